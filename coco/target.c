/* coco/target.c - per-image training targets, as RF-DETR's ConvertCoco builds them:
 * boxes, labels, area, iscrowd, masks at a chosen size, keypoints (docs/coco.md,
 * "Targets").
 *
 * Callers: loaders/fill.c from the loader's worker threads, several threads on one
 * ferry_coco at once (this file only reads it), and users through include/ferry/coco.h.
 * The caller sizes the target with ferry_coco_target_count and then fills it with
 * ferry_coco_target_write, whose arrays it owns; both go through kept_box, so they agree
 * on which annotations are kept and in which order (the image's annotations in file
 * order), which is what lets slot k of every array describe the same annotation.
 * Bit-exactness rules, each from ConvertCoco / pycocotools:
 *   - boxes are computed in float32 from the float32 of each xywh value (x2 = x + w in
 *     float32, as torch does on a float32 tensor), then clamped to [0, w] x [0, h];
 *   - for an image decoded at a reduced size (the loader's draft_size, coco/target.h)
 *     each xywh value and the area are first multiplied by decoded/annotated per axis
 *     in double (RF-DETR's scale_coco_annotation), and the clamp is to the decoded size;
 *   - a kept annotation has x2 > x1 and y2 > y1 after the clamp; the test drops the
 *     mask, label and keypoints with the box;
 *   - masks come from pycocotools' annToRLE (segm.c) decoded straight to the output size
 *     by the nearest-neighbour rule of torch's interpolate (rle.c, decode_resized).
 * Invariants: a NULL output array is skipped, not an error (a caller asks only for what
 * it uses); slot counts written never exceed the count ferry_coco_target_count gave.
 * Not done here: image decoding, resizing of boxes (targets are in source pixels), any
 * mask cache: each call rasterises again.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coco/rle_decode.h"
#include "coco/segm.h"
#include "coco/store.h"
#include "coco/target.h"
#include "lib/alloc.h"
#include "lib/status.h"

void ferry_target_options_default(ferry_target_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

static ferry_status check_args(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                               const char *fn) {
  if (!coco || !opts) return ferry__fail(FERRY_EINVAL, "%s: NULL argument", fn);
  if (index >= coco->images.n)
    return ferry__fail(FERRY_EINVAL, "%s: image index %zu out of range (%zu images)", coco->name, index, coco->images.n);
  if (opts->mask_height < 0 || opts->mask_width < 0 || opts->mask_height > UINT32_MAX ||
      opts->mask_width > UINT32_MAX)
    return ferry__fail(FERRY_EINVAL, "%s: mask size %lldx%lld is invalid", fn, (long long)opts->mask_height,
                      (long long)opts->mask_width);
  const ferry__coco_image *img = &COCO_AT(coco->images, ferry__coco_image, index);
  if (img->height <= 0 || img->width <= 0)
    return ferry__fail(FERRY_EFORMAT, "%s: images[%zu] (id %lld): no height/width, which targets need", coco->name,
                      index, (long long)img->id);
  return FERRY_OK;
}

/* max then min, as torch's clamp_(min=0, max=hi) does for finite values. A NaN would
 * become 0 here (fmaxf returns the non-NaN operand), where torch keeps NaN; JSON cannot
 * express one, so only a hand-made index could hold it. */
static float clampf(float v, float hi) { return fminf(fmaxf(v, 0.0f), hi); }

/* The frame the targets are made in: the annotated size, or the size a reduced decode
 * gives (scale = decoded / annotated per axis; exactly 1 for the annotated size, so
 * that the products below leave every value as it is). */
typedef struct target_frame {
  double sx, sy;
  float w, h;
  int scaled;
} target_frame;

static ferry_status frame_of(const ferry_coco *coco, const ferry__coco_image *img, const ferry_target_options *opts,
                             int64_t source_w, int64_t source_h, target_frame *f) {
  f->scaled = (source_w || source_h) && (source_w != img->width || source_h != img->height);
  if (!f->scaled) source_w = img->width, source_h = img->height;
  if (source_w <= 0 || source_h <= 0 || source_w > img->width || source_h > img->height)
    return ferry__fail(FERRY_EINVAL, "%s: image %lld: targets at %lldx%lld, which is not a reduction of its %lldx%lld",
                      coco->name, (long long)img->id, (long long)source_w, (long long)source_h,
                      (long long)img->width, (long long)img->height);
  f->sx = (double)source_w / (double)img->width;
  f->sy = (double)source_h / (double)img->height;
  f->w = (float)source_w;
  f->h = (float)source_h;
  return FERRY_OK;
}

