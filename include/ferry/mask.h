/* ferry/mask.h - run-length encoded masks with pycocotools' semantics.
 *
 * A ferry_rle is COCO's RLE: the mask of an h x w image read in COLUMN-major order
 * (down the first column, then the next) as alternating runs, the first run being
 * background (so a mask whose first pixel is set starts with a 0 count). Every
 * ferry_rle built by these functions is valid: its counts sum to exactly h*w and
 * h*w fits in 32 bits, so nothing downstream has to re-check it.
 *
 * The functions reproduce pycocotools' common/maskApi.c (as shipped in pycocotools
 * 2.0.11) bit for bit (rleFrPoly, rleFrBbox, rleMerge, rleArea, rleToBbox, rleIou,
 * rleToString/rleFrString) on every input that code handles without undefined
 * behaviour; where maskApi.c would read or write out of bounds (counts that do not sum
 * to h*w, unterminated strings, coordinates beyond int range) ferry returns
 * FERRY_EFORMAT or FERRY_ELIMIT instead. The one deliberate difference is merge and IoU
 * of RLEs with zero-length runs after the first, where maskApi.c's loop can stop early:
 * ferry computes the true union/intersection.
 *
 * Masks handed in or out as pixels are ROW-major u8 (h rows of w bytes), the layout
 * of numpy/torch tensors; only the runs are column-major.
 */
#ifndef FERRY_MASK_H
#define FERRY_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"
#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_rle {
  uint32_t h, w;      /* mask height and width; h*w <= UINT32_MAX */
  size_t m;           /* number of runs (>= 1 once built) */
  uint32_t *counts;   /* m run lengths, owned (release with ferry_rle_free) */
} ferry_rle;

/* Release the runs of `rle` and reset it to an empty 0x0 value. Safe on a zeroed or
 * already freed ferry_rle and on NULL. */
FERRY_API void ferry_rle_free(ferry_rle *rle);

/* Build an RLE from `m` run lengths at size h x w, validating them: the counts must sum
 * to exactly h*w (FERRY_EFORMAT otherwise, saying by how much they differ) and h*w must
 * fit in 32 bits (FERRY_ELIMIT). Zero-length runs are kept as given, as pycocotools
 * keeps them for an uncompressed RLE. `out` is overwritten (not freed) on success. */
FERRY_API ferry_status ferry_rle_from_counts(const uint32_t *counts, size_t m, uint32_t h, uint32_t w,
                                             ferry_rle *out);

/* Encode a row-major h x w mask (any nonzero byte is foreground). */
FERRY_API ferry_status ferry_rle_encode(const uint8_t *mask, uint32_t h, uint32_t w, ferry_rle *out);

/* Decode into a row-major h x w buffer of 0/1 bytes; `out_size` must be >= h*w. */
FERRY_API ferry_status ferry_rle_decode(const ferry_rle *rle, uint8_t *out, size_t out_size);

/* Decode straight to dst_h x dst_w (row-major 0/1 bytes, out_size >= dst_h*dst_w) with
 * nearest sampling: output pixel (i, j) is source pixel (map_h[i], map_w[j]), where
 * map_h and map_w are ferry_nearest_index_map(h, dst_h) and (w, dst_w): the indices
 * torch's interpolate(mode="nearest") takes, so the result equals torchvision's
 * resize of the full mask as a tv_tensors.Mask. Equal to ferry_rle_decode followed by
 * that resize, but the full-size mask is never built: the cost is O(runs +
 * foreground output pixels). A zero-sized source yields an all-zero output. */
FERRY_API ferry_status ferry_rle_decode_resized(const ferry_rle *rle, uint8_t *out, size_t out_size,
                                                uint32_t dst_h, uint32_t dst_w);

