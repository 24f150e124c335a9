/* repro/bench_util.c - see bench_util.h. */
#include "loaders/baseline.h"
#include "repro/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bench_thread_cpu(void) { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }

double bench_process_cpu(void) { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

bench_range bench_summarise(double *v, size_t n) {
  qsort(v, n, sizeof *v, by_value);
  bench_range r = {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[0], v[n - 1]};
  return r;
}

int bench_in_processes(int processes, bench_child_fn fn, void *arg, size_t nvalues, double *results) {
  int failed = 0;
  /* One at a time: the children measure speed, so they must not compete. */
  for (int p = 0; p < processes; p++) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      close(fds[0]);
      double *out = calloc(nvalues, sizeof *out);
      int rc = out ? fn(arg, out) : 1;
      if (rc == 0 && write(fds[1], out, nvalues * sizeof *out) != (ssize_t)(nvalues * sizeof *out)) rc = 1;
      _exit(rc);
    }
    close(fds[1]);
    size_t want = nvalues * sizeof(double), got = 0;
    char *dst = (char *)(results + (size_t)p * nvalues);
    for (ssize_t n; got < want && (n = read(fds[0], dst + got, want - got)) > 0;) got += (size_t)n;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != want || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed ? -1 : 0;
}

int bench_dataset(const char *argv0, const char *dir, int images, const char **annotations,
                  const char **images_dir) {
  if (*annotations && *images_dir) return 0;
  if (*annotations || *images_dir) {
    fprintf(stderr, "give both --annotations and --images, or neither\n");
    return -1;
  }
  static char ann[4096], img[4096];
  snprintf(ann, sizeof ann, "%s/annotations/instances_val2017.json", dir);
  snprintf(img, sizeof img, "%s/val2017", dir);
  *annotations = ann;
  *images_dir = img;
  struct stat st;
  if (stat(ann, &st) == 0) return 0;
  char exe[4096];
  snprintf(exe, sizeof exe, "%s", argv0);
  char *slash = strrchr(exe, '/');
  if (slash) slash[1] = '\0';
  else exe[0] = '\0';
  /* The build tree's layout: BUILD/repro/<program> beside BUILD/synth/synth_coco (and,
   * for a copy that put them side by side, the program's own folder). */
  char synth[4200];
  snprintf(synth, sizeof synth, "%s../synth/synth_coco", exe);
  if (access(synth, X_OK) != 0) snprintf(synth, sizeof synth, "%ssynth_coco", exe);
  char cmd[12288];
  snprintf(cmd, sizeof cmd, "'%s' --out '%s' --images %d --seed 0 >&2", synth, dir, images);
  fprintf(stderr, "generating a %d-image synthetic set in %s\n", images, dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "synth_coco failed (%s)\n", cmd);
    return -1;
  }
  return 0;
}

int bench_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void bench_common_default(bench_common *c) {
  *c = (bench_common){.workers = bench_cores(), .batch = 8, .resolution = 312, .layout = FERRY_LAYOUT_F32_CHW,
                      .shuffle = 1, .order = FERRY_ORDER_AUTO};
}

int bench_common_flag(bench_common *c, const char *flag, const char *value) {
  if (!strcmp(flag, "--annotations")) c->annotations = value;
  else if (!strcmp(flag, "--images")) c->images = value;
  else if (!strcmp(flag, "--workers")) c->workers = atoi(value);
  else if (!strcmp(flag, "--batch")) c->batch = atoi(value);
  else if (!strcmp(flag, "--resolution")) c->resolution = atoi(value);
  else if (!strcmp(flag, "--prefetch")) c->prefetch = atoi(value);
  else if (!strcmp(flag, "--remap-categories")) c->remap_categories = atoi(value) != 0;
  else if (!strcmp(flag, "--shuffle")) c->shuffle = atoi(value) != 0;
  else if (!strcmp(flag, "--shuffle-buffer")) c->shuffle_buffer = atoi(value) > 0 ? atoi(value) : 0;
  else if (!strcmp(flag, "--order")) {
    if (!strcmp(value, "auto")) c->order = FERRY_ORDER_AUTO;
    else if (!strcmp(value, "dataset")) c->order = FERRY_ORDER_DATASET;
    else if (!strcmp(value, "shards")) c->order = FERRY_ORDER_SHARDS;
    else return -1;
  }
  else if (!strcmp(flag, "--layout")) {
    if (!strcmp(value, "f32")) c->layout = FERRY_LAYOUT_F32_CHW;
    else if (!strcmp(value, "u8")) c->layout = FERRY_LAYOUT_U8_HWC;
    else return -1;
  } else return 0;
  return 1;
}

void bench_loader_config(ferry_loader_config *config, const bench_common *c, ferry_device *device) {
  ferry_loader_config_default(config);
  config->annotations = c->annotations;
  config->images = c->images;
  config->batch_size = (size_t)c->batch;
  config->workers = (size_t)c->workers;
  config->resolution = c->resolution;
  config->device = device;
  config->layout = c->layout;
  config->prefetch = c->prefetch > 0 ? (size_t)c->prefetch : 0;
  config->remap_categories = c->remap_categories;
  config->shuffle = c->shuffle;
  config->order = c->order;
  config->shuffle_buffer = (size_t)c->shuffle_buffer;
}

uint8_t *bench_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  *len = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = n > 0 ? malloc((size_t)n) : NULL;
  *len = data ? fread(data, 1, (size_t)n, f) : 0;
  fclose(f);
  return data;
}

ferry_status bench_loader_open(const ferry_loader_config *config, int packed, ferry_loader **out) {
  return packed ? ferry_loader_open(config, out) : ferry__loader_open_unpacked(config, out);
}
