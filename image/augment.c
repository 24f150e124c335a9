/* image/augment.c - RF-DETR's recipes: the options, the draws, and a record's chain
 * through pixels, boxes, areas and masks (augment.h).
 *
 * Owns nothing between calls but what a recipe holds (its options and scales, fixed
 * at open); the pixels' intermediate lives in the caller's decoder. Callers: the
 * loader's coordinator draws records when it lays a batch out (any sample, one thread);
 * its workers replay them (each on its own sample and decoder, many at once). No lock.
 *
 * Invariants:
 *   - a record is a pure function of (options, resolution, seed, epoch, dataset index,
 *     the per-batch scale, the source size): every choice has its own draw slot
 *     (lib/rng.h), so a choice a recipe does not make moves no other;
 *   - the arithmetic of each step is the reference's, in its types (augment.h): float32
 *     for boxes and areas, doubles for the sizes RandomResize computes, u8 between the
 *     two resizes of branch B, torch's float32 nearest rule for masks;
 *   - the output size of a record never exceeds what ferry__augment_draw computed, and
 *     the survivors of a crop are a function of the record and the boxes alone, so the
 *     coordinator lays a sample out from the same numbers the worker writes.
 * Not done here: keypoints (the loader refuses them with a recipe that moves pixels),
 * per-sample photometric augmentations, deciding when a pixel count is too many (the
 * loader applies the image options' limit to the record's sizes).
 */
#include <math.h>
#include <string.h>

#include "image/augment.h"
#include "image/decoder.h"
#include "image/scratch.h"
#include "image/resize_kernels.h"
#include "lib/nearest.h"
#include "lib/rng.h"
#include "lib/status.h"

/* Draw slots: one per choice, in any order. */
enum { SLOT_BRANCH = 1, SLOT_SCALE, SLOT_RESIZE_B, SLOT_CROP, SLOT_TOP, SLOT_LEFT, SLOT_FLIP, SLOT_BATCH_SCALE };

/* The draws of sample `index` and of batch `batch` come from different streams. */
enum { STREAM_SAMPLE = 0x5a11, STREAM_BATCH = 0xba7c };

/* ---- options -------------------------------------------------------------------- */

void ferry_augment_options_default(ferry_augment_options *o) {
  memset(o, 0, sizeof *o);
  o->recipe = FERRY_AUGMENT_NONE;
  o->multi_scale = FERRY_MULTI_SCALE_OFF;
  o->patch_size = 16;
  o->num_windows = 4;
  o->scale_jitter = 1;
  o->hflip = 0.5f;
  o->max_size = 1333;
  o->crop_min = 384;
  o->crop_max = 600;
  o->resize_b[0] = 400;
  o->resize_b[1] = 500;
  o->resize_b[2] = 600;
}

static const char *const recipe_names[] = {"none", "val", "rfdetr-square", "rfdetr"};
static const char *const multi_scale_names[] = {"off", "per-sample", "per-batch"};

ferry_status ferry_augment_parse(const char *name, ferry_augment *out) {
  if (name && strcmp(name, "val-square") == 0) return *out = FERRY_AUGMENT_NONE, FERRY_OK;
  for (int i = 0; name && i < 4; i++)
    if (strcmp(name, recipe_names[i]) == 0) return *out = (ferry_augment)i, FERRY_OK;
  return ferry__fail(FERRY_EINVAL, "augment '%s' is none of none, val-square, val, rfdetr-square, rfdetr",
                     name ? name : "(null)");
}

const char *ferry_augment_name(ferry_augment recipe) {
  return (unsigned)recipe < 4 ? recipe_names[recipe] : "?";
}

ferry_status ferry_multi_scale_parse(const char *name, ferry_multi_scale *out) {
  for (int i = 0; name && i < 3; i++)
    if (strcmp(name, multi_scale_names[i]) == 0) return *out = (ferry_multi_scale)i, FERRY_OK;
  return ferry__fail(FERRY_EINVAL, "multi_scale '%s' is none of off, per-sample, per-batch", name ? name : "(null)");
}

const char *ferry_multi_scale_name(ferry_multi_scale mode) {
  return (unsigned)mode < 3 ? multi_scale_names[mode] : "?";
}

static int is_training(ferry_augment recipe) {
  return recipe == FERRY_AUGMENT_RFDETR_SQUARE || recipe == FERRY_AUGMENT_RFDETR;
}

