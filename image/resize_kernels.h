/* image/resize_kernels.h - the resize's inner loops (internal).
 *
 * resize.c plans a resize (filter tables, pass order, scratch) and runs it through
 * one of these kernel sets: the portable one (resize.c, normalize.c) or, on
 * x86-64 CPUs that have them, the AVX2 + FMA one (resize_avx2.c), the AVX-512
 * one (resize_avx512.c), or that one with a horizontal pass that gathers bytes
 * along the row instead of transposing (resize_vbmi.c, AVX-512 VBMI). Every sum
 * is an exact integer and every float step is the same IEEE operation, so all
 * sets write identical bytes; the choice is speed only, and test_image_resize
 * holds them to that.
 * A kernel set is a table of plain functions with no state of its own: whatever
 * memory a call needs (scratch, plan) is the caller's (the decoder's, resize.c), so
 * one set serves every thread at once.
 */
#ifndef FERRY_LOADERS_IMAGE_RESIZE_KERNELS_H
#define FERRY_LOADERS_IMAGE_RESIZE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/image.h"
#include "image/image_config.h"

enum { FERRY_RESIZE_WEIGHT_BITS = 22 };

/* One axis' filter: output i reads `count[i]` inputs from `first[i]` with weights
 * weights[offset[i] .. +count[i]), fixed point with FERRY_RESIZE_WEIGHT_BITS.
 * by_count lists the outputs ordered by count (a kernel whose outputs are
 * independent may take them in that order, for predictable loop trip counts). */
typedef struct ferry__resize_axis {
  int *first, *count, *offset, *by_count;
  int32_t *weights;
} ferry__resize_axis;

/* The filter tables of one axis, as the CPU resize builds them, for another
 * resampler that must agree with it byte for byte (the GPU resize, image/gpu/resize_cuda.h):
 * the bytes they need (8-byte aligned memory), and the tables laid out in `mem`. */
size_t ferry__resize_axis_bytes(int in_size, int out_size);
void ferry__resize_axis_build(ferry__resize_axis *axis, int in_size, int out_size, void *mem);
/* The pass order the CPU resize takes for this shape (1: vertical first). */
int ferry__resize_vertical_first(int width, int height, int size);

/* Normalisation, torchvision v2's ToDtype(scale=True) then Normalize in float32
 * steps: lut[c][v] == ((float)v * recip255 - mean[c]) / std[c], each operation
 * rounded to float (lib/transfer/normalize.h). A kernel may look the value up or
 * compute it with the same operations; when fma_exact is set, dividing by std as a
 * product with the reciprocal and one fma correction (q = a*r; q += fma(-q, b, a) * r,
 * fused) gives every entry too. */
typedef struct ferry__resize_norm {
  float mean[3], std[3];
  float recip255, recip_std[3];
  int fma_exact;
  float lut[3][256];
} ferry__resize_norm;

/* The table for FERRY_IMAGENET_MEAN and _STD (built once). */
const ferry__resize_norm *ferry__resize_imagenet_norm(void);

typedef struct ferry__resize_kernels {
  /* Horizontal pass of `rows` RGB8 rows of in_w pixels (row stride in_stride) into
   * rows of out_w pixels (stride out_stride). `scratch` is 32-byte aligned and
   * ferry_resize_block_bytes(in_w, out_w) long; `plan` is what plan_horizontal
   * laid out for this filter (NULL for a set without one). */
  void (*horizontal)(const uint8_t *in, size_t in_stride, int rows, int in_w, const ferry__resize_axis *h, int out_w,
                     uint8_t *out, size_t out_stride, void *scratch, const void *plan);
  /* out[i] = clip8(bias + sum_t rows[t*stride + i] * k[t]) for i < n: one output
   * row of the vertical pass. */
  void (*vertical)(const uint8_t *rows, size_t stride, const int32_t *k, int count, size_t n,
                   uint8_t *out);
  /* One RGB8 row of n pixels into three float planes (plane c at dst + c*plane_stride),
   * each value what the table says for its byte. `rgb` may be read up to
   * FERRY_RESIZE_ROW_SLACK bytes past 3*n. */
  void (*normalize)(const uint8_t *rgb, size_t n, const struct ferry__resize_norm *norm, float *dst,
                    size_t plane_stride);
  /* Rows the horizontal kernel works on at once (callers hand it at least this
   * many where they can; at most FERRY_RESIZE_MAX_BLOCK). */
  int block_rows;
  /* NULL, or the layout of tables the horizontal kernel derives from its filter
   * once per shape rather than once per call: returns their size in bytes and,
   * when mem is not NULL, writes them there (FERRY_RESIZE_PLAN_ALIGN-aligned).
   * resize.c keeps the plan with the filters, so it is rebuilt only when the
   * shape or the kernel set changes. */
  size_t (*plan_horizontal)(const ferry__resize_axis *h, int in_w, int out_w, void *mem);
  /* NULL, or what orders the kernels' non-temporal stores before anything that
   * follows (an sfence): resize.c calls it once an image is written, so the
   * image is complete before whatever hands it to another thread. */
  void (*drain)(void);
} ferry__resize_kernels;

