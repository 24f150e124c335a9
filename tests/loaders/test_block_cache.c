/* tests/loaders/test_block_cache.c - the block cache of remote shards
 * (loaders/block_cache.c) on its own, with a fetch function that makes each block's
 * bytes from its number and counts the fetches: a block is fetched once while its
 * members are read, freed when the last is, fetched again after; the cap evicts the
 * least recently used block and refuses (FERRY_EAGAIN) what cannot fit; a failed
 * fetch leaves nothing behind; the first read of a block reads the next ahead, never
 * evicting for it nor for a block with no member to read, and a failed read-ahead
 * is fetched again by its reader; many threads reading the same blocks fetch each
 * once (and, under TSan, race on nothing). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "ferry_config.h"
#include "loader_fixture.h"
#include "lib/status.h"
#include "loaders/block_cache.h"

#define MAX_BLOCKS 64

typedef struct source {
  atomic_int fetches[MAX_BLOCKS];
  atomic_int fail_next[MAX_BLOCKS];  /* that many fetches of the block fail */
} source;

static uint8_t byte_of(size_t block, size_t i) { return (uint8_t)(block * 251 + i * 7); }

static ferry_status fetch(void *ctx, size_t block, uint8_t *buf, size_t len) {
  source *s = ctx;
  atomic_fetch_add(&s->fetches[block], 1);
  for (int i = 0; i < 4; i++) sched_yield();  /* a window for other readers to arrive */
  if (atomic_load(&s->fail_next[block]) > 0) {
    atomic_fetch_sub(&s->fail_next[block], 1);
    return ferry__fail(FERRY_EIO, "block %zu: HTTP 503", block);
  }
  for (size_t i = 0; i < len; i++) buf[i] = byte_of(block, i);
  return FERRY_OK;
}

/* Copies [from, from + len) of `block` and checks the bytes. */
static ferry_status copy_checked(ferry__block_cache *c, size_t block, size_t block_len, size_t from, size_t len) {
  uint8_t out[256];
  ferry_status st = ferry__block_cache_copy(c, block, block_len, from, len, out, SIZE_MAX, 0);
  for (size_t i = 0; st == FERRY_OK && i < len; i++)
    if (out[i] != byte_of(block, from + i)) return ferry__fail(FERRY_EFORMAT, "block %zu byte %zu", block, from + i);
  return st;
}

/* A cache of n blocks over a fresh `src`. */
static ferry__block_cache *open_cache(source *src, size_t n, const uint32_t *members, size_t cap) {
  memset(src, 0, sizeof *src);
  ferry__block_cache *c = NULL;
  cr_assert_eq(ferry__block_cache_open(n, members, cap, fetch, src, &c), FERRY_OK);
  return c;
}

static ferry__block_cache_stats stats_of(ferry__block_cache *c) {
  ferry__block_cache_stats s;
  ferry__block_cache_stats_get(c, &s);
  return s;
}

Test(block_cache, a_block_is_fetched_once_for_its_members_and_freed_after_the_last) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 2, (uint32_t[]){3, 1}, 1000);
  for (int m = 0; m < 3; m++) {
    cr_assert_eq(copy_checked(c, 0, 100, (size_t)m * 30, 30), FERRY_OK, "%s", ferry_last_error());
    cr_expect_eq(atomic_load(&src.fetches[0]), 1);
    cr_expect_eq(stats_of(c).resident_bytes, m < 2 ? 100u : 0u, "member %d", m);
  }
  /* read again (the next epoch, a padding sample): fetched again, counted afresh */
  cr_assert_eq(copy_checked(c, 0, 100, 0, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.fetches[0]), 2);
  cr_expect_eq(stats_of(c).resident_bytes, 100u);
  cr_assert_eq(copy_checked(c, 1, 40, 0, 40), FERRY_OK);
  cr_expect_eq(stats_of(c).resident_bytes, 100u, "block 1's one member read: freed");
  cr_expect_eq(ferry__block_cache_copy(c, 1, 40, 30, 11, (uint8_t[64]){0}, SIZE_MAX, 0), FERRY_EINVAL,
               "past the block");
  ferry__block_cache_close(c);
}

Test(block_cache, the_cap_evicts_the_least_recently_used_and_refuses_what_cannot_fit) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 4, (uint32_t[]){5, 5, 5, 5}, 200);
  cr_assert_eq(copy_checked(c, 0, 100, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 1, 100, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 0, 100, 10, 10), FERRY_OK);  /* 0 used last: 1 is the LRU */
  cr_assert_eq(copy_checked(c, 2, 100, 0, 10), FERRY_OK);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.evictions, 1u);
  cr_expect(s.resident_bytes <= 200 && s.peak_bytes <= 200, "resident %zu, peak %zu", s.resident_bytes, s.peak_bytes);
  cr_assert_eq(copy_checked(c, 0, 100, 20, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.fetches[0]), 1, "block 0 was kept");
  cr_assert_eq(copy_checked(c, 1, 100, 10, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.fetches[1]), 2, "block 1 was evicted, so fetched again");
  cr_expect_eq(ferry__block_cache_copy(c, 3, 201, 0, 10, (uint8_t[16]){0}, SIZE_MAX, 0), FERRY_EAGAIN,
               "larger than the cap");
  cr_expect_eq(atomic_load(&src.fetches[3]), 0);
  ferry__block_cache_close(c);
}