/* The annotation's box as ConvertCoco makes it (float32 xywh -> xyxy, clamped) in the
 * frame; 1 when the annotation is kept. */
static ferry_status kept_box(const ferry_coco *coco, const ferry__coco_image *img, const ferry__coco_ann *ann,
                             const ferry_target_options *opts, const target_frame *f, float box[4], int *keep) {
  *keep = 0;
  /* Crowds first: a crowd without a "bbox" is dropped, not an error, as ConvertCoco
   * filters iscrowd before it reads boxes. */
  if (ann->pub.iscrowd && !opts->keep_crowd) return FERRY_OK;
  if (!ann->pub.has_bbox)
    return ferry__fail(FERRY_EFORMAT, "%s: annotations[%zu]: no \"bbox\", which targets need (image %lld)", coco->name,
                      ann->pub.json_index, (long long)img->id);
  /* Each value rounded to float32 before the add, not x + w in double then rounded: the
   * two can differ in the last bit for fractional boxes. */
  float x = (float)(ann->pub.bbox[0] * f->sx), y = (float)(ann->pub.bbox[1] * f->sy);
  float x2 = x + (float)(ann->pub.bbox[2] * f->sx), y2 = y + (float)(ann->pub.bbox[3] * f->sy);
  box[0] = clampf(x, f->w);
  box[1] = clampf(y, f->h);
  box[2] = clampf(x2, f->w);
  box[3] = clampf(y2, f->h);
  *keep = box[3] > box[1] && box[2] > box[0];
  return FERRY_OK;
}

ferry_status ferry__coco_target_count_at(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                         int64_t source_w, int64_t source_h, int64_t *count) {
  ferry_status st = check_args(coco, index, opts, "ferry_coco_target_count");
  if (st < 0) return st;
  if (!count) return ferry__fail(FERRY_EINVAL, "ferry_coco_target_count: NULL count");
  const ferry__coco_image *img = &COCO_AT(coco->images, ferry__coco_image, index);
  target_frame f;
  if ((st = frame_of(coco, img, opts, source_w, source_h, &f)) < 0) return st;
  int64_t n = 0;
  for (size_t k = 0; k < img->num_anns; k++) {
    const ferry__coco_ann *ann = &COCO_AT(coco->anns, ferry__coco_ann, coco->image_anns[img->first_ann + k]);
    float box[4];
    int keep;
    if ((st = kept_box(coco, img, ann, opts, &f, box, &keep)) < 0) return st;
    n += keep;
  }
  *count = n;
  return FERRY_OK;
}

ferry_status ferry_coco_target_count(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                     int64_t *count) {
  return ferry__coco_target_count_at(coco, index, opts, 0, 0, count);
}

/* The annotation's mask through the image's map into dst; all zero without a
 * segmentation. */
static ferry_status write_mask(const ferry_coco *coco, const ferry__coco_image *img, const ferry__coco_ann *ann,
                               uint8_t *dst, const ferry__mask_map *map) {
  size_t n = (size_t)map->dst_h * map->dst_w;
  if (ann->pub.segm == FERRY_SEGM_NONE) {
    memset(dst, 0, n);
    return FERRY_OK;
  }
  ferry_rle rle = {0};
  /* An RLE dict is decoded at its own "size" (segm.c); one that differs from the image
   * would be resized to the wrong frame, so it is refused rather than stretched. */
  ferry_status st = ferry__coco_ann_rle(coco, ann, &rle);
  if (st == FERRY_OK && (rle.h != (uint64_t)img->height || rle.w != (uint64_t)img->width))
    st = ferry__fail(FERRY_EFORMAT, "%s: annotations[%zu].segmentation.size: [%u, %u] differs from the image's [%lld, %lld]",
                    coco->name, ann->pub.json_index, rle.h, rle.w, (long long)img->height, (long long)img->width);
  if (st == FERRY_OK) st = ferry__rle_decode_mapped(&rle, dst, map);
  ferry_rle_free(&rle);
  return st;
}

/* K triplets per annotation: the dataset's K (the largest category's), zero-filled past
 * what the annotation gives, so every slot has the same shape. Nothing past K is
 * written (parse.c refuses more than K once categories declare keypoints). */
static void write_keypoints(const ferry_coco *coco, const ferry__coco_ann *ann, float *dst) {
  size_t K = coco->num_keypoints, given = ann->pub.num_keypoints < K ? ann->pub.num_keypoints : K;
  memset(dst, 0, K * 3 * sizeof(float));
  if (given) memcpy(dst, &COCO_AT(coco->keypoints, float, ann->kp_first), given * 3 * sizeof(float));
}

