/* tests/transfer/test_transfer_oom.c - device memory run out in the middle of a
 * transfer (issue 25, item 10).
 *
 * The device's byte cap (ferry__device_cap_bytes) stands for a GPU whose memory the
 * model has taken: a "model" allocation of growing size leaves the transfer less room
 * than it needs, so it runs out at every point in turn (the images tensor, then each
 * sample's fields). Each time: FERRY_ENOMEM naming the batch and the sample (its
 * dataset index), no device batch, every device byte back, and the packed batch
 * untouched, so that once the model's memory is freed the same call succeeds and gives
 * exactly the clean transfer's result. On CUDA the same cap holds the pool to it
 * (skipped without a GPU: not verified on the machine that wrote it).
 */
#include "fixtures.h"
#include "lib/device_internal.h"

enum { B = 5 };

/* The detection batch of the fixtures with a sample index field (the loader's, by its
 * role), the dataset index 100 + 10 i for sample i. */
static ferry_batch *make_indexed(ferry_pool *pool) {
  ferry_field_spec f[NFIELDS + 1];
  int64_t rows[(NFIELDS + 1) * B];
  detection_fields(f);
  f[NFIELDS] = (ferry_field_spec){"sample_index", FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, {1}};
  detection_rows(B, default_instances, rows);
  for (size_t i = 0; i < B; i++) rows[NFIELDS * B + i] = 1;
  ferry_batch *b = NULL;
  cr_assert_eq(ferry_batch_create(pool, B, NFIELDS + 1, f, rows, &b), FERRY_OK, "%s", ferry_last_error());
  mark_images(b);
  cr_assert_eq(ferry_batch_set_role(b, NFIELDS, FERRY_ROLE_SAMPLE_INDEX), FERRY_OK);
  fill_batch(b, 11);
  for (size_t i = 0; i < B; i++) {
    ferry_tensor v;
    cr_assert_eq(ferry_batch_sample(b, NFIELDS, i, &v), FERRY_OK);
    *(int64_t *)v.data = 100 + 10 * (int64_t)i;
  }
  return b;
}

static uint64_t live_bytes(ferry_device *d) {
  ferry_device_synchronize(d);
  return stats_of(d).live_bytes;
}

/* The message names the batch, and the sample it ran out on by its position and its
 * dataset index (or the images tensor, which is the whole batch's). */
static void expect_named(const char *msg, uint64_t model) {
  cr_assert(strstr(msg, "out of device memory"), "model %llu: %s", (unsigned long long)model, msg);
  cr_assert(strstr(msg, "batch of 5 samples from dataset index 100"), "model %llu: %s", (unsigned long long)model, msg);
  const char *at = strstr(msg, "sample ");
  if (!at) {
    cr_assert(strstr(msg, "images tensor"), "model %llu names neither a sample nor the images tensor: %s",
              (unsigned long long)model, msg);
    return;
  }
  size_t sample = 99;
  long long index = -1;
  cr_assert_eq(sscanf(at, "sample %zu (dataset index %lld)", &sample, &index), 2, "%s", msg);
  cr_assert_lt(sample, B, "%s", msg);
  cr_assert_eq(index, 100 + 10 * (long long)sample, "%s", msg);
}

static void runs_out_cleanly(const char *name) {
  rig r = rig_open(name, 1);
  ferry_batch *b = make_indexed(r.pool);
  snapshot snap;
  snapshot_take(&snap, b, r.stream);
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_NONE};
  uint64_t before = live_bytes(r.device);
  ferry_device_batch *db = NULL;
  cr_assert_eq(ferry_transfer(r.device, r.stream, b, &o, &db), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  uint64_t need = live_bytes(r.device) - before;
  ferry_device_batch_free(db);
  cr_assert_eq(live_bytes(r.device), before);
  /* Room for exactly one transfer; the model takes 1 byte to all of it. */
  ferry__device_cap_bytes(r.device, before + need);
  size_t failures = 0, at_samples = 0;
  for (uint64_t model = 1; model <= need; model += model < 64 ? 1 : need / 61) {
    void *weights = NULL;
    cr_assert_eq(ferry_device_malloc(r.device, r.stream, model, &weights), FERRY_OK, "%s", ferry_last_error());
    db = (ferry_device_batch *)&o;
    ferry_status st = ferry_transfer(r.device, r.stream, b, &o, &db);
    cr_assert_eq(st, FERRY_ENOMEM, "model %llu: %d: %s", (unsigned long long)model, st, ferry_last_error());
    cr_assert_null(db, "a failed transfer hands out no device batch");
    expect_named(ferry_last_error(), model);
    at_samples += strstr(ferry_last_error(), "(dataset index") != NULL;
    failures++;
    cr_assert_eq(live_bytes(r.device), before + model, "model %llu: the failed transfer left device bytes",
                 (unsigned long long)model);
    /* The caller frees memory and retries the batch it still holds. */
    cr_assert_eq(ferry_device_free(r.device, r.stream, weights), FERRY_OK);
    cr_assert_eq(ferry_transfer(r.device, r.stream, b, &o, &db), FERRY_OK, "model %llu: retry: %s",
                 (unsigned long long)model, ferry_last_error());
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    expect_equal_to_snapshot(db, &snap, r.stream);
    ferry_device_batch_free(db);
    cr_assert_eq(live_bytes(r.device), before);
  }
  cr_expect_gt(failures, 60);
  cr_expect_gt(at_samples, 30, "most failures are in a sample's fields: %zu of %zu", at_samples, failures);
  ferry__device_cap_bytes(r.device, 0);
  ferry_batch_release(b);
  snapshot_free(&snap);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer_oom, runs_out_cleanly_and_the_retry_gives_the_same_batch, runs_out_cleanly)
