/* repro/decode_limit.c - the decode-only (and decode+resize+normalise) rate. */
#include "repro/decode_limit.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/status.h"

typedef struct shared_run {
  const decode_limit_config *cfg;
  atomic_int next;
  atomic_int failed;
  char message[FERRY_ERROR_MAX];
  pthread_mutex_t lock;
} shared_run;

static void record_failure(shared_run *run, ferry_status st) {
  pthread_mutex_lock(&run->lock);
  if (!atomic_load(&run->failed)) {
    snprintf(run->message, sizeof run->message, "%s", ferry_last_error());
    atomic_store(&run->failed, st);
  }
  pthread_mutex_unlock(&run->lock);
}

static ferry_status decode_one(ferry_decoder *d, const decode_limit_config *cfg, const char *path,
                               float *dst) {
  if (cfg->work == DECODE_ONLY) {
    const uint8_t *rgb;
    int w, h;
    return ferry_image_load_rgb(d, path, &cfg->options, &rgb, &w, &h);
  }
  return ferry_image_load_resized(d, path, &cfg->options, cfg->size, FERRY_LAYOUT_F32_CHW, dst,
                                  NULL, NULL);
}

static void *worker(void *arg) {
  shared_run *run = arg;
  const decode_limit_config *cfg = run->cfg;
  ferry_decoder *d = NULL;
  float *dst = NULL;
  ferry_status st = ferry_decoder_open(&d);
  if (st == FERRY_OK && cfg->work == DECODE_RESIZE_NORMALISE) {
    dst = malloc((size_t)3 * cfg->size * cfg->size * sizeof(float));
    if (!dst) st = ferry__fail(FERRY_ENOMEM, "decode_limit: output buffer");
  }
  while (st == FERRY_OK && !atomic_load(&run->failed)) {
    int i = atomic_fetch_add(&run->next, 1);
    if (i >= cfg->count) break;
    st = decode_one(d, cfg, cfg->paths[i], dst);
  }
  if (st < 0) record_failure(run, st);
  free(dst);
  ferry_decoder_close(d);
  return NULL;
}

static double clock_seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

ferry_status decode_limit_run(const decode_limit_config *cfg, double *seconds) {
  double cpu;
  return decode_limit_run_cpu(cfg, seconds, &cpu);
}

ferry_status decode_limit_run_cpu(const decode_limit_config *cfg, double *seconds,
                                  double *cpu_seconds) {
  enum { MAX_THREADS = 64 };
  if (cfg->threads < 1 || cfg->threads > MAX_THREADS || cfg->count < 1)
    return ferry__fail(FERRY_EINVAL, "decode_limit: threads must be 1..%d, count >= 1",
                      MAX_THREADS);
  shared_run run = {.cfg = cfg};
  atomic_init(&run.next, 0);
  atomic_init(&run.failed, 0);
  pthread_mutex_init(&run.lock, NULL);
  pthread_t tids[MAX_THREADS];
  int started = 0;
  double t0 = clock_seconds(CLOCK_MONOTONIC), c0 = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
  for (; started < cfg->threads; started++)
    if (pthread_create(&tids[started], NULL, worker, &run) != 0) break;
  for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
  *seconds = clock_seconds(CLOCK_MONOTONIC) - t0;
  *cpu_seconds = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
  pthread_mutex_destroy(&run.lock);
  if (started < cfg->threads) return ferry__fail(FERRY_ENOMEM, "decode_limit: pthread_create");
  int failed = atomic_load(&run.failed);
  return failed ? ferry__error_restore((ferry_status)failed, run.message) : FERRY_OK;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

ferry_status decode_limit_measure(const decode_limit_config *cfg, int runs,
                                  decode_limit_stats *out) {
  double rates[15], cpu_ms[15];
  if (runs < 1 || runs > 15) return ferry__fail(FERRY_EINVAL, "decode_limit: runs must be 1..15");
  for (int r = 0; r < runs; r++) {
    double wall, cpu;
    ferry_status st = decode_limit_run_cpu(cfg, &wall, &cpu);
    if (st < 0) return st;
    rates[r] = cfg->count / wall;
    cpu_ms[r] = 1e3 * cpu / cfg->count;
  }
  qsort(rates, (size_t)runs, sizeof *rates, compare_doubles);
  qsort(cpu_ms, (size_t)runs, sizeof *cpu_ms, compare_doubles);
  out->images_per_s = rates[runs / 2];
  out->cpu_ms_per_image = cpu_ms[runs / 2];
  return FERRY_OK;
}

ferry_status decode_limit_rate(const decode_limit_config *cfg, int runs, double *images_per_s) {
  decode_limit_stats stats;
  ferry_status st = decode_limit_measure(cfg, runs, &stats);
  if (st == FERRY_OK) *images_per_s = stats.images_per_s;
  return st;
}

static int compare_strings(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_jpeg_name(const char *name) {
  size_t n = strlen(name);
  return n > 4 && strcmp(name + n - 4, ".jpg") == 0;
}

ferry_status decode_limit_list_jpegs(const char *dir, int max, char ***paths, int *count) {
  DIR *dp = opendir(dir);
  if (!dp) return ferry__fail(FERRY_ENOTFOUND, "%s: cannot open the directory", dir);
  char **list = calloc((size_t)(max > 0 ? max : 1), sizeof *list);
  int n = 0;
  struct dirent *e = NULL;
  while (list && n < max && (e = readdir(dp)) != NULL) {
    if (!is_jpeg_name(e->d_name)) continue;
    size_t len = strlen(dir) + strlen(e->d_name) + 2;
    if (!(list[n] = malloc(len))) break;
    snprintf(list[n++], len, "%s/%s", dir, e->d_name);
  }
  closedir(dp);
  if (!list || (n < max && e != NULL)) {
    decode_limit_free_paths(list, n);
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory listing files", dir);
  }
  qsort(list, (size_t)n, sizeof *list, compare_strings);
  *paths = list;
  *count = n;
  return n ? FERRY_OK : ferry__fail(FERRY_ENOTFOUND, "%s: no .jpg files", dir);
}

void decode_limit_free_paths(char **paths, int count) {
  for (int i = 0; paths && i < count; i++) free(paths[i]);
  free(paths);
}