enum { FERRY_RESIZE_PLAN_ALIGN = 64 };

/* The vector horizontal kernels work on blocks of rows transposed, so that one
 * source column of the block is one word: 8 rows (8 bytes) for AVX2, 16 for
 * AVX-512. */
enum { FERRY_RESIZE_MAX_BLOCK = 16 };

/* A vector set's three steps for one block; ferry__resize_horizontal_blocks runs
 * them over the rows. Words are `rows` bytes: byte r of word j is row r's byte j. */
typedef struct ferry__resize_block_ops {
  int rows;
  /* row[0..rows) (the last rows of a short block repeat its last row), `bytes`
   * bytes each, into words[0..bytes) */
  void (*transpose_in)(const uint8_t *const *row, size_t bytes, void *words);
  /* every output pixel of the block: words -> out_words[0 .. 3*out_w) */
  void (*convolve)(const void *words, const ferry__resize_axis *h, int out_w, void *out_words);
  /* out_words[0..bytes) back into the first `rows` rows of out */
  void (*transpose_out)(const void *out_words, size_t bytes, uint8_t *out, size_t stride, int rows);
} ferry__resize_block_ops;

/* The horizontal kernel of a vector set, in blocks of ops->rows rows (the
 * `horizontal` signature otherwise). */
void ferry__resize_horizontal_blocks(const ferry__resize_block_ops *ops, const uint8_t *in, size_t in_stride, int rows,
                                     int in_w, const ferry__resize_axis *h, int out_w, uint8_t *out, size_t out_stride,
                                     void *scratch);

/* Their scratch: the transposed input block (one word per source byte column)
 * and the transposed output. */
static inline size_t ferry_resize_block_bytes(int in_w, int out_w) {
  return FERRY_RESIZE_MAX_BLOCK * (3 * (size_t)in_w + 3 * (size_t)out_w);
}

/* Bytes of slack the normalize kernels may read past a row. */
enum { FERRY_RESIZE_ROW_SLACK = 4 };

extern const ferry__resize_kernels ferry__resize_portable;
void ferry__resize_normalize_portable(const uint8_t *rgb, size_t n, const ferry__resize_norm *norm, float *dst,
                                      size_t plane_stride);
#if FERRY_HAVE_AVX2_KERNELS
extern const ferry__resize_kernels ferry__resize_avx2;
void ferry__resize_normalize_avx2(const uint8_t *rgb, size_t n, const ferry__resize_norm *norm, float *dst,
                                  size_t plane_stride);
void ferry__resize_drain_avx2(void);
#endif
#if FERRY_HAVE_AVX512_KERNELS
extern const ferry__resize_kernels ferry__resize_avx512;
void ferry__resize_vertical_avx512(const uint8_t *rows, size_t stride, const int32_t *k, int count,
                                  size_t n, uint8_t *out);
#endif
#if FERRY_HAVE_VBMI_KERNELS
extern const ferry__resize_kernels ferry__resize_vbmi;
#endif

/* The fastest set this CPU runs. */
const ferry__resize_kernels *ferry__resize_best_kernels(void);

/* A resize of the width x height RGB8 image at src (rows src_stride bytes apart: a
 * rectangle of a larger image, a crop) to out_w x out_h in `layout`, with kernel set k. */
ferry_status ferry__image_resize_rect(const ferry__resize_kernels *k, ferry_decoder *d, const uint8_t *src,
                                      size_t src_stride, int width, int height, int out_w, int out_h,
                                      ferry_image_layout layout, void *dst);
/* Part of a resize's output: the rectangle (x, y, w, h) of the full_w x full_h
 * resize, mirrored left to right when `mirror` (output column j is the rectangle's
 * w-1-j). Its bytes are the full resize's, cropped (and flipped), whatever part:
 * each output pixel's filter depends only on the sizes and its own index. */
typedef struct ferry__resize_view {
  int full_w, full_h;
  int x, y, w, h;
  int mirror;
} ferry__resize_view;
enum { FERRY_RESIZE_SHAPE_INTS = 9 }; /* width, height and the view: the decoder's taps_shape */

/* The view of a resize of the width x height RGB8 image at src (rows src_stride
 * apart) into dst, view->w x view->h in `layout`. */
ferry_status ferry__image_resize_view(const ferry__resize_kernels *k, ferry_decoder *d, const uint8_t *src,
                                      size_t src_stride, int width, int height, const ferry__resize_view *view,
                                      ferry_image_layout layout, void *dst);
/* ferry_image_resize with a given kernel set (tests compare the sets). */
ferry_status ferry__image_resize_with(const ferry__resize_kernels *k, ferry_decoder *d, const uint8_t *src, int width,
                                      int height, int size, ferry_image_layout layout, void *dst);

#endif
