/* repro/serial_baseline/serial_pair.c - the loader's serial work per batch: the
 * coordinator's and the consumer's CPU time per delivered batch, less the CPU they
 * spend in their waits, measured the same way on ca9f8bc (its waits wrapped by
 * run.sh) and on this tree (ferry_loader_stats). Built and run by run.sh only. It
 * includes only the public API: ca9f8bc has no stats call, so the counts that tree
 * keeps inside its loader (its coordinator thread's CPU clock, the waits run.sh wraps)
 * are read by ferry_bench_serial, a function run.sh adds to that tree's own loader.c.
 *
 *   serial_pair ANNOTATIONS IMAGES BATCHES
 *     ->  "serial_us serial_work_us consumer_work_us coordinator_work_us" (per batch)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ferry/ferry.h"

#ifdef OLD
/* Defined by run.sh in its copy of ca9f8bc's loaders/loader.c (under the loader's lock):
 * [0] the coordinator's CPU, [1] its CPU in waits, [2] the consumer's CPU in waits, ns. */
void ferry_bench_serial(ferry_loader *l, double out[3]);
#endif

static double cpu_of(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* [0] coordinator CPU, [1] coordinator idle, [2] consumer idle */
static void serial(ferry_loader *l, double out[3]) {
#ifdef OLD
  ferry_bench_serial(l, out);
#else
  ferry_loader_stats st;
  ferry_loader_stats_init(&st);
  ferry_loader_stats_get(l, &st);
  out[0] = (double)st.coordinator_cpu_ns;
  out[1] = (double)st.coordinator_idle_cpu_ns;
  out[2] = (double)st.consumer_idle_cpu_ns;
#endif
}

int main(int argc, char **argv) {
  int batches = atoi(argv[3]);
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  c.annotations = argv[1];
  c.images = argv[2];
  c.batch_size = 8;
  c.workers = 16;
  c.resolution = 32;
  ferry_loader *l;
  if (ferry_loader_open(&c, &l) != FERRY_OK) return fprintf(stderr, "%s\n", ferry_last_error()), 1;
  ferry_batch *b;
  for (int k = 0; k < 50; k++) {
    if (ferry_loader_next(l, &b) != FERRY_OK) { k--; continue; }
    ferry_batch_release(b);
  }
  double s0[3], s1[3];
  serial(l, s0);
  double c0 = cpu_of(CLOCK_THREAD_CPUTIME_ID);
  for (int k = 0; k < batches; k++) {
    if (ferry_loader_next(l, &b) != FERRY_OK) { k--; continue; }
    ferry_batch_release(b);
  }
  double consumer = cpu_of(CLOCK_THREAD_CPUTIME_ID) - c0;
  serial(l, s1);
  double coordinator = s1[0] - s0[0], coordinator_idle = s1[1] - s0[1], consumer_idle = s1[2] - s0[2];
  double total = consumer + coordinator, idle = coordinator_idle + consumer_idle, us = 1e3 * batches;
  printf("%.2f %.2f %.2f %.2f\n", total / us, (total - idle) / us, (consumer - consumer_idle) / us,
         (coordinator - coordinator_idle) / us);
  ferry_loader_close(l);
  return 0;
}
