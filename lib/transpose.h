/* lib/transpose.h - transposing byte matrices (internal).
 *
 * Masks decode column by column (COCO's RLE runs down columns) into row-major
 * tensors, and the resize's vector kernels turn blocks of rows into columns:
 * both are byte transposes. The 16x16 register kernel is SSE2, which every
 * x86-64 CPU has; elsewhere the plain loop does the work.
 */
#ifndef FERRY_LIB_TRANSPOSE_H
#define FERRY_LIB_TRANSPOSE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SSE2__)
#include <emmintrin.h>

/* m[r] holds row r of a 16x16 byte matrix; afterwards m[c] holds column c. Four
 * rounds of interleaving, each doubling the width of what moves together. */
__attribute__((always_inline)) static inline void ferry_transpose_16x16(__m128i m[16]) {
  __m128i b[16], c[16], d[16];
#pragma GCC unroll 16
  for (int k = 0; k < 16; k += 2) { /* 16-bit units: rows k, k+1 */
    b[k] = _mm_unpacklo_epi8(m[k], m[k + 1]);     /* columns 0..7 */
    b[k + 1] = _mm_unpackhi_epi8(m[k], m[k + 1]); /* 8..15 */
  }
#pragma GCC unroll 16
  for (int q = 0; q < 16; q += 4) { /* 32-bit: rows q..q+3 */
    c[q] = _mm_unpacklo_epi16(b[q], b[q + 2]);         /* columns 0..3 */
    c[q + 1] = _mm_unpackhi_epi16(b[q], b[q + 2]);     /* 4..7 */
    c[q + 2] = _mm_unpacklo_epi16(b[q + 1], b[q + 3]); /* 8..11 */
    c[q + 3] = _mm_unpackhi_epi16(b[q + 1], b[q + 3]); /* 12..15 */
  }
#pragma GCC unroll 16
  for (int h = 0; h < 16; h += 8) /* 64-bit: rows h..h+7, two columns each */
#pragma GCC unroll 16
    for (int g = 0; g < 4; g++) {
      d[h + 2 * g] = _mm_unpacklo_epi32(c[h + g], c[h + 4 + g]);     /* columns 4g, 4g+1 */
      d[h + 2 * g + 1] = _mm_unpackhi_epi32(c[h + g], c[h + 4 + g]); /* 4g+2, 4g+3 */
    }
#pragma GCC unroll 16
  for (int p = 0; p < 8; p++) { /* all 16 rows of columns 2p, 2p+1 */
    m[2 * p] = _mm_unpacklo_epi64(d[p], d[8 + p]);
    m[2 * p + 1] = _mm_unpackhi_epi64(d[p], d[8 + p]);
  }
}
#endif

/* dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols. */
void ferry_transpose_u8(const uint8_t *src, size_t rows, size_t cols, size_t src_stride,
                        uint8_t *dst, size_t dst_stride);

#endif
