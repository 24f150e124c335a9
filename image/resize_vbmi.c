/* image/resize_vbmi.c - the horizontal pass with AVX-512 VBMI and BW
 * (built with -mavx512f -mavx512bw -mavx512vl -mavx512vbmi, run only where the
 * CPU has them; see resize_kernels.h).
 *
 * The transposing kernels (resize_avx2.c, resize_avx512.c) spend about as long
 * moving bytes into columns and back as they spend multiplying, and pay two
 * uops per vpmulld. This one works along the row. A group of up to five output
 * pixels (fifteen bytes, one int32 lane each, already in RGB order) reads a
 * 64-byte window of the source row; for each pair of taps one vpermb gathers
 * every lane's two source bytes into the two 16-bit halves of the lane, and
 * vpmaddwd multiplies and adds them. Its factors are 16 bits, so each 22-bit
 * weight is split, w = hi * 2^15 + lo with 0 <= lo < 2^15, into two tables, and
 * the sum is hi_sum * 2^15 + lo_sum: the same exact integer as the other
 * kernels' (no partial sum exceeds the full one, which fits in int32 as
 * Pillow's does). The byte indices and split weights depend only on the
 * filter, so they are laid out once per shape (the plan) rather than per row.
 * A filter so wide that one output's taps leave the window (downscales of ten
 * or more) falls back to the AVX-512 kernel.
 *
 * Callers: resize.c, through ferry__resize_best_kernels (where the CPU has VBMI, BW,
 * AVX-512F, AVX2 and FMA); it lays the plan out with plan_vbmi once per filter shape
 * and keeps it in the decoder, then calls horizontal_vbmi with it for every block of
 * rows. Worker threads, no state beyond the plan, which is read-only once laid out.
 * Invariants:
 *   - every byte index in the plan is < WINDOW (a group is made only if its span
 *     fits), so vpermb never needs the index bits it ignores;
 *   - the window load is masked to the bytes inside the row, and the store to the
 *     group's 3n output bytes, so neither touches memory past the row or the
 *     neighbouring group's output;
 *   - lanes and taps a pixel does not have carry weight 0: they add nothing.
 */
#include <immintrin.h>
#include <string.h>

#include "image/resize_kernels.h"

enum {
  BIAS = 1 << (FERRY_RESIZE_WEIGHT_BITS - 1),
  LO_BITS = 15,            /* the weight split */
  WINDOW = 64,             /* source bytes one vpermb reads */
  MAX_GROUP_PIXELS = 5,    /* 15 of the 16 int32 lanes */
  LINE = 64,               /* plan records are whole vectors */
};

/* The plan: a header line, then per group a line of group_info followed by
 * `pairs` triples of vectors (byte indices, low weights, high weights). */
typedef struct plan_header {
  int32_t group_pixels; /* 0: the filter does not fit; use the AVX-512 kernel */
  int32_t groups;
} plan_header;

typedef struct group_info {
  uint64_t window_mask; /* the window's bytes that lie inside the row */
  int32_t base;         /* the source byte the window starts at */
  int32_t pairs;        /* tap pairs */
  int32_t out_bytes;    /* output bytes, 3 per pixel */
  int32_t first_out;    /* the group's first output byte */
} group_info;

typedef union plan_line {
  group_info info;
  plan_header header;
  uint8_t bytes[LINE];
  int16_t words[LINE / 2];
} plan_line;

/* Outputs x0 .. x0+n of axis h read source bytes [*base, *base + span), the span
 * returned, and have at most `most` taps each. The lowest first input is not always
 * x0's: a mirrored axis (resize.c's views) runs right to left. */
static int group_span(const ferry__resize_axis *h, int x0, int n, int *most, int *base) {
  int end = 0, lo = h->first[x0];
  *most = 0;
  for (int x = x0; x < x0 + n; x++) {
    int e = h->first[x] + h->count[x];
    end = e > end ? e : end;
    lo = h->first[x] < lo ? h->first[x] : lo;
    *most = h->count[x] > *most ? h->count[x] : *most;
  }
  *base = 3 * lo;
  return 3 * (end - lo);
}

/* The most pixels per group (down to 1) for which every group's taps fit the
 * window; 0 if not even single pixels do. */
static int pick_group_pixels(const ferry__resize_axis *h, int out_w) {
  /* most pixels first: fewer groups, fewer windows and vpermbs per row */
  for (int p = MAX_GROUP_PIXELS; p >= 1; p--) {
    int fits = 1, most, base;
    for (int x0 = 0; x0 < out_w && fits; x0 += p)
      fits = group_span(h, x0, out_w - x0 < p ? out_w - x0 : p, &most, &base) <= WINDOW;
    if (fits) return p;
  }
  return 0;
}

/* Pair `pair` of the group at x0 (n pixels) into v[0] (byte indices), v[1] (low
 * weights) and v[2] (high weights): lane j is pixel x0 + j/3, channel j%3; its
 * taps 2*pair and 2*pair+1 go to the lane's bytes 0 and 2 (the low bytes of its
 * two words), with their weights split across v[1] and v[2]. Taps a pixel does
 * not have get index 0 and weight 0. */