ferry_status ferry_augment_options_check(const ferry_augment_options *o, int resolution) {
  if (!o) return ferry__fail(FERRY_EINVAL, "augment: NULL options");
  if ((unsigned)o->recipe > FERRY_AUGMENT_RFDETR)
    return ferry__fail(FERRY_EINVAL, "augment: recipe %d is not a ferry_augment", (int)o->recipe);
  if ((unsigned)o->multi_scale > FERRY_MULTI_SCALE_PER_BATCH)
    return ferry__fail(FERRY_EINVAL, "augment: multi_scale %d is not a ferry_multi_scale", (int)o->multi_scale);
  if (o->multi_scale != FERRY_MULTI_SCALE_OFF && !is_training(o->recipe))
    return ferry__fail(FERRY_EINVAL, "augment: multi_scale %s needs a training recipe (rfdetr-square or rfdetr), "
                       "not %s", ferry_multi_scale_name(o->multi_scale), ferry_augment_name(o->recipe));
  if (resolution < 1) return ferry__fail(FERRY_EINVAL, "augment: resolution %d is not positive", resolution);
  if (o->patch_size < 1 || o->num_windows < 1)
    return ferry__fail(FERRY_EINVAL, "augment: %s %d must be positive", o->patch_size < 1 ? "patch_size" : "num_windows",
                       o->patch_size < 1 ? o->patch_size : o->num_windows);
  if (o->max_size < 1) return ferry__fail(FERRY_EINVAL, "augment: max_size %d must be positive", o->max_size);
  if (o->crop_min < 1 || o->crop_max < o->crop_min)
    return ferry__fail(FERRY_EINVAL, "augment: crop bounds (crop_min %d, crop_max %d) must be positive and in order",
                       o->crop_min, o->crop_max);
  for (int i = 0; i < 3; i++)
    if (o->resize_b[i] < 1)
      return ferry__fail(FERRY_EINVAL, "augment: resize_b[%d] %d must be positive", i, o->resize_b[i]);
  if (!(o->hflip >= 0.0f && o->hflip <= 1.0f))
    return ferry__fail(FERRY_EINVAL, "augment: hflip %g is a probability outside [0, 1]", (double)o->hflip);
  if (o->scale_jitter != 0 && o->scale_jitter != 1)
    return ferry__fail(FERRY_EINVAL, "augment: scale_jitter %d is neither 0 nor 1", o->scale_jitter);
  for (size_t i = 0; i < sizeof o->reserved / sizeof o->reserved[0]; i++)
    if (o->reserved[i]) return ferry__fail(FERRY_EINVAL, "augment: reserved[%zu] must be 0", i);
  return FERRY_OK;
}

/* compute_multi_scale_scales (rfdetr/datasets/coco.py): multiples of patch * windows
 * around the resolution's, at least twice that multiple. */
ferry_status ferry_augment_scales(const ferry_augment_options *o, int resolution, int *scales, size_t cap, size_t *n) {
  ferry_status st = ferry_augment_options_check(o, resolution);
  if (st != FERRY_OK) return st;
  *n = 0;
  if (o->multi_scale == FERRY_MULTI_SCALE_OFF) {
    if (cap < 1) return ferry__fail(FERRY_EINVAL, "augment: no room for the scales");
    scales[(*n)++] = resolution;
    return FERRY_OK;
  }
  int64_t unit = (int64_t)o->patch_size * o->num_windows, base = resolution / unit;
  int lo = o->expanded_scales ? -5 : -3, hi = o->expanded_scales ? 5 : 4;
  for (int off = lo; off <= hi; off++) {
    int64_t s = (base + off) * unit;
    if (s < unit * 2 || s > 8192) continue;
    if (*n == cap) return ferry__fail(FERRY_EINVAL, "augment: more scales than %zu", cap);
    scales[(*n)++] = (int)s;
  }
  if (*n == 0)
    return ferry__fail(FERRY_EINVAL, "augment: no scale: resolution %d with patch_size %d and num_windows %d leaves "
                       "none between %lld and 8192", resolution, o->patch_size, o->num_windows, (long long)(unit * 2));
  return FERRY_OK;
}

