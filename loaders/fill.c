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
 *   - the fill context is read-only here (fixed at open, loader.c), and the batch is
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

#include "image/geometry.h"
#include "loaders/loader_internal.h"

/* "..", or an absolute name, would let an annotation file read outside the folder. */
static int escapes(const char *name) {
  if (name[0] == '/') return 1;
  for (const char *p = name; *p;) {
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') return 1;
    if (!slash) break;
    p = slash + 1;
  }
  return 0;
}

/* The file of image `img`: file_name under the images folder, or as it is when it is
 * absolute and allow_escaping_paths lets it be. A name that does not fit in `size`
 * is an error rather than a cut path that could name another file. */
static ferry_status image_path(const fill_context *ctx, const ferry_coco_image *img, char *path,
                               size_t size) {
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
static void convert_boxes(float *boxes, int64_t n, const fill_context *ctx, double w, double h) {
  if (ctx->box_format == FERRY_BOXES_CXCYWH_NORM) ferry__boxes_to_cxcywh_norm(boxes, n, w, h);
  else ferry__boxes_scale(boxes, n, ctx->resolution / w, ctx->resolution / h);
}

ferry_status ferry__loader_write_targets(const fill_context *ctx, ferry_batch *batch, size_t slot,
                                        size_t index, const ferry_coco_image *img) {
  const field_slots *f = &ctx->slots;
  ferry_coco_target t = {
    .boxes = ferry__loader_slice(batch, f->boxes, slot),
    .labels = ferry__loader_slice(batch, f->labels, slot),
    .area = ferry__loader_slice(batch, f->area, slot),
    .iscrowd = ferry__loader_slice(batch, f->iscrowd, slot),
    .masks = ferry__loader_slice(batch, f->masks, slot),
    .keypoints = ferry__loader_slice(batch, f->keypoints, slot),
  };
  ferry_status st = ferry_coco_target_write(ctx->coco, index, &ctx->target, &t);
  if (st != FERRY_OK) return st;
  /* The slot's box count is its row count in the layout (offsets[slot + 1] -
   * offsets[slot]), the same the target writer filled. */
  int64_t n = 0;
  if (f->boxes >= 0) {
    n = ferry_batch_offsets(batch, (size_t)f->boxes)[slot + 1] - ferry_batch_offsets(batch, (size_t)f->boxes)[slot];
    convert_boxes(t.boxes, n, ctx, (double)img->width, (double)img->height);
  }
  int64_t *id = ferry__loader_slice(batch, f->image_id, slot);
  if (id) id[0] = t.image_id;
  int64_t *orig = ferry__loader_slice(batch, f->orig_size, slot);
  if (orig) orig[0] = img->height, orig[1] = img->width;
  int64_t *size = ferry__loader_slice(batch, f->size, slot);
  if (size) size[0] = size[1] = ctx->resolution;
  /* Always defined (loader.c define_fields), so never NULL. */
  *(int64_t *)ferry__loader_slice(batch, f->sample_index, slot) = (int64_t)index;
  return FERRY_OK;
}

ferry_status ferry__loader_image_file(const fill_context *ctx, size_t index, ferry_coco_image *img,
                                     char *path, size_t size) {
  ferry_status st = ferry_coco_image_at(ctx->coco, index, img);
  if (st == FERRY_OK) st = image_path(ctx, img, path, size);
  if (st != FERRY_OK) return ferry__error_prefix(st, "dataset index %zu: ", index);
  return FERRY_OK;
}

ferry_status ferry__loader_check_size(const char *path, int w, int h, const ferry_coco_image *img) {
  if (w == img->width && h == img->height) return FERRY_OK;
  return ferry__fail(FERRY_EFORMAT, "%s: the image is %dx%d but the annotations say %lldx%lld", path,
                     w, h, (long long)img->width, (long long)img->height);
}

ferry_status ferry__loader_fill_sample(const fill_context *ctx, ferry_decoder *decoder,
                                      ferry_batch *batch, size_t slot, size_t index) {
  ferry_coco_image img;
  char path[4096];
  ferry_status st = ferry__loader_image_file(ctx, index, &img, path, sizeof path);
  if (st != FERRY_OK) return st;
  /* Straight into the slot's image slice, no copy. w and h come back as the file's
   * size, EXIF-rotated when ctx->image.apply_exif is set: the annotations must then
   * give the size as displayed. A size that differs from the annotations fails the
   * sample: the boxes and masks, made at the annotated size, would not fit the image. */
  int w = 0, h = 0;
  st = ferry_image_load_resized(decoder, path, &ctx->image, ctx->resolution, ctx->layout,
                                ferry__loader_slice(batch, ctx->slots.images, slot), &w, &h);
  if (st == FERRY_OK) st = ferry__loader_check_size(path, w, h, &img);
  /* Targets only for an image that loaded and matches: a failed sample's work stops
   * at its first error. */
  if (st == FERRY_OK) st = ferry__loader_write_targets(ctx, batch, slot, index, &img);
  if (st != FERRY_OK)
    return ferry__error_prefix(st, "dataset index %zu (image id %lld, file %s): ", index,
                              (long long)img.id, img.file_name);
  return FERRY_OK;
}
