/* loaders/image/resize.c - square resize with Pillow's BILINEAR, then the output layout.
 *
 * The arithmetic follows Pillow's Resample.c so that the u8 result is Pillow's:
 *  - per output pixel, a triangle filter centred at (i + 0.5) * scale, its support
 *    widened by the downscale factor (that is the antialiasing), weights
 *    normalised to sum 1 and then rounded to 22-bit fixed point;
 *  - first the horizontal pass into u8 rows (rounded and clipped), then the
 *    vertical pass from those rows; only the source rows the vertical filter
 *    touches are resampled horizontally.
 * The second pass writes the final values straight into the caller's buffer in the
 * requested layout (through one staging row for f32), so there is no full-size
 * intermediate copy of the output.
 */
#include <math.h>
#include <string.h>

#include "lib/status.h"
#include "loaders/image/image_internal.h"

enum { WEIGHT_BITS = 22, MAX_SIZE = 32768 };

/* One axis' filter: output i reads `count[i]` inputs from `first[i]` with weights
 * weights[offset[i] .. +count[i]). Packed by offset rather than at a fixed stride,
 * the tables stay O(in + out) even for an image thousands of times wider than R. */
typedef struct axis_taps {
  int *first, *count, *offset;
  int32_t *weights;
} axis_taps;

