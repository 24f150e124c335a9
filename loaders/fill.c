/* loaders/fill.c - one sample: decode its image and write its targets in place.
 * The GPU decoder's variant (gpu_fill.c) shares the file, target and size steps.
 *
 * Owns nothing that outlives a call: the sample's path is built on the stack, and
 * every byte written goes into the slot's slices of a batch the coordinator laid out.
 * Callers: the workers (workers.c worker_main), many at once, without loader->lock,
 * each with its own decoder, each on a slot it alone has claimed; gpu_fill.c's fill
 * on the same terms, and its stat threads at open (ferry__loader_image_file only).
 *
 * Invariants:
 *   - the fill context is read-only here (fixed at open, loader_open.c), and the batch is
 *     touched only through this slot's slices, so two fills never share a byte;
 *   - the rows written for a field are the ones the layout reserved: the coordinator
 *     counted them with the same target options (ctx->target) at open;
 *   - on failure the message on this thread names the dataset index, and once the
 *     image is known its id and file; the slot's bytes are then left as they are,
 *     since the plan is never delivered with a failed slot (handoff.c).
 * Not done here: retrying, skipping (coordinator.c decides from the status), or
 * checking a symlink inside the images folder: `escapes` reads the name only.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "source/tar.h"
#include "coco/target.h"
#include "image/augment.h"
#include "image/geometry.h"
#include "lib/alloc.h"
#include "loaders/fill.h"

/* "..", or an absolute name, would let an annotation file read outside the folder: the
 * rule a tar member's name follows too (source/tar.h). Empty names are refused before. */
static int escapes(const char *name) { return ferry__tar_name_refused(name) != NULL; }

/* The file of image `img`: file_name under the images folder, or as it is when it is
 * absolute and allow_escaping_paths lets it be. A name that does not fit in `size`
 * is an error rather than a cut path that could name another file. */
static ferry_status image_path(const ferry__fill_context *ctx, const ferry_coco_image *img, char *path, size_t size) {
  if (!img->file_name || !img->file_name[0])
    return ferry__fail(FERRY_EFORMAT, "image id %lld has no file_name", (long long)img->id);
  if (!ctx->allow_escaping_paths && escapes(img->file_name))
    return ferry__fail(FERRY_EINVAL, "image id %lld: file_name '%s' leaves the images folder %s",
                      (long long)img->id, img->file_name, ctx->images_dir);
  int n = img->file_name[0] == '/' ? snprintf(path, size, "%s", img->file_name)
                                   : snprintf(path, size, "%s/%s", ctx->images_dir, img->file_name);
  if (n < 0 || (size_t)n >= size)
    return ferry__fail(FERRY_EINVAL, "image id %lld: path too long", (long long)img->id);
  return FERRY_OK;
}

/* This slot's bytes of `field`, or NULL when the config did not ask for the field
 * (field -1): the target writer then skips it. */
void *ferry__loader_slice(ferry_batch *batch, int field, size_t slot) {
  ferry_tensor view;
  if (field < 0 || ferry_batch_sample(batch, (size_t)field, slot, &view) != FERRY_OK) return NULL;
  return view.data;
}

/* Boxes arrive as xyxy in the file's pixels; make them what the config asks. w and h
 * are the annotated size, which the caller has checked against the image
 * (ferry__loader_check_size). */
static void convert_boxes(float *boxes, int64_t n, const ferry__fill_context *ctx, double w, double h) {
  if (ctx->box_format == FERRY_BOXES_CXCYWH_NORM) ferry__boxes_to_cxcywh_norm(boxes, n, w, h);
  else ferry__boxes_scale(boxes, n, ctx->resolution / w, ctx->resolution / h);
}

/* ---- the frame a sample is made in ------------------------------------------------- */

/* Named as a JPEG (.jpg, .jpeg, .jpe, .jfif, any case). */
static int named_as_jpeg(const char *name) {
  const char *dot = name ? strrchr(name, '.') : NULL;
  if (!dot || strchr(dot, '/')) return 0;
  return !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".jpe") ||
         !strcasecmp(dot, ".jfif");
}

