/* repro/cuda_peak_memory - the device's extra peak of the previous transfer path
 * (whole packed batch on the device, then per-sample clones) against the direct path
 * (per-sample copies straight from the pinned arena), for mask batches of three sizes.
 *
 *   cuda_peak_memory [--json] [--reps N] [--backend host|cuda|all]
 *
 * For every repetition the device is synchronised and its peak reset; "extra" is the
 * peak minus the bytes the returned tensors keep, from ferry's byte-exact accounting
 * (max over repetitions). Times run from ferry_transfer to the transfer's event.
 * The host backend always runs; CUDA runs when a device answers. Exits 1 if the
 * direct path's extra peak is ever non-zero, 2 on an error.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry/advanced.h"
#include "ferry/ferry.h"
#include "ferry/transfer.h"
#include "lib/transfer/packed_copy.h"

typedef struct mask_size {
  const char *label;
  int64_t instances, side;
} mask_size;

/* 6x256^2 = 393,216; 12x512^2 = 3,145,728; 32x576^2 = 10,616,832 mask bytes. */
static const mask_size sizes[] = {{"6x256x256", 6, 256}, {"12x512x512", 12, 512}, {"32x576x576", 32, 576}};
enum { NSIZES = 3, BATCH = 4 };

typedef struct path_result {
  uint64_t extra_peak;
  double ms_median, ms_min, ms_max;
} path_result;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int fail(const char *what) {
  fprintf(stderr, "cuda_peak_memory: %s: %s\n", what, ferry_last_error());
  return 2;
}

/* Instances spread unevenly over the batch, one sample empty, as real batches are. */
static void split_instances(int64_t n, int64_t *rows) {
  rows[0] = n / 2;
  rows[1] = 0;
  rows[3] = n / 4;
  rows[2] = n - rows[0] - rows[3];
}

