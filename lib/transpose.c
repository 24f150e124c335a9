/* lib/transpose.c - see transpose.h. */
#include "lib/transpose.h"

/* The part of the matrix the 16x16 blocks do not cover, one byte at a time. */
static void transpose_plain(const uint8_t *src, size_t r0, size_t r1, size_t c0, size_t c1,
                            size_t src_stride, uint8_t *dst, size_t dst_stride) {
  for (size_t r = r0; r < r1; r++)
    for (size_t c = c0; c < c1; c++) dst[c * dst_stride + r] = src[r * src_stride + c];
}

void ferry_transpose_u8(const uint8_t *src, size_t rows, size_t cols, size_t src_stride,
                        uint8_t *dst, size_t dst_stride) {
  size_t full_rows = 0, full_cols = 0;
#if defined(__SSE2__)
  full_rows = rows & ~(size_t)15;
  full_cols = cols & ~(size_t)15;
  for (size_t r = 0; r < full_rows; r += 16)
    for (size_t c = 0; c < full_cols; c += 16) {
      __m128i m[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; k++)
        m[k] = _mm_loadu_si128((const __m128i *)(src + (r + k) * src_stride + c));
      ferry_transpose_16x16(m);
#pragma GCC unroll 16
      for (int k = 0; k < 16; k++) _mm_storeu_si128((__m128i *)(dst + (c + k) * dst_stride + r), m[k]);
    }
#endif
  transpose_plain(src, 0, full_rows, full_cols, cols, src_stride, dst, dst_stride);
  transpose_plain(src, full_rows, rows, 0, cols, src_stride, dst, dst_stride);
}