void ferry__loader_source_size(const ferry__fill_context *ctx, const ferry_coco_image *img, int *w, int *h) {
  int64_t f = 1;
  if (ctx->image.draft_size > 0 && named_as_jpeg(img->file_name))
    f = ferry_image_draft_factor((int)img->width, (int)img->height, ctx->image.draft_size);
  *w = (int)((img->width + f - 1) / f);
  *h = (int)((img->height + f - 1) / f);
}

ferry_status ferry__loader_targets(const ferry__fill_context *ctx, size_t index, const ferry_target_options *opts,
                                   ferry_coco_target *out) {
  ferry_coco_image img;
  ferry_status st = ferry_coco_image_at(ctx->coco, index, &img);
  int w, h;
  if (st != FERRY_OK) return st;
  ferry__loader_source_size(ctx, &img, &w, &h);
  return ferry__coco_target_write_at(ctx->coco, index, opts, w, h, out);
}

ferry_status ferry__loader_target_count(const ferry__fill_context *ctx, size_t index, int64_t *count) {
  ferry_coco_image img;
  ferry_status st = ferry_coco_image_at(ctx->coco, index, &img);
  int w, h;
  if (st != FERRY_OK) return st;
  ferry__loader_source_size(ctx, &img, &w, &h);
  return ferry__coco_target_count_at(ctx->coco, index, &ctx->target, w, h, count);
}

ferry_status ferry__loader_check_decoded(const ferry__fill_context *ctx, const char *path, int w, int h,
                                         const ferry_coco_image *img) {
  int pw, ph;
  ferry__loader_source_size(ctx, img, &pw, &ph);
  if (w == pw && h == ph) return FERRY_OK;
  if (ctx->image.draft_size <= 0) return ferry__loader_check_size(path, w, h, img);
  return ferry__fail(FERRY_EFORMAT, "%s: decoded at %dx%d under draft_size %d, where its annotated size %lldx%lld "
                     "and its name planned %dx%d: ferry plans a reduced decode before reading a file, for names "
                     "ending .jpg, .jpeg, .jpe or .jfif, so a JPEG under another name, another format under a JPEG "
                     "name, or a wrong annotated size fails", path, w, h, ctx->image.draft_size,
                     (long long)img->width, (long long)img->height, pw, ph);
}

ferry_status ferry__loader_write_targets(const ferry__fill_context *ctx, ferry_batch *batch, size_t slot, size_t index,
                                         const ferry_coco_image *img) {
  const ferry__field_slots *f = &ctx->slots;
  ferry_coco_target t = {
    .boxes = ferry__loader_slice(batch, f->boxes, slot),
    .labels = ferry__loader_slice(batch, f->labels, slot),
    .area = ferry__loader_slice(batch, f->area, slot),
    .iscrowd = ferry__loader_slice(batch, f->iscrowd, slot),
    .masks = ferry__loader_slice(batch, f->masks, slot),
    .keypoints = ferry__loader_slice(batch, f->keypoints, slot),
  };
  ferry_status st = ferry__loader_targets(ctx, index, &ctx->target, &t);
  if (st != FERRY_OK) return st;
  /* The slot's box count is its row count in the layout (offsets[slot + 1] -
   * offsets[slot]), the same the target writer filled. */
  int64_t n = 0;
  int w, h; /* the decoded size: the boxes' frame, and RF-DETR's orig_size */
  ferry__loader_source_size(ctx, img, &w, &h);
  if (f->boxes >= 0) {
    n = ferry_batch_offsets(batch, (size_t)f->boxes)[slot + 1] - ferry_batch_offsets(batch, (size_t)f->boxes)[slot];
    convert_boxes(t.boxes, n, ctx, (double)w, (double)h);
  }
  int64_t *id = ferry__loader_slice(batch, f->image_id, slot);
  if (id) id[0] = t.image_id;
  int64_t *orig = ferry__loader_slice(batch, f->orig_size, slot);
  if (orig) orig[0] = h, orig[1] = w;
  int64_t *size = ferry__loader_slice(batch, f->size, slot);
  if (size) size[0] = size[1] = ctx->resolution;
  int32_t *record = ferry__loader_slice(batch, f->augment, slot);
  if (record) {
    /* recipe none: no draw, the square resize */
    memset(record, 0, FERRY_AUGMENT_RECORD_LEN * sizeof *record);
    record[FERRY_AUGMENT_OUT_H] = record[FERRY_AUGMENT_OUT_W] = ctx->resolution;
  }
  /* Always defined (loader_open.c define_fields), so never NULL. */
  *(int64_t *)ferry__loader_slice(batch, f->sample_index, slot) = (int64_t)index;
  return FERRY_OK;
}