Test(block_cache, a_failed_fetch_is_reported_and_leaves_nothing_behind) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 1, (uint32_t[]){2}, 1000);
  atomic_store(&src.fail_next[0], 1);
  cr_expect_eq(copy_checked(c, 0, 100, 0, 10), FERRY_EIO);
  cr_expect_str_eq(ferry_last_error(), "block 0: HTTP 503");
  cr_expect_eq(stats_of(c).resident_bytes, 0u);
  cr_assert_eq(copy_checked(c, 0, 100, 0, 10), FERRY_OK, "the next reader fetches it: %s", ferry_last_error());
  cr_expect_eq(atomic_load(&src.fetches[0]), 2);
  ferry__block_cache_close(c);
}

/* Waits (up to 10 s, polling) until `count` reaches `at_least`: for the read-ahead
 * thread's fetch to have begun. What is asserted is the count, not the time. */
static int wait_for(atomic_int *count, int at_least) {
  for (int i = 0; i < 10000 && atomic_load(count) < at_least; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
  return atomic_load(count) >= at_least;
}

static ferry_status copy_ahead(ferry__block_cache *c, size_t block, size_t from, size_t next) {
  uint8_t out[16];
  return ferry__block_cache_copy(c, block, 100, from, 10, out, next, 100);
}

Test(block_cache, the_first_read_of_a_block_reads_the_next_ahead_without_evicting) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 3, (uint32_t[]){2, 2, 2}, 200);
  cr_assert_eq(copy_ahead(c, 0, 0, 1), FERRY_OK);
  cr_assert(wait_for(&src.fetches[1], 1), "block 1 was not read ahead");
  /* block 1's first read asks for block 2: no room without evicting block 0 (its
   * second member still to come), so nothing is asked */
  cr_assert_eq(copy_ahead(c, 1, 0, 2), FERRY_OK);
  cr_expect_eq(atomic_load(&src.fetches[1]), 1, "the reader found block 1 read ahead");
  cr_expect_eq(stats_of(c).resident_bytes, 200u);
  cr_assert_eq(copy_ahead(c, 1, 10, 2), FERRY_OK);
  cr_assert_eq(copy_ahead(c, 0, 10, 1), FERRY_OK);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 2u);
  cr_expect_eq(s.resident_bytes, 0u, "blocks 0 and 1 read through: freed");
  ferry__block_cache_close(c);
  cr_expect_eq(atomic_load(&src.fetches[2]), 0);
}

Test(block_cache, a_block_with_no_member_to_read_is_not_read_ahead) {
  static source src;
  /* block 1 lies inside a member too large for blocks (read by a GET of its own) */
  ferry__block_cache *c = open_cache(&src, 3, (uint32_t[]){1, 0, 1}, 1000);
  cr_assert_eq(copy_ahead(c, 0, 0, 1), FERRY_OK);
  /* asked ahead, it would be resident from the ask on (queued or being fetched) */
  cr_expect_eq(stats_of(c).resident_bytes, 0u, "block 1 was asked for ahead");
  ferry__block_cache_close(c);
  cr_expect_eq(atomic_load(&src.fetches[1]), 0);
}

Test(block_cache, a_failed_read_ahead_is_fetched_again_by_its_reader) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 2, (uint32_t[]){1, 1}, 1000);
  atomic_store(&src.fail_next[1], 1);
  cr_assert_eq(copy_ahead(c, 0, 0, 1), FERRY_OK);
  cr_assert(wait_for(&src.fetches[1], 1), "block 1 was not read ahead");
  cr_assert_eq(copy_checked(c, 1, 100, 0, 10), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(atomic_load(&src.fetches[1]), 2);
  ferry__block_cache_close(c);
}

/* Many readers, every one reading one member of each block in turn, as workers read
 * neighbouring samples: every block fetched once (its count reaches 0 only when all
 * have read it), every byte right; the first fetch of block 0 fails, which exactly one
 * reader sees while the others fetch it again. */
#define READERS 8
#define BLOCKS 16
typedef struct reader {
  ferry__block_cache *cache;
  int reader, failures, wrong;
} reader;

static void *read_all(void *arg) {
  reader *r = arg;
  for (size_t b = 0; b < BLOCKS; b++) {
    ferry_status st = copy_checked(r->cache, b, 256, (size_t)r->reader * 32, 32);
    if (st == FERRY_EIO) r->failures++;
    else if (st != FERRY_OK) r->wrong++;
  }
  return NULL;
}

Test(block_cache, readers_at_once_fetch_each_block_once) {
  static source src;
  uint32_t members[BLOCKS];
  for (size_t b = 0; b < BLOCKS; b++) members[b] = READERS;
  /* room for all: a reader far ahead of the others evicts nothing (the cap's test is above) */
  ferry__block_cache *c = open_cache(&src, BLOCKS, members, BLOCKS * 256);
  atomic_store(&src.fail_next[0], 1);
  pthread_t threads[READERS];
  reader readers[READERS];
  for (int i = 0; i < READERS; i++) {
    readers[i] = (reader){c, i, 0, 0};
    cr_assert_eq(pthread_create(&threads[i], NULL, read_all, &readers[i]), 0);
  }
  int failures = 0;
  for (int i = 0; i < READERS; i++) {
    pthread_join(threads[i], NULL);
    failures += readers[i].failures;
    cr_expect_eq(readers[i].wrong, 0, "reader %d read wrong bytes", i);
  }
  cr_expect_eq(failures, 1);
  cr_expect_eq(atomic_load(&src.fetches[0]), 2, "block 0: the failed fetch and one more");
  for (size_t b = 1; b < BLOCKS; b++) cr_expect_eq(atomic_load(&src.fetches[b]), 1, "block %zu", b);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.evictions, 0u);
  cr_expect_eq(s.resident_bytes, 256u, "only block 0, one member short (the failed read), is left");
  ferry__block_cache_close(c);
}