ferry_status ferry__augment_recipe_init(ferry__augment_recipe *r, const ferry_augment_options *o, int resolution) {
  memset(r, 0, sizeof *r);
  r->options = *o;
  r->resolution = resolution;
  return ferry_augment_scales(o, resolution, r->scales, FERRY_AUGMENT_MAX_SCALES, &r->nscales);
}

int ferry__augment_varies(const ferry__augment_recipe *r) { return r->options.recipe != FERRY_AUGMENT_NONE; }

/* RF-DETR's draft_size_for_transforms, restated: what branch A resizes to at most (the
 * largest scale: with multi-scale the largest of compute_multi_scale_scales, else the
 * resolution), with scale jitter at least branch B's largest first resize. */
int ferry__augment_draft_size(const ferry__augment_recipe *r, int masks) {
  if (!is_training(r->options.recipe) || masks) return 0;
  int size = 0;
  for (size_t i = 0; i < r->nscales; i++)
    if (r->scales[i] > size) size = r->scales[i];
  for (int i = 0; r->options.scale_jitter && i < 3; i++)
    if (r->options.resize_b[i] > size) size = r->options.resize_b[i];
  return size;
}

/* ---- the draws ------------------------------------------------------------------ */

int ferry__augment_batch_scale(const ferry__augment_recipe *r, uint64_t seed, int64_t epoch, uint64_t batch) {
  uint64_t key = ferry__rng_key(seed, (uint64_t)epoch, batch, STREAM_BATCH);
  return r->scales[ferry__rng_below(key, SLOT_BATCH_SCALE, r->nscales)];
}

/* RandomResize._get_size: the shortest side to `size`, the longest capped at max_size
 * (0: no cap), in Python's doubles and round() (half to even). */
static void shortest_side(int h, int w, int size, int max_size, int *out_h, int *out_w) {
  double min_original = h < w ? h : w, max_original = h < w ? w : h;
  if (max_size > 0 && max_original / min_original * size > max_size)
    size = (int)nearbyint(max_size * min_original / max_original);
  if ((w <= h && w == size) || (h <= w && h == size)) {
    *out_h = h, *out_w = w;
  } else if (w < h) {
    *out_w = size;
    *out_h = (int)nearbyint((double)size * h / w);
  } else {
    *out_h = size;
    *out_w = (int)nearbyint((double)size * w / h);
  }
}

/* torch.randint(lo, hi + 1) over [lo, hi], or lo when the range is one value (the
 * reference draws nothing then). */
static int uniform_in(uint64_t key, uint32_t slot, int lo, int hi) {
  return hi > lo ? lo + (int)ferry__rng_below(key, slot, (uint64_t)(hi - lo) + 1) : lo;
}

/* Branch B: RandomResize(resize_b), then RandomSizedCrop((crop_min, crop_max), (s, s)). */
static void draw_branch_b(const ferry_augment_options *o, uint64_t key, int h, int w, int s, int32_t *rec) {
  int h1, w1;
  shortest_side(h, w, o->resize_b[ferry__rng_below(key, SLOT_RESIZE_B, 3)], 0, &h1, &w1);
  int max_crop = o->crop_max < h1 ? o->crop_max : h1;
  if (w1 < max_crop) max_crop = w1;
  int min_crop = o->crop_min < max_crop ? o->crop_min : max_crop;
  int side = uniform_in(key, SLOT_CROP, min_crop, max_crop);
  int ch = side < h1 ? side : h1, cw = side < w1 ? side : w1;
  rec[FERRY_AUGMENT_BRANCH] = 1;
  rec[FERRY_AUGMENT_RESIZE_H] = h1;
  rec[FERRY_AUGMENT_RESIZE_W] = w1;
  rec[FERRY_AUGMENT_CROP_TOP] = uniform_in(key, SLOT_TOP, 0, h1 - ch);
  rec[FERRY_AUGMENT_CROP_LEFT] = uniform_in(key, SLOT_LEFT, 0, w1 - cw);
  rec[FERRY_AUGMENT_CROP_H] = ch;
  rec[FERRY_AUGMENT_CROP_W] = cw;
  rec[FERRY_AUGMENT_OUT_H] = rec[FERRY_AUGMENT_OUT_W] = s;
}

