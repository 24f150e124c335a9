/* The pinned pool: fixed arenas, reuse without growth, backpressure, deferred return. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "../common/canary.h"
#include "backends.h"
#include "ferry/advanced.h"

static ferry_pool_stats stats(ferry_pool *p) {
  ferry_pool_stats s;
  ferry_pool_stats_init(&s);
  cr_assert_eq(ferry_pool_stats_get(p, &s), FERRY_OK);
  return s;
}

Test(pool, reuse_without_growth_across_1000_batches) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 3, 1 << 20, &p), FERRY_OK);
  ferry_memory_stats before;
  ferry_memory_stats_init(&before);
  ferry_device_memory_stats(d, &before);
  ferry_arena *held[2];
  for (int i = 0; i < 1000; i++) {
    ferry_arena *a;
    cr_assert_eq(ferry_pool_acquire(p, (size_t)(1 << 19) + (size_t)(i % 7) * 1000, &a), FERRY_OK);
    if (i % 3 == 2) {
      ferry_arena_release(held[0]);
      ferry_arena_release(held[1]);
      ferry_arena_release(a);
    } else {
      held[i % 3] = a;
    }
  }
  ferry_pool_stats s = stats(p);
  cr_assert_eq(s.growths, 0);
  cr_assert_eq(s.acquisitions, 1000);
  cr_assert_eq(s.reserved_bytes, 3u << 20);
  cr_assert_eq(s.peak_reserved_bytes, 3u << 20, "the pool never held more than its arenas");
  ferry_memory_stats after;
  ferry_memory_stats_init(&after);
  ferry_device_memory_stats(d, &after);
  cr_assert_eq(after.pinned_live_bytes, before.pinned_live_bytes, "no pinned growth");
  ferry_pool_close(p);
  ferry_device_close(d);
}

Test(pool, an_oversized_batch_grows_one_arena_and_is_counted) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 2, 4096, &p), FERRY_OK);
  ferry_arena *a;
  cr_assert_eq(ferry_pool_acquire(p, 1 << 20, &a), FERRY_OK);
  cr_assert_geq(ferry_arena_capacity(a), 1 << 20);
  ferry_arena_release(a);
  ferry_pool_stats s = stats(p);
  cr_assert_eq(s.growths, 1);
  cr_assert_eq(s.reserved_bytes, 4096 + ferry_arena_capacity(a));
  cr_assert_eq(ferry_pool_acquire(p, 1 << 20, &a), FERRY_OK);
  ferry_arena_release(a);
  cr_assert_eq(stats(p).growths, 1, "the grown arena is reused, not grown again");
  ferry_pool_close(p);
  ferry_device_close(d);
}

/* A request no allocator can meet fails; it used to wrap in the rounding to the growth
 * quantum and come back as an arena of 0 bytes. */
Test(pool, an_impossible_size_fails_and_leaves_the_arena_usable) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 1, 4096, &p), FERRY_OK);
  ferry_arena *a = NULL;
  cr_assert_eq(ferry_pool_acquire(p, SIZE_MAX - 10, &a), FERRY_ENOMEM);
  cr_assert_null(a);
  cr_assert(strstr(ferry_last_error(), "cannot be allocated"), "%s", ferry_last_error());
  cr_assert_eq(ferry_pool_acquire(p, 100, &a), FERRY_OK, "the arena is still free");
  cr_assert_geq(ferry_arena_capacity(a), 100);
  ferry_arena_release(a);
  ferry_pool_close(p);
  ferry_device_close(d);
}

Test(pool, a_full_pool_pushes_back) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 2, 4096, &p), FERRY_OK);
  ferry_arena *a, *b, *c;
  cr_assert_eq(ferry_pool_acquire(p, 100, &a), FERRY_OK);
  cr_assert_eq(ferry_pool_acquire(p, 100, &b), FERRY_OK);
  cr_assert_eq(ferry_pool_try_acquire(p, 100, &c), FERRY_EAGAIN);
  cr_assert_eq(stats(p).in_use, 2);
  ferry_arena_release(b);
  cr_assert_eq(ferry_pool_try_acquire(p, 100, &c), FERRY_OK);
  cr_assert_eq(c, b, "the released arena comes back");
  ferry_arena_release(a);
  ferry_arena_release(c);
  ferry_pool_close(p);
  ferry_device_close(d);
}