static void fill_pair(const ferry__resize_axis *h, int x0, int n, int base, int pair, plan_line v[3]) {
  memset(v, 0, 3 * sizeof *v);
  for (int j = 0; j < 3 * n; j++) {
    int x = x0 + j / 3;
    for (int s = 0; s < 2; s++) {
      int t = 2 * pair + s;
      if (t >= h->count[x]) continue;
      int32_t w = h->weights[h->offset[x] + t];
      v[0].bytes[4 * j + 2 * s] = (uint8_t)(3 * (h->first[x] + t) + j % 3 - base);
      /* floor division by 2^15 (>> on int32 is arithmetic with GCC), so
       * 0 <= lo < 2^15 fits a signed 16-bit factor, and hi = w >> 15 does too
       * (|w| <= 2^22) */
      v[1].words[2 * j + s] = (int16_t)(w - (w >> LO_BITS) * (1 << LO_BITS));
      v[2].words[2 * j + s] = (int16_t)(w >> LO_BITS);
    }
  }
}

/* Lay the plan out in mem (LINE-aligned) and return its size; with mem NULL,
 * only the size. */
static size_t plan_vbmi(const ferry__resize_axis *h, int in_w, int out_w, void *mem) {
  plan_line *line = mem;
  int p = pick_group_pixels(h, out_w), groups = p ? (out_w + p - 1) / p : 0;
  size_t lines = 1;
  if (line) line[0].header = (plan_header){p, groups};
  for (int g = 0; g < groups; g++) {
    int x0 = g * p, n = out_w - x0 < p ? out_w - x0 : p, most, base;
    group_span(h, x0, n, &most, &base);
    int pairs = (most + 1) / 2, left = 3 * in_w - base;
    if (line) {
      plan_line *info = line + lines;
      memset(info, 0, sizeof *info);
      /* a shift by 64 would be undefined: the full mask is spelled out */
      uint64_t mask = left >= WINDOW ? ~0ull : left > 0 ? (1ull << left) - 1 : 0;
      info->info = (group_info){mask, base, pairs, 3 * n, 3 * x0};
      for (int q = 0; q < pairs; q++) fill_pair(h, x0, n, base, q, info + 1 + 3 * q);
    }
    lines += 1 + 3 * (size_t)pairs;
  }
  return lines * LINE;
}

/* The lanes' two taps as 16-bit words, times the split weights, added in. */
__attribute__((always_inline)) static inline void add_pair(__m512i window, const plan_line *v,
                                                          __m512i *lo, __m512i *hi) {
  const __mmask64 low_bytes = 0x5555555555555555ull; /* byte 0 of each word */
  __m512i px = _mm512_maskz_permutexvar_epi8(low_bytes, _mm512_load_si512(v), window);
  *lo = _mm512_add_epi32(*lo, _mm512_madd_epi16(px, _mm512_load_si512(v + 1)));
  *hi = _mm512_add_epi32(*hi, _mm512_madd_epi16(px, _mm512_load_si512(v + 2)));
}

/* One group over `rows` rows; `pairs` is a constant where the caller can make
 * it one, so the loop over them unrolls. */
__attribute__((always_inline)) static inline void group_rows(const plan_line *g, int pairs,
                                                            const uint8_t *in, size_t in_stride,
                                                            int rows, uint8_t *out,
                                                            size_t out_stride) {
  const group_info *info = &g->info;
  /* the group's bytes only; out_bytes <= 15, so the shift is defined */
  __mmask16 store = (__mmask16)((1u << info->out_bytes) - 1);
  in += info->base;
  out += info->first_out;
  for (int y = 0; y < rows; y++, in += in_stride, out += out_stride) {
    /* going down the rows, the hardware prefetcher misses where the next groups'
     * windows lie; the decoded image is no longer all in L2 by now */
    /* a prefetch past the end of the image is harmless: it never faults */
    _mm_prefetch((const char *)in + 2 * WINDOW, _MM_HINT_T0);
    __m512i window = _mm512_maskz_loadu_epi8(info->window_mask, in);
    __m512i lo = _mm512_set1_epi32(BIAS), hi = _mm512_setzero_si512();
    for (int q = 0; q < pairs; q++) add_pair(window, g + 1 + 3 * q, &lo, &hi);
    /* hi_sum * 2^15 + lo_sum, the sum the other kernels make; BIAS went into lo */
    __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(hi, LO_BITS), lo);
    sum = _mm512_max_epi32(_mm512_srai_epi32(sum, FERRY_RESIZE_WEIGHT_BITS), _mm512_setzero_si512());
    _mm_mask_storeu_epi8(out, store, _mm512_cvtusepi32_epi8(sum));
  }
}

/* Group by group, each down all the rows, so its indices and weights stay in
 * registers. */
static void horizontal_vbmi(const uint8_t *in, size_t in_stride, int rows, int in_w, const ferry__resize_axis *h,
                            int out_w, uint8_t *out, size_t out_stride, void *scratch, const void *plan) {
  const plan_line *line = plan;
  if (line[0].header.group_pixels == 0) {
    ferry__resize_avx512.horizontal(in, in_stride, rows, in_w, h, out_w, out, out_stride, scratch,
                                   NULL);
    return;
  }
  const plan_line *g = line + 1;
  for (int k = 0; k < line[0].header.groups; k++) {
    int pairs = g->info.pairs;
    switch (pairs) {
      case 1: group_rows(g, 1, in, in_stride, rows, out, out_stride); break;
      case 2: group_rows(g, 2, in, in_stride, rows, out, out_stride); break;
      case 3: group_rows(g, 3, in, in_stride, rows, out, out_stride); break;
      default: group_rows(g, pairs, in, in_stride, rows, out, out_stride); break;
    }
    g += 1 + 3 * pairs;
  }
}

const ferry__resize_kernels ferry__resize_vbmi = {
    horizontal_vbmi, ferry__resize_vertical_avx512, ferry__resize_normalize_avx2, FERRY_RESIZE_MAX_BLOCK,
    plan_vbmi,       ferry__resize_drain_avx2};
