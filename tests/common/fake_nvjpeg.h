/* tests/common/fake_nvjpeg.h - an nvJPEG table that decodes with ferry's CPU decoder.
 *
 * For the GPU decoder's host-side tests (the loader's worker side, the transfer
 * stage) on the host backend: its parser reads real JPEG headers (ferry_image_probe)
 * and sends to the CPU every image whose bytes hash to 0 modulo
 * fake_nvjpeg.fallback_every (as if it were CMYK); its batched decode writes the CPU
 * decoder's RGB pixels at the pitch it is given, into host memory (on the host
 * backend, "device" memory is host memory). So a pipeline through this table must
 * give the CPU path's bytes exactly, and any difference is the pipeline's. Counters
 * record the calls, for the order of calls. Needs nvjpeg.h (FERRY_HAVE_NVJPEG).
 */
#ifndef FERRY_TESTS_FAKE_NVJPEG_H
#define FERRY_TESTS_FAKE_NVJPEG_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "image/gpu/nvjpeg_table.h"

static struct {
  unsigned fallback_every; /* 0: every JPEG goes to nvJPEG */
  atomic_int parses, inits, decodes, decoded_images, last_batch; /* workers update them */
  int fail_decode;         /* DecodeBatched fails, with decode_failure (0: EXECUTION_FAILED) */
  nvjpegStatus_t decode_failure;
} fake_nvjpeg;

/* A fresh fake: the TSan harness runs every test in one process. Call it before any
 * loader that uses the fake is open. */
static inline void fake_nvjpeg_reset(unsigned fallback_every) {
  memset(&fake_nvjpeg, 0, sizeof fake_nvjpeg);
  fake_nvjpeg.fallback_every = fallback_every;
}

typedef struct fake_nv_stream {
  const uint8_t *data;
  size_t len;
} fake_nv_stream;

static int fake_nv_token;

static inline uint64_t fake_nv_hash(const uint8_t *d, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 0x100000001b3ull;
  return h;
}

/* Whether the fake sends these bytes to the CPU (the tests predict fallbacks with it). */
static inline int fake_nv_is_fallback(const uint8_t *d, size_t n) {
  return fake_nvjpeg.fallback_every && fake_nv_hash(d, n) % fake_nvjpeg.fallback_every == 0;
}