ferry_status ferry__loader_image_file(const ferry__fill_context *ctx, size_t index, ferry_coco_image *img, char *path,
                                      size_t size) {
  ferry_status st = ferry_coco_image_at(ctx->coco, index, img);
  if (st == FERRY_OK && ctx->source) ctx->source->describe(ctx->source, index, path, size);
  else if (st == FERRY_OK) st = image_path(ctx, img, path, size);
  if (st != FERRY_OK) return ferry__error_prefix(st, "dataset index %zu: ", index);
  return FERRY_OK;
}

int ferry__loader_over_instance_cap(const ferry__fill_context *ctx, int64_t count) {
  return count > 0 && (uint64_t)count > (uint64_t)ctx->max_instances;
}

/* Before the image is opened: its rows were never laid out, so nothing may be written. */
ferry_status ferry__loader_check_instances(const ferry__fill_context *ctx, size_t index, int64_t count) {
  if (!ferry__loader_over_instance_cap(ctx, count)) return FERRY_OK;
  ferry_coco_image img;
  ferry_status st = ferry_coco_image_at(ctx->coco, index, &img);
  if (st != FERRY_OK) return ferry__error_prefix(st, "dataset index %zu: ", index);
  return ferry__fail(FERRY_ELIMIT, "dataset index %zu (image id %lld, file %s): %lld instances, more than "
                     "config.max_instances = %zu allows one image; the sample is refused before its rows are "
                     "laid out (raise max_instances to load it)", index, (long long)img.id,
                     img.file_name ? img.file_name : "(none)", (long long)count, ctx->max_instances);
}

ferry_status ferry__loader_check_size(const char *path, int w, int h, const ferry_coco_image *img) {
  if (w == img->width && h == img->height) return FERRY_OK;
  return ferry__fail(FERRY_EFORMAT, "%s: the image is %dx%d but the annotations say %lldx%lld", path,
                     w, h, (long long)img->width, (long long)img->height);
}

/* ---- the square resize (no recipe) ----------------------------------------------- */

/* The image's bytes from the fill's source into the worker's scratch; *data NULL when
 * the image is a file of the images folder, which the decoder reads itself. */
static ferry_status source_bytes(const ferry__fill_context *ctx, ferry__fill_scratch *s, size_t index,
                                 const uint8_t **data, size_t *len) {
  *data = NULL;
  *len = 0;
  if (!ctx->source) return FERRY_OK;
  ferry_status st = ctx->source->read(ctx->source, index, &s->bytes, &s->bytes_cap, len);
  if (st == FERRY_OK) *data = s->bytes;
  return st;
}