/* Each instance a filled disk of 1s, like a decoded mask. */
static int make_batch(ferry_pool *pool, const mask_size *size, ferry_batch **out) {
  ferry_field_spec spec = {FERRY_FIELD_MASKS, FERRY_U8, FERRY_FIELD_ROWS, 2, {size->side, size->side}};
  int64_t rows[BATCH];
  split_instances(size->instances, rows);
  if (ferry_batch_create(pool, BATCH, 1, &spec, rows, out) != FERRY_OK) return fail("creating a batch");
  ferry_tensor masks;
  ferry_batch_field(*out, 0, &masks);
  int64_t s = size->side;
  for (int64_t n = 0; n < size->instances; n++) {
    uint8_t *m = (uint8_t *)masks.data + n * s * s;
    int64_t cx = (n * 37) % s, cy = (n * 61) % s, r = s / 4 + n % (s / 4);
    for (int64_t y = 0; y < s; y++)
      for (int64_t x = 0; x < s; x++) m[y * s + x] = (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r;
  }
  return 0;
}

/* One repetition: extra peak and milliseconds. */
static int run_once(ferry_device *d, ferry_stream *s, ferry_batch *b, ferry__transfer_path mode,
                    uint64_t *extra, double *ms) {
  ferry_memory_stats st;
  ferry_memory_stats_init(&st);
  ferry_device_batch *db = NULL;
  if (ferry_device_synchronize(d) != FERRY_OK || ferry_device_reset_peak(d) != FERRY_OK)
    return fail("synchronising the device");
  double t0 = now_ms();
  if (ferry__transfer_by(mode, d, s, b, NULL, &db) != FERRY_OK) return fail("transfer");
  if (ferry_device_batch_wait(db) != FERRY_OK) return fail("waiting for the transfer");
  *ms = now_ms() - t0;
  ferry_device_memory_stats(d, &st);
  *extra = st.peak_bytes - st.live_bytes;
  ferry_device_batch_free(db);
  return 0;
}

static int measure(ferry_device *d, ferry_stream *s, ferry_batch *b, ferry__transfer_path mode,
                   int reps, path_result *out) {
  double *ms = calloc((size_t)reps, sizeof *ms);
  uint64_t extra = 0, worst = 0;
  double warm;
  int rc = ms ? run_once(d, s, b, mode, &extra, &warm) : 2; /* warm the pool up */
  for (int r = 0; r < reps && rc == 0; r++) {
    rc = run_once(d, s, b, mode, &extra, &ms[r]);
    if (extra > worst) worst = extra;
  }
  if (rc == 0) {
    qsort(ms, (size_t)reps, sizeof *ms, by_value);
    *out = (path_result){worst, ms[reps / 2], ms[0], ms[reps - 1]};
  }
  free(ms);
  return rc;
}

static void print_row(int json, const char *backend, const mask_size *size, uint64_t bytes,
                      const path_result *prev, const path_result *direct) {
  if (!json) {
    char prev_ms[64], direct_ms[64];
    snprintf(prev_ms, sizeof prev_ms, "%.3f [%.3f, %.3f]", prev->ms_median, prev->ms_min, prev->ms_max);
    snprintf(direct_ms, sizeof direct_ms, "%.3f [%.3f, %.3f]", direct->ms_median, direct->ms_min,
             direct->ms_max);
    printf("%-7s %-11s %12" PRIu64 " %20" PRIu64 " %17" PRIu64 "   %-28s %s\n", backend,
           size->label, bytes, prev->extra_peak, direct->extra_peak, prev_ms, direct_ms);
    return;
  }
  const path_result *r[2] = {prev, direct};
  const char *names[2] = {"previous", "direct"};
  for (int p = 0; p < 2; p++)
    printf("{\"backend\": \"%s\", \"size\": \"%s\", \"mask_bytes\": %" PRIu64
           ", \"path\": \"%s\", \"extra_peak_bytes\": %" PRIu64
           ", \"ms_median\": %.4f, \"ms_min\": %.4f, \"ms_max\": %.4f}\n",
           backend, size->label, bytes, names[p], r[p]->extra_peak, r[p]->ms_median,
           r[p]->ms_min, r[p]->ms_max);
}

/* All sizes on one backend; *direct_nonzero is set if the direct path ever costs extra. */
static int run_backend(const char *name, int json, int reps, int *direct_nonzero) {
  ferry_device *d = NULL;
  ferry_stream *s = NULL;
  ferry_pool *pool = NULL;
  ferry_status st = ferry_device_open(name, &d);
  if (st == FERRY_ENODEV) {
    fprintf(stderr, "%s: skipped (%s)\n", name, ferry_last_error());
    return 0;
  }
  if (st != FERRY_OK) return fail(name);
  int rc = 0;
  if (ferry_stream_open(d, &s) != FERRY_OK || ferry_pool_open(d, 1, 0, &pool) != FERRY_OK)
    rc = fail(name);
  const char *backend = ferry_device_get_kind(d) == FERRY_DEVICE_CUDA ? "cuda" : "host";
  for (int i = 0; i < NSIZES && rc == 0; i++) {
    ferry_batch *b = NULL;
    path_result prev, direct;
    rc = make_batch(pool, &sizes[i], &b);
    if (rc == 0) rc = measure(d, s, b, FERRY__PACKED_THEN_CLONE, reps, &prev);
    if (rc == 0) rc = measure(d, s, b, FERRY__DIRECT, reps, &direct);
    if (rc == 0) {
      uint64_t bytes = (uint64_t)(sizes[i].instances * sizes[i].side * sizes[i].side);
      print_row(json, backend, &sizes[i], bytes, &prev, &direct);
      if (direct.extra_peak != 0) *direct_nonzero = 1;
    }
    ferry_batch_release(b);
  }
  ferry_pool_close(pool);
  ferry_stream_close(s);
  ferry_device_close(d);
  return rc;
}

int main(int argc, char **argv) {
  int json = 0, reps = 20;
  const char *backend = "all";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--json] [--reps N] [--backend host|cuda|all]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 100000 ||
      (strcmp(backend, "all") && strcmp(backend, "host") && strcmp(backend, "cuda"))) {
    fprintf(stderr, "cuda_peak_memory: --reps must be >= 1, --backend host, cuda or all\n");
    return 2;
  }
  if (!json)
    printf("extra device peak (peak - bytes kept by the returned tensors), max over %d reps; "
           "time: median [min, max] ms\n%-7s %-11s %12s %20s %17s   %-26s %s\n",
           reps, "backend", "size", "mask bytes", "previous extra peak", "fixed extra peak",
           "previous ms", "fixed ms");
  int direct_nonzero = 0, rc = 0;
  if (strcmp(backend, "cuda") != 0) rc = run_backend("host", json, reps, &direct_nonzero);
  if (rc == 0 && strcmp(backend, "host") != 0) rc = run_backend("cuda", json, reps, &direct_nonzero);
  if (rc != 0) return rc;
  if (direct_nonzero) {
    fprintf(stderr, "cuda_peak_memory: FAIL: the direct path's extra peak is not 0\n");
    return 1;
  }
  return 0;
}
