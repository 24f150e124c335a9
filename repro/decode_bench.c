/* repro/decode_bench.c - decode-only and decode+resize+normalise images/s.
 *
 *   decode_bench --dir DIR [--images N] [--size R] [--threads LIST] [--runs K] [--dct]
 *
 * DIR holds the JPEGs (e.g. synth_coco's OUT/val2017). Every configuration reads and
 * decodes each image once per run (the page cache is warmed by one untimed pass),
 * and prints the median images/s of K runs (default 3), and the median CPU time per
 * image (all threads), as a Markdown table row.
 * Threads default to "1,2"; R defaults to 640 (RF-DETR's square input).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repro/decode_limit.h"

typedef struct bench_args {
  const char *dir;
  int images, size, runs, dct;
  char threads[64];
} bench_args;

static int parse_args(int argc, char **argv, bench_args *a) {
  *a = (bench_args){.images = 5000, .size = 640, .runs = 3, .threads = "1,2"};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--dct") == 0) a->dct = 1;
    else if (v && strcmp(argv[i], "--dir") == 0) a->dir = v, i++;
    else if (v && strcmp(argv[i], "--images") == 0) a->images = atoi(v), i++;
    else if (v && strcmp(argv[i], "--size") == 0) a->size = atoi(v), i++;
    else if (v && strcmp(argv[i], "--runs") == 0) a->runs = atoi(v), i++;
    else if (v && strcmp(argv[i], "--threads") == 0)
      snprintf(a->threads, sizeof a->threads, "%s", v), i++;
    else return 0;
  }
  return a->dir && a->images > 0 && a->size > 0 && a->runs >= 1 && a->runs <= 15;
}

static int run_row(decode_limit_config *cfg, int runs, const char *label) {
  decode_limit_stats stats;
  if (decode_limit_measure(cfg, runs, &stats) < 0) {
    fprintf(stderr, "decode_bench: %s\n", ferry_last_error());
    return 1;
  }
  printf("| %s | %d | %s | %d | %.1f | %.2f |\n", label, cfg->threads,
         cfg->options.dct_scaling ? "on" : "off", cfg->count, stats.images_per_s,
         stats.cpu_ms_per_image);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  bench_args a;
  if (!parse_args(argc, argv, &a)) {
    fprintf(stderr, "usage: decode_bench --dir DIR [--images N] [--size R] [--threads 1,2] "
                    "[--runs K] [--dct]\n");
    return 2;
  }
  char **paths;
  int count;
  if (decode_limit_list_jpegs(a.dir, a.images, &paths, &count) < 0) {
    fprintf(stderr, "decode_bench: %s\n", ferry_last_error());
    return 1;
  }
  decode_limit_config cfg = {.paths = (const char *const *)paths, .count = count, .size = a.size};
  ferry_image_options_default(&cfg.options);
  cfg.options.dct_scaling = a.dct;
  char label[64];
  snprintf(label, sizeof label, "decode + resize %d + normalise f32", a.size);
  printf("| work | threads | DCT scaling | images | images/s (median of %d) | CPU ms/image |\n",
         a.runs);
  printf("|---|---|---|---|---|---|\n");
  int rc = 0;
  cfg.threads = 1;
  cfg.work = DECODE_ONLY;
  double warm;
  if (decode_limit_run(&cfg, &warm) < 0) { /* warm the page cache */
    fprintf(stderr, "decode_bench: %s\n", ferry_last_error());
    rc = 1;
  }
  for (char *tok = strtok(a.threads, ","); tok && !rc; tok = strtok(NULL, ",")) {
    cfg.threads = atoi(tok);
    cfg.work = DECODE_ONLY;
    rc = run_row(&cfg, a.runs, "decode only (read + decode to RGB8)");
    cfg.work = DECODE_RESIZE_NORMALISE;
    if (!rc) rc = run_row(&cfg, a.runs, label);
  }
  decode_limit_free_paths(paths, count);
  return rc;
}