void ferry__augment_draw(const ferry__augment_recipe *r, uint64_t seed, int64_t epoch, uint64_t index,
                         int batch_scale, int src_h, int src_w, int32_t *rec) {
  const ferry_augment_options *o = &r->options;
  memset(rec, 0, FERRY_AUGMENT_RECORD_LEN * sizeof *rec);
  int oh = r->resolution, ow = r->resolution;
  if (o->recipe == FERRY_AUGMENT_VAL) shortest_side(src_h, src_w, r->resolution, o->max_size, &oh, &ow);
  if (!is_training(o->recipe)) {
    rec[FERRY_AUGMENT_OUT_H] = oh;
    rec[FERRY_AUGMENT_OUT_W] = ow;
    return;
  }
  uint64_t key = ferry__rng_key(seed, (uint64_t)epoch, index, STREAM_SAMPLE);
  int s = batch_scale > 0 ? batch_scale : r->scales[ferry__rng_below(key, SLOT_SCALE, r->nscales)];
  int square = o->recipe == FERRY_AUGMENT_RFDETR_SQUARE;
  /* RandomSelect: branch A when rand < 0.5 */
  int branch_b = o->scale_jitter && ferry__rng_unit(key, SLOT_BRANCH) >= 0.5f;
  if (branch_b) {
    draw_branch_b(o, key, src_h, src_w, square || s < o->max_size ? s : o->max_size, rec);
  } else if (square) {
    rec[FERRY_AUGMENT_OUT_H] = rec[FERRY_AUGMENT_OUT_W] = s;
  } else {
    shortest_side(src_h, src_w, s, o->max_size, &oh, &ow);
    rec[FERRY_AUGMENT_OUT_H] = oh;
    rec[FERRY_AUGMENT_OUT_W] = ow;
  }
  /* RandomHorizontalFlip: no flip when rand >= p */
  rec[FERRY_AUGMENT_FLIP] = ferry__rng_unit(key, SLOT_FLIP) < o->hflip;
}

/* ---- boxes and areas ------------------------------------------------------------ */

/* Resize's boxes and area: times each axis' ratio as float32 (torchvision's ratio
 * tensor), the area times the ratios' product as a float32 scalar. */
static void resize_targets(float *boxes, float *areas, size_t n, int h, int w, int nh, int nw) {
  double rw = (double)nw / w, rh = (double)nh / h;
  float fw = (float)rw, fh = (float)rh, fa = (float)(rw * rh);
  for (size_t k = 0; k < n; k++) {
    if (nh != h || nw != w) {
      float *b = boxes + 4 * k;
      b[0] *= fw, b[1] *= fh, b[2] *= fw, b[3] *= fh;
    }
    if (areas) areas[k] *= fa;
  }
}

static float clampf(float v, float hi) { return fminf(fmaxf(v, 0.0f), hi); }

/* crop's boxes: shifted, clamped, the empty ones dropped (compacted); survivors' area
 * is their box's. Returns the survivors. */
static size_t crop_targets(float *boxes, float *areas, size_t n, const int32_t *rec, uint8_t *keep) {
  float top = (float)rec[FERRY_AUGMENT_CROP_TOP], left = (float)rec[FERRY_AUGMENT_CROP_LEFT];
  float ch = (float)rec[FERRY_AUGMENT_CROP_H], cw = (float)rec[FERRY_AUGMENT_CROP_W];
  size_t kept = 0;
  for (size_t k = 0; k < n; k++) {
    const float *b = boxes + 4 * k;
    float c[4] = {clampf(b[0] - left, cw), clampf(b[1] - top, ch), clampf(b[2] - left, cw), clampf(b[3] - top, ch)};
    keep[k] = c[2] > c[0] && c[3] > c[1];
    if (!keep[k]) continue;
    memcpy(boxes + 4 * kept, c, sizeof c);
    if (areas) areas[kept] = (c[2] - c[0]) * (c[3] - c[1]);
    kept++;
  }
  return kept;
}

