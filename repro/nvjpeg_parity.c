/* nvjpeg_parity: nvJPEG's pixels against TurboJPEG's, and nvJPEG's decode-only rate.
 *
 *   nvjpeg_parity [--device cuda:0] [--json] [--rate N] [--batch 32] DIR...
 *
 * For every *.jpg of each DIR: route it (image/gpu/nvjpeg_api.c's rules; images nvJPEG
 * does not take are counted by reason), decode it with nvJPEG to RGB8 on the device
 * and with ferry's CPU decoder, and compare: per channel, the largest and the mean
 * absolute difference. The decoders differ by their IDCT and chroma upsampling only;
 * this is how the bound docs/images.md states is measured (issue 15). With --rate N,
 * also nvJPEG's batched decode-only images/s over N images of the last DIR in batches of
 * --batch from one thread, files in memory (the device side of the comparison with
 * repro/decode_bench's CPU decode-only limit).
 *
 * Needs a CUDA device and libnvjpeg.so.13/.12 on the library path: without them it
 * says which is missing and exits 2 (not measured). Run by repro/gpu_check.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "lib/device_internal.h"
#include "image/gpu/nvjpeg_table.h"
#include "lib/status.h"
#include "repro/bench_util.h"
#include "repro/decode_limit.h"

typedef struct options {
  const char *device;
  int json, rate, batch;
  int ndirs;
  char **dirs;
} options;

typedef struct diff {
  int max[3];
  double sum[3];
  size_t pixels;
} diff;

typedef struct context {
  ferry_device *dev;
  ferry_stream *stream;
  ferry__nvjpeg_decoder nv;
  ferry_decoder *cpu;
  int routes[FERRY_NVJPEG_ROUTES];
  diff all;
  int compared;
} context;

static int usage(void) {
  fprintf(stderr, "usage: nvjpeg_parity [--device cuda:0] [--json] [--rate N] [--batch N] DIR...\n");
  return 2;
}

static void add_diff(diff *d, const uint8_t *a, const uint8_t *b, size_t pixels) {
  for (size_t i = 0; i < pixels; i++)
    for (int c = 0; c < 3; c++) {
      int v = abs((int)a[3 * i + c] - (int)b[3 * i + c]);
      if (v > d->max[c]) d->max[c] = v;
      d->sum[c] += v;
    }
  d->pixels += pixels;
}

/* nvJPEG's RGB of one image, copied back to the host (malloc'ed). */
static ferry_status gpu_rgb(context *cx, const uint8_t *data, size_t len, const char *name, uint8_t **out,
                            int *w, int *h) {
  ferry_status st = ferry__nvjpeg_image_size(&cx->nv.parser, data, len, name, NULL, w, h);
  if (st != FERRY_OK) return st;
  size_t bytes = (size_t)*w * *h * 3;
  void *dev = NULL;
  st = ferry_device_malloc(cx->dev, cx->stream, bytes, &dev);
  uint8_t *dst = dev;
  if (st == FERRY_OK) st = ferry__nvjpeg_decode_rgbi(&cx->nv, &data, &len, w, &dst, 1, cx->stream);
  *out = st == FERRY_OK ? malloc(bytes) : NULL;
  if (st == FERRY_OK && !*out) st = ferry__fail(FERRY_ENOMEM, "%s: out of memory", name);
  if (st == FERRY_OK) st = ferry_memcpy(cx->stream, *out, dev, bytes, FERRY_COPY_D2H);
  if (dev) ferry_device_free(cx->dev, cx->stream, dev);
  return st;
}

