/* coco/rle_decode.h - what coco/rle_decode.c exports: decoding a mask straight through a
 * nearest index map (internal).
 *
 * A mask made at an output size never exists at its source size: output pixel
 * (i, j) is source pixel (rows[i], cols[j]), where rows and cols are nearest index
 * maps (lib/nearest.h): one resize, or a composition of resizes, crops and a
 * horizontal flip (an augmentation's chain). The decoder walks the RLE's runs once
 * and writes only the foreground output pixels, so the cost is O(runs + foreground
 * output pixels + the map's size).
 *
 * ferry_rle_decode_resized (rle_decode.c) decodes with it; target.c builds a map once per
 * image and decodes every mask of the image through it. Invariants the decoder
 * relies on, which ferry__mask_map_init establishes: rows is non-decreasing (no
 * vertical flip), cols is monotonic either way (a horizontal flip reverses it), and
 * every index is inside the source.
 */
#ifndef FERRY_COCO_RLE_DECODE_H
#define FERRY_COCO_RLE_DECODE_H

#include "ferry/mask.h"

typedef struct ferry__mask_map {
  uint32_t src_h, src_w, dst_h, dst_w;
  uint32_t *cols;       /* [dst_w]: the source column of each output column */
  uint32_t *first_row;  /* [src_h + 1]: the first output row whose source row is >= s */
} ferry__mask_map;

/* A map from (src_h, src_w) to (dst_h, dst_w). rows/cols: the source index of each
 * output row and column (checked: rows non-decreasing, cols monotonic, all inside the
 * source); NULL: the plain nearest resize of that axis. FERRY_EINVAL for a map that
 * breaks the rules, FERRY_ENOMEM. Free with ferry__mask_map_free. */
ferry_status ferry__mask_map_init(ferry__mask_map *map, uint32_t src_h, uint32_t src_w, uint32_t dst_h,
                                 uint32_t dst_w, const uint32_t *rows, const uint32_t *cols);
void ferry__mask_map_free(ferry__mask_map *map);

/* Decode `rle` (which must be src_h x src_w) into out[dst_h * dst_w] through the map. */
ferry_status ferry__rle_decode_mapped(const ferry_rle *rle, uint8_t *out, const ferry__mask_map *map);

#endif
