/* Allocation failures anywhere in a transfer or a packed_to give FERRY_ENOMEM (host
 * memory, or the host backend's "device memory": exhausted device memory is ENOMEM on
 * every backend, issue 25), leak nothing, and leave the batch usable. Needs -Dalloc_failure_injection=true;
 * other builds skip. */
#include "ferry/advanced.h"
#include "fixtures.h"
#include "lib/alloc.h"

static void require_injection(void) {
  if (!ferry__alloc_injection_available())
    cr_skip_test("skipped: build with -Dalloc_failure_injection=true to inject failures");
}

static uint64_t live_bytes(ferry_device *d) {
  ferry_device_synchronize(d);
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  return s.live_bytes;
}

static int is_allocation_failure(ferry_status st) { return st == FERRY_ENOMEM; }

Test(failures, transfer_survives_every_allocation_failure) {
  require_injection();
  ferry_device *d = open_device("host");
  ferry_stream *s = NULL;
  ferry_pool *pool = NULL;
  cr_assert_eq(ferry_stream_open(d, &s), FERRY_OK);
  cr_assert_eq(ferry_pool_open(d, 1, 0, &pool), FERRY_OK);
  ferry_batch *b = make_packed(pool, 5, default_instances, 3);
  snapshot snap;
  snapshot_take(&snap, b, s);
  ferry__transfer_path paths[3] = {FERRY__DIRECT, FERRY__PACKED_THEN_CLONE, FERRY__DIRECT};
  ferry_transfer_options modes[3] = {{0}, {0}, {.image_field = ""}};
  for (int m = 0; m < 3; m++) {
    /* As many failure points as a clean transfer makes allocations, and a few more. */
    long before = ferry__alloc_attempts();
    ferry_device_batch *clean = NULL;
    cr_assert_eq(ferry__transfer_by(paths[m], d, s, b, &modes[m], &clean), FERRY_OK);
    cr_assert_eq(ferry_device_batch_wait(clean), FERRY_OK);
    ferry_device_batch_free(clean);
    long allocations = ferry__alloc_attempts() - before;
    int failed = 0;
    for (long n = 0; n < allocations + 5; n++) {
      ferry_device_batch *db = NULL;
      ferry__alloc_fail_after(n);
      ferry_status st = ferry__transfer_by(paths[m], d, s, b, &modes[m], &db);
      ferry__alloc_fail_after(-1);
      if (st != FERRY_OK) {
        cr_assert(is_allocation_failure(st), "mode %d, failure %ld: %s", m, n, ferry_last_error());
        cr_assert_null(db);
        cr_assert_eq(live_bytes(d), 0, "mode %d, failure %ld leaked device memory", m, n);
        failed++;
        continue;
      }
      /* Some failures are absorbed (a stream-ordered free that cannot be queued waits
       * instead): the result must then be right. */
      cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
      expect_equal_to_snapshot(db, &snap, s);
      ferry_device_batch_free(db);
    }
    cr_assert_gt(failed, 10, "mode %d: only %d of %ld allocations failed the transfer", m, failed,
                 allocations);
  }
  int moved = 0;
  for (long n = 0; n < 200 && !moved; n++) {
    ferry_batch *out = NULL;
    ferry__alloc_fail_after(n);
    ferry_status st = ferry__packed_to(b, d, s, &out);
    ferry__alloc_fail_after(-1);
    if (st != FERRY_OK) {
      cr_assert(is_allocation_failure(st), "packed_to, failure %ld: %s", n, ferry_last_error());
      cr_assert_eq(live_bytes(d), 0);
      continue;
    }
    moved = 1;
    b = out; /* the arena batch was consumed */
  }
  cr_assert(moved);
  ferry_batch_release(b);
  snapshot_free(&snap);
  ferry_pool_close(pool);
  ferry_stream_close(s);
  ferry_device_close(d);
}