/* The source index of each output index of a nearest resize from `in` to `out`
 * (map[0..out-1]; in > 0), as ATen's interpolate(mode="nearest") computes it:
 * map[i] = i when out == in, i / 2 when out == 2 * in, and otherwise
 * min(floorf((float)i * ((float)in / (float)out)), in - 1), the product rounded to
 * float32. That rounding matters: 428 -> 312 maps 78 to 106, where exact integers
 * give 107. Non-decreasing in i. */
FERRY_API ferry_status ferry_nearest_index_map(uint32_t in, uint32_t out, uint32_t *map);

/* The compressed string form (pycocotools' rleToString: 6 bits per character in
 * '0'..'o', counts after the third delta-coded against the count two places back).
 * `*out` is a NUL-terminated string; release it with ferry_rle_free_string. */
FERRY_API ferry_status ferry_rle_to_string(const ferry_rle *rle, char **out);

/* Release a string from ferry_rle_to_string; NULL is a no-op. */
FERRY_API void ferry_rle_free_string(char *s);

/* Parse `len` bytes of the compressed string form at size h x w. Rejected with
 * FERRY_EFORMAT, naming the character offset: a character outside '0'..'o', a value
 * still continued when the string ends, a value longer than 7 characters or a count
 * outside 0..UINT32_MAX, and counts that do not sum to h*w. */
FERRY_API ferry_status ferry_rle_from_string(const char *s, size_t len, uint32_t h, uint32_t w,
                                             ferry_rle *out);

/* Number of foreground pixels (the sum of the odd-indexed runs). */
FERRY_API uint64_t ferry_rle_area(const ferry_rle *rle);

/* The bounding box [x, y, width, height] exactly as pycocotools' current rleToBbox
 * computes it: zeros when there is no foreground run; a foreground run that spans
 * two columns gives the full height; zero-length foreground runs are skipped (a mask with
 * only such runs gets maskApi.c's wrapped-around uint32 width and height). */
FERRY_API void ferry_rle_to_bbox(const ferry_rle *rle, double bbox[4]);

/* Rasterise polygon `xy` (k vertices: x0,y0,x1,y1,...; float64) at h x w exactly as
 * pycocotools' rleFrPoly does: vertices on a 5x grid, boundary walked edge by edge,
 * pixel (x, y) set when its centre lies inside. Vertices may be negative, fractional,
 * repeated or outside the image. k < 3 gives an empty mask (pycocotools would rasterise
 * a degenerate line). Coordinates must be finite with |x|, |y| <= 1e8 (FERRY_ELIMIT),
 * and an outline longer than 2^30 grid steps is refused (FERRY_ELIMIT). */
FERRY_API ferry_status ferry_rle_from_polygon(const double *xy, size_t k, uint32_t h, uint32_t w,
                                              ferry_rle *out);

/* The mask of box [x, y, width, height] (pycocotools' rleFrBbox: the rectangle as a
 * 4-vertex polygon). */
FERRY_API ferry_status ferry_rle_from_bbox(const double bbox[4], uint32_t h, uint32_t w, ferry_rle *out);

/* Union (intersect = 0) or intersection (intersect = 1) of n >= 1 masks of one size
 * (FERRY_EINVAL if the sizes differ). A single mask is copied as is; otherwise the
 * result is canonical (no zero-length run after the first), as pycocotools' rleMerge
 * returns for masks without inner zero-length runs. */
FERRY_API ferry_status ferry_rle_merge(const ferry_rle *rles, size_t n, int intersect, ferry_rle *out);

/* IoU of every detection dt[d] against every ground truth gt[g], written to
 * out[g*m + d] (pycocotools' rleIou layout and rules): 0 when the bounding boxes do not
 * overlap, -1 when the sizes differ, intersection/union otherwise; for a crowd ground
 * truth (iscrowd[g] != 0; iscrowd may be NULL) the union is the detection's area. */
FERRY_API ferry_status ferry_rle_iou(const ferry_rle *dt, size_t m, const ferry_rle *gt, size_t n,
                                     const uint8_t *iscrowd, double *out);

#ifdef __cplusplus
}
#endif
#endif
