/* repro/decode_limit.h - how fast can images be decoded, with no loader around it?
 *
 * The decode-only rate is the ceiling the loader is measured against: a loader
 * that reaches it spends nothing on its own machinery. repro/decode_bench prints
 * it; repro/throughput reuses these functions for its "decode-only limit" line.
 */
#ifndef FERRY_REPRO_DECODE_LIMIT_H
#define FERRY_REPRO_DECODE_LIMIT_H

#include "ferry/image.h"

typedef enum decode_work {
  DECODE_ONLY = 0,            /* read the file, decode to RGB8 */
  DECODE_RESIZE_NORMALISE = 1 /* read, decode, resize to size x size, f32 CHW normalised */
} decode_work;

typedef struct decode_limit_config {
  const char *const *paths;
  int count;
  int threads;
  decode_work work;
  int size;                      /* for DECODE_RESIZE_NORMALISE */
  ferry_image_options options;
} decode_limit_config;

/* Decode every path once on `threads` threads (one ferry_decoder each, pulling the
 * next index from a shared counter) and store the wall time in *seconds.
 * Fails on the first image that fails, with ferry's message. */
ferry_status decode_limit_run(const decode_limit_config *cfg, double *seconds);

/* decode_limit_run, also giving the CPU time all threads used (it shows the cost per
 * image even when other work on the machine slows the wall clock). */
ferry_status decode_limit_run_cpu(const decode_limit_config *cfg, double *seconds,
                                  double *cpu_seconds);

typedef struct decode_limit_stats {
  double images_per_s;     /* median over the runs */
  double cpu_ms_per_image; /* median over the runs */
} decode_limit_stats;

/* Medians over `runs` runs (1..15). */
ferry_status decode_limit_measure(const decode_limit_config *cfg, int runs,
                                  decode_limit_stats *out);

/* The median images/s over `runs` runs (1..15). */
ferry_status decode_limit_rate(const decode_limit_config *cfg, int runs, double *images_per_s);

/* Up to max paths of DIR's *.jpg files, sorted, malloc'ed (free with
 * decode_limit_free_paths); *count receives how many. */
ferry_status decode_limit_list_jpegs(const char *dir, int max, char ***paths, int *count);
void decode_limit_free_paths(char **paths, int count);

#endif
