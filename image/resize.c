/* image/resize.c - resize with Pillow's BILINEAR, then the output layout.
 *
 * The arithmetic follows Pillow's Resample.c so that the u8 result is Pillow's:
 *  - per output pixel, a triangle filter centred at (i + 0.5) * scale, its support
 *    widened by the downscale factor (that is the antialiasing), weights
 *    normalised to sum 1 and then rounded to 22-bit fixed point;
 *  - first the horizontal pass into u8 rows (rounded and clipped), then the
 *    vertical pass from those rows; only the source rows the vertical filter
 *    touches are resampled horizontally. Pillow 13 runs the vertical pass first
 *    when the height shrinks by more than twice what the width does, and so does
 *    this file (vertical_first);
 *  - the source may be a rectangle of a larger image (a row stride): a crop is
 *    resampled where it lies, as Pillow resamples the image Image.crop made;
 *  - the output may be a view of the full resize (ferry__resize_view): a rectangle
 *    of it, mirrored left to right or not. Every output pixel's filter depends only
 *    on (input size, full output size, its index), and the pass order on the full
 *    sizes, so a view's bytes are those of the full resize cropped (and flipped):
 *    branch B's crop (augment.c) resamples only the pixels it keeps, and the flip
 *    costs nothing. A mirrored axis' filters run right to left.
 * The second pass writes the final values straight into the caller's buffer in the
 * requested layout (through staging rows for f32), so there is no full-size
 * intermediate copy of the output. This file plans a resize (filters, pass order,
 * scratch, the row window) and holds the portable kernels; the vector kernel sets
 * (resize_kernels.h) compute the same bytes faster.
 *
 * Callers: image.c (ferry_image_decode_resized, once per sample on a worker's own
 * decoder) and users of ferry_image_resize; a decoder is used by one thread at a time,
 * and every buffer here is that decoder's scratch, so resizes on different decoders
 * share nothing but the read-only normalisation table (built once, normalize.c).
 * The GPU resize (image/gpu/resize_cuda.h) takes filters made by ferry__resize_axis_build
 * and this file's pass order (handed to it by gpu_fill.c), so that it agrees with
 * this file byte for byte.
 * Invariants:
 *   - d->taps holds the filters of d->taps_shape (sizes and view), tagged right after
 *     a build (which cannot fail halfway); d->plan holds the horizontal plan of
 *     (d->plan_kernels, d->plan_shape), untagged while it is rewritten; each is
 *     reused only when the shape (and for the plan the kernel set) matches;
 *   - the vertical filter's first rows never decrease with y, which lets the row
 *     window only drop rows from its top and resample below;
 *   - nothing is allocated outside the decoder's scratch, so once the scratch has
 *     grown to a shape, resizing that shape again allocates nothing.
 * Not done here: choosing the output size (augment.c does, for the recipes), other
 * filters than BILINEAR, and any resampling of masks (coco/ makes them through index
 * maps).
 */
#include <math.h>
#include <string.h>

#include "lib/status.h"
#include "image/decoder.h"
#include "image/scratch.h"
#include "image/resize_kernels.h"

enum { WEIGHT_BITS = FERRY_RESIZE_WEIGHT_BITS, MAX_SIZE = 32768 };

typedef ferry__resize_axis axis_taps;
_Static_assert(sizeof((ferry_decoder *)0)->taps_shape == FERRY_RESIZE_SHAPE_INTS * sizeof(int),
               "the decoder keeps a whole view's shape");

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
 * when downscaling (scale = in/out), at most 3 when upscaling. Packed by offset
 * rather than at a fixed stride, the tables stay O(in + out) even for an image
 * thousands of times wider than the output. */
static size_t total_taps(int in_size, int out_size) {
  return 2 * (size_t)in_size + 3 * (size_t)out_size;
}

/* The tables of n outputs of an in_size -> full resize (n <= full): the taps of
 * any n of its outputs are at most those of all of them. */
static size_t taps_bytes(int in_size, int full, int n) {
  return max_taps(in_size, full) * sizeof(double) + (size_t)n * 4 * sizeof(int) +
         total_taps(in_size, full) * sizeof(int32_t);
}