/* Of the free arenas that fit, the one released last comes back first (its
 * lines are the likeliest to be in cache); a bigger need still takes the biggest. */
Test(pool, the_arena_released_last_is_reused_first) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 3, 4096, &p), FERRY_OK);
  ferry_arena *held[3], *again[2];
  for (int i = 0; i < 3; i++) cr_assert_eq(ferry_pool_acquire(p, 100, &held[i]), FERRY_OK);
  static const int release_order[3] = {1, 2, 0};
  for (int i = 0; i < 3; i++) ferry_arena_release(held[release_order[i]]);
  for (int i = 0; i < 2; i++) cr_assert_eq(ferry_pool_acquire(p, 100, &again[i]), FERRY_OK);
  cr_assert_eq(again[0], held[0], "the last released arena is taken first");
  cr_assert_eq(again[1], held[2], "then the one released before it");
  for (int i = 0; i < 2; i++) ferry_arena_release(again[i]);
  ferry_pool_close(p);
  ferry_device_close(d);
}

/* The host device gives arenas of 2 MiB or more whole huge pages (it asks the
 * kernel for transparent huge pages there: filling a cold arena costs half as
 * much without a TLB miss per 4 KiB); smaller ones are page aligned. */
Test(pool, big_host_arenas_start_on_a_huge_page) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 2, 4096, &p), FERRY_OK);
  ferry_arena *small, *big;
  cr_assert_eq(ferry_pool_acquire(p, 100, &small), FERRY_OK);
  cr_assert_eq(ferry_pool_acquire(p, (size_t)5 << 20, &big), FERRY_OK);
  cr_assert_eq((uintptr_t)ferry_arena_data(small) % 4096, 0);
  cr_assert_eq((uintptr_t)ferry_arena_data(big) % ((uintptr_t)2 << 20), 0);
  memset(ferry_arena_data(big), 1, ferry_arena_capacity(big)); /* all of it is ours */
  ferry_arena_release(small);
  ferry_arena_release(big);
  ferry_pool_close(p);
  ferry_device_close(d);
}

typedef struct {
  ferry_pool *pool;
  ferry_status status;
} waiter;
static void *acquire_and_report(void *arg) {
  waiter *w = arg;
  ferry_arena *a;
  w->status = ferry_pool_acquire(w->pool, 10, &a);
  if (w->status == FERRY_OK) ferry_arena_release(a);
  return NULL;
}

Test(pool, cancel_wakes_a_blocked_acquire, .timeout = 10) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 1, 4096, &p), FERRY_OK);
  ferry_arena *a;
  cr_assert_eq(ferry_pool_acquire(p, 10, &a), FERRY_OK);
  waiter w = {p, FERRY_OK};
  pthread_t t;
  pthread_create(&t, NULL, acquire_and_report, &w);
  usleep(20000);
  ferry_pool_cancel(p);
  pthread_join(t, NULL);
  cr_assert_eq(w.status, FERRY_ECANCELED);
  ferry_arena_release(a);
  ferry_pool_close(p);
  ferry_device_close(d);
}

static void hold_stream(void *arg) {
  atomic_int *flag = arg;
  while (!atomic_load(flag)) usleep(1000);
}

Test(pool, an_arena_returns_only_after_its_event, .timeout = 10) {
  ferry_device *d = open_device("host");
  ferry_stream *s;
  cr_assert_eq(ferry_stream_open(d, &s), FERRY_OK);
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 1, 4096, &p), FERRY_OK);
  ferry_arena *a, *again;
  cr_assert_eq(ferry_pool_acquire(p, 10, &a), FERRY_OK);
  static atomic_int released;
  atomic_store(&released, 0);
  cr_assert_eq(ferry_stream_call(s, hold_stream, (void *)&released), FERRY_OK);
  ferry_event *e;
  cr_assert_eq(ferry_event_record(s, &e), FERRY_OK);
  ferry_arena_release_after(a, &e, 1); /* returns at once even though the stream is held */
  cr_assert_eq(stats(p).pending, 1);
  cr_assert_eq(ferry_pool_try_acquire(p, 10, &again), FERRY_EAGAIN, "reused before its event");
  atomic_store(&released, 1);
  cr_assert_eq(ferry_pool_acquire(p, 10, &again), FERRY_OK, "a blocking acquire waits for the event");
  cr_assert_eq(again, a);
  cr_assert_eq(stats(p).pending, 0);
  ferry_arena_release(again);
  ferry_pool_close(p);
  ferry_stream_close(s);
  ferry_device_close(d);
}