static ferry_status fill_square(const ferry__fill_context *ctx, ferry_decoder *decoder, ferry__fill_scratch *scratch,
                                ferry_batch *batch, size_t slot, size_t index, const ferry_coco_image *img,
                                const char *path) {
  /* Straight into the slot's image slice, no copy. w and h come back as the file's
   * size, EXIF-rotated when ctx->image.apply_exif is set: the annotations must then
   * give the size as displayed. A size that differs from the annotations fails the
   * sample: the boxes and masks, made at the annotated size, would not fit the image. */
  ferry_status st = FERRY_OK;
  if (ctx->slots.images >= 0) {
    int w = 0, h = 0;
    const uint8_t *data;
    size_t len;
    void *dst = ferry__loader_slice(batch, ctx->slots.images, slot);
    st = source_bytes(ctx, scratch, index, &data, &len);
    if (st == FERRY_OK && ctx->image.draft_size > 0) {
      /* the reduced pixels first: their size is checked against the plan's before the
       * resize (the resized call reports the stored size, not the decoded one) */
      const uint8_t *rgb;
      st = data ? ferry_decode_rgb(decoder, data, len, path, &ctx->image, &rgb, &w, &h)
                : ferry_image_load_rgb(decoder, path, &ctx->image, &rgb, &w, &h);
      if (st == FERRY_OK) st = ferry__loader_check_decoded(ctx, path, w, h, img);
      if (st == FERRY_OK) st = ferry_image_resize(decoder, rgb, w, h, ctx->resolution, ctx->layout, dst);
    } else {
      if (st == FERRY_OK && data)
        st = ferry_image_decode_resized(decoder, data, len, path, &ctx->image, ctx->resolution, ctx->layout, dst, &w, &h);
      else if (st == FERRY_OK)
        st = ferry_image_load_resized(decoder, path, &ctx->image, ctx->resolution, ctx->layout, dst, &w, &h);
      if (st == FERRY_OK) st = ferry__loader_check_size(path, w, h, img);
    }
  }
  /* Targets only for an image that loaded and matches: a failed sample's work stops
   * at its first error. */
  if (st == FERRY_OK) st = ferry__loader_write_targets(ctx, batch, slot, index, img);
  return st;
}

/* ---- a recipe's record ------------------------------------------------------------ */

void ferry__fill_scratch_free(ferry__fill_scratch *s) {
  ferry__free(s->boxes);
  ferry__free(s->areas);
  ferry__free(s->keep);
  ferry__free(s->maps);
  ferry__free(s->bytes);
  memset(s, 0, sizeof *s);
}

static ferry_status scratch_reserve(ferry__fill_scratch *s, size_t instances, size_t map_entries) {
  if (instances > s->instances) {
    ferry__free(s->boxes);
    ferry__free(s->areas);
    ferry__free(s->keep);
    s->boxes = ferry__malloc(instances * 4 * sizeof *s->boxes);
    s->areas = ferry__malloc(instances * sizeof *s->areas);
    s->keep = ferry__malloc(instances);
    s->instances = s->boxes && s->areas && s->keep ? instances : 0;
    if (!s->instances) return ferry__fail(FERRY_ENOMEM, "out of memory for %zu instances' targets", instances);
  }
  if (map_entries > s->map_entries) {
    ferry__free(s->maps);
    s->maps = ferry__malloc(map_entries * sizeof *s->maps);
    s->map_entries = s->maps ? map_entries : 0;
    if (!s->maps) return ferry__fail(FERRY_ENOMEM, "out of memory for masks' index maps");
  }
  return FERRY_OK;
}

int ferry__augment_over_limit(const ferry__fill_context *ctx, const int32_t *rec) {
  uint64_t limit = ctx->image.max_pixels;
  uint64_t out = (uint64_t)rec[FERRY_AUGMENT_OUT_H] * (uint64_t)rec[FERRY_AUGMENT_OUT_W];
  uint64_t mid = (uint64_t)rec[FERRY_AUGMENT_RESIZE_H] * (uint64_t)rec[FERRY_AUGMENT_RESIZE_W];
  return limit && (out > limit || mid > limit);
}

/* Boxes in the output image: xyxy as they are, or DETR's normalised cxcywh in
 * float32 steps as RF-DETR's Normalize computes them (box_xyxy_to_cxcywh, then a
 * division by [w, h, w, h]). */
