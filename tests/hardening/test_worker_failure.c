/* tests/hardening/test_worker_failure.c - one worker's decode fails while others run.
 *
 * A 16-image subset of the real dali_coco set, linked into a scratch folder, with one
 * image replaced by a truncated copy. With 4 workers, under the fail policy the epoch
 * must end with an error naming that file (and no deadlock: the test's timeout), the
 * next epoch must start again, and the loader must close cleanly, also mid-epoch;
 * under the skip policy the epoch completes without that one sample. Repeated over
 * seeds so the failure lands at different moments. Runs under ASan and TSan (suite
 * 'concurrency').
 */
#include <criterion/criterion.h>

#include "ferry/coco.h"
#include "ferry/ferry.h"
#include "ferry/loader.h"
#include "tests/hardening/hardening.h"

#define IMAGES 16
#define BROKEN 5
#define ROUNDS 8

static char broken_name[256];
static char annotations[2 * HARD_PATH], images[2 * HARD_PATH];

/* scratch/images/: symlinks to the real images, except BROKEN, cut to a third. Made
 * once per process (the TSan build's harness runs every test in one process). */
static void make_files(void) {
  if (annotations[0]) return;
  snprintf(annotations, sizeof annotations, "%s",
           write_subset(realdata_path("dali_coco/coco/instances.json"), IMAGES, "subset.json"));
  snprintf(images, sizeof images, "%s", scratch_path("images"));
  const char *real = realdata_path("dali_coco/coco/images");
  cr_assert_eq(mkdir(images, 0700), 0);
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(annotations, NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  for (size_t i = 0; i < ferry_coco_num_images(coco); i++) {
    ferry_coco_image img;
    cr_assert_eq(ferry_coco_image_at(coco, i, &img), FERRY_OK);
    char from[2 * HARD_PATH], to[2 * HARD_PATH];
    snprintf(from, sizeof from, "%s/%s", real, img.file_name);
    snprintf(to, sizeof to, "images/%s", img.file_name);
    if (i == BROKEN) {
      size_t len;
      unsigned char *bytes = read_whole(from, &len);
      write_scratch(to, bytes, len / 3);
      free(bytes);
      snprintf(broken_name, sizeof broken_name, "%s", img.file_name);
    } else {
      cr_assert_eq(symlink(from, scratch_path(to)), 0);
    }
  }
  ferry_coco_close(coco);
}

static void make_dataset(ferry_loader_config *cfg) {
  make_files();
  ferry_loader_config_default(cfg);
  cfg->annotations = annotations;
  cfg->images = images;
  cfg->batch_size = 2;
  cfg->resolution = 32;
  cfg->workers = 4;
  cfg->rank = 0;
  cfg->world_size = 1;
}

/* Run the current epoch to its end; returns the status that ended it and counts samples. */
static ferry_status run_epoch(ferry_loader *loader, size_t *samples) {
  *samples = 0;
  for (;;) {
    ferry_batch *batch = NULL;
    ferry_status st = ferry_loader_next(loader, &batch);
    if (st != FERRY_OK) return st;
    *samples += ferry_batch_size(batch);
    ferry_batch_release(batch);
  }
}

Test(worker_failure, fail_policy_names_the_file, .timeout = 300) {
  ferry_loader_config cfg;
  make_dataset(&cfg);
  for (int round = 0; round < ROUNDS; round++) {
    cfg.seed = (uint64_t)round;
    ferry_loader *loader = NULL;
    cr_assert_eq(ferry_loader_open(&cfg, &loader), FERRY_OK, "%s", ferry_last_error());
    size_t samples;
    ferry_status st = run_epoch(loader, &samples);
    cr_assert_eq(st, FERRY_EFORMAT, "round %d: the epoch ended with %d: %s", round, st, ferry_last_error());
    cr_assert(strstr(ferry_last_error(), broken_name) != NULL, "round %d: the error does not name %s: %s",
              round, broken_name, ferry_last_error());
    cr_assert(strstr(ferry_last_error(), "dataset index ") != NULL, "no sample in: %s", ferry_last_error());
    cr_assert_lt(samples, (size_t)IMAGES);
    /* The next epoch starts again; close it half-way, with workers still busy. */
    ferry_batch *batch = NULL;
    st = ferry_loader_next(loader, &batch);
    if (st == FERRY_OK) ferry_batch_release(batch);
    else cr_assert_eq(st, FERRY_EFORMAT, "%s", ferry_last_error());
    ferry_loader_close(loader);
  }
}

Test(worker_failure, skip_policy_completes_the_epoch, .timeout = 300) {
  ferry_loader_config cfg;
  make_dataset(&cfg);
  cfg.on_error = FERRY_ON_ERROR_SKIP;
  for (int round = 0; round < ROUNDS / 2; round++) {
    cfg.seed = (uint64_t)round;
    ferry_loader *loader = NULL;
    cr_assert_eq(ferry_loader_open(&cfg, &loader), FERRY_OK, "%s", ferry_last_error());
    size_t samples;
    ferry_status st = run_epoch(loader, &samples);
    cr_assert_eq(st, FERRY_EEND, "round %d: %s", round, ferry_last_error());
    cr_assert_eq(samples, (size_t)IMAGES - 1, "round %d: %zu samples", round, samples);
    ferry_loader_stats stats;
    ferry_loader_stats_init(&stats);
    cr_assert_eq(ferry_loader_stats_get(loader, &stats), FERRY_OK);
    cr_assert_geq(stats.samples_skipped, 1);
    ferry_loader_close(loader);
  }
}

Test(worker_failure, close_while_the_failure_is_in_flight, .timeout = 300) {
  ferry_loader_config cfg;
  make_dataset(&cfg);
  cfg.prefetch = 4;
  for (int round = 0; round < ROUNDS; round++) {
    cfg.seed = (uint64_t)round;
    ferry_loader *loader = NULL;
    cr_assert_eq(ferry_loader_open(&cfg, &loader), FERRY_OK, "%s", ferry_last_error());
    if (round & 1) {
      ferry_batch *batch = NULL;
      ferry_status st = ferry_loader_next(loader, &batch);
      if (st == FERRY_OK) ferry_batch_release(batch);
    }
    ferry_loader_close(loader); /* workers mid-decode, the broken file among the queued */
  }
}
