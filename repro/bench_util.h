/* repro/bench_util.h - what the repro programs share: timing, medians, running a
 * measurement in independent processes, and finding (or generating) a dataset. */
#ifndef FERRY_REPRO_BENCH_UTIL_H
#define FERRY_REPRO_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/loader.h"

/* The flags every loader benchmark takes. */
typedef struct bench_common {
  const char *annotations, *images;
  int workers, batch, resolution;
  ferry_image_layout layout;
  int prefetch; /* 0: the loader's default depth */
  int remap_categories; /* config.remap_categories (a shard index's own policy wins) */
  int shuffle;          /* config.shuffle: 1 */
  ferry_sample_order order; /* config.order: AUTO */
  int shuffle_buffer;   /* config.shuffle_buffer: 0, the loader's default */
} bench_common;

/* Defaults: no dataset yet, one worker per core, batch 8, resolution 312, images
 * as normalised f32 CHW (the loader's default layout), the default prefetch. */
void bench_common_default(bench_common *c);
/* Consume `flag value` if it is one of --annotations, --images, --workers, --batch,
 * --resolution, --layout (f32 or u8), --prefetch, --remap-categories (0 or 1), --shuffle (0 or 1),
 * --order (auto, dataset or shards), --shuffle-buffer N: 1 if it was, 0 if not, -1 if
 * the value is not one it takes. */
int bench_common_flag(bench_common *c, const char *flag, const char *value);
/* A loader config for these flags on `device`, packed or unpacked. */
void bench_loader_config(ferry_loader_config *config, const bench_common *c, ferry_device *device);
/* ferry_loader_open, or with packed 0 the unpacked baseline (loaders/baseline.h). */
ferry_status bench_loader_open(const ferry_loader_config *config, int packed, ferry_loader **out);

/* The whole file, malloc'ed (free it), its size in *len; NULL when it cannot be read
 * or is empty. */
uint8_t *bench_read_file(const char *path, size_t *len);

double bench_now(void);
/* CPU seconds the calling thread has used (user and system). */
double bench_thread_cpu(void);
/* CPU seconds every thread of the process has used (user and system). */
double bench_process_cpu(void);

typedef struct bench_range {
  double median, min, max;
} bench_range;
/* Median, min and max of n values (n >= 1); sorts `values`. */
bench_range bench_summarise(double *values, size_t n);

/* Run fn(arg, out) in `processes` forked children, each filling `nvalues` doubles,
 * and gather them as results[p * nvalues + v]. Returns 0 when every child exited 0. */
typedef int (*bench_child_fn)(void *arg, double *out);
int bench_in_processes(int processes, bench_child_fn fn, void *arg, size_t nvalues, double *results);

/* The dataset a program should use: --annotations/--images when given, else a
 * synthetic set of `images` images made by synth_coco (../synth/synth_coco from
 * argv0's folder, as in the build tree, else beside argv0) in
 * DIR (created once and reused). Returns 0, or -1 with a message on stderr. */
int bench_dataset(const char *argv0, const char *dir, int images, const char **annotations,
                  const char **images_dir);

/* Number of online cores. */
int bench_cores(void);

#endif
