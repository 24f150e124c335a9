/* image/resize_avx2.c - the resize kernels with AVX2 and FMA (built with
 * -mavx2 -mfma, run only where the CPU has both; see resize_kernels.h).
 *
 * They compute exactly what the portable kernels compute: 32-bit products of
 * u8 pixels and 22-bit weights, summed (the order of an exact integer sum cannot
 * change it), shifted, and clipped by saturating packs, which clamp any int32 to
 * 0..255 just as clip8 does. Pillow-SIMD gets its speed by cutting the weights to
 * 16 bits; that changes pixels, so these keep all 22 and pay with vpmulld.
 *
 * Callers: resize.c, through the kernel set ferry__resize_best_kernels picks (this
 * one, or the AVX-512 sets that borrow its normalise, vertical tail and drain), on
 * the worker threads, each with its own decoder's scratch. No state: any number of
 * threads at once.
 * Invariants:
 *   - a sum cannot overflow int32: BILINEAR's weights are nonnegative and sum to
 *     2^22 give or take their rounding, so a sum stays near 255 * 2^22 < 2^30;
 *   - loads and stores stay inside the rows, words and planes the caller hands in
 *     (bytes past the last whole 16 go one at a time; the normalise's last load of
 *     a step ends at byte 3x + 23 < 3n, so it needs no slack);
 *   - every byte written equals the portable kernel's (test_image_resize).
 * Not done here: choosing the set (resize.c checks the CPU), planning the filters,
 * the pass order.
 */
#include <immintrin.h>
#include <string.h>

#include "image/resize_kernels.h"

enum { BIAS = 1 << (FERRY_RESIZE_WEIGHT_BITS - 1), ROWS = 8 };

/* The fixed-count loops over registers below must become straight code, or the
 * registers become stack arrays. */
#define UNROLL _Pragma("GCC unroll 16")

/* acc (eight int32 sums) -> eight bytes as clip8 would make them, in lane order:
 * the low four of each 128-bit half are the results. */
static __m256i shift_and_saturate(__m256i acc) {
  __m256i s = _mm256_srai_epi32(acc, FERRY_RESIZE_WEIGHT_BITS);
  s = _mm256_packs_epi32(s, s);
  return _mm256_packus_epi16(s, s);
}

/* The horizontal pass, ROWS (8) rows at a time. Summing along a row
 * gives every output pixel its own taps, which leaves vector lanes idle and
 * costs a reduction per pixel. Transposed, so that one source column of eight
 * rows is one 64-bit word, the pass becomes the vertical pass's shape: eight
 * lanes (the rows) share each weight. Transposing in and out costs a few
 * shuffles per 16 bytes. */

/* Eight rows of 16 bytes from column j -> words t[j .. j+16): word c holds
 * column c's byte of row r in its byte r. Three rounds of interleaving. */
static void transpose_in_16(const uint8_t *const *row, size_t j, uint64_t *t) {
  __m128i a[8], b[8], c[8];
  UNROLL for (int r = 0; r < 8; r++) a[r] = _mm_loadu_si128((const __m128i *)(row[r] + j));
  UNROLL for (int r = 0; r < 8; r += 2) {
    b[r] = _mm_unpacklo_epi8(a[r], a[r + 1]); /* 16-bit: rows r, r+1 of columns 0..7 */
    b[r + 1] = _mm_unpackhi_epi8(a[r], a[r + 1]); /* columns 8..15 */
  }
  UNROLL for (int q = 0; q < 2; q++) { /* 32-bit: rows 4q..4q+3 */
    const __m128i *lo = b + 4 * q, *hi = b + 4 * q + 2;
    c[4 * q] = _mm_unpacklo_epi16(lo[0], hi[0]);     /* columns 0..3 */
    c[4 * q + 1] = _mm_unpackhi_epi16(lo[0], hi[0]); /* 4..7 */
    c[4 * q + 2] = _mm_unpacklo_epi16(lo[1], hi[1]); /* 8..11 */
    c[4 * q + 3] = _mm_unpackhi_epi16(lo[1], hi[1]); /* 12..15 */
  }
  UNROLL for (int k = 0; k < 4; k++) { /* 64-bit: all eight rows, two columns per register */
    _mm_storeu_si128((__m128i *)(t + j + 4 * k), _mm_unpacklo_epi32(c[k], c[4 + k]));
    _mm_storeu_si128((__m128i *)(t + j + 4 * k + 2), _mm_unpackhi_epi32(c[k], c[4 + k]));
  }
}