/* Output indices by tap count, stably: a filter's counts take two values (plus
 * smaller ones clipped at the edges), so the AVX2 horizontal kernel, taking the
 * outputs in this order, runs one trip count for long stretches and predicts its
 * branches. Counts spread wider than that are left in order (speed only). */
static void order_by_count(axis_taps *t, int out_size) {
  int lo = t->count[0], hi = lo;
  for (int i = 0; i < out_size; i++) {
    if (t->count[i] < lo) lo = t->count[i];
    if (t->count[i] > hi) hi = t->count[i];
  }
  int k = 0;
  if (hi - lo > 8) {
    for (int i = 0; i < out_size; i++) t->by_count[i] = i;
    return;
  }
  for (int c = lo; c <= hi; c++)
    for (int i = 0; i < out_size; i++)
      if (t->count[i] == c) t->by_count[k++] = i;
}

/* Point the axis' arrays, n outputs of a resize to `full`, into mem (taps_bytes
 * long, 8-byte aligned). */
static void layout_taps(axis_taps *t, int in_size, int full, int n, void *mem) {
  t->first = (int *)((double *)mem + max_taps(in_size, full));
  t->count = t->first + n;
  t->offset = t->count + n;
  t->by_count = t->offset + n;
  t->weights = (int32_t *)(t->by_count + n);
}

/* Lay out in mem, and fill, the filters of outputs from .. from+n of a resize of
 * in_size to full, in that order or (mirror) the reverse: output j is the full
 * resize's from + j, or from + n-1 - j. Each step is Pillow's precompute_coeffs: the
 * window [lo, hi) rounds centre -/+ support to the nearest input and is clipped to
 * the image; the weights are normalised by their sum (left as 0 when it is 0, as
 * Pillow does) and rounded half away from zero. */
static void build_taps(axis_taps *t, int in_size, int full, int from, int n, int mirror, void *mem) {
  double scale = (double)in_size / full;
  double support = filter_scale(in_size, full); /* triangle support 1, widened */
  double inv_filter_scale = 1.0 / support;
  double *w = mem; /* one output's float weights */
  layout_taps(t, in_size, full, n, mem);
  int next = 0;
  for (int j = 0; j < n; j++) {
    int i = mirror ? from + n - 1 - j : from + j;
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
    t->first[j] = lo;
    t->count[j] = hi - lo;
    t->offset[j] = next;
    next += hi - lo;
  }
  order_by_count(t, n);
}

/* The accumulators start at half a unit (1 << (WEIGHT_BITS - 1)), so this shift
 * rounds to nearest, as Pillow's clip8 does. */
