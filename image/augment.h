/* image/augment.h - RF-DETR's recipes as geometry: draws, then what they do to the
 * pixels, the boxes, the areas and the masks of one sample (internal; issue 24).
 *
 * A sample's geometry is its record (FERRY_AUGMENT_* in ferry/image.h: flip, branch,
 * branch B's resize, its crop, the output size), drawn from its key alone
 * (ferry__augment_draw) when the batch is laid out, before a pixel is decoded, and
 * replayed on the sample by the worker that fills it. The record is the one place
 * the chain is described: pixels (ferry__augment_pixels), boxes and areas
 * (ferry__augment_targets) and masks (ferry__augment_mask_maps) all read it, so they
 * cannot disagree about which resize, crop or flip a sample had.
 *
 * The references, restated (rfdetr/datasets/_torchvision.py of RF-DETR 1.11, with
 * torchvision.transforms.v2's functionals):
 *   - Resize((h', w')): Pillow BILINEAR on u8; boxes times float32(w'/w), float32(h'/h)
 *     in float32; area times float32((w'/w) * (h'/h)); masks by torch's nearest rule;
 *   - RandomResize([s], max_size): the shortest side to s, the longest capped, sizes
 *     int(round(s * long / short)) in doubles, round half to even (_get_size);
 *   - crop(top, left, h, w): the pixels and masks cut; boxes minus (left, top), clamped
 *     to [0, w] x [0, h] in float32; an instance whose clamped box has no width or no
 *     height is dropped (box, label, mask, area, iscrowd); survivors' area becomes
 *     their clamped box's;
 *   - RandomSizedCrop((lo, hi), (s, s)): side uniform in [min(lo, m), m], m = min(hi,
 *     h, w); top and left uniform over the valid range; the crop; Resize((s, s));
 *   - RandomHorizontalFlip(p): last; boxes x -> w - x (swapped); masks and pixels mirrored.
 */
#ifndef FERRY_IMAGE_AUGMENT_H
#define FERRY_IMAGE_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/image.h"

enum { FERRY_AUGMENT_MAX_SCALES = 16 };

/* A recipe made ready at open: the options, the resolution, its scales. */
typedef struct ferry__augment_recipe {
  ferry_augment_options options;
  int resolution;
  int scales[FERRY_AUGMENT_MAX_SCALES];
  size_t nscales;
} ferry__augment_recipe;

/* The options checked and the scales computed (FERRY_EINVAL naming the option). */
ferry_status ferry__augment_recipe_init(ferry__augment_recipe *r, const ferry_augment_options *o, int resolution);

/* 1 when the recipe draws anything (a training recipe) or can give samples of
 * different sizes: then a batch's samples have their own shapes. */
int ferry__augment_varies(const ferry__augment_recipe *r);

/* FERRY_DRAFT_SIZE_RFDETR worked out for this recipe (ferry/image.h): 0 (full size) for
 * a validation recipe or when masks are made; else the smallest extent the recipe
 * resizes from without upscaling, as RF-DETR's draft_size_for_transforms says. */
int ferry__augment_draft_size(const ferry__augment_recipe *r, int masks);

/* The scale of batch `batch` of an epoch with per-batch multi-scale, drawn from
 * (seed, epoch, batch). */
int ferry__augment_batch_scale(const ferry__augment_recipe *r, uint64_t seed, int64_t epoch, uint64_t batch);

/* Draw sample `index`'s record in `epoch` for a src_h x src_w image. batch_scale > 0
 * is the per-batch scale; 0 draws s per sample (or takes the resolution). */
void ferry__augment_draw(const ferry__augment_recipe *r, uint64_t seed, int64_t epoch, uint64_t index,
                         int batch_scale, int src_h, int src_w, int32_t *record);

/* The boxes (xyxy float32, in the source image's pixels, as ConvertCoco makes them)
 * and areas (may be NULL) of n instances through the record's chain, in place; keep[k]
 * says whether instance k survives the crop. Returns the survivors' count; the
 * survivors' values are compacted to the front, in order. */
size_t ferry__augment_targets(const int32_t *record, int src_h, int src_w,
                              float *boxes, float *areas, size_t n, uint8_t *keep);

/* The source row of each output row and the source column of each output column
 * (rows[out_h], cols[out_w]): the masks' chain of nearest resizes, crop and flip, as
 * index maps (rows non-decreasing; cols reversed by a flip). */
void ferry__augment_mask_maps(const int32_t *record, int src_h, int src_w, uint32_t *rows,
                              uint32_t *cols);

/* The pixels: the decoded RGB8 src (src_w x src_h, rows 3*src_w apart) through the
 * chain into dst (out_h x out_w in `layout`), with d's scratch for the intermediate of
 * branch B (u8, as a PIL image is). */
ferry_status ferry__augment_pixels(ferry_decoder *d, const int32_t *record,
                                   const uint8_t *src, int src_w, int src_h, ferry_image_layout layout, void *dst);

#endif