/* The source block (rows beyond the last repeat it) into words, bytes past the
 * last whole 16 one at a time. */
static void transpose_in(const uint8_t *const *row, size_t bytes, void *words) {
  uint64_t *t = words;
  size_t j = 0;
  for (; j + 16 <= bytes; j += 16) transpose_in_16(row, j, t);
  for (; j < bytes; j++) {
    uint64_t w = 0;
    for (int r = 0; r < 8; r++) w |= (uint64_t)row[r][j] << (8 * r);
    t[j] = w;
  }
}

/* Words u[j .. j+16) -> 16 bytes of each of the first `rows` output rows: the
 * same three rounds the other way. */
static void transpose_out_16(const uint64_t *u, size_t j, uint8_t *out, size_t stride, int rows) {
  __m128i f[16], t[8], q[8], v[8];
  UNROLL for (int k = 0; k < 16; k++) f[k] = _mm_loadl_epi64((const __m128i *)(u + j + k));
  UNROLL for (int k = 0; k < 8; k++) t[k] = _mm_unpacklo_epi8(f[2 * k], f[2 * k + 1]); /* columns 2k, 2k+1 */
  UNROLL for (int k = 0; k < 4; k++) {
    q[2 * k] = _mm_unpacklo_epi16(t[2 * k], t[2 * k + 1]);     /* rows 0..3, columns 4k..4k+3 */
    q[2 * k + 1] = _mm_unpackhi_epi16(t[2 * k], t[2 * k + 1]); /* rows 4..7 */
  }
  UNROLL for (int h = 0; h < 2; h++) /* columns 8h..8h+7, two rows per register */
    UNROLL for (int k = 0; k < 2; k++) {
      v[4 * h + 2 * k] = _mm_unpacklo_epi32(q[4 * h + k], q[4 * h + k + 2]);
      v[4 * h + 2 * k + 1] = _mm_unpackhi_epi32(q[4 * h + k], q[4 * h + k + 2]);
    }
  UNROLL for (int r = 0; r < 8; r++) {
    if (r == rows) break;
    __m128i lo = v[r / 2], hi = v[4 + r / 2];
    __m128i row = r % 2 ? _mm_unpackhi_epi64(lo, hi) : _mm_unpacklo_epi64(lo, hi);
    _mm_storeu_si128((__m128i *)(out + r * stride + j), row);
  }
}

static void transpose_out(const void *words, size_t bytes, uint8_t *out, size_t stride, int rows) {
  const uint64_t *u = words;
  size_t j = 0;
  for (; j + 16 <= bytes; j += 16) transpose_out_16(u, j, out, stride, rows);
  for (; j < bytes; j++)
    for (int r = 0; r < rows; r++) out[r * stride + j] = (uint8_t)(u[j] >> (8 * r));
}

/* The eight bytes of one word as int32 lanes. */
static __m256i widen_word(const uint64_t *w) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)w));
}

/* Output pixel x of the transposed block: R, G and B of all eight rows, each a
 * sum over the pixel's taps, stored as three words of u. */
