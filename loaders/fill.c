/* loaders/fill.c - one sample: decode its image and write its targets in place. */
#include <stdio.h>
#include <string.h>

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

static void *slice(ferry_batch *batch, int field, size_t slot) {
  ferry_tensor view;
  if (field < 0 || ferry_batch_sample(batch, (size_t)field, slot, &view) != FERRY_OK) return NULL;
  return view.data;
}

/* Boxes arrive as xyxy in the file's pixels; make them what the config asks. */
static void convert_boxes(float *boxes, int64_t n, const fill_context *ctx, double w, double h) {
  for (int64_t i = 0; i < n; i++) {
    float *b = boxes + 4 * i;
    double x0 = b[0], y0 = b[1], x1 = b[2], y1 = b[3];
    if (ctx->box_format == FERRY_BOXES_CXCYWH_NORM) {
      b[0] = (float)((x0 + x1) / 2 / w);
      b[1] = (float)((y0 + y1) / 2 / h);
      b[2] = (float)((x1 - x0) / w);
      b[3] = (float)((y1 - y0) / h);
    } else {
      double sx = ctx->resolution / w, sy = ctx->resolution / h;
      b[0] = (float)(x0 * sx);
      b[1] = (float)(y0 * sy);
      b[2] = (float)(x1 * sx);
      b[3] = (float)(y1 * sy);
    }
  }
}

static ferry_status write_targets(const fill_context *ctx, ferry_batch *batch, size_t slot,
                                  size_t index, const ferry_coco_image *img) {
  const field_slots *f = &ctx->slots;
  ferry_coco_target t = {
    .boxes = slice(batch, f->boxes, slot),
    .labels = slice(batch, f->labels, slot),
    .area = slice(batch, f->area, slot),
    .iscrowd = slice(batch, f->iscrowd, slot),
    .masks = slice(batch, f->masks, slot),
    .keypoints = slice(batch, f->keypoints, slot),
  };
  ferry_status st = ferry_coco_target_write(ctx->coco, index, &ctx->target, &t);
  if (st != FERRY_OK) return st;
  int64_t n = 0;
  if (f->boxes >= 0) {
    n = ferry_batch_offsets(batch, (size_t)f->boxes)[slot + 1] - ferry_batch_offsets(batch, (size_t)f->boxes)[slot];
    convert_boxes(t.boxes, n, ctx, (double)img->width, (double)img->height);
  }
  int64_t *id = slice(batch, f->image_id, slot);
  if (id) id[0] = t.image_id;
  int64_t *orig = slice(batch, f->orig_size, slot);
  if (orig) orig[0] = img->height, orig[1] = img->width;
  int64_t *size = slice(batch, f->size, slot);
  if (size) size[0] = size[1] = ctx->resolution;
  *(int64_t *)slice(batch, f->sample_index, slot) = (int64_t)index;
  return FERRY_OK;
}

ferry_status ferry__loader_fill_sample(const fill_context *ctx, ferry_decoder *decoder,
                                      ferry_batch *batch, size_t slot, size_t index) {
  ferry_coco_image img;
  char path[4096];
  ferry_status st = ferry_coco_image_at(ctx->coco, index, &img);
  if (st == FERRY_OK) st = image_path(ctx, &img, path, sizeof path);
  if (st != FERRY_OK) return ferry__error_prefix(st, "dataset index %zu: ", index);
  int w = 0, h = 0;
  st = ferry_image_load_resized(decoder, path, &ctx->image, ctx->resolution, ctx->layout,
                                slice(batch, ctx->slots.images, slot), &w, &h);
  if (st == FERRY_OK && (w != img.width || h != img.height))
    st = ferry__fail(FERRY_EFORMAT, "%s: the image is %dx%d but the annotations say %lldx%lld", path,
                    w, h, (long long)img.width, (long long)img.height);
  if (st == FERRY_OK) st = write_targets(ctx, batch, slot, index, &img);
  if (st != FERRY_OK)
    return ferry__error_prefix(st, "dataset index %zu (image id %lld, file %s): ", index,
                              (long long)img.id, img.file_name);
  return FERRY_OK;
}
