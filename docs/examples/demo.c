/* demo: the loader over a COCO set: throughput and what one batch holds.
 *
 *   demo --annotations FILE --images DIR [--batch 8] [--workers N] [--resolution 312]
 *        [--epochs 1] [--device host|cuda] [--on-error skip|fail]
 *        [--decode cpu|gpu|auto] [--augment none|val-square|val|rfdetr-square|rfdetr]
 *        [--multi-scale off|per-sample|per-batch]
 *
 * The command line is example_args.c's, shared with train_loop (demo --help).
 * `./run demo` runs it on the embedded synthetic dataset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "example_args.h"
#include "ferry/ferry.h"
#include "ferry/loader.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void describe(const ferry_batch *b) {
  printf("batch of %zu samples, %s:\n", ferry_batch_size(b), ferry_batch_is_packed(b) ? "packed" : "unpacked");
  for (size_t f = 0; f < ferry_batch_num_fields(b); f++) {
    const ferry_field_spec *s = ferry_batch_field_spec(b, f);
    const int64_t *off = ferry_batch_offsets(b, f);
    printf("  %-12s %-4s inner [", s->name, ferry_dtype_name(s->dtype));
    for (int d = 0; d < s->inner_ndim; d++) {
      int64_t n = s->inner_shape[d]; /* h and w: each sample's own size (a training recipe) */
      if (n == FERRY_DIM_SAMPLE_H || n == FERRY_DIM_SAMPLE_W) printf("%s%s", d ? "," : "", n == FERRY_DIM_SAMPLE_H ? "h" : "w");
      else printf("%s%lld", d ? "," : "", (long long)n);
    }
    printf("]  rows per sample:");
    for (size_t i = 0; i < ferry_batch_size(b); i++) printf(" %lld", (long long)(off[i + 1] - off[i]));
    printf("\n");
  }
}

int main(int argc, char **argv) {
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  example_common o = {.device = "host", .batch = (int64_t)c.batch_size, .workers = (int64_t)c.workers,
                      .resolution = c.resolution, .epochs = 1, .on_error = c.on_error, .decode = c.image.decode,
                      .augment = c.augment.recipe, .multi_scale = c.augment.multi_scale};
  example_flag flags[EXAMPLE_MAX_FLAGS];
  size_t nflags = example_common_flags(&o, flags);
  int exit_status = example_parse_args("demo", "The loader over a COCO set: throughput and what one batch holds.",
                                       flags, nflags, argc, argv);
  if (exit_status >= 0) return exit_status;
  example_apply_common(&o, &c);
  ferry_device *device;
  if (ferry_device_open(o.device, &device) != FERRY_OK) {
    fprintf(stderr, "demo: %s\n", ferry_last_error());
    return 1;
  }
  c.device = device;
  c.progress = ferry_loader_progress_bar;
  ferry_loader *loader;
  if (ferry_loader_open(&c, &loader) != FERRY_OK) {
    fprintf(stderr, "demo: %s\n", ferry_last_error());
    ferry_device_close(device);
    return 1;
  }
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  ferry_loader_stats_get(loader, &stats);
  printf("ferry demo: %llu images per epoch on rank %d of %d, batch %zu, %zu workers, %dx%d\n",
         (unsigned long long)ferry_loader_samples_per_epoch(loader), stats.rank, stats.world_size,
         c.batch_size, stats.workers, c.resolution, c.resolution);
  if (stats.decoder == FERRY_DECODE_GPU)
    printf("decoder gpu: the batches hold compressed bytes; ferry_transfer decodes them on the device "
           "(this demo does not transfer: see train_loop)\n");
  int status = 0;
  for (int64_t e = 0; e < o.epochs && !status; e++) {
    double t0 = now();
    size_t images = 0, instances = 0;
    ferry_batch *b;
    ferry_status st;
    while ((st = ferry_loader_next(loader, &b)) == FERRY_OK) {
      if (e == 0 && images == 0) describe(b);
      images += ferry_batch_size(b);
      int boxes = ferry_batch_find_field(b, FERRY_FIELD_BOXES);
      if (boxes >= 0) instances += (size_t)ferry_batch_offsets(b, (size_t)boxes)[ferry_batch_size(b)];
      ferry_batch_release(b);
    }
    if (st != FERRY_EEND) {
      fprintf(stderr, "demo: %s\n", ferry_last_error());
      status = 1;
      break;
    }
    double s = now() - t0;
    printf("epoch %lld: %zu images, %zu instances in %.2f s: %.1f images/s\n", (long long)e, images,
           instances, s, images / s);
  }
  ferry_loader_stats_get(loader, &stats);
  printf("pinned pool: %zu arenas, %.1f MiB reserved, %llu growths\n", stats.pool.arenas,
         stats.pool.reserved_bytes / 1048576.0, (unsigned long long)stats.pool.growths);
  printf("%llu samples skipped (--on-error %s)\n", (unsigned long long)stats.samples_skipped,
         c.on_error == FERRY_ON_ERROR_SKIP ? "skip" : "fail");
  ferry_loader_close(loader);
  ferry_device_close(device);
  return status;
}