static void convolve_columns(const uint64_t *t, const ferry__resize_axis *h, int x, uint64_t *u) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const uint64_t *col = t + 3 * (size_t)h->first[x];
  const int32_t *k = h->weights + h->offset[x];
  __m256i r = _mm256_set1_epi32(BIAS), g = r, b = r;
  for (int i = 0; i < h->count[x]; i++, col += 3) {
    __m256i w = _mm256_set1_epi32(k[i]);
    r = _mm256_add_epi32(r, _mm256_mullo_epi32(widen_word(col), w));
    g = _mm256_add_epi32(g, _mm256_mullo_epi32(widen_word(col + 1), w));
    b = _mm256_add_epi32(b, _mm256_mullo_epi32(widen_word(col + 2), w));
  }
  r = _mm256_srai_epi32(r, FERRY_RESIZE_WEIGHT_BITS);
  g = _mm256_srai_epi32(g, FERRY_RESIZE_WEIGHT_BITS);
  b = _mm256_srai_epi32(b, FERRY_RESIZE_WEIGHT_BITS);
  /* after the permute: the R and G words in the low half, B twice in the high */
  __m256i bytes = _mm256_permutevar8x32_epi32(
      _mm256_packus_epi16(_mm256_packs_epi32(r, g), _mm256_packs_epi32(b, b)), order);
  _mm_storeu_si128((__m128i *)(u + 3 * (size_t)x), _mm256_castsi256_si128(bytes));
  _mm_storel_epi64((__m128i *)(u + 3 * (size_t)x + 2), _mm256_extracti128_si256(bytes, 1));
}

/* Outputs in by_count order: each is written to its own words, so the order changes
 * no byte, only how often the tap loop's trip count changes. */
static void convolve_block(const void *words, const ferry__resize_axis *h, int out_w, void *out_words) {
  for (int i = 0; i < out_w; i++) convolve_columns(words, h, h->by_count[i], out_words);
}

static const ferry__resize_block_ops blocks = {ROWS, transpose_in, convolve_block, transpose_out};

/* `plan` is unused: this set has no plan_horizontal. */
static void horizontal_avx2(const uint8_t *in, size_t in_stride, int rows, int in_w, const ferry__resize_axis *h,
                            int out_w, uint8_t *out, size_t out_stride, void *scratch, const void *plan) {
  ferry__resize_horizontal_blocks(&blocks, in, in_stride, rows, in_w, h, out_w, out, out_stride, scratch);
}

/* Sum of rows[t*stride + i .. +8) * k[t] over the taps, plus the rounding bias. */
static __m256i vertical_sum8(const uint8_t *rows, size_t stride, const int32_t *k, int count) {
  __m256i acc = _mm256_set1_epi32(BIAS);
  for (int t = 0; t < count; t++) {
    __m256i px = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(rows + t * stride)));
    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(px, _mm256_set1_epi32(k[t])));
  }
  return acc;
}

/* The vertical pass, every lane sharing one weight per source row: 32 outputs
 * per step in four independent sums, then eight, then the portable tail. */
static void vertical_avx2(const uint8_t *rows, size_t stride, const int32_t *k, int count, size_t n,
                          uint8_t *out) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i s[4];
    for (int q = 0; q < 4; q++)
      s[q] = _mm256_srai_epi32(vertical_sum8(rows + i + 8 * q, stride, k, count),
                               FERRY_RESIZE_WEIGHT_BITS);
    /* the packs work per 128-bit half; the permute puts the 4-byte runs back in order */
    __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(s[0], s[1]), _mm256_packs_epi32(s[2], s[3]));
    _mm256_storeu_si256((__m256i *)(out + i), _mm256_permutevar8x32_epi32(bytes, order));
  }
  for (; i + 8 <= n; i += 8) {
    __m256i bytes = shift_and_saturate(vertical_sum8(rows + i, stride, k, count));
    uint32_t lo = (uint32_t)_mm256_extract_epi32(bytes, 0), hi = (uint32_t)_mm256_extract_epi32(bytes, 4);
    memcpy(out + i, &lo, 4);
    memcpy(out + i + 4, &hi, 4);
  }
  if (i < n) ferry__resize_portable.vertical(rows + i, stride, k, count, n - i, out + i);
}

/* Channel c of eight RGB8 pixels as int32 lanes: lo holds bytes 0..15 of the
 * pixels, hi bytes 8..23; byte 3p+c comes from lo while it is inside, else from
 * hi (-1 picks zero). */
