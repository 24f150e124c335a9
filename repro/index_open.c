/* repro/index_open.c - what opening annotations costs a process, and N processes at once.
 *
 *   index_open FILE [--loader] [--processes N]
 *
 * FILE is a COCO JSON or its binary index (docs/benchmarks.md, "Annotations at
 * train2017 scale"). Each of N processes (default 1) opens it with ferry_coco_open, or
 * with --loader opens a ferry_loader on it (cfg.annotations = FILE; the images folder
 * need not exist: open reads no image), and reports its open time, peak resident memory
 * (getrusage) and, once all N have opened and while they all still hold it, its Rss and
 * Pss from /proc/self/smaps_rollup: a mapping shared by N processes counts 1/N of its
 * pages in each Pss, so the sum of Pss is what the machine really spends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferry/coco.h"
#include "ferry/loader.h"

typedef struct report {
  double open_s, peak_mb, rss_mb, pss_mb;
  int ok;
} report;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "Rss:" and "Pss:" of /proc/self/smaps_rollup, in MB (0 where unavailable). */
static void rollup(double *rss_mb, double *pss_mb) {
  *rss_mb = *pss_mb = 0;
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) return;
  char line[256];
  unsigned long kb;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "Rss: %lu kB", &kb) == 1) *rss_mb = kb / 1024.0;
    else if (sscanf(line, "Pss: %lu kB", &kb) == 1) *pss_mb = kb / 1024.0;
  }
  fclose(f);
}

typedef struct held {
  ferry_coco *coco;
  ferry_loader *loader;
} held;

static int open_it(const char *file, int loader, held *h) {
  if (!loader) return ferry_coco_open(file, NULL, &h->coco) == FERRY_OK;
  ferry_loader_config cfg;
  ferry_loader_config_default(&cfg);
  cfg.annotations = file;
  cfg.images = "/nonexistent-images";
  cfg.workers = 1;
  return ferry_loader_open(&cfg, &h->loader) == FERRY_OK;
}

/* One process: open, tell the parent, wait for all, measure, report, wait to exit. */
static void child(const char *file, int loader, int ready_fd, int go_fd, int report_fd, int hold_fd) {
  report r = {0};
  held h = {0};
  double t0 = now_s();
  r.ok = open_it(file, loader, &h);
  r.open_s = now_s() - t0;
  if (!r.ok) fprintf(stderr, "index_open: %s\n", ferry_last_error());
  char c = 1;
  if (write(ready_fd, &c, 1) != 1 || read(go_fd, &c, 1) != 1) _exit(1);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  r.peak_mb = ru.ru_maxrss / 1024.0;
  rollup(&r.rss_mb, &r.pss_mb);
  if (write(report_fd, &r, sizeof r) != (ssize_t)sizeof r) _exit(1);
  while (read(hold_fd, &c, 1) == 1) {}  /* hold until the parent closes the pipe */
  ferry_loader_close(h.loader);
  ferry_coco_close(h.coco);
  _exit(r.ok ? 0 : 1);
}

int main(int argc, char **argv) {
  const char *file = NULL;
  int loader = 0, n = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--loader")) loader = 1;
    else if (!strcmp(argv[i], "--processes") && i + 1 < argc) n = atoi(argv[++i]);
    else if (!file && argv[i][0] != '-') file = argv[i];
    else file = NULL, n = 0, i = argc;
  }
  if (!file || n < 1 || n > 256) {
    fprintf(stderr, "usage: index_open FILE [--loader] [--processes N]\n");
    return 2;
  }
  int ready[2], go[2], rep[2], hold[2];
  if (pipe(ready) || pipe(go) || pipe(rep) || pipe(hold)) return 1;
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      close(hold[1]);  /* else the child's own copy keeps "hold" open and it never exits */
      close(go[1]);
      close(ready[0]);
      close(rep[0]);
      child(file, loader, ready[1], go[0], rep[1], hold[0]);
    }
  }
  char c;
  for (int i = 0; i < n; i++)
    if (read(ready[0], &c, 1) != 1) return 1;
  char gos[256] = {0};
  if (write(go[1], gos, (size_t)n) != n) return 1;
  report sum = {0}, worst = {0};
  int failed = 0;
  for (int i = 0; i < n; i++) {
    report r;
    if (read(rep[0], &r, sizeof r) != (ssize_t)sizeof r) return 1;
    printf("process %d: open %.3f s, peak %.1f MB, Rss %.1f MB, Pss %.1f MB%s\n", i, r.open_s, r.peak_mb, r.rss_mb,
           r.pss_mb, r.ok ? "" : " (FAILED)");
    failed += !r.ok;
    sum.rss_mb += r.rss_mb, sum.pss_mb += r.pss_mb;
    if (r.open_s > worst.open_s) worst.open_s = r.open_s;
    if (r.peak_mb > worst.peak_mb) worst.peak_mb = r.peak_mb;
  }
  close(hold[1]);
  for (int i = 0; i < n; i++) wait(NULL);
  printf("%d process%s (%s): slowest open %.3f s, highest peak %.1f MB, total Rss %.1f MB, total Pss %.1f MB\n", n,
         n == 1 ? "" : "es", loader ? "ferry_loader_open" : "ferry_coco_open", worst.open_s, worst.peak_mb, sum.rss_mb,
         sum.pss_mb);
  return failed ? 1 : 0;
}
