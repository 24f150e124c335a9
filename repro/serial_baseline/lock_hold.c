/* repro/serial_baseline/lock_hold.c - how long the loader's one mutex is held per
 * delivered batch: the other serial resource of a many-core node besides the
 * coordinator and the consumer (every thread's steps under the lock run one at a
 * time, whichever thread runs them). Built and run by lock_hold.sh only, against a
 * copy of the loader whose lock and unlock are counted (TSC ticks from taking the
 * lock to letting it go, in the holder's own thread).
 *
 *   lock_hold ANNOTATIONS IMAGES BATCHES WORKERS [BATCH]
 *     -> "held_us_per_batch acquisitions_per_batch images_per_s"
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "ferry/ferry.h"

/* Defined by lock_hold.sh in its counted copy of loaders/handoff.c: the TSC ticks the
 * lock was held and the times it was taken, read under the lock. */
void ferry_bench_counters(ferry_loader *l, unsigned long long out[2]);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* TSC ticks per microsecond, over a 200 ms sleep. */
static double ticks_per_us(void) {
  double t0 = now();
  unsigned long long c0 = __rdtsc();
  usleep(200000);
  return (double)(__rdtsc() - c0) / ((now() - t0) * 1e6);
}

static void run(ferry_loader *l, int batches) {
  ferry_batch *b;
  for (int k = 0; k < batches; k++) {
    if (ferry_loader_next(l, &b) != FERRY_OK) {
      k--; /* an epoch's end */
      continue;
    }
    ferry_batch_release(b);
  }
}

int main(int argc, char **argv) {
  if (argc < 5) return fprintf(stderr, "usage: lock_hold ANNOTATIONS IMAGES BATCHES WORKERS [BATCH]\n"), 2;
  double tick = ticks_per_us();
  int batches = atoi(argv[3]);
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  c.annotations = argv[1];
  c.images = argv[2];
  c.workers = (size_t)atoi(argv[4]);
  c.batch_size = argc > 5 ? (size_t)atoi(argv[5]) : 8;
  c.resolution = 32;
  ferry_loader *l;
  if (ferry_loader_open(&c, &l) != FERRY_OK) return fprintf(stderr, "%s\n", ferry_last_error()), 1;
  run(l, 50);
  unsigned long long c0[2], c1[2];
  ferry_bench_counters(l, c0);
  double t0 = now();
  run(l, batches);
  double wall = now() - t0;
  ferry_bench_counters(l, c1);
  printf("%.3f %.1f %.0f\n", (double)(c1[0] - c0[0]) / tick / batches, (double)(c1[1] - c0[1]) / batches,
         batches * (double)c.batch_size / wall);
  ferry_loader_close(l);
  return 0;
}
