/* tests/loaders/loader_fixture.h - shared helpers of the loader tests: real data
 * from ../shared, digests of whole batches, and a tiny loader factory. */
#ifndef FERRY_TESTS_LOADER_FIXTURE_H
#define FERRY_TESTS_LOADER_FIXTURE_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "ferry/loader.h"
#include "../common/realdata.h"

/* The settings the loader tests share, without data. */
static inline void small_config(ferry_loader_config *c) {
  ferry_loader_config_default(c);
  c->batch_size = 4;
  c->resolution = 32;
  c->workers = 2;
  c->seed = 11;
  /* Decode at 1/8 scale where possible: these tests are about the loader, not pixels. */
  c->image.dct_scaling = 1;
}

/* small_config over ../shared's dali_coco (61 real photos); skips without it. */
static inline void dali_config(ferry_loader_config *c) {
  small_config(c);
  c->annotations = realdata_path("dali_coco/coco/instances.json");
  c->images = realdata_path("dali_coco/coco/images");
}

/* The synthetic set made at build time for these tests (tests/loaders/meson.build):
 * LOADER_TEST_IMAGES small baseline JPEGs, quick to decode even under TSan. */
static inline void test_config(ferry_loader_config *c) {
  static char ann[4096], img[4096];
  const char *dir = getenv("FERRY_LOADER_DATA");
  if (!dir) cr_skip_test("FERRY_LOADER_DATA is not set");
  snprintf(ann, sizeof ann, "%s/annotations/instances_val2017.json", dir);
  snprintf(img, sizeof img, "%s/val2017", dir);
  small_config(c);
  c->annotations = ann;
  c->images = img;
}

/* The first epoch's skips, from the progress call that ends it (UINT64_MAX until it
 * ends). stats.samples_skipped counts since open, and by the time the consumer reads
 * it the coordinator may have skipped samples of the next epoch, which it lays out
 * ahead: a test of one epoch's count reads this instead. */
static inline void note_first_epoch_skips(const ferry_loader_progress *p, void *user) {
  if (p->epoch_ended && p->epoch == 0) *(uint64_t *)user = p->samples_skipped;
}

static inline void watch_first_epoch_skips(ferry_loader_config *c, uint64_t *skipped) {
  *skipped = UINT64_MAX;
  c->progress = note_first_epoch_skips;
  c->progress_user = skipped;
}

/* A folder a test made under /tmp, gone with what it holds (its loader closed). */
static inline void remove_folder(const char *dir) {
  char cmd[512];
  cr_assert_lt((size_t)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir), sizeof cmd);
  cr_expect_eq(system(cmd), 0, "%s", cmd);
}

static inline ferry_loader *open_loader(const ferry_loader_config *c) {
  ferry_loader *l = NULL;
  cr_assert_eq(ferry_loader_open(c, &l), FERRY_OK, "%s", ferry_last_error());
  return l;
}

static inline uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* A digest of every byte and every offset table of a batch. */
static inline uint64_t batch_digest(const ferry_batch *b) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t f = 0; f < ferry_batch_num_fields(b); f++) {
    h = fnv1a(h, ferry_batch_offsets(b, f), (ferry_batch_size(b) + 1) * sizeof(int64_t));
    for (size_t i = 0; i < ferry_batch_size(b); i++) {
      ferry_tensor v;
      cr_assert_eq(ferry_batch_sample(b, f, i, &v), FERRY_OK);
      h = fnv1a(h, v.data, v.nbytes);
    }
  }
  return h;
}

static inline int64_t sample_index(const ferry_batch *b, size_t i) {
  ferry_tensor v;
  cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, "sample_index"), i, &v), FERRY_OK);
  return *(int64_t *)v.data;
}

/* Digests of one epoch's batches (up to max); returns how many. */
static inline size_t epoch_digests(ferry_loader *l, uint64_t *out, size_t max) {
  size_t n = 0;
  for (;;) {
    ferry_batch *b;
    ferry_status st = ferry_loader_next(l, &b);
    if (st == FERRY_EEND) return n;
    cr_assert_eq(st, FERRY_OK, "%s", ferry_last_error());
    cr_assert_lt(n, max);
    out[n++] = batch_digest(b);
    ferry_batch_release(b);
  }
}

#endif