static nvjpegStatus_t fake_nv_create(nvjpegBackend_t b, nvjpegDevAllocator_t *d, nvjpegPinnedAllocator_t *p,
                                     unsigned flags, nvjpegHandle_t *h) {
  *h = (nvjpegHandle_t)&fake_nv_token;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_destroy(nvjpegHandle_t h) { return NVJPEG_STATUS_SUCCESS; }
static nvjpegStatus_t fake_nv_stream_create(nvjpegHandle_t h, nvjpegJpegStream_t *s) {
  *s = (nvjpegJpegStream_t)calloc(1, sizeof(fake_nv_stream));
  return *s ? NVJPEG_STATUS_SUCCESS : NVJPEG_STATUS_ALLOCATOR_FAILURE;
}
static nvjpegStatus_t fake_nv_stream_destroy(nvjpegJpegStream_t s) {
  free(s);
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_parse(nvjpegHandle_t h, const unsigned char *d, size_t n, int meta, int keep,
                                    nvjpegJpegStream_t s) {
  atomic_fetch_add_explicit(&fake_nvjpeg.parses, 1, memory_order_relaxed);
  int w, hh;
  if (ferry_image_probe(d, n, "fake", &w, &hh) != FERRY_OK) return NVJPEG_STATUS_BAD_JPEG;
  ((fake_nv_stream *)s)->data = d;
  ((fake_nv_stream *)s)->len = n;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_encoding(nvjpegJpegStream_t s, nvjpegJpegEncoding_t *e) {
  *e = NVJPEG_ENCODING_BASELINE_DCT;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_components(nvjpegJpegStream_t s, unsigned *n) {
  const fake_nv_stream *fs = (const fake_nv_stream *)s;
  *n = fake_nv_is_fallback(fs->data, fs->len) ? 4 : 3;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_precision(nvjpegJpegStream_t s, unsigned *p) {
  *p = 8;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_css(nvjpegJpegStream_t s, nvjpegChromaSubsampling_t *c) {
  *c = NVJPEG_CSS_420;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_orientation(nvjpegJpegStream_t s, nvjpegExifOrientation_t *o) {
  *o = NVJPEG_ORIENTATION_NORMAL;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_supported(nvjpegHandle_t h, nvjpegJpegStream_t s, int *flag) {
  *flag = 0;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_state_create(nvjpegHandle_t h, nvjpegJpegState_t *st) {
  *st = (nvjpegJpegState_t)&fake_nv_token;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_state_destroy(nvjpegJpegState_t st) { return NVJPEG_STATUS_SUCCESS; }
static nvjpegStatus_t fake_nv_info(nvjpegHandle_t h, const unsigned char *d, size_t n, int *components,
                                   nvjpegChromaSubsampling_t *css, int *w, int *hh) {
  if (ferry_image_probe(d, n, "fake", &w[0], &hh[0]) != FERRY_OK) return NVJPEG_STATUS_BAD_JPEG;
  *components = 3;
  *css = NVJPEG_CSS_420;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t fake_nv_init(nvjpegHandle_t h, nvjpegJpegState_t st, int batch, int threads,
                                   nvjpegOutputFormat_t format) {
  atomic_fetch_add_explicit(&fake_nvjpeg.inits, 1, memory_order_relaxed);
  atomic_store_explicit(&fake_nvjpeg.last_batch, batch, memory_order_relaxed);
  return format == NVJPEG_OUTPUT_RGBI ? NVJPEG_STATUS_SUCCESS : NVJPEG_STATUS_INVALID_PARAMETER;
}
/* The CPU decoder's pixels, row by row at the destination's pitch. */
static nvjpegStatus_t fake_nv_decode(nvjpegHandle_t h, nvjpegJpegState_t st, const unsigned char *const *data,
                                     const size_t *len, nvjpegImage_t *out, cudaStream_t s) {
  atomic_fetch_add_explicit(&fake_nvjpeg.decodes, 1, memory_order_relaxed);
  if (fake_nvjpeg.fail_decode)
    return fake_nvjpeg.decode_failure ? fake_nvjpeg.decode_failure : NVJPEG_STATUS_EXECUTION_FAILED;
  ferry_decoder *d;
  if (ferry_decoder_open(&d) != FERRY_OK) return NVJPEG_STATUS_ALLOCATOR_FAILURE;
  nvjpegStatus_t result = NVJPEG_STATUS_SUCCESS;
  int n = atomic_load_explicit(&fake_nvjpeg.last_batch, memory_order_relaxed);
  for (int i = 0; i < n && result == NVJPEG_STATUS_SUCCESS; i++) {
    const uint8_t *rgb;
    int w, hh;
    if (ferry_decode_rgb(d, data[i], len[i], "fake", NULL, &rgb, &w, &hh) != FERRY_OK) {
      result = NVJPEG_STATUS_BAD_JPEG;
      break;
    }
    for (int y = 0; y < hh; y++)
      memcpy(out[i].channel[0] + (size_t)y * out[i].pitch[0], rgb + (size_t)y * w * 3, (size_t)w * 3);
    atomic_fetch_add_explicit(&fake_nvjpeg.decoded_images, 1, memory_order_relaxed);
  }
  ferry_decoder_close(d);
  return result;
}

/* The version of the header the test is built with, as the real library would say. */
static nvjpegStatus_t fake_nv_property(libraryPropertyType type, int *value) {
  *value = type == MAJOR_VERSION ? NVJPEG_VER_MAJOR : type == MINOR_VERSION ? NVJPEG_VER_MINOR : NVJPEG_VER_PATCH;
  return NVJPEG_STATUS_SUCCESS;
}

static const ferry__nvjpeg_api fake_nvjpeg_api = {
    .CreateEx = fake_nv_create,
    .Destroy = fake_nv_destroy,
    .JpegStateCreate = fake_nv_state_create,
    .JpegStateDestroy = fake_nv_state_destroy,
    .GetImageInfo = fake_nv_info,
    .JpegStreamCreate = fake_nv_stream_create,
    .JpegStreamDestroy = fake_nv_stream_destroy,
    .JpegStreamParse = fake_nv_parse,
    .JpegStreamGetJpegEncoding = fake_nv_encoding,
    .JpegStreamGetComponentsNum = fake_nv_components,
    .JpegStreamGetSamplePrecision = fake_nv_precision,
    .JpegStreamGetChromaSubsampling = fake_nv_css,
    .JpegStreamGetExifOrientation = fake_nv_orientation,
    .DecodeBatchedSupported = fake_nv_supported,
    .DecodeBatchedInitialize = fake_nv_init,
    .DecodeBatched = fake_nv_decode,
    .GetProperty = fake_nv_property,
};

#endif
