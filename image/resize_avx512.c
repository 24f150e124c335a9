/* image/resize_avx512.c - the two resampling passes with AVX-512 (built
 * with -mavx512f, run only where the CPU has it; see resize_kernels.h).
 *
 * The same arithmetic as the AVX2 kernels (exact 32-bit sums of u8 pixels times
 * 22-bit weights) on sixteen lanes: the horizontal pass transposes blocks of 16
 * rows, so a source column is one 16-byte word, and the vertical pass takes 16
 * outputs per multiply. Results are clamped at 0 and narrowed with unsigned
 * saturation, which is clip8. Normalisation is the AVX2 kernel's.
 *
 * Callers: resize.c, through ferry__resize_best_kernels (only where the CPU has
 * AVX-512F, AVX2 and FMA: this set runs AVX2 code for the normalise, the vertical
 * tail and the drain), and resize_vbmi.c, whose set uses this vertical pass and
 * falls back to this horizontal one. Worker threads, no state.
 * Invariants: the same bytes as the portable kernels; loads and stores stay inside
 * the rows, words and outputs handed in; the word arrays are 16-byte aligned (the
 * scratch is 32-byte aligned and every word is 16 bytes), which the aligned loads
 * and stores of words rely on.
 */
#include <immintrin.h>

#include "image/resize_kernels.h"

enum { BIAS = 1 << (FERRY_RESIZE_WEIGHT_BITS - 1), ROWS = 16 };

#define UNROLL _Pragma("GCC unroll 16") /* register arrays must become registers */

/* Sixteen int32 sums -> sixteen bytes as clip8 makes them. The max with 0 first:
 * vpmovusdb saturates unsigned, so a negative int32 would come out as 255. */
static __m128i finish16(__m512i acc) {
  __m512i v = _mm512_srai_epi32(acc, FERRY_RESIZE_WEIGHT_BITS);
  return _mm512_cvtusepi32_epi8(_mm512_max_epi32(v, _mm512_setzero_si512()));
}

/* A 16x16 byte matrix, one row per register, transposed in place: four rounds
 * of interleaving, each doubling the width of what moves together. */
__attribute__((always_inline)) static inline void transpose_16x16(__m128i m[16]) {
  __m128i b[16], c[16], d[16];
  UNROLL for (int k = 0; k < 16; k += 2) { /* 16-bit: rows k, k+1 */
    b[k] = _mm_unpacklo_epi8(m[k], m[k + 1]);     /* columns 0..7 */
    b[k + 1] = _mm_unpackhi_epi8(m[k], m[k + 1]); /* 8..15 */
  }
  UNROLL for (int q = 0; q < 16; q += 4) { /* 32-bit: rows q..q+3 */
    c[q] = _mm_unpacklo_epi16(b[q], b[q + 2]);         /* columns 0..3 */
    c[q + 1] = _mm_unpackhi_epi16(b[q], b[q + 2]);     /* 4..7 */
    c[q + 2] = _mm_unpacklo_epi16(b[q + 1], b[q + 3]); /* 8..11 */
    c[q + 3] = _mm_unpackhi_epi16(b[q + 1], b[q + 3]); /* 12..15 */
  }
  UNROLL for (int h = 0; h < 16; h += 8) /* 64-bit: rows h..h+7, two columns each */
    UNROLL for (int g = 0; g < 4; g++) {
      d[h + 2 * g] = _mm_unpacklo_epi32(c[h + g], c[h + 4 + g]);     /* columns 4g, 4g+1 */
      d[h + 2 * g + 1] = _mm_unpackhi_epi32(c[h + g], c[h + 4 + g]); /* 4g+2, 4g+3 */
    }
  UNROLL for (int p = 0; p < 8; p++) { /* all 16 rows of columns 2p, 2p+1 */
    m[2 * p] = _mm_unpacklo_epi64(d[p], d[8 + p]);
    m[2 * p + 1] = _mm_unpackhi_epi64(d[p], d[8 + p]);
  }
}

/* The block (rows past the last repeat it) into words: t[j] is source byte
 * column j of all 16 rows; bytes past the last whole 16 one at a time. */
static void transpose_in(const uint8_t *const *row, size_t bytes, void *words) {
  __m128i *t = words;
  size_t j = 0;
  for (; j + 16 <= bytes; j += 16) {
    __m128i m[16];
    UNROLL for (int r = 0; r < 16; r++) m[r] = _mm_loadu_si128((const __m128i *)(row[r] + j));
    transpose_16x16(m);
    UNROLL for (int k = 0; k < 16; k++) _mm_store_si128(t + j + k, m[k]);
  }
  for (; j < bytes; j++) {
    uint8_t w[16];
    for (int r = 0; r < 16; r++) w[r] = row[r][j];
    t[j] = _mm_loadu_si128((const __m128i *)w);
  }
}

