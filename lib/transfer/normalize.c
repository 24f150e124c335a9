/* lib/transfer/normalize.c - image normalisation in stream order, CPU or CUDA.
 *
 * Owns: nothing between calls. A queued CPU job owns its own copy of the parameters
 * and frees itself after running; a CUDA staging buffer is freed in stream order.
 * Callers: the transfer stage (copy_image_rows), on the caller's thread; a CPU job runs
 * later on the host stream's thread. The source image must stay unchanged until the
 * job or kernel has run: the transfer holds the source batch by an event recorded
 * after all of them.
 * Invariant: for the same input and parameters, the host and the CUDA paths produce
 * the same bits: both apply ferry__normalize_value (normalize.h), the host through a
 * table of its 256 values per channel; tests/transfer
 * checks the host against torchvision's steps and, on a GPU, the kernel against the
 * host.
 * Not done here: validating mean and std (transfer.c's check_normalization refuses
 * a std with a zero or non-finite channel before anything runs), normalisation
 * across devices (the source is host memory or memory of the stream's device).
 */
#include <math.h>
#include <string.h>

#include "ferry_config.h"
#include "lib/alloc.h"
#include "lib/device_internal.h"
#include "lib/status.h"
#include "lib/transfer/normalize.h"
#include "ferry/transfer.h" /* FERRY_IMAGENET_MEAN and _STD: the statistics every layout uses */

#if FERRY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

void ferry__norm_params_init(ferry__norm_params *p, const float mean[3], const float std[3], int bf16) {
  static const float imagenet_mean[3] = FERRY_IMAGENET_MEAN, imagenet_std[3] = FERRY_IMAGENET_STD;
  int given = std && (std[0] != 0.0f || std[1] != 0.0f || std[2] != 0.0f);
  const float *m = given ? mean : imagenet_mean, *s = given ? std : imagenet_std;
  for (int c = 0; c < 3; c++) {
    p->mean[c] = m[c];
    p->std[c] = s[c];
  }
  p->bf16 = bf16;
}

/* The normalised value of every byte, per channel: 768 evaluations of
 * ferry__normalize_value (so the same bits), against a division per value of an image. */
typedef struct norm_table {
  float f32[3][256];
  uint16_t bf16[3][256];
} norm_table;

static void fill_table(norm_table *t, const ferry__norm_params *p) {
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) {
      t->f32[c][v] = ferry__normalize_value((uint8_t)v, p->mean[c], p->std[c]);
      t->bf16[c][v] = ferry__float_to_bf16(t->f32[c][v]);
    }
}

/* Channel c's value of byte v at x in a plane's row. */
static inline void put(char *row, size_t x, const norm_table *t, int c, uint8_t v, int bf16) {
  if (bf16) ((uint16_t *)row)[x] = t->bf16[c][v];
  else ((float *)row)[x] = t->f32[c][v];
}

/* One row of pixels into the three planes' rows (`planes` bytes apart): w values each,
 * then zeros up to out_w (bf16 zero is all zero bits). Inlined with bf16 a constant at
 * each call, so that the pixel loop has no branch. */
static inline void normalize_row(const uint8_t *src, const ferry__norm_shape *s, const norm_table *t, int bf16,
                                 char *dst, size_t planes) {
  size_t item = bf16 ? sizeof(uint16_t) : sizeof(float);
  for (size_t x = 0; x < s->w; x++, src += 3) {
    put(dst, x, t, 0, src[0], bf16);
    put(dst + planes, x, t, 1, src[1], bf16);
    put(dst + 2 * planes, x, t, 2, src[2], bf16);
  }
  for (int c = 0; c < 3; c++) memset(dst + (size_t)c * planes + s->w * item, 0, (s->out_w - s->w) * item);
}

/* Row by row of the source, each pixel's three channels at once: the image is read
 * once, and no value is computed twice. */
void ferry__normalize_cpu(const uint8_t *src, void *dst, const ferry__norm_shape *s, const ferry__norm_params *p) {
  size_t item = p->bf16 ? sizeof(uint16_t) : sizeof(float), row = s->out_w * item, planes = s->out_h * row;
  norm_table t;
  fill_table(&t, p);
  for (size_t y = 0; y < s->h; y++) {
    char *out = (char *)dst + y * row;
    if (p->bf16) normalize_row(src + y * s->w * 3, s, &t, 1, out, planes);
    else normalize_row(src + y * s->w * 3, s, &t, 0, out, planes);
  }
  for (int c = 0; c < 3; c++) memset((char *)dst + (size_t)c * planes + s->h * row, 0, (s->out_h - s->h) * row);
}