static const int8_t from_lo[3][16] = {
    {0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
    {1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},
    {2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}};
static const int8_t from_hi[3][16] = {
    {-1, -1, -1, -1, -1, -1, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1},
    {-1, -1, -1, -1, -1, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1},
    {-1, -1, -1, -1, -1, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1}};

static __m256i channel_of_8(__m128i lo, __m128i hi, int c) {
  __m128i bytes = _mm_or_si128(_mm_shuffle_epi8(lo, _mm_loadu_si128((const __m128i *)from_lo[c])),
                               _mm_shuffle_epi8(hi, _mm_loadu_si128((const __m128i *)from_hi[c])));
  return _mm256_cvtepu8_epi32(bytes);
}

/* a / b, as divide_by_fma in normalize.c: exact where norm->fma_exact says so. */
static __m256 divide_by_fma(__m256 a, __m256 b, __m256 recip) {
  __m256 q = _mm256_mul_ps(a, recip);
  return _mm256_fmadd_ps(_mm256_fnmadd_ps(q, b, a), recip, q);
}

/* RGB8 -> three float planes, eight pixels per step: shuffles split the
 * channels, then the table's own float operations (multiply, subtract, divide),
 * which vector units round exactly as scalar ones do; the divisions by fma where
 * that is exact for every byte value (two fmas and a product cost less than a
 * divide). This is faster than a gather from the table.
 *
 * The planes go to a batch arena that was last written a few batches ago and is
 * out of cache: an ordinary store would first read each line in, so where the
 * planes are 32-byte aligned the stores are non-temporal (about 2.5x faster into
 * cold memory, the same into warm). They are ordered by ferry__resize_drain_avx2,
 * once per image; a fence per row would wait on every row's writes. */
void ferry__resize_normalize_avx2(const uint8_t *rgb, size_t n, const ferry__resize_norm *norm, float *dst,
                                  size_t plane_stride) {
  size_t vec = n & ~(size_t)7;
  int stream = (((uintptr_t)dst | plane_stride * sizeof(float)) & 31) == 0;
  const __m256 r255 = _mm256_set1_ps(norm->recip255);
  __m256 mean[3], std[3], rstd[3];
  UNROLL for (int c = 0; c < 3; c++) {
    mean[c] = _mm256_set1_ps(norm->mean[c]);
    std[c] = _mm256_set1_ps(norm->std[c]);
    rstd[c] = _mm256_set1_ps(norm->recip_std[c]);
  }
  for (size_t x = 0; x < vec; x += 8) {
    __m128i lo = _mm_loadu_si128((const __m128i *)(rgb + 3 * x));
    __m128i hi = _mm_loadu_si128((const __m128i *)(rgb + 3 * x + 8));
    UNROLL for (int c = 0; c < 3; c++) {
      __m256 v = _mm256_cvtepi32_ps(channel_of_8(lo, hi, c)), f;
      __m256 centred = _mm256_sub_ps(_mm256_mul_ps(v, r255), mean[c]);
      if (norm->fma_exact)
        f = divide_by_fma(centred, std[c], rstd[c]);
      else
        f = _mm256_div_ps(centred, std[c]);
      if (stream) _mm256_stream_ps(dst + c * plane_stride + x, f);
      else _mm256_storeu_ps(dst + c * plane_stride + x, f);
    }
  }
  if (vec < n) ferry__resize_portable.normalize(rgb + 3 * vec, n - vec, norm, dst + vec, plane_stride);
}

/* Non-temporal stores are weakly ordered, outside x86's usual store order; the
 * sfence puts them before every store that follows it. */
void ferry__resize_drain_avx2(void) { _mm_sfence(); }

const ferry__resize_kernels ferry__resize_avx2 = {
    horizontal_avx2, vertical_avx2, ferry__resize_normalize_avx2, ROWS, NULL, ferry__resize_drain_avx2};