/* Say which image the failing annotation belongs to, after the rest of the message.
 * The message is copied first: ferry__fail formats into the same thread-local buffer
 * that ferry_last_error returns. */
static ferry_status with_image(const ferry_coco *coco, ferry_status st, const ferry__coco_image *img) {
  char msg[FERRY_ERROR_MAX];
  snprintf(msg, sizeof msg, "%s", ferry_last_error());
  return ferry__fail(st, "%s (image %lld, \"%s\")", msg, (long long)img->id, COCO_STRING(coco, img->file_name));
}

/* Every kept annotation of the image into the target's arrays, in file order. */
static ferry_status write_kept(const ferry_coco *coco, const ferry__coco_image *img, const ferry_target_options *opts,
                               const target_frame *f, ferry_coco_target *out, const ferry__mask_map *map,
                               size_t mask_bytes, size_t K) {
  ferry_status st;
  size_t slot = 0, kept = 0;
  for (size_t k = 0; k < img->num_anns; k++) {
    const ferry__coco_ann *ann = &COCO_AT(coco->anns, ferry__coco_ann, coco->image_anns[img->first_ann + k]);
    float box[4];
    int keep;
    if ((st = kept_box(coco, img, ann, opts, f, box, &keep)) < 0) return st;
    if (!keep) continue;
    if (opts->select && !opts->select[kept++]) continue;
    if (out->boxes) memcpy(out->boxes + slot * 4, box, sizeof box);
    if (out->labels) out->labels[slot] = ferry__coco_label(coco, ann);
    /* (area * sx) * sy, left to right as scale_coco_annotation multiplies */
    if (out->area) out->area[slot] = (float)(ann->pub.area * f->sx * f->sy);
    if (out->iscrowd) out->iscrowd[slot] = ann->pub.iscrowd;
    if (out->keypoints) write_keypoints(coco, ann, out->keypoints + slot * K * 3);
    if (out->masks && (st = write_mask(coco, img, ann, out->masks + slot * mask_bytes, map)) < 0)
      return with_image(coco, st, img);
    slot++;
  }
  return FERRY_OK;
}

ferry_status ferry__coco_target_write_at(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                         int64_t source_w, int64_t source_h, ferry_coco_target *out) {
  ferry_status st = check_args(coco, index, opts, "ferry_coco_target_write");
  if (st < 0) return st;
  if (!out) return ferry__fail(FERRY_EINVAL, "ferry_coco_target_write: NULL target");
  const ferry__coco_image *img = &COCO_AT(coco->images, ferry__coco_image, index);
  target_frame f;
  if ((st = frame_of(coco, img, opts, source_w, source_h, &f)) < 0) return st;
  /* Masks and keypoints are in the annotated frame; RF-DETR never reduces a decode
   * that has them (draft_size_for_transforms), and neither is rescaled here. */
  if (f.scaled && (out->masks || out->keypoints))
    return ferry__fail(FERRY_EINVAL, "%s: image %lld: masks or keypoints at a reduced decode size: they cannot be "
                      "rescaled as the boxes are", coco->name, (long long)img->id);
  /* 0 means the image's own size. check_args bounded both to UINT32_MAX, so
   * (size_t)mh * mw cannot overflow a 64-bit size_t. */
  uint32_t mh = opts->mask_height ? (uint32_t)opts->mask_height : (uint32_t)img->height;
  uint32_t mw = opts->mask_width ? (uint32_t)opts->mask_width : (uint32_t)img->width;
  size_t mask_bytes = (size_t)mh * mw, K = coco->num_keypoints;
  out->image_id = img->id;
  out->orig_h = img->height;
  out->orig_w = img->width;
  /* One map for every mask of the image: its tables cost O(height + mw) once. */
  ferry__mask_map map = {0};
  if (out->masks && img->num_anns &&
      (st = ferry__mask_map_init(&map, (uint32_t)img->height, (uint32_t)img->width, mh, mw, opts->mask_rows,
                                 opts->mask_cols)) < 0)
    return with_image(coco, st, img);
  st = write_kept(coco, img, opts, &f, out, &map, mask_bytes, K);
  ferry__mask_map_free(&map);
  return st;
}

ferry_status ferry_coco_target_write(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                     ferry_coco_target *out) {
  return ferry__coco_target_write_at(coco, index, opts, 0, 0, out);
}