typedef struct cpu_job {
  const uint8_t *src;
  void *dst;
  ferry__norm_shape shape;
  ferry__norm_params params;
} cpu_job;

static void run_cpu_job(void *arg) {
  cpu_job *job = arg;
  ferry__normalize_cpu(job->src, job->dst, &job->shape, &job->params);
  ferry__free(job);
}

static ferry_status enqueue_cpu(ferry_stream *stream, const void *src, void *dst, const ferry__norm_shape *shape,
                                const ferry__norm_params *p) {
  /* The parameters are copied: the caller's live on its stack, the job runs later. */
  cpu_job *job = ferry__malloc(sizeof *job);
  if (!job) return ferry__fail(FERRY_ENOMEM, "normalise: out of memory queueing an image");
  *job = (cpu_job){.src = src, .dst = dst, .shape = *shape, .params = *p};
  ferry_status st = ferry_stream_call(stream, run_cpu_job, job);
  if (st != FERRY_OK) ferry__free(job);
  return st;
}

#if FERRY_HAVE_CUDA
static ferry_status launch(ferry_stream *stream, const void *src, void *dst, const ferry__norm_shape *shape,
                           const ferry__norm_params *p) {
  /* Reports only launch errors; a fault while the kernel runs surfaces at a later
   * synchronisation, as for any asynchronous CUDA work. */
  int err = ferry__cuda_normalize_launch(stream->impl, src, dst, shape, p);
  if (err != cudaSuccess)
    return ferry__fail(FERRY_EDEVICE, "%s: normalisation kernel launch failed: %s",
                      stream->device->name, cudaGetErrorString((cudaError_t)err));
  return FERRY_OK;
}

/* Host bytes go through a one-image staging buffer, freed in stream order right
 * after the kernel, so the pool reuses it for the next image: the transient is one
 * u8 image, never a whole field. The copy into it is queued from an arena and waited
 * for from an unpacked batch's pageable buffer (ferry__memcpy_or_wait). */
static ferry_status enqueue_cuda(ferry_stream *stream, const void *src, int src_on_host, void *dst,
                                 const ferry__norm_shape *shape, const ferry__norm_params *p) {
  if (!src_on_host) return launch(stream, src, dst, shape, p);
  ferry_device *device = stream->device;
  void *stage = NULL;
  size_t bytes = 3 * shape->h * shape->w;
  ferry_status st = ferry_device_malloc(device, stream, bytes, &stage);
  if (st == FERRY_OK) st = ferry__memcpy_or_wait(stream, stage, src, bytes, FERRY_COPY_H2D);
  if (st == FERRY_OK) st = launch(stream, stage, dst, shape, p);
  /* Freed after the launch in stream order, on failure too: whatever was queued
   * finishes with it first. */
  if (stage) ferry_device_free(device, stream, stage);
  return st;
}
#endif

ferry_status ferry__normalize_enqueue(ferry_stream *stream, const void *src, int src_on_host, void *dst,
                                      const ferry__norm_shape *shape, const ferry__norm_params *p) {
  if (shape->out_h < shape->h || shape->out_w < shape->w)
    return ferry__fail(FERRY_EINVAL, "normalise: a %zux%zu image does not fit %zux%zu", shape->h, shape->w,
                      shape->out_h, shape->out_w);
  if (shape->out_h * shape->out_w == 0) return FERRY_OK;
  if (stream->device->kind == FERRY_DEVICE_HOST) {
    if (!src_on_host)
      return ferry__fail(FERRY_EUNSUPPORTED, "normalise: the host device cannot read images held on another device");
    return enqueue_cpu(stream, src, dst, shape, p);
  }
#if FERRY_HAVE_CUDA
  return enqueue_cuda(stream, src, src_on_host, dst, shape, p);
#else
  return ferry__fail(FERRY_ENODEV, "normalise: built without CUDA");
#endif
}