static uint8_t clip8(int32_t acc) {
  int32_t v = acc >> WEIGHT_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The portable kernels: plain loops, the reference the vector ones must equal. */

static void horizontal_portable(const uint8_t *in, size_t in_stride, int rows, int in_w,
                                const axis_taps *h, int out_w, uint8_t *out, size_t out_stride,
                                void *scratch, const void *plan) {
  for (int y = 0; y < rows; y++, in += in_stride, out += out_stride)
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

/* A short last block repeats its last row rather than reading past the image; only
 * its `n` real rows are written back. */
void ferry__resize_horizontal_blocks(const ferry__resize_block_ops *ops, const uint8_t *in, size_t in_stride, int rows,
                                     int in_w, const axis_taps *h, int out_w, uint8_t *out, size_t out_stride,
                                     void *scratch) {
  size_t in_bytes = (size_t)in_w * 3;
  uint8_t *words = scratch, *out_words = words + in_bytes * (size_t)ops->rows;
  for (int y = 0; y < rows; y += ops->rows) {
    int n = rows - y < ops->rows ? rows - y : ops->rows;
    const uint8_t *row[FERRY_RESIZE_MAX_BLOCK];
    for (int r = 0; r < ops->rows; r++) row[r] = in + (size_t)(y + (r < n ? r : n - 1)) * in_stride;
    ops->transpose_in(row, in_bytes, words);
    ops->convolve(words, h, out_w, out_words);
    ops->transpose_out(out_words, (size_t)out_w * 3, out + (size_t)y * out_stride, out_stride, n);
  }
}

static void vertical_portable(const uint8_t *rows, size_t stride, const int32_t *k, int count,
                              size_t n, uint8_t *out) {
  for (size_t i = 0; i < n; i++) {
    int32_t acc = 1 << (WEIGHT_BITS - 1);
    for (int t = 0; t < count; t++) acc += rows[t * stride + i] * k[t];
    out[i] = clip8(acc);
  }
}

const ferry__resize_kernels ferry__resize_portable = {
    horizontal_portable, vertical_portable, ferry__resize_normalize_portable, 1, NULL, NULL};

/* Most capable first; each set needs every feature its file is compiled for (the
 * build leaves out a set its compiler cannot make). Asked on every resize: the
 * answer is a few cached CPUID bits. */
const ferry__resize_kernels *ferry__resize_best_kernels(void) {
#if FERRY_HAVE_VBMI_KERNELS
  if (__builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return &ferry__resize_vbmi;
#endif
#if FERRY_HAVE_AVX512_KERNELS
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return &ferry__resize_avx512;
#endif
#if FERRY_HAVE_AVX2_KERNELS
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &ferry__resize_avx2;
#endif
  return &ferry__resize_portable;
}

/* One resize in progress: the kernels, both filters, scratch for the horizontal
 * kernel, and where finished output rows go (straight into dst for U8_HWC; for
 * F32_CHW through staging rows that rows_done spreads, normalised, over the planes). */
typedef struct resize_job {
  const ferry__resize_kernels *k;
  axis_taps h, v;
  int out_w, out_h;
  size_t src_stride; /* bytes from one source row to the next */
  ferry_image_layout layout;
  void *dst;
  uint8_t *staging; /* FERRY_RESIZE_MAX_BLOCK rows of out_w pixels */
  void *block;      /* the horizontal kernel's scratch */
  const void *plan; /* and its plan for j->h */
  int src_rows;     /* the source image's height */
  const ferry__resize_norm *norm; /* F32_CHW */
} resize_job;

/* Where output rows y.. are written as RGB8 (rows of out_w pixels). */
static uint8_t *out_rows(const resize_job *j, int y) {
  if (j->layout == FERRY_LAYOUT_U8_HWC) return (uint8_t *)j->dst + (size_t)y * j->out_w * 3;
  return j->staging;
}

/* Output rows y .. y+n are in out_rows(j, y): finish them in the layout. F32_CHW is
 * three planes of out_h*out_w floats; staging row r is output row y + r of each. */
static void rows_done(const resize_job *j, int y, int n) {
  if (j->layout == FERRY_LAYOUT_U8_HWC) return;
  size_t px = (size_t)j->out_w;
  for (int r = 0; r < n; r++)
    j->k->normalize(j->staging + r * px * 3, px, j->norm, (float *)j->dst + (size_t)(y + r) * px,
                    px * (size_t)j->out_h);
}

/* Rows of the horizontal pass the vertical pass reads: a window sliding down the
 * image, so the intermediate stays a few dozen rows (cache-resident) rather than
 * a whole image. Buffer rows start .. start+rows hold source rows first ..,
 * resampled to the output width; when the window reaches the end of the buffer
 * (cap rows), its rows move back to the front, which happens once every few
 * dozen rows. */
typedef struct row_window {
  uint8_t *buf;
  size_t row_bytes;
  int first, start, rows, cap;
} row_window;

enum { WINDOW_SLACK_ROWS = 4 * FERRY_RESIZE_MAX_BLOCK };

/* The longest vertical filter plus room to resample ahead: after the rows output
 * row y no longer needs are dropped, a whole block always fits. */
static int window_rows(const axis_taps *v, int out_h) {
  int most = 0;
  for (int y = 0; y < out_h; y++) most = v->count[y] > most ? v->count[y] : most;
  return most + WINDOW_SLACK_ROWS;
}

/* Make room for `n` more rows after the window's last. */
static void window_make_room(row_window *w, int n) {
  if (w->start + w->rows + n <= w->cap) return;
  memmove(w->buf, w->buf + (size_t)w->start * w->row_bytes, (size_t)w->rows * w->row_bytes);
  w->start = 0;
}

/* Make the window hold source rows [lo, hi): drop the rows above lo, resample the
 * missing ones below (a block at least, while the image lasts). Filters only
 * move down, so lo never decreases. Returns source row lo. */
static const uint8_t *window_cover(const resize_job *j, row_window *w, const uint8_t *src,
                                   int width, int lo, int hi) {
  size_t in_row = j->src_stride;
  int drop = lo - w->first;
  if (drop >= w->rows) {
    w->start = w->rows = 0;
  } else {
    w->start += drop;
    w->rows -= drop;
  }
  w->first = lo;
  while (w->first + w->rows < hi) {
    int r = w->first + w->rows, n = hi - r;
    if (n < j->k->block_rows) n = j->k->block_rows;
    if (n > j->src_rows - r) n = j->src_rows - r;
    if (n > w->cap - w->rows) n = w->cap - w->rows;
    window_make_room(w, n);
    j->k->horizontal(src + (size_t)r * in_row, in_row, n, width, &j->h, j->out_w,
                     w->buf + (size_t)(w->start + w->rows) * w->row_bytes, w->row_bytes, j->block,
                     j->plan);
    w->rows += n;
  }
  return w->buf + (size_t)w->start * w->row_bytes;
}

/* Horizontal, then vertical (Pillow's usual order). Only the source rows the
 * vertical filter reads are resampled; when the width already matches, the
 * source rows are used as they are. */
static void resize_horizontal_first(const resize_job *j, const uint8_t *src, int width, int h_pass,
                                    uint8_t *tmp) {
  size_t n = (size_t)j->out_w * 3;
  row_window w = {tmp, n, 0, 0, 0, window_rows(&j->v, j->out_h)};
  for (int y = 0; y < j->out_h; y++) {
    int lo = j->v.first[y], hi = lo + j->v.count[y];
    /* no horizontal pass: the source rows as they are, at their stride */
    const uint8_t *rows = !h_pass ? src + (size_t)lo * j->src_stride : window_cover(j, &w, src, width, lo, hi);
    size_t stride = !h_pass ? j->src_stride : n;
    j->k->vertical(rows + (size_t)(j->v.first[y] - lo) * stride, stride, j->v.weights + j->v.offset[y],
                   j->v.count[y], n, out_rows(j, y));
    rows_done(j, y, 1);
  }
}

/* Vertical over the full width, then horizontal, a block of rows at a time. tmp
 * holds out_h rows of the source width: every source row may be read, so there is no
 * window to slide. */
static void resize_vertical_first(const resize_job *j, const uint8_t *src, int width,
                                  uint8_t *tmp) {
  size_t n = (size_t)width * 3;
  for (int y = 0; y < j->out_h; y++)
    j->k->vertical(src + (size_t)j->v.first[y] * j->src_stride, j->src_stride, j->v.weights + j->v.offset[y],
                   j->v.count[y], n, tmp + (size_t)y * n);
  for (int y = 0; y < j->out_h; y += FERRY_RESIZE_MAX_BLOCK) {
    int rows = j->out_h - y < FERRY_RESIZE_MAX_BLOCK ? j->out_h - y : FERRY_RESIZE_MAX_BLOCK;
    j->k->horizontal(tmp + (size_t)y * n, n, rows, width, &j->h, j->out_w, out_rows(j, y),
                     (size_t)j->out_w * 3, j->block, j->plan);
    rows_done(j, y, rows);
  }
}

/* Pillow 13 runs the vertical pass first when the height shrinks by more than twice
 * what the width does (libImaging/Resample.c, ImagingResampleInner, 13.0.0's source:
 * horizontal_first = !(in_h - out_h > 0 && in_h - out_h > (in_w - out_w) * 2)). The
 * pass order changes the intermediate rounding, so ours must agree. With the width
 * unchanged there is no horizontal pass, and the order does not matter. Pillow 12 and
 * older always went horizontally first. */
static int vertical_first(int width, int height, int out_w, int out_h) {
  return width != out_w && height - out_h > 0 && height - out_h > (width - out_w) * 2;
}

size_t ferry__resize_axis_bytes(int in_size, int out_size) { return taps_bytes(in_size, out_size, out_size); }

void ferry__resize_axis_build(ferry__resize_axis *axis, int in_size, int out_size, void *mem) {
  build_taps(axis, in_size, out_size, 0, out_size, 0, mem);
}

int ferry__resize_vertical_first(int width, int height, int size) {
  return vertical_first(width, height, size, size);
}

static ferry_status check_resize_args(const uint8_t *src, int width, int height, const ferry__resize_view *v,
                                      ferry_image_layout layout, const void *dst) {
  if (!src || !dst || width <= 0 || height <= 0)
    return ferry__fail(FERRY_EINVAL, "image resize: no pixels or no destination");
  if (v->full_w <= 0 || v->full_w > MAX_SIZE || v->full_h <= 0 || v->full_h > MAX_SIZE)
    return ferry__fail(FERRY_EINVAL, "image resize: size %dx%d is outside 1..%d", v->full_w, v->full_h, MAX_SIZE);
  if (v->w <= 0 || v->h <= 0 || v->x < 0 || v->y < 0 || v->w > v->full_w - v->x || v->h > v->full_h - v->y)
    return ferry__fail(FERRY_EINVAL, "image resize: view %dx%d at (%d, %d) is not inside the %dx%d output",
                       v->w, v->h, v->x, v->y, v->full_w, v->full_h);
  if (layout != FERRY_LAYOUT_F32_CHW && layout != FERRY_LAYOUT_U8_HWC)
    return ferry__fail(FERRY_EINVAL, "image resize: unknown layout %d", (int)layout);
  return FERRY_OK;
}

/* Where each part of the resize's scratch (d->taps) starts: the vertical and
 * horizontal filters, the staging rows and the horizontal kernel's block (32-byte
 * aligned: the scratch itself comes from malloc, 16-byte aligned, hence the slack). */
typedef struct scratch_plan {
  size_t v_taps, h_taps, staging, block, total;
} scratch_plan;

static size_t align_to(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

static void *align_pointer(void *p, size_t a) { return (void *)align_to((uintptr_t)p, a); }

static void *aligned_plan(const ferry_decoder *d) {
  return align_pointer(d->plan.data, FERRY_RESIZE_PLAN_ALIGN);
}

static scratch_plan plan_scratch(int width, int height, const ferry__resize_view *v) {
  scratch_plan p;
  p.v_taps = 0;
  p.h_taps = align_to(taps_bytes(height, v->full_h, v->h), 8);
  p.staging = p.h_taps + align_to(taps_bytes(width, v->full_w, v->w), 8);
  p.block = align_to(p.staging + (size_t)FERRY_RESIZE_MAX_BLOCK * v->w * 3 + FERRY_RESIZE_ROW_SLACK, 32);
  p.total = p.block + ferry_resize_block_bytes(width, v->w) + 32;
  return p;
}

/* The kernel set's plan for the horizontal filter h (resize_kernels.h), kept in
 * the decoder and laid out again only when the shape, the view's columns or the set
 * changes. */
static ferry_status horizontal_plan(const ferry__resize_kernels *k, ferry_decoder *d, const axis_taps *h, int width,
                                    const ferry__resize_view *v, const void **plan) {
  *plan = NULL;
  if (!k->plan_horizontal) return FERRY_OK;
  int size = v->w;
  const int shape[5] = {width, v->full_w, v->x, v->w, v->mirror};
  if (d->plan_kernels != k || memcmp(shape, d->plan_shape, sizeof shape) != 0) {
    /* Invalid until rebuilt, so a failed reserve leaves no stale plan marked good. */
    d->plan_kernels = NULL;
    size_t bytes = k->plan_horizontal(h, width, size, NULL) + FERRY_RESIZE_PLAN_ALIGN;
    ferry_status st = ferry__scratch_reserve(&d->plan, bytes, "image resize");
    if (st < 0) return st;
    k->plan_horizontal(h, width, size, aligned_plan(d));
    d->plan_kernels = k;
    memcpy(d->plan_shape, shape, sizeof shape);
  }
  *plan = aligned_plan(d);
  return FERRY_OK;
}

/* The filters of both axes for the view, or the last ones when they are for the
 * same shape and view. */
static void view_taps(ferry_decoder *d, uint8_t *mem, const scratch_plan *parts, int reuse, int width, int height,
                      const ferry__resize_view *v, resize_job *j) {
  if (reuse) {
    layout_taps(&j->v, height, v->full_h, v->h, mem + parts->v_taps);
    layout_taps(&j->h, width, v->full_w, v->w, mem + parts->h_taps);
    return;
  }
  build_taps(&j->v, height, v->full_h, v->y, v->h, 0, mem + parts->v_taps);
  build_taps(&j->h, width, v->full_w, v->x, v->w, v->mirror, mem + parts->h_taps);
}

ferry_status ferry__image_resize_view(const ferry__resize_kernels *k, ferry_decoder *d, const uint8_t *src,
                                      size_t src_stride, int width, int height, const ferry__resize_view *view,
                                      ferry_image_layout layout, void *dst) {
  ferry_status st = check_resize_args(src, width, height, view, layout, dst);
  if (st < 0) return st;
  int out_w = view->w, out_h = view->h;
  scratch_plan parts = plan_scratch(width, height, view);
  size_t cap_before = d->taps.cap;
  st = ferry__scratch_reserve(&d->taps, parts.total, "image resize");
  if (st < 0) return st;
  uint8_t *mem = d->taps.data;
  /* Datasets repeat a few image sizes: the filters of the last resize are kept in
   * the scratch and reused when the sizes match (and the scratch did not grow,
   * which loses its contents). */
  const int shape[FERRY_RESIZE_SHAPE_INTS] = {width,   height,  view->full_w, view->full_h, view->x,
                                              view->y, view->w, view->h,      view->mirror};
  int reuse = d->taps.cap == cap_before && memcmp(shape, d->taps_shape, sizeof shape) == 0;
  resize_job j = {.k = k, .out_w = out_w, .out_h = out_h, .src_stride = src_stride, .layout = layout, .dst = dst,
                  .staging = mem + parts.staging, .block = align_pointer(mem + parts.block, 32),
                  .src_rows = height,
                  .norm = layout == FERRY_LAYOUT_F32_CHW ? ferry__resize_imagenet_norm() : NULL};
  view_taps(d, mem, &parts, reuse, width, height, view, &j);
  if (!reuse) memcpy(d->taps_shape, shape, sizeof shape);
  /* a width the full resize keeps is never resampled horizontally, unless the view
   * takes some of its columns or mirrors them (the filters are then exact copies,
   * weight 1, so the bytes are the same); a view as wide as the source of a resize
   * that changes the width is still resampled */
  int h_pass = width != view->full_w || view->x != 0 || out_w != view->full_w || view->mirror;
  st = h_pass ? horizontal_plan(k, d, &j.h, width, view, &j.plan) : FERRY_OK;
  if (st < 0) return st;
  /* the order the full resize takes */
  int v_first = vertical_first(width, height, view->full_w, view->full_h);
  /* the intermediate image: out_h rows of the source width, or the source rows the
   * vertical filter reads at the output width */
  size_t tmp_bytes = v_first  ? (size_t)out_h * width * 3
                     : !h_pass ? 0
                               : (size_t)window_rows(&j.v, out_h) * out_w * 3;
  st = ferry__scratch_reserve(&d->rows, tmp_bytes, "image resize");
  if (st < 0) return st;
  if (v_first)
    resize_vertical_first(&j, src, width, d->rows.data);
  else
    resize_horizontal_first(&j, src, width, h_pass, d->rows.data);
  /* The non-temporal stores reach memory before the caller hands dst to another
   * thread (the loader does, through its lock). */
  if (k->drain) k->drain();
  return FERRY_OK;
}

ferry_status ferry__image_resize_rect(const ferry__resize_kernels *k, ferry_decoder *d, const uint8_t *src,
                                      size_t src_stride, int width, int height, int out_w, int out_h,
                                      ferry_image_layout layout, void *dst) {
  ferry__resize_view whole = {out_w, out_h, 0, 0, out_w, out_h, 0};
  return ferry__image_resize_view(k, d, src, src_stride, width, height, &whole, layout, dst);
}

ferry_status ferry__image_resize_with(const ferry__resize_kernels *k, ferry_decoder *d, const uint8_t *src, int width,
                                      int height, int size, ferry_image_layout layout, void *dst) {
  return ferry__image_resize_rect(k, d, src, (size_t)width * 3, width, height, size, size, layout, dst);
}

ferry_status ferry_image_resize(ferry_decoder *d, const uint8_t *src, int width, int height,
                                int size, ferry_image_layout layout, void *dst) {
  return ferry__image_resize_with(ferry__resize_best_kernels(), d, src, width, height, size, layout,
                                 dst);
}