/* struct_size (device.h, above ferry_memory_stats). A program built against an older
 * header: its ferry_pool_stats lacked peak_in_use_bytes. */
typedef struct pool_stats_older {
  size_t struct_size;
  size_t arenas, in_use, pending;
  uint64_t acquisitions, growths, reserved_bytes, peak_reserved_bytes, in_use_bytes;
} pool_stats_older;
_Static_assert(sizeof(pool_stats_older) == offsetof(ferry_pool_stats, peak_in_use_bytes),
               "the older layout is a prefix of today's");

/* One built against a newer header, which appended counters this library lacks. */
typedef struct pool_stats_newer {
  ferry_pool_stats today;
  uint64_t counted_later[2];
} pool_stats_newer;

/* A pool of 2 arenas of 4096 bytes, one of them acquired (returned in *held). */
static ferry_pool *pool_with_one_arena_held(ferry_device *d, ferry_arena **held) {
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 2, 4096, &p), FERRY_OK);
  cr_assert_eq(ferry_pool_acquire(p, 100, held), FERRY_OK);
  return p;
}

Test(pool, stats_of_an_older_layout_are_written_no_further) {
  ferry_device *d = open_device("host");
  ferry_arena *a;
  ferry_pool *p = pool_with_one_arena_held(d, &a);
  union {
    pool_stats_older stats;
    unsigned char bytes[sizeof(ferry_pool_stats) + 32];
  } older;
  canary_struct(&older, sizeof older, sizeof older.stats);
  cr_assert_eq(ferry_pool_stats_get(p, (ferry_pool_stats *)&older), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(older.stats.struct_size, sizeof older.stats, "struct_size: the bytes written");
  cr_assert_eq(older.stats.arenas, 2);
  cr_assert_eq(older.stats.in_use, 1);
  cr_assert_eq(older.stats.in_use_bytes, 4096);
  expect_canary(&older, sizeof older.stats, sizeof older, "an older ferry_pool_stats");
  ferry_arena_release(a);
  ferry_pool_close(p);
  ferry_device_close(d);
}

Test(pool, stats_of_a_newer_layout_get_their_unknown_counters_zeroed) {
  ferry_device *d = open_device("host");
  ferry_arena *a;
  ferry_pool *p = pool_with_one_arena_held(d, &a);
  union {
    pool_stats_newer stats;
    unsigned char bytes[sizeof(pool_stats_newer) + 32];
  } newer;
  canary_struct(&newer, sizeof newer, sizeof newer.stats);
  cr_assert_eq(ferry_pool_stats_get(p, &newer.stats.today), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(newer.stats.today.struct_size, sizeof(ferry_pool_stats), "struct_size: this library's size");
  cr_assert_eq(newer.stats.today.in_use, 1);
  cr_assert_eq(newer.stats.today.peak_in_use_bytes, 4096);
  expect_zeros(&newer, sizeof(ferry_pool_stats), sizeof newer.stats, "a newer ferry_pool_stats");
  expect_canary(&newer, sizeof newer.stats, sizeof newer, "a newer ferry_pool_stats");
  ferry_arena_release(a);
  ferry_pool_close(p);
  ferry_device_close(d);
}

Test(pool, stats_never_initialised_are_refused) {
  ferry_device *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(d, 1, 0, &p), FERRY_OK);
  union {
    ferry_pool_stats stats;
    unsigned char bytes[sizeof(ferry_pool_stats)];
  } unset;
  canary_struct(&unset, sizeof unset, 0);
  cr_assert_eq(ferry_pool_stats_get(p, &unset.stats), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "ferry_pool_stats_get") && strstr(ferry_last_error(), "ferry_pool_stats_init"),
            "%s", ferry_last_error());
  cr_assert_eq(struct_size_in(&unset), 0);
  expect_canary(&unset, sizeof(size_t), sizeof unset, "a refused ferry_pool_stats");
  ferry_pool_close(p);
  ferry_device_close(d);
}