size_t ferry__augment_targets(const int32_t *rec, int src_h, int src_w, float *boxes, float *areas, size_t n,
                              uint8_t *keep) {
  int oh = rec[FERRY_AUGMENT_OUT_H], ow = rec[FERRY_AUGMENT_OUT_W];
  memset(keep, 1, n);
  if (rec[FERRY_AUGMENT_BRANCH]) {
    resize_targets(boxes, areas, n, src_h, src_w, rec[FERRY_AUGMENT_RESIZE_H], rec[FERRY_AUGMENT_RESIZE_W]);
    n = crop_targets(boxes, areas, n, rec, keep);
    resize_targets(boxes, areas, n, rec[FERRY_AUGMENT_CROP_H], rec[FERRY_AUGMENT_CROP_W], oh, ow);
  } else {
    resize_targets(boxes, areas, n, src_h, src_w, oh, ow);
  }
  if (rec[FERRY_AUGMENT_FLIP])
    for (size_t k = 0; k < n; k++) {
      float *b = boxes + 4 * k, x0 = b[0];
      b[0] = (float)ow - b[2];
      b[2] = (float)ow - x0;
    }
  return n;
}

/* ---- masks ---------------------------------------------------------------------- */

/* One axis: output index i of out through an optional crop (offset, crop) of an
 * intermediate `mid` wide resized from `src`. */
static void axis_map(uint32_t src, uint32_t mid, uint32_t offset, uint32_t crop, uint32_t out, int reverse,
                     uint32_t *map) {
  for (uint32_t i = 0; i < out; i++) {
    uint32_t m = crop ? offset + ferry__nearest_source(i, crop, out) : i;
    uint32_t v = crop ? ferry__nearest_source(m, src, mid) : ferry__nearest_source(i, src, out);
    map[reverse ? out - 1 - i : i] = v;
  }
}

void ferry__augment_mask_maps(const int32_t *rec, int src_h, int src_w, uint32_t *rows, uint32_t *cols) {
  int b = rec[FERRY_AUGMENT_BRANCH];
  axis_map((uint32_t)src_h, (uint32_t)rec[FERRY_AUGMENT_RESIZE_H], (uint32_t)rec[FERRY_AUGMENT_CROP_TOP],
           b ? (uint32_t)rec[FERRY_AUGMENT_CROP_H] : 0, (uint32_t)rec[FERRY_AUGMENT_OUT_H], 0, rows);
  axis_map((uint32_t)src_w, (uint32_t)rec[FERRY_AUGMENT_RESIZE_W], (uint32_t)rec[FERRY_AUGMENT_CROP_LEFT],
           b ? (uint32_t)rec[FERRY_AUGMENT_CROP_W] : 0, (uint32_t)rec[FERRY_AUGMENT_OUT_W], rec[FERRY_AUGMENT_FLIP], cols);
}

/* ---- pixels --------------------------------------------------------------------- */

/* Pillow's chain, each resize made as a view (resize_kernels.h): branch B's first
 * resize makes only the crop's pixels (its u8 intermediate, as the PIL image between
 * the two resizes is; the rest of it would be cropped away), and the flip is the last
 * resize's columns taken right to left. The bytes are those of the full chain. */
ferry_status ferry__augment_pixels(ferry_decoder *d, const int32_t *rec, const uint8_t *src, int src_w, int src_h,
                                   ferry_image_layout layout, void *dst) {
  const ferry__resize_kernels *k = ferry__resize_best_kernels();
  int oh = rec[FERRY_AUGMENT_OUT_H], ow = rec[FERRY_AUGMENT_OUT_W];
  ferry__resize_view last = {ow, oh, 0, 0, ow, oh, rec[FERRY_AUGMENT_FLIP] != 0};
  if (!rec[FERRY_AUGMENT_BRANCH])
    return ferry__image_resize_view(k, d, src, (size_t)src_w * 3, src_w, src_h, &last, layout, dst);
  int ch = rec[FERRY_AUGMENT_CROP_H], cw = rec[FERRY_AUGMENT_CROP_W];
  ferry__resize_view crop = {rec[FERRY_AUGMENT_RESIZE_W],
                             rec[FERRY_AUGMENT_RESIZE_H],
                             rec[FERRY_AUGMENT_CROP_LEFT],
                             rec[FERRY_AUGMENT_CROP_TOP],
                             cw,
                             ch,
                             0};
  ferry_status st = ferry__scratch_reserve(&d->augment, (size_t)ch * cw * 3, "augment");
  if (st == FERRY_OK)
    st = ferry__image_resize_view(k, d, src, (size_t)src_w * 3, src_w, src_h, &crop, FERRY_LAYOUT_U8_HWC,
                                  d->augment.data);
  if (st == FERRY_OK)
    st = ferry__image_resize_view(k, d, d->augment.data, (size_t)cw * 3, cw, ch, &last, layout, dst);
  return st;
}
