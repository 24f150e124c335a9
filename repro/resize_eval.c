/* repro/resize_eval.c - resamplers and DCT scaling against Pillow's BILINEAR.
 *
 *   resize_eval [--repeat K] SIZE[,SIZE...] IMAGE...
 *
 * For every image (decoded once by ferry) and size, times K square resizes with:
 *   ferry   ferry_image_resize (u8 output equals Pillow's; test_image_pillow.py checks)
 *   stb     stb_image_resize.h v1 (Debian libstb-dev), triangle filter, clamped edges
 *   swscale libswscale SWS_BILINEAR (only when built with it)
 * and reports ms per resize plus the max / mean |difference| from ferry (= Pillow)
 * and the share of values off by more than 1. For JPEG inputs it also times
 * ferry_image_decode_resized with DCT scaling on and off and reports the same
 * differences for "on" (the "off" result is Pillow's).
 * This is an evaluation tool for docs/images.md, not part of the library.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "repro/repro_config.h"
#include "ferry/image.h"
#include "repro/bench_util.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
/* stb v1 asserts inside its coefficient normalisation for some size pairs (e.g.
 * 1280x724 -> 224); count those instead of aborting, so the evaluation can say so. */
static long stb_assertions;
#define STBIR_ASSERT(x) ((void)((x) || (stb_assertions++, 0)))
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_STATIC
#include <stb/stb_image_resize.h>
#pragma GCC diagnostic pop

#if FERRY_HAVE_SWSCALE
#include <libswscale/swscale.h>
#endif

enum { METHOD_FERRY, METHOD_STB, METHOD_SWSCALE, METHOD_DCT_OFF, METHOD_DCT_ON, N_METHODS };
static const char *const method_names[N_METHODS] = {
    "ferry (Pillow BILINEAR)", "stb_image_resize v1 triangle", "libswscale SWS_BILINEAR",
    "JPEG decode+resize, DCT scaling off", "JPEG decode+resize, DCT scaling on"};

typedef struct tally {
  double seconds;
  long calls;
  int max_diff;
  double sum_diff;
  long values, off_by_more_than_1;
  int used;
} tally;

/* CPU time, not wall time: this single-threaded evaluation should not depend on
 * what else the machine is running. */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void compare(tally *t, const uint8_t *got, const uint8_t *ref, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)got[i] - (int)ref[i]);
    if (d > t->max_diff) t->max_diff = d;
    t->sum_diff += d;
    t->off_by_more_than_1 += d > 1;
  }
  t->values += (long)n;
  t->used = 1;
}

static int resize_with(int method, ferry_decoder *d, const uint8_t *rgb, int w, int h, int size,
                       uint8_t *out) {
  switch (method) {
    case METHOD_FERRY:
      return ferry_image_resize(d, rgb, w, h, size, FERRY_LAYOUT_U8_HWC, out) == FERRY_OK;
    case METHOD_STB:
      return stbir_resize_uint8_generic(rgb, w, h, 0, out, size, size, 0, 3, STBIR_ALPHA_CHANNEL_NONE,
                                        0, STBIR_EDGE_CLAMP, STBIR_FILTER_TRIANGLE,
                                        STBIR_COLORSPACE_LINEAR, NULL);
#if FERRY_HAVE_SWSCALE
    case METHOD_SWSCALE: {
      /* a fresh context per image: a data set's images come in many sizes */
      struct SwsContext *ctx = sws_getContext(w, h, AV_PIX_FMT_RGB24, size, size, AV_PIX_FMT_RGB24,
                                              SWS_BILINEAR | SWS_ACCURATE_RND, NULL, NULL, NULL);
      if (!ctx) return 0;
      const uint8_t *src[1] = {rgb};
      int src_stride[1] = {3 * w}, dst_stride[1] = {3 * size};
      uint8_t *dst[1] = {out};
      sws_scale(ctx, src, src_stride, 0, h, dst, dst_stride);
      sws_freeContext(ctx);
      return 1;
    }
#endif
    default: return 0;
  }
}