/* Words u -> the first `rows` output rows. */
/* A short block writes only its `rows` rows: the repeated rows transpose_in made up
 * are computed but never stored. */
static void transpose_out(const void *words, size_t bytes, uint8_t *out, size_t stride, int rows) {
  const __m128i *u = words;
  size_t j = 0;
  for (; j + 16 <= bytes; j += 16) {
    __m128i m[16];
    UNROLL for (int k = 0; k < 16; k++) m[k] = _mm_load_si128(u + j + k);
    transpose_16x16(m);
    for (int r = 0; r < rows; r++) _mm_storeu_si128((__m128i *)(out + r * stride + j), m[r]);
  }
  for (; j < bytes; j++) {
    uint8_t w[16];
    _mm_storeu_si128((__m128i *)w, u[j]);
    for (int r = 0; r < rows; r++) out[r * stride + j] = w[r];
  }
}

static __m512i widen_word(const __m128i *w) { return _mm512_cvtepu8_epi32(_mm_load_si128(w)); }

/* Output pixel x of the transposed block: R, G, B words of all 16 rows. */
static void convolve_columns(const __m128i *t, const ferry__resize_axis *h, int x, __m128i *u) {
  const __m128i *col = t + 3 * (size_t)h->first[x];
  const int32_t *k = h->weights + h->offset[x];
  __m512i r = _mm512_set1_epi32(BIAS), g = r, b = r;
  for (int i = 0; i < h->count[x]; i++, col += 3) {
    __m512i w = _mm512_set1_epi32(k[i]);
    r = _mm512_add_epi32(r, _mm512_mullo_epi32(widen_word(col), w));
    g = _mm512_add_epi32(g, _mm512_mullo_epi32(widen_word(col + 1), w));
    b = _mm512_add_epi32(b, _mm512_mullo_epi32(widen_word(col + 2), w));
  }
  _mm_store_si128(u + 3 * (size_t)x, finish16(r));
  _mm_store_si128(u + 3 * (size_t)x + 1, finish16(g));
  _mm_store_si128(u + 3 * (size_t)x + 2, finish16(b));
}

static void convolve_block(const void *words, const ferry__resize_axis *h, int out_w, void *out_words) {
  for (int i = 0; i < out_w; i++) convolve_columns(words, h, h->by_count[i], out_words);
}

static const ferry__resize_block_ops blocks = {ROWS, transpose_in, convolve_block, transpose_out};

static void horizontal_avx512(const uint8_t *in, size_t in_stride, int rows, int in_w, const ferry__resize_axis *h,
                              int out_w, uint8_t *out, size_t out_stride, void *scratch, const void *plan) {
  ferry__resize_horizontal_blocks(&blocks, in, in_stride, rows, in_w, h, out_w, out, out_stride, scratch);
}

/* Sum of rows[t*stride + i .. +16) * k[t] over the taps, plus the rounding bias. */
static __m512i vertical_sum16(const uint8_t *rows, size_t stride, const int32_t *k, int count) {
  __m512i acc = _mm512_set1_epi32(BIAS);
  for (int t = 0; t < count; t++) {
    __m512i px = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rows + t * stride)));
    acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(px, _mm512_set1_epi32(k[t])));
  }
  return acc;
}

/* 64 outputs per step in four independent sums, then 16, then the AVX2 kernel
 * for what is left. */
void ferry__resize_vertical_avx512(const uint8_t *rows, size_t stride, const int32_t *k, int count,
                                  size_t n, uint8_t *out) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64)
    UNROLL for (int q = 0; q < 4; q++)
      _mm_storeu_si128((__m128i *)(out + i + 16 * q),
                       finish16(vertical_sum16(rows + i + 16 * q, stride, k, count)));
  for (; i + 16 <= n; i += 16)
    _mm_storeu_si128((__m128i *)(out + i), finish16(vertical_sum16(rows + i, stride, k, count)));
  if (i < n) ferry__resize_avx2.vertical(rows + i, stride, k, count, n - i, out + i);
}

const ferry__resize_kernels ferry__resize_avx512 = {
    horizontal_avx512,       ferry__resize_vertical_avx512, ferry__resize_normalize_avx2, ROWS, NULL,
    ferry__resize_drain_avx2};
