/* lib/nearest.h - the nearest-neighbour index rule of torch's interpolate (internal).
 *
 * Every nearest resize ferry makes (masks at R x R, the augmentation chains' masks)
 * maps an output index to a source index by the rule ATen's CPU and CUDA kernels use
 * for interpolate(mode="nearest"), the mode torchvision's resize of a Mask takes:
 *
 *     out == in:      src = dst
 *     out == 2 * in:  src = dst >> 1
 *     otherwise:      scale = (float)in / (float)out
 *                     src = min((int64)floorf((float)dst * scale), in - 1)
 *
 * The product is rounded to float32, so where dst * in / out is an integer it can
 * land just below it (h 428 -> 312 maps output row 78 to source row 106, where exact
 * integers give 107). The rule is reproduced bit for bit, not approximated:
 * tests/coco/check_nearest_torch.py compares it with torch for every input size up
 * to 4096 and the training output sizes. (The CUDA kernel has no special cases, but
 * for sizes below 2^24 its scales 1 and 0.5 give the same indices.)
 *
 * Invariant the callers rely on: for fixed (in, out) the map is non-decreasing in
 * dst (float rounding and floor are monotonic), and it stays inside [0, in - 1].
 * Compile without -ffast-math: the float rounding is the rule.
 */
#ifndef FERRY_LIB_NEAREST_H
#define FERRY_LIB_NEAREST_H

#include <math.h>
#include <stdint.h>

/* Source index of output index `dst` (< out) for a resize from `in` to `out` (both
 * > 0). */
static inline uint32_t ferry__nearest_source(uint32_t dst, uint32_t in, uint32_t out) {
  if (out == in) return dst;
  if ((uint64_t)out == 2 * (uint64_t)in) return dst >> 1;
  float scale = (float)in / (float)out;
  int64_t src = (int64_t)floorf((float)dst * scale);
  return src < (int64_t)in - 1 ? (uint32_t)src : in - 1;
}

/* map[0..out-1] = ferry__nearest_source(i, in, out). */
static inline void ferry__nearest_map(uint32_t in, uint32_t out, uint32_t *map) {
  for (uint32_t i = 0; i < out; i++) map[i] = ferry__nearest_source(i, in, out);
}

/* The inverse of a non-decreasing index map rows[0..out-1] (values < in):
 * first[s], for s in [0, in], is the first output index whose source is >= s (out
 * when there is none), so the outputs reading source range [a, b) are
 * [first[a], first[b]). O(in + out). Any composition of nearest resizes and crops
 * is such a map, which is how a mask is decoded straight through an augmentation. */
static inline void ferry__nearest_inverse(const uint32_t *rows, uint32_t out, uint32_t in, uint32_t *first) {
  uint32_t i = 0;
  for (uint64_t s = 0; s <= in; s++) {
    while (i < out && rows[i] < s) i++;
    first[s] = i;
  }
}

#endif