static int compare_one(context *cx, const options *o, const char *path) {
  size_t len = 0;
  uint8_t *data = bench_read_file(path, &len);
  if (!data) return fprintf(stderr, "nvjpeg_parity: cannot read %s\n", path), -1;
  ferry__nvjpeg_route_kind r = ferry__nvjpeg_route(&cx->nv.parser, data, len, 0);
  cx->routes[r]++;
  int rc = 0;
  if (r == FERRY_NVJPEG_ROUTE_GPU) {
    uint8_t *gpu = NULL;
    const uint8_t *cpu;
    int gw, gh, cw, ch;
    if (gpu_rgb(cx, data, len, path, &gpu, &gw, &gh) != FERRY_OK ||
        ferry_decode_rgb(cx->cpu, data, len, path, NULL, &cpu, &cw, &ch) != FERRY_OK) {
      fprintf(stderr, "nvjpeg_parity: %s\n", ferry_last_error());
      rc = -1;
    } else if (gw != cw || gh != ch) {
      fprintf(stderr, "nvjpeg_parity: %s: nvJPEG %dx%d, CPU %dx%d\n", path, gw, gh, cw, ch);
      rc = -1;
    } else {
      diff d = {{0}, {0}, 0};
      add_diff(&d, gpu, cpu, (size_t)gw * gh);
      add_diff(&cx->all, gpu, cpu, (size_t)gw * gh);
      cx->compared++;
      if (o->json)
        printf("{\"image\": \"%s\", \"max_abs\": [%d, %d, %d], \"mean_abs\": [%.4f, %.4f, %.4f]}\n", path,
               d.max[0], d.max[1], d.max[2], d.sum[0] / d.pixels, d.sum[1] / d.pixels, d.sum[2] / d.pixels);
      else
        printf("%-60s max |d| %3d %3d %3d  mean |d| %.3f %.3f %.3f\n", path, d.max[0], d.max[1], d.max[2],
               d.sum[0] / d.pixels, d.sum[1] / d.pixels, d.sum[2] / d.pixels);
    }
    free(gpu);
  } else if (!o->json) {
    printf("%-60s CPU path: %s\n", path, ferry__nvjpeg_route_name(r));
  }
  free(data);
  return rc;
}

/* The JPEGs nvJPEG takes, read into memory with their sizes, for the rate. */
typedef struct corpus {
  uint8_t **data;
  size_t *len;
  int *w, *h;
  int n;
} corpus;

static void corpus_free(corpus *c) {
  for (int i = 0; i < c->n; i++) free(c->data[i]);
  free(c->data), free(c->len), free(c->w), free(c->h);
}

static int corpus_load(context *cx, char **paths, int count, corpus *c) {
  *c = (corpus){calloc((size_t)count, sizeof *c->data), calloc((size_t)count, sizeof *c->len),
                calloc((size_t)count, sizeof *c->w), calloc((size_t)count, sizeof *c->h), 0};
  if (!c->data || !c->len || !c->w || !c->h) return -1;
  for (int i = 0; i < count; i++) {
    int k = c->n;
    c->data[k] = bench_read_file(paths[i], &c->len[k]);
    if (!c->data[k]) continue;
    if (ferry__nvjpeg_route(&cx->nv.parser, c->data[k], c->len[k], 0) == FERRY_NVJPEG_ROUTE_GPU &&
        ferry__nvjpeg_image_size(&cx->nv.parser, c->data[k], c->len[k], paths[i], NULL, &c->w[k], &c->h[k]) == FERRY_OK)
      c->n++;
    else
      free(c->data[k]);
  }
  return c->n > 0 ? 0 : -1;
}

/* Batched decode-only images/s over o->rate images of the corpus (cycling through it),
 * from one thread: the files are in memory; the device buffers come from the stream's
 * pool and are freed in stream order, as a decode stage would use them. */
static int measure_rate(context *cx, const options *o, char **paths, int count) {
  corpus c;
  int b = o->batch, rc = corpus_load(cx, paths, count, &c), done = 0;
  const uint8_t **data = calloc((size_t)b, sizeof *data);
  size_t *len = calloc((size_t)b, sizeof *len);
  int *w = calloc((size_t)b, sizeof *w);
  uint8_t **dst = calloc((size_t)b, sizeof *dst);
  if (rc || !data || !len || !w || !dst) rc = -1;
  double t0 = bench_now();
  for (int round = -1; rc == 0 && round * b < o->rate; round++) { /* round -1 warms up */
    if (round == 0) {
      ferry_stream_synchronize(cx->stream);
      t0 = bench_now();
    }
    for (int i = 0; i < b && rc == 0; i++) {
      int k = (int)(((size_t)(round + 1) * b + i) % (size_t)c.n);
      data[i] = c.data[k], len[i] = c.len[k], w[i] = c.w[k];
      if (ferry_device_malloc(cx->dev, cx->stream, (size_t)c.w[k] * c.h[k] * 3, (void **)&dst[i]) != FERRY_OK)
        rc = -1;
    }
    if (rc == 0 && ferry__nvjpeg_decode_rgbi(&cx->nv, data, len, w, dst, b, cx->stream) != FERRY_OK) rc = -1;
    for (int i = 0; i < b; i++)
      if (dst[i]) ferry_device_free(cx->dev, cx->stream, dst[i]), dst[i] = NULL;
    if (round >= 0) done += b;
  }
  if (rc == 0 && ferry_stream_synchronize(cx->stream) != FERRY_OK) rc = -1;
  double s = bench_now() - t0;
  if (rc != 0) fprintf(stderr, "nvjpeg_parity: rate: %s\n", ferry_last_error());
  else if (o->json)
    printf("{\"nvjpeg_images_per_s\": %.1f, \"images\": %d, \"batch\": %d, \"hardware\": %d}\n", done / s, done,
           b, cx->nv.parser.hardware);
  else
    printf("nvJPEG batched decode-only: %.1f images/s (%d images in batches of %d, %s backend, one thread, "
           "files in memory)\n", done / s, done, b, cx->nv.parser.hardware ? "hardware" : "default");
  free(data), free(len), free(w), free(dst);
  corpus_free(&c);
  return rc;
}

