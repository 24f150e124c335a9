/* Allocation failures anywhere in a transfer, a packed_to or a module move give
 * FERRY_ENOMEM (or FERRY_EDEVICE, the host backend's "device memory" failure), leak
 * nothing, and leave the batch or module usable. Needs -Dalloc_failure_injection=true;
 * other builds skip. */
#include "ferry/advanced.h"
#include "ferry/module.h"
#include "fixtures.h"
#include "lib/alloc.h"

static void require_injection(void) {
  if (!ferry__alloc_injection_available())
    cr_skip_test("skipped: build with -Dalloc_failure_injection=true to inject failures");
}

static uint64_t live_bytes(ferry_device *d) {
  ferry_device_synchronize(d);
  ferry_memory_stats s;
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  return s.live_bytes;
}

static int is_allocation_failure(ferry_status st) {
  return st == FERRY_ENOMEM || st == FERRY_EDEVICE;
}

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
  ferry_transfer_options modes[3] = {{.mode = FERRY_TRANSFER_DIRECT},
                                     {.mode = FERRY_TRANSFER_PACKED_THEN_CLONE},
                                     {.image_field = ""}};
  for (int m = 0; m < 3; m++) {
    /* As many failure points as a clean transfer makes allocations, and a few more. */
    long before = ferry__alloc_attempts();
    ferry_device_batch *clean = NULL;
    cr_assert_eq(ferry_transfer(d, s, b, &modes[m], &clean), FERRY_OK);
    cr_assert_eq(ferry_device_batch_wait(clean), FERRY_OK);
    ferry_device_batch_free(clean);
    long allocations = ferry__alloc_attempts() - before;
    int failed = 0;
    for (long n = 0; n < allocations + 5; n++) {
      ferry_device_batch *db = NULL;
      ferry__alloc_fail_after(n);
      ferry_status st = ferry_transfer(d, s, b, &modes[m], &db);
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
    ferry_status st = ferry_packed_to(b, d, s, &out);
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

Test(failures, module_move_survives_every_allocation_failure) {
  require_injection();
  ferry_device *home = open_device("host"), *away = NULL;
  cr_assert_eq(ferry_device_open("host", &away), FERRY_OK);
  ferry_module *m = NULL;
  cr_assert_eq(ferry_module_create("m", home, &m), FERRY_OK);
  for (int i = 0; i < 3; i++) {
    int64_t shape[1] = {100 + i};
    ferry_tensor t;
    cr_assert_eq(ferry_tensor_alloc(&t, home, NULL, FERRY_U8, 1, shape), FERRY_OK);
    memset(t.data, i + 1, t.nbytes);
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    cr_assert_eq(ferry_module_add(m, name, &t), FERRY_OK);
  }
  int completed = 0, failed = 0;
  for (long n = 0; n < 500 && !completed; n++) {
    ferry__alloc_fail_after(n);
    ferry_status st = ferry_module_ensure_on(m, away);
    ferry__alloc_fail_after(-1);
    if (st == FERRY_OK) {
      completed = 1;
      break;
    }
    cr_assert(is_allocation_failure(st), "failure %ld: %s", n, ferry_last_error());
    cr_assert_eq(ferry_module_device(m), home, "a failed move leaves the module home");
    cr_assert_eq(live_bytes(away), 0, "failure %ld leaked the partial copies", n);
    failed++;
  }
  cr_assert(completed);
  cr_assert_gt(failed, 3, "only %d allocations could fail", failed);
  for (int i = 0; i < 3; i++) {
    char name[8];
    snprintf(name, sizeof name, "t%d", i);
    ferry_tensor t;
    cr_assert_eq(ferry_module_get(m, name, &t), FERRY_OK);
    cr_assert_eq(t.device, away);
    for (size_t k = 0; k < t.nbytes; k++) cr_assert_eq(((uint8_t *)t.data)[k], i + 1);
  }
  ferry_module_unref(m);
  cr_assert_eq(live_bytes(home) + live_bytes(away), 0);
  ferry_device_close(away);
  ferry_device_close(home);
}