static void eval_resizers(ferry_decoder *d, const uint8_t *rgb, int w, int h, int size, int repeat,
                          tally *tallies, uint8_t *ref, uint8_t *out) {
  for (int m = METHOD_FERRY; m <= METHOD_SWSCALE; m++) {
    uint8_t *dst = m == METHOD_FERRY ? ref : out;
    double t0 = now();
    int ok = 1;
    for (int r = 0; r < repeat && ok; r++) ok = resize_with(m, d, rgb, w, h, size, dst);
    if (!ok) continue;
    tallies[m].seconds += now() - t0;
    tallies[m].calls += repeat;
    compare(&tallies[m], dst, ref, (size_t)size * size * 3);
  }
}

static void eval_dct(ferry_decoder *d, const uint8_t *bytes, size_t len, const char *path,
                     int size, int repeat, tally *tallies, uint8_t *ref, uint8_t *out) {
  ferry_image_options o;
  ferry_image_options_default(&o);
  for (int on = 0; on < 2; on++) {
    o.dct_scaling = on;
    uint8_t *dst = on ? out : ref;
    double t0 = now();
    for (int r = 0; r < repeat; r++)
      if (ferry_image_decode_resized(d, bytes, len, path, &o, size, FERRY_LAYOUT_U8_HWC, dst, NULL,
                                     NULL) != FERRY_OK)
        return;
    tally *t = &tallies[on ? METHOD_DCT_ON : METHOD_DCT_OFF];
    t->seconds += now() - t0;
    t->calls += repeat;
    compare(t, dst, ref, (size_t)size * size * 3);
  }
}

static void print_tallies(int size, const tally *t) {
  for (int m = 0; m < N_METHODS; m++) {
    if (!t[m].used) continue;
    printf("| %d | %s | %.3f | %d | %.4f | %.4f%% |\n", size, method_names[m],
           1e3 * t[m].seconds / t[m].calls, t[m].max_diff, t[m].sum_diff / t[m].values,
           100.0 * t[m].off_by_more_than_1 / t[m].values);
  }
}

int main(int argc, char **argv) {
  int repeat = 5, first = 1;
  if (argc > 2 && strcmp(argv[1], "--repeat") == 0) repeat = atoi(argv[2]), first = 3;
  if (argc < first + 2 || repeat < 1) {
    fprintf(stderr, "usage: resize_eval [--repeat K] SIZE[,SIZE...] IMAGE...\n");
    return 2;
  }
  ferry_decoder *d;
  if (ferry_decoder_open(&d) != FERRY_OK) return 1;
  printf("| size | method | ms per call | max abs diff | mean abs diff | share > 1 |\n");
  printf("|---|---|---|---|---|---|\n");
  char sizes[256];
  snprintf(sizes, sizeof sizes, "%s", argv[first]);
  for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
    int size = atoi(tok);
    tally t[N_METHODS] = {0};
    uint8_t *ref = malloc((size_t)size * size * 3), *out = malloc((size_t)size * size * 3);
    for (int i = first + 1; i < argc && ref && out; i++) {
      size_t len;
      uint8_t *bytes = bench_read_file(argv[i], &len);
      const uint8_t *rgb;
      int w, h;
      if (!bytes || ferry_decode_rgb(d, bytes, len, argv[i], NULL, &rgb, &w, &h) != FERRY_OK) {
        fprintf(stderr, "skipping %s: %s\n", argv[i], ferry_last_error());
        free(bytes);
        continue;
      }
      /* the decoder's scratch is reused by the resize: keep a private copy */
      uint8_t *copy = malloc((size_t)w * h * 3);
      if (copy) {
        memcpy(copy, rgb, (size_t)w * h * 3);
        eval_resizers(d, copy, w, h, size, repeat, t, ref, out);
        if (len > 2 && bytes[0] == 0xFF && bytes[1] == 0xD8)
          eval_dct(d, bytes, len, argv[i], size, repeat, t, ref, out);
      }
      free(copy);
      free(bytes);
    }
    print_tallies(size, t);
    if (stb_assertions) printf("| %d | stb internal assertions failed | %ld | | | |\n", size, stb_assertions);
    stb_assertions = 0;
    free(ref);
    free(out);
  }
  ferry_decoder_close(d);
  return 0;
}
