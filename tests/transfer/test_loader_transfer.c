/* Real masks: every batch the loader makes from DALI's COCO sample (61 photos,
 * progressive JPEGs and RGBA PNGs, polygon masks) goes through both transfer paths,
 * and every output equals its packed slice bit for bit. */
#include <stdio.h>

#include "ferry/loader.h"
#include "fixtures.h"
#include "../common/realdata.h"

static void real_batches_transfer_exactly(const char *name) {
  const char *annotations = realdata_path("dali_coco/coco/instances.json");
  const char *images = realdata_path("dali_coco/coco/images");
  ferry_device *d = open_device(name);
  ferry_stream *stream = NULL;
  cr_assert_eq(ferry_stream_open(d, &stream), FERRY_OK);
  ferry_loader_config cfg;
  ferry_loader_config_default(&cfg);
  cfg.annotations = annotations;
  cfg.images = images;
  cfg.batch_size = 4;
  cfg.workers = 2;
  cfg.resolution = 96;
  cfg.keep_crowd = 1;
  cfg.device = d;
  ferry_loader *loader = NULL;
  cr_assert_eq(ferry_loader_open(&cfg, &loader), FERRY_OK, "%s", ferry_last_error());
  size_t batches = 0, mask_ones = 0, instances = 0;
  for (;;) {
    ferry_batch *b = NULL;
    ferry_status st = ferry_loader_next(loader, &b);
    if (st == FERRY_EEND) break;
    cr_assert_eq(st, FERRY_OK, "%s", ferry_last_error());
    cr_assert_geq(ferry_batch_find_field(b, "masks"), 0);
    snapshot s;
    snapshot_take(&s, b, stream);
    ferry__transfer_path path = batches % 2 ? FERRY__PACKED_THEN_CLONE : FERRY__DIRECT;
    ferry_device_batch *db = NULL;
    cr_assert_eq(ferry__transfer_by(path, d, stream, b, NULL, &db), FERRY_OK, "%s", ferry_last_error());
    ferry_batch_release(b);
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    expect_equal_to_snapshot(db, &s, stream);
    size_t mf = snapshot_field(&s, "masks");
    for (size_t i = 0; i < s.batch; i++) {
      instances += (size_t)s.views[mf][i].shape[0];
      for (size_t k = 0; k < s.views[mf][i].nbytes; k++) mask_ones += s.bytes[mf][i][k];
    }
    snapshot_free(&s);
    ferry_device_batch_free(db);
    batches++;
  }
  cr_assert_eq(batches, 16, "61 photos in batches of 4");
  cr_assert_gt(instances, 50, "the sample's polygon annotations are there");
  cr_assert_gt(mask_ones, 1000, "the masks are real, not empty");
  ferry_loader_close(loader);
  ferry_stream_close(stream);
  ferry_memory_stats ms;
  ferry_memory_stats_init(&ms);
  cr_assert_eq(ferry_device_memory_stats(d, &ms), FERRY_OK);
  cr_assert_eq(ms.live_bytes, 0, "every output was freed");
  ferry_device_close(d);
}
ON_EVERY_BACKEND(loader, real_batches_transfer_exactly, real_batches_transfer_exactly)