static int parse(int argc, char **argv, options *o) {
  *o = (options){.device = "cuda:0", .batch = 32};
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) { o->json = 1; continue; }
    if (i + 1 >= argc) return -1;
    const char *v = argv[++i];
    if (!strcmp(a, "--device")) o->device = v;
    else if (!strcmp(a, "--rate")) o->rate = atoi(v);
    else if (!strcmp(a, "--batch")) o->batch = atoi(v);
    else return -1;
  }
  o->dirs = argv + i;
  o->ndirs = argc - i;
  return o->ndirs > 0 && o->batch > 0 && o->rate >= 0 ? 0 : -1;
}

static int open_context(context *cx, const options *o) {
  memset(cx, 0, sizeof *cx);
  const ferry__nvjpeg_api *api;
  if (ferry_device_open(o->device, &cx->dev) != FERRY_OK || ferry_stream_open(cx->dev, &cx->stream) != FERRY_OK ||
      ferry__nvjpeg_load(&api) != FERRY_OK || ferry__nvjpeg_decoder_open(api, &cx->nv) != FERRY_OK) {
    fprintf(stderr, "nvjpeg_parity: not measured: %s\n", ferry_last_error());
    return 2;
  }
  if (ferry_decoder_open(&cx->cpu) != FERRY_OK) return fprintf(stderr, "nvjpeg_parity: %s\n", ferry_last_error()), 1;
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o) != 0) return usage();
  context cx;
  int rc = open_context(&cx, &o);
  if (rc) return rc;
  char **paths = NULL;
  int count = 0;
  for (int d = 0; d < o.ndirs && rc == 0; d++) {
    decode_limit_free_paths(paths, count);
    if (decode_limit_list_jpegs(o.dirs[d], 1 << 20, &paths, &count) != FERRY_OK)
      return fprintf(stderr, "nvjpeg_parity: %s\n", ferry_last_error()), 1;
    for (int i = 0; i < count; i++)
      if (compare_one(&cx, &o, paths[i]) != 0) rc = 1;
  }
  const diff *a = &cx.all;
  double n = a->pixels ? (double)a->pixels : 1;
  if (o.json) {
    printf("{\"compared\": %d, \"max_abs\": [%d, %d, %d], \"mean_abs\": [%.4f, %.4f, %.4f], \"cpu_routes\": {",
           cx.compared, a->max[0], a->max[1], a->max[2], a->sum[0] / n, a->sum[1] / n, a->sum[2] / n);
    for (int r = 1; r < FERRY_NVJPEG_ROUTES; r++)
      printf("%s\"%s\": %d", r > 1 ? ", " : "", ferry__nvjpeg_route_name((ferry__nvjpeg_route_kind)r), cx.routes[r]);
    printf("}, \"hardware\": %d}\n", cx.nv.parser.hardware);
  } else {
    printf("%d images compared on the %s backend: max |d| R %d G %d B %d, mean |d| %.4f %.4f %.4f; CPU path:",
           cx.compared, cx.nv.parser.hardware ? "hardware" : "default", a->max[0], a->max[1], a->max[2],
           a->sum[0] / n, a->sum[1] / n, a->sum[2] / n);
    for (int r = 1; r < FERRY_NVJPEG_ROUTES; r++)
      printf(" %s %d", ferry__nvjpeg_route_name((ferry__nvjpeg_route_kind)r), cx.routes[r]);
    printf("\n");
  }
  if (rc == 0 && o.rate > 0 && count > 0) rc = measure_rate(&cx, &o, paths, count) ? 1 : 0;
  decode_limit_free_paths(paths, count);
  ferry_decoder_close(cx.cpu);
  ferry__nvjpeg_decoder_close(&cx.nv);
  ferry_stream_close(cx.stream);
  ferry_device_close(cx.dev);
  return rc;
}
