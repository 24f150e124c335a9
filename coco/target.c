/* coco/target.c - per-image training targets, as RF-DETR's ConvertCoco builds them. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coco/coco_internal.h"
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
  const coco_image *img = &COCO_AT(coco->images, coco_image, index);
  if (img->height <= 0 || img->width <= 0)
    return ferry__fail(FERRY_EFORMAT, "%s: images[%zu] (id %lld): no height/width, which targets need", coco->name,
                      index, (long long)img->id);
  return FERRY_OK;
}

static float clampf(float v, float hi) { return fminf(fmaxf(v, 0.0f), hi); }

/* The annotation's box as ConvertCoco makes it (float32 xywh -> xyxy, clamped); 1 when
 * the annotation is kept. */
static ferry_status kept_box(const ferry_coco *coco, const coco_image *img, const coco_ann *ann,
                             const ferry_target_options *opts, float box[4], int *keep) {
  *keep = 0;
  if (ann->pub.iscrowd && !opts->keep_crowd) return FERRY_OK;
  if (!ann->pub.has_bbox)
    return ferry__fail(FERRY_EFORMAT, "%s: annotations[%zu]: no \"bbox\", which targets need (image %lld)", coco->name,
                      ann->pub.json_index, (long long)img->id);
  float x = (float)ann->pub.bbox[0], y = (float)ann->pub.bbox[1];
  float x2 = x + (float)ann->pub.bbox[2], y2 = y + (float)ann->pub.bbox[3];
  float w = (float)img->width, h = (float)img->height;
  box[0] = clampf(x, w);
  box[1] = clampf(y, h);
  box[2] = clampf(x2, w);
  box[3] = clampf(y2, h);
  *keep = box[3] > box[1] && box[2] > box[0];
  return FERRY_OK;
}

ferry_status ferry_coco_target_count(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                     int64_t *count) {
  ferry_status st = check_args(coco, index, opts, "ferry_coco_target_count");
  if (st < 0) return st;
  if (!count) return ferry__fail(FERRY_EINVAL, "ferry_coco_target_count: NULL count");
  const coco_image *img = &COCO_AT(coco->images, coco_image, index);
  int64_t n = 0;
  for (size_t k = 0; k < img->num_anns; k++) {
    const coco_ann *ann = &COCO_AT(coco->anns, coco_ann, coco->image_anns[img->first_ann + k]);
    float box[4];
    int keep;
    if ((st = kept_box(coco, img, ann, opts, box, &keep)) < 0) return st;
    n += keep;
  }
  *count = n;
  return FERRY_OK;
}

/* The annotation's mask at mh x mw into dst; all zero without a segmentation. */
static ferry_status write_mask(const ferry_coco *coco, const coco_image *img, const coco_ann *ann, uint8_t *dst,
                               uint32_t mh, uint32_t mw) {
  size_t n = (size_t)mh * mw;
  if (ann->pub.segm == FERRY_SEGM_NONE) {
    memset(dst, 0, n);
    return FERRY_OK;
  }
  ferry_rle rle = {0};
  ferry_status st = ferry__coco_ann_rle(coco, ann, &rle);
  if (st == FERRY_OK && (rle.h != (uint64_t)img->height || rle.w != (uint64_t)img->width))
    st = ferry__fail(FERRY_EFORMAT, "%s: annotations[%zu].segmentation.size: [%u, %u] differs from the image's [%lld, %lld]",
                    coco->name, ann->pub.json_index, rle.h, rle.w, (long long)img->height, (long long)img->width);
  if (st == FERRY_OK) st = ferry_rle_decode_resized(&rle, dst, n, mh, mw);
  ferry_rle_free(&rle);
  return st;
}

static void write_keypoints(const ferry_coco *coco, const coco_ann *ann, float *dst) {
  size_t K = coco->num_keypoints, given = ann->pub.num_keypoints < K ? ann->pub.num_keypoints : K;
  memset(dst, 0, K * 3 * sizeof(float));
  if (given) memcpy(dst, &COCO_AT(coco->keypoints, float, ann->kp_first), given * 3 * sizeof(float));
}

/* Say which image the failing annotation belongs to, after the rest of the message. */
static ferry_status with_image(const ferry_coco *coco, ferry_status st, const coco_image *img) {
  char msg[FERRY_ERROR_MAX];
  snprintf(msg, sizeof msg, "%s", ferry_last_error());
  return ferry__fail(st, "%s (image %lld, \"%s\")", msg, (long long)img->id, COCO_STRING(coco, img->file_name));
}

ferry_status ferry_coco_target_write(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                     ferry_coco_target *out) {
  ferry_status st = check_args(coco, index, opts, "ferry_coco_target_write");
  if (st < 0) return st;
  if (!out) return ferry__fail(FERRY_EINVAL, "ferry_coco_target_write: NULL target");
  const coco_image *img = &COCO_AT(coco->images, coco_image, index);
  uint32_t mh = opts->mask_height ? (uint32_t)opts->mask_height : (uint32_t)img->height;
  uint32_t mw = opts->mask_width ? (uint32_t)opts->mask_width : (uint32_t)img->width;
  size_t mask_bytes = (size_t)mh * mw, K = coco->num_keypoints, slot = 0;
  out->image_id = img->id;
  out->orig_h = img->height;
  out->orig_w = img->width;
  for (size_t k = 0; k < img->num_anns; k++) {
    const coco_ann *ann = &COCO_AT(coco->anns, coco_ann, coco->image_anns[img->first_ann + k]);
    float box[4];
    int keep;
    if ((st = kept_box(coco, img, ann, opts, box, &keep)) < 0) return st;
    if (!keep) continue;
    if (out->boxes) memcpy(out->boxes + slot * 4, box, sizeof box);
    if (out->labels) out->labels[slot] = ferry__coco_label(coco, ann);
    if (out->area) out->area[slot] = (float)ann->pub.area;
    if (out->iscrowd) out->iscrowd[slot] = ann->pub.iscrowd;
    if (out->keypoints) write_keypoints(coco, ann, out->keypoints + slot * K * 3);
    if (out->masks && (st = write_mask(coco, img, ann, out->masks + slot * mask_bytes, mh, mw)) < 0)
      return with_image(coco, st, img);
    slot++;
  }
  return FERRY_OK;
}