static double triangle(double x) {
  x = fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

static double filter_scale(int in_size, int out_size) {
  double scale = (double)in_size / out_size;
  return scale < 1.0 ? 1.0 : scale;
}

/* Most taps one output pixel can have: the support spans 2*filter_scale inputs. */
static size_t max_taps(int in_size, int out_size) {
  return (size_t)ceil(filter_scale(in_size, out_size)) * 2 + 1;
}

/* All outputs together use at most 2*in + 3*out taps: each spans 2*scale + 1 inputs
 * when downscaling (scale = in/out), at most 3 when upscaling. */
static size_t total_taps(int in_size, int out_size) {
  return 2 * (size_t)in_size + 3 * (size_t)out_size;
}

static size_t taps_bytes(int in_size, int out_size) {
  return max_taps(in_size, out_size) * sizeof(double) + (size_t)out_size * 3 * sizeof(int) +
         total_taps(in_size, out_size) * sizeof(int32_t);
}

/* Lay the axis' arrays out in mem (taps_bytes long, 8-byte aligned) and fill them. */
static void build_taps(axis_taps *t, int in_size, int out_size, void *mem) {
  double scale = (double)in_size / out_size;
  double support = filter_scale(in_size, out_size); /* triangle support 1, widened */
  double inv_filter_scale = 1.0 / support;
  double *w = mem; /* one output's float weights */
  t->first = (int *)(w + max_taps(in_size, out_size));
  t->count = t->first + out_size;
  t->offset = t->count + out_size;
  t->weights = (int32_t *)(t->offset + out_size);
  int next = 0;
  for (int i = 0; i < out_size; i++) {
    double center = (i + 0.5) * scale;
    int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
    if (lo < 0) lo = 0;
    if (hi > in_size) hi = in_size;
    double sum = 0.0;
    for (int k = 0; k < hi - lo; k++) {
      w[k] = triangle((k + lo - center + 0.5) * inv_filter_scale);
      sum += w[k];
    }
    for (int k = 0; k < hi - lo; k++) {
      double v = sum != 0.0 ? w[k] / sum : 0.0;
      t->weights[next + k] =
          (int32_t)(v < 0 ? -0.5 + v * (1 << WEIGHT_BITS) : 0.5 + v * (1 << WEIGHT_BITS));
    }
    t->first[i] = lo;
    t->count[i] = hi - lo;
    t->offset[i] = next;
    next += hi - lo;
  }
}

static uint8_t clip8(int32_t acc) {
  int32_t v = acc >> WEIGHT_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Eight lanes at a time (GCC/Clang vector extensions). The sums are exact
 * integers, so the lane order cannot change a result. The hot loops are also
 * built for AVX2 (picked at load time), whose byte-to-int widening and 32-bit
 * multiply plain SSE2 lacks. */
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint8_t u8x8 __attribute__((vector_size(8)));
/* Not under ThreadSanitizer: target_clones resolves through an ifunc, which runs
 * while the program is being relocated, before TSan's runtime is ready. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define HOT_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define HOT_LOOP
#endif

/* Horizontal pass of one row: in (RGB8) -> out (out_w pixels). */
static void horizontal_row(const uint8_t *in, const axis_taps *h, int out_w, uint8_t *out) {
  for (int x = 0; x < out_w; x++) {
    const int32_t *k = h->weights + h->offset[x];
    const uint8_t *p = in + (size_t)h->first[x] * 3;
    int32_t r = 1 << (WEIGHT_BITS - 1), g = r, b = r;
    for (int i = 0; i < h->count[x]; i++, p += 3) {
      r += p[0] * k[i];
      g += p[1] * k[i];
      b += p[2] * k[i];
    }
    out[3 * x] = clip8(r);
    out[3 * x + 1] = clip8(g);
    out[3 * x + 2] = clip8(b);
  }
}

/* out[i] = clip8(bias + sum_t rows[t*stride + i] * k[t]) for i < n: one output row
 * of the vertical pass, eight values at a time, the sums kept in registers. */
HOT_LOOP static void convolve_rows(const uint8_t *restrict rows, size_t stride,
                                   const int32_t *restrict k, int count, size_t n,
                                   uint8_t *restrict out) {
  const int32_t bias = 1 << (WEIGHT_BITS - 1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    i32x8 acc = (i32x8){0} + bias;
    for (int t = 0; t < count; t++) {
      u8x8 px;
      memcpy(&px, rows + t * stride + i, sizeof px);
      acc += __builtin_convertvector(px, i32x8) * k[t];
    }
    acc >>= WEIGHT_BITS;
    acc &= ~(acc < 0); /* comparisons give all-ones lanes where true */
    i32x8 over = acc > 255;
    u8x8 px = __builtin_convertvector((acc & ~over) | (over & 255), u8x8);
    memcpy(out + i, &px, sizeof px);
  }
  for (; i < n; i++) {
    int32_t acc = bias;
    for (int t = 0; t < count; t++) acc += rows[t * stride + i] * k[t];
    out[i] = clip8(acc);
  }
}

/* Vertical pass of output row y: rows + i*n is source row row0 + i (n bytes each). */
static void vertical_row(const uint8_t *rows, size_t n, int row0, const axis_taps *v, int y,
                         uint8_t *out) {
  convolve_rows(rows + (size_t)(v->first[y] - row0) * n, n, v->weights + v->offset[y],
                v->count[y], n, out);
}

/* Where finished output rows go: straight into dst for U8_HWC; for F32_CHW into a
 * staging row that sink_done spreads, normalised, over the three planes. */
typedef struct row_sink {
  ferry_image_layout layout;
  void *dst;
  int size;
  uint8_t *staging;
  float lut[3][256]; /* F32_CHW: u8 value -> normalised float, per channel */
} row_sink;

static void sink_init(row_sink *s, ferry_image_layout layout, void *dst, int size,
                      uint8_t *staging) {
  static const float mean[3] = FERRY_IMAGENET_MEAN, std[3] = FERRY_IMAGENET_STD;
  s->layout = layout;
  s->dst = dst;
  s->size = size;
  s->staging = staging;
  if (layout != FERRY_LAYOUT_F32_CHW) return;
  /* the same float32 steps as torchvision's to_tensor then normalize */
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) s->lut[c][v] = ((float)v / 255.0f - mean[c]) / std[c];
}

/* The u8 row to write output row y into. */
static uint8_t *sink_row(const row_sink *s, int y) {
  if (s->layout == FERRY_LAYOUT_U8_HWC) return (uint8_t *)s->dst + (size_t)y * s->size * 3;
  return s->staging;
}

static void sink_done(const row_sink *s, int y) {
  if (s->layout == FERRY_LAYOUT_U8_HWC) return;
  size_t n = (size_t)s->size;
  float *plane = (float *)s->dst + (size_t)y * n;
  for (int c = 0; c < 3; c++)
    for (size_t x = 0; x < n; x++) plane[c * n * n + x] = s->lut[c][s->staging[3 * x + c]];
}

/* Horizontal, then vertical (Pillow's usual order). Only the source rows the
 * vertical filter reads are resampled; when the width already matches, the
 * source rows are used as they are. */
static void resize_horizontal_first(const uint8_t *src, int width, const axis_taps *h,
                                    const axis_taps *v, int size, uint8_t *tmp,
                                    const row_sink *sink) {
  int row0 = v->first[0], row1 = v->first[size - 1] + v->count[size - 1];
  const uint8_t *rows = src + (size_t)row0 * width * 3;
  if (width != size) {
    for (int y = row0; y < row1; y++)
      horizontal_row(src + (size_t)y * width * 3, h, size, tmp + (size_t)(y - row0) * size * 3);
    rows = tmp;
  }
  for (int y = 0; y < size; y++) {
    vertical_row(rows, (size_t)size * 3, row0, v, y, sink_row(sink, y));
    sink_done(sink, y);
  }
}

/* Vertical over the full width, then horizontal. */
static void resize_vertical_first(const uint8_t *src, int width, const axis_taps *h,
                                  const axis_taps *v, int size, uint8_t *tmp,
                                  const row_sink *sink) {
  size_t n = (size_t)width * 3;
  for (int y = 0; y < size; y++) vertical_row(src, n, 0, v, y, tmp + (size_t)y * n);
  for (int y = 0; y < size; y++) {
    horizontal_row(tmp + (size_t)y * n, h, size, sink_row(sink, y));
    sink_done(sink, y);
  }
}

/* Pillow 13 (python-pillow/Pillow#9549) runs the vertical pass first when the height
 * shrinks much more than the width. The pass order changes the intermediate
 * rounding, so ours must agree. Pillow's test of it is not in the source we read;
 * this rule was measured on Pillow 13.0 itself (every boundary, for R = 37, 64, 100
 * and widths from 20 to 300): vertical first iff both passes are needed, the
 * height shrinks, and it loses more than twice the pixels the width loses. */
static int vertical_first(int width, int height, int size) {
  return width != size && height > size && height - size > 2 * (width - size);
}

static ferry_status check_resize_args(const uint8_t *src, int width, int height, int size,
                                      ferry_image_layout layout, const void *dst) {
  if (!src || !dst || width <= 0 || height <= 0)
    return ferry_fail(FERRY_EINVAL, "image resize: no pixels or no destination");
  if (size <= 0 || size > MAX_SIZE)
    return ferry_fail(FERRY_EINVAL, "image resize: size %d is outside 1..%d", size, MAX_SIZE);
  if (layout != FERRY_LAYOUT_F32_CHW && layout != FERRY_LAYOUT_U8_HWC)
    return ferry_fail(FERRY_EINVAL, "image resize: unknown layout %d", (int)layout);
  return FERRY_OK;
}

/* Where each part of the resize's scratch (d->taps) starts: the vertical and
 * horizontal filters and the staging row, each 8-byte aligned. */
typedef struct scratch_plan {
  size_t v_taps, h_taps, staging, total;
} scratch_plan;

static size_t align8(size_t n) { return (n + 7) & ~(size_t)7; }

static scratch_plan plan_scratch(int width, int height, int size) {
  scratch_plan p;
  p.v_taps = 0;
  p.h_taps = align8(taps_bytes(height, size));
  p.staging = p.h_taps + align8(taps_bytes(width, size));
  p.total = p.staging + (size_t)size * 3;
  return p;
}

ferry_status ferry_image_resize(ferry_decoder *d, const uint8_t *src, int width, int height,
                                int size, ferry_image_layout layout, void *dst) {
  ferry_status st = check_resize_args(src, width, height, size, layout, dst);
  if (st < 0) return st;
  scratch_plan plan = plan_scratch(width, height, size);
  st = ferry_scratch_reserve(&d->taps, plan.total, "image resize");
  if (st < 0) return st;
  uint8_t *mem = d->taps.data;
  axis_taps h, v;
  build_taps(&v, height, size, mem + plan.v_taps);
  build_taps(&h, width, size, mem + plan.h_taps);
  int v_first = vertical_first(width, height, size);
  /* the intermediate image: size rows of the source width, or the source rows the
   * vertical filter reads at the output width */
  size_t tmp_bytes = v_first         ? (size_t)size * width * 3
                     : width == size ? 0
                                     : (size_t)(v.first[size - 1] + v.count[size - 1] -
                                                v.first[0]) * size * 3;
  st = ferry_scratch_reserve(&d->rows, tmp_bytes, "image resize");
  if (st < 0) return st;
  row_sink sink;
  sink_init(&sink, layout, dst, size, mem + plan.staging);
  if (v_first)
    resize_vertical_first(src, width, &h, &v, size, d->rows.data, &sink);
  else
    resize_horizontal_first(src, width, &h, &v, size, d->rows.data, &sink);
  return FERRY_OK;
}