static void write_augmented_boxes(const ferry__fill_context *ctx, const float *in, size_t n, int out_h, int out_w,
                                  float *out) {
  for (size_t k = 0; k < n; k++) {
    const float *b = in + 4 * k;
    float *o = out + 4 * k;
    if (ctx->box_format == FERRY_BOXES_CXCYWH_NORM) {
      float cx = (b[0] + b[2]) / 2.0f, cy = (b[1] + b[3]) / 2.0f, w = b[2] - b[0], h = b[3] - b[1];
      o[0] = cx / (float)out_w, o[1] = cy / (float)out_h, o[2] = w / (float)out_w, o[3] = h / (float)out_h;
    } else {
      memcpy(o, b, 4 * sizeof *o);
    }
  }
}

/* The instance rows the layout gave the slot (every per-instance field has the same),
 * -1 when no per-instance field was asked for. */
static int64_t laid_out_rows(const ferry__fill_context *ctx, ferry_batch *batch, size_t slot) {
  const ferry__field_slots *f = &ctx->slots;
  const int fields[] = {f->boxes, f->labels, f->masks, f->area, f->iscrowd};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (fields[i] >= 0)
      return ferry_batch_offsets(batch, (size_t)fields[i])[slot + 1] - ferry_batch_offsets(batch, (size_t)fields[i])[slot];
  return -1;
}

/* The targets through the record: boxes and areas moved and cropped here; labels,
 * iscrowd and masks written by the target writer for the survivors only, the masks
 * decoded straight through the chain's index maps. `rows` is the layout's instance
 * count, which the survivors must match (the coordinator counted them the same way). */
static ferry_status write_augmented_targets(const ferry__fill_context *ctx, ferry__fill_scratch *sc, ferry_batch *batch,
                                            size_t slot, size_t index, const ferry_coco_image *img,
                                            const int32_t *rec) {
  const ferry__field_slots *f = &ctx->slots;
  int out_h = rec[FERRY_AUGMENT_OUT_H], out_w = rec[FERRY_AUGMENT_OUT_W], src_w, src_h;
  ferry__loader_source_size(ctx, img, &src_w, &src_h);
  int64_t n0;
  ferry_status st = ferry__loader_target_count(ctx, index, &n0);
  if (st == FERRY_OK) st = scratch_reserve(sc, (size_t)n0 + 1, (size_t)out_h + (size_t)out_w);
  ferry_coco_target t = {.boxes = sc->boxes, .area = sc->areas};
  if (st == FERRY_OK) st = ferry__loader_targets(ctx, index, &ctx->target, &t);
  if (st != FERRY_OK) return st;
  size_t n = ferry__augment_targets(rec, src_h, src_w, sc->boxes, sc->areas, (size_t)n0, sc->keep);
  int64_t rows = laid_out_rows(ctx, batch, slot);
  if (rows >= 0 && (size_t)rows != n)
    return ferry__fail(FERRY_EFORMAT, "%zu instances survive the crop, but %lld were laid out", n, (long long)rows);
  if (f->boxes >= 0) write_augmented_boxes(ctx, sc->boxes, n, out_h, out_w, ferry__loader_slice(batch, f->boxes, slot));
  if (f->area >= 0 && n) memcpy(ferry__loader_slice(batch, f->area, slot), sc->areas, n * sizeof *sc->areas);
  ferry_target_options opts = ctx->target;
  opts.mask_height = out_h;
  opts.mask_width = out_w;
  opts.mask_rows = sc->maps;
  opts.mask_cols = sc->maps + out_h;
  opts.select = sc->keep;
  ferry__augment_mask_maps(rec, src_h, src_w, sc->maps, sc->maps + out_h);
  ferry_coco_target rest = {
    .labels = ferry__loader_slice(batch, f->labels, slot),
    .iscrowd = ferry__loader_slice(batch, f->iscrowd, slot),
    .masks = ferry__loader_slice(batch, f->masks, slot),
  };
  return ferry__loader_targets(ctx, index, &opts, &rest);
}

/* The per-sample fields that do not move with the geometry. */
static void write_sample_fields(const ferry__fill_context *ctx, ferry_batch *batch, size_t slot, size_t index,
                                const ferry_coco_image *img, const int32_t *rec) {
  const ferry__field_slots *f = &ctx->slots;
  int64_t *id = ferry__loader_slice(batch, f->image_id, slot);
  if (id) id[0] = img->id;
  int w, h; /* RF-DETR's orig_size: the decoded image's size */
  ferry__loader_source_size(ctx, img, &w, &h);
  int64_t *orig = ferry__loader_slice(batch, f->orig_size, slot);
  if (orig) orig[0] = h, orig[1] = w;
  int64_t *size = ferry__loader_slice(batch, f->size, slot);
  if (size) size[0] = rec[FERRY_AUGMENT_OUT_H], size[1] = rec[FERRY_AUGMENT_OUT_W];
  int32_t *record = ferry__loader_slice(batch, f->augment, slot);
  if (record) memcpy(record, rec, FERRY_AUGMENT_RECORD_LEN * sizeof *rec);
  *(int64_t *)ferry__loader_slice(batch, f->sample_index, slot) = (int64_t)index;
}

static ferry_status fill_augmented(const ferry__fill_context *ctx, ferry_decoder *decoder, ferry__fill_scratch *scratch,
                                   ferry_batch *batch, size_t slot, size_t index, const ferry_coco_image *img,
                                   const char *path, const int32_t *rec) {
  if (ferry__augment_over_limit(ctx, rec))
    return ferry__fail(FERRY_ELIMIT, "the augmented image of %dx%d (branch B's resize to %dx%d) would pass the "
                       "pixel limit of %llu (config.image.max_pixels)", rec[FERRY_AUGMENT_OUT_W], rec[FERRY_AUGMENT_OUT_H],
                       rec[FERRY_AUGMENT_RESIZE_W], rec[FERRY_AUGMENT_RESIZE_H],
                       (unsigned long long)ctx->image.max_pixels);
  ferry_status st = FERRY_OK;
  if (ctx->slots.images >= 0) {
    const uint8_t *rgb, *data;
    size_t len;
    int w = 0, h = 0;
    st = source_bytes(ctx, scratch, index, &data, &len);
    if (st == FERRY_OK && data) st = ferry_decode_rgb(decoder, data, len, path, &ctx->image, &rgb, &w, &h);
    else if (st == FERRY_OK) st = ferry_image_load_rgb(decoder, path, &ctx->image, &rgb, &w, &h);
    if (st == FERRY_OK) st = ferry__loader_check_decoded(ctx, path, w, h, img);
    if (st == FERRY_OK)
      st = ferry__augment_pixels(decoder, rec, rgb, w, h, ctx->layout, ferry__loader_slice(batch, ctx->slots.images, slot));
  }
  if (st == FERRY_OK) st = write_augmented_targets(ctx, scratch, batch, slot, index, img, rec);
  if (st == FERRY_OK) write_sample_fields(ctx, batch, slot, index, img, rec);
  return st;
}

ferry_status ferry__loader_fill_sample(const ferry__fill_context *ctx, ferry_decoder *decoder,
                                       ferry__fill_scratch *scratch, ferry_batch *batch, size_t slot, size_t index,
                                       const int32_t *record) {
  ferry_coco_image img;
  char path[4096];
  ferry_status st = ferry__loader_image_file(ctx, index, &img, path, sizeof path);
  if (st != FERRY_OK) return st;
  st = ctx->varies ? fill_augmented(ctx, decoder, scratch, batch, slot, index, &img, path, record)
                   : fill_square(ctx, decoder, scratch, batch, slot, index, &img, path);
  if (st != FERRY_OK)
    return ferry__error_prefix(st, "dataset index %zu (image id %lld, file %s): ", index,
                              (long long)img.id, img.file_name);
  return FERRY_OK;
}
