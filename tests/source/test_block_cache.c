/* tests/source/test_block_cache.c - the block cache of remote shards
 * (source/block_cache.c) on its own, with a fetch function that makes each block's
 * bytes from its number, hands them in small pieces as a network would, and counts
 * requests (by the block they start at, and in which order) and blocks filled: a block
 * is fetched once while its members are read, freed when the last is, fetched again
 * after; the cap evicts the least recently used block and refuses (FERRY_EAGAIN) what
 * cannot fit (the read-ahead stopping short of it by the room kept for readers), but
 * never a block its fetcher has yet to copy from; a failed fetch leaves nothing behind;
 * the read-ahead fetches a pass's plan in its order, the blocks after each planned one
 * in one request, never evicting for them nor for a block with no member to read,
 * waiting for room a bounded time inside a request (one request carrying more than the
 * cap as readers free room) and as long as it takes between requests, passing over
 * what it failed in, ending at close, going from one object into the next, never
 * fetching a block twice in a pass; a reader that needs the block a run fills next
 * waits for it; blocks that all fit under the read-ahead's cap kept across passes when
 * the caller allows it, and freed as ever when they do not; many threads reading the
 * same blocks, with and without the read-ahead, fetch each once (and, under TSan, race
 * on nothing). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "ferry_config.h"
#include <criterion/criterion.h>
#include "lib/status.h"
#include "source/block_cache.h"

#define MAX_BLOCKS 64
#define PIECE 37  /* bytes handed at a time: pieces straddle blocks */

typedef struct source {
  ferry__block_info info[MAX_BLOCKS];
  size_t num_blocks;
  atomic_int requests[MAX_BLOCKS];   /* requests starting at the block */
  atomic_int filled[MAX_BLOCKS];     /* times the block's last byte was handed */
  atomic_int fail_next[MAX_BLOCKS];  /* that many requests reaching the block fail in its middle */
  atomic_int seq, order[MAX_BLOCKS]; /* order[b]: the last request starting at b was the seq-th */
  atomic_int stopped[MAX_BLOCKS];    /* times the sink ended a request after bytes of the block */
  atomic_int hold;                   /* block + 1: a request waits before the block's last piece */
  atomic_int holding, release;       /* ... says it waits there; goes on once released */
  /* at the end of a request for block 0: a read of block 1 through this cache, as another
   * reader's, between the publication of block 0 and its fetcher's own copy */
  ferry__block_cache *nested;
  ferry_status nested_status;
} source;

static uint8_t byte_of(size_t block, size_t i) { return (uint8_t)(block * 251 + i * 7); }

static ferry_status fetch(void *ctx, size_t first, size_t len, ferry__block_sink_fn sink, void *sink_ctx) {
  source *s = ctx;
  if (first == 0 && s->nested) {  /* block 0's bytes, then another reader's read of block 1 */
    ferry__block_cache *c = s->nested;
    s->nested = NULL;
    ferry_status st = fetch(ctx, first, len, sink, sink_ctx);
    s->nested_status = ferry__block_cache_copy(c, 1, 0, 10, (uint8_t[16]){0});
    return st;
  }
  atomic_fetch_add(&s->requests[first], 1);
  atomic_store(&s->order[first], atomic_fetch_add(&s->seq, 1) + 1);
  for (int i = 0; i < 4; i++) sched_yield();  /* a window for other readers to arrive */
  uint8_t piece[PIECE];
  size_t at = 0;
  for (size_t b = first; at < len; b++) {
    if (b >= s->num_blocks || (b > first && !s->info[b - 1].continues))
      return ferry__fail(FERRY_EINVAL, "the request runs past its object at block %zu", b);
    size_t blen = s->info[b].len;
    for (size_t i = 0; i < blen && at < len;) {
      if (i >= blen / 2 && atomic_load(&s->fail_next[b]) > 0) {
        atomic_fetch_sub(&s->fail_next[b], 1);
        return ferry__fail(FERRY_EIO, "block %zu: HTTP 503", b);
      }
      size_t n = 0;
      while (n < PIECE && i < blen && at + n < len) piece[n++] = byte_of(b, i++);
      if (i == blen && atomic_load(&s->hold) == (int)b + 1) {
        atomic_store(&s->holding, 1);
        while (!atomic_load(&s->release)) nanosleep(&(struct timespec){0, 1000000}, NULL);
      }
      if (i == blen) atomic_fetch_add(&s->filled[b], 1);
      int enough = sink(sink_ctx, at, piece, n);
      at += n;
      if (enough) {
        atomic_fetch_add(&s->stopped[b], 1);
        return FERRY_OK;
      }
    }
  }
  return FERRY_OK;
}

/* Copies [from, from + len) of `block` and checks the bytes. */
static ferry_status copy_checked(ferry__block_cache *c, size_t block, size_t from, size_t len) {
  uint8_t out[256];
  ferry_status st = ferry__block_cache_copy(c, block, from, len, out);
  for (size_t i = 0; st == FERRY_OK && i < len; i++)
    if (out[i] != byte_of(block, from + i)) return ferry__fail(FERRY_EFORMAT, "block %zu byte %zu", block, from + i);
  return st;
}

/* A fresh `src` of n blocks of lens[b] bytes and members[b] members each, all in one
 * object when `one_object` (so read ahead), else each its own. */
static void make_source(source *src, size_t n, const size_t *lens, const uint32_t *members, int one_object) {
  memset(src, 0, sizeof *src);
  src->num_blocks = n;
  for (size_t b = 0; b < n; b++)
    src->info[b] = (ferry__block_info){lens[b], members[b], (uint8_t)(one_object && b + 1 < n)};
}

static ferry__block_cache *open_keeping(source *src, size_t cap, long room_wait_ms, size_t ahead_cap, int keep) {
  ferry__block_cache_config config = {src->num_blocks, src->info, cap, room_wait_ms, fetch, src, ahead_cap, keep};
  ferry__block_cache *c = NULL;
  cr_assert_eq(ferry__block_cache_open(&config, &c), FERRY_OK);
  return c;
}

/* Blocks freed when read through, whatever fits (keep_if_all_fit 0). */
static ferry__block_cache *open_config(source *src, size_t cap, long room_wait_ms, size_t ahead_cap) {
  return open_keeping(src, cap, room_wait_ms, ahead_cap, 0);
}

/* A cache over a fresh source (make_source), the read-ahead allowed the whole cap. */
static ferry__block_cache *open_cache(source *src, size_t n, const size_t *lens, const uint32_t *members,
                                      int one_object, size_t cap, long room_wait_ms) {
  make_source(src, n, lens, members, one_object);
  return open_config(src, cap, room_wait_ms, 0);
}

static ferry__block_cache_stats stats_of(ferry__block_cache *c) {
  ferry__block_cache_stats s;
  ferry__block_cache_stats_get(c, &s);
  return s;
}

#define LENS(...) ((const size_t[]){__VA_ARGS__})
#define MEMBERS(...) ((const uint32_t[]){__VA_ARGS__})
#define PLAN(...) (const size_t[]){__VA_ARGS__}, sizeof((const size_t[]){__VA_ARGS__}) / sizeof(size_t)

/* A pass planned as the blocks listed, in their order. */
#define BEGIN_PASS(c, ...) cr_assert_eq(ferry__block_cache_begin_pass((c), PLAN(__VA_ARGS__)), FERRY_OK, "%s", \
                                        ferry_last_error())

Test(block_cache, a_block_is_fetched_once_for_its_members_and_freed_after_the_last) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 2, LENS(100, 40), MEMBERS(3, 1), 0, 1000, 0);
  for (int m = 0; m < 3; m++) {
    cr_assert_eq(copy_checked(c, 0, (size_t)m * 30, 30), FERRY_OK, "%s", ferry_last_error());
    cr_expect_eq(atomic_load(&src.requests[0]), 1);
    cr_expect_eq(stats_of(c).resident_bytes, m < 2 ? 100u : 0u, "member %d", m);
  }
  /* read again (the next epoch, a padding sample): fetched again, counted afresh */
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.requests[0]), 2);
  cr_expect_eq(stats_of(c).resident_bytes, 100u);
  cr_assert_eq(copy_checked(c, 1, 0, 40), FERRY_OK);
  cr_expect_eq(stats_of(c).resident_bytes, 100u, "block 1's one member read: freed");
  cr_expect_eq(ferry__block_cache_copy(c, 1, 30, 11, (uint8_t[64]){0}), FERRY_EINVAL, "past the block");
  ferry__block_cache_close(c);
}

Test(block_cache, the_cap_evicts_the_least_recently_used_and_refuses_what_cannot_fit) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 4, LENS(100, 100, 100, 201), MEMBERS(5, 5, 5, 5), 0, 200, 0);
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 1, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 0, 10, 10), FERRY_OK);  /* 0 used last: 1 is the LRU */
  cr_assert_eq(copy_checked(c, 2, 0, 10), FERRY_OK);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.evictions, 1u);
  cr_expect(s.resident_bytes <= 200 && s.peak_bytes <= 200, "resident %zu, peak %zu", s.resident_bytes, s.peak_bytes);
  cr_assert_eq(copy_checked(c, 0, 20, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.requests[0]), 1, "block 0 was kept");
  cr_assert_eq(copy_checked(c, 1, 10, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.requests[1]), 2, "block 1 was evicted, so fetched again");
  cr_expect_eq(ferry__block_cache_copy(c, 3, 0, 10, (uint8_t[16]){0}), FERRY_EAGAIN, "larger than the cap");
  cr_expect_eq(atomic_load(&src.requests[3]), 0);
  ferry__block_cache_close(c);
}

Test(block_cache, a_block_just_fetched_is_kept_for_its_fetcher_s_copy) {
  static source src;
  /* room for one block: block 1's reader, coming between the publication of block 0 and
   * the copy of the reader that fetched it, may not evict it */
  ferry__block_cache *c = open_cache(&src, 2, LENS(100, 100), MEMBERS(2, 2), 0, 100, 0);
  src.nested = c;
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(src.nested_status, FERRY_EAGAIN, "block 0 was evicted under its fetcher");
  cr_expect_eq(stats_of(c).evictions, 0u);
  ferry__block_cache_close(c);
}

Test(block_cache, a_failed_fetch_is_reported_and_leaves_nothing_behind) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 1, LENS(100), MEMBERS(2), 0, 1000, 0);
  atomic_store(&src.fail_next[0], 1);
  cr_expect_eq(copy_checked(c, 0, 0, 10), FERRY_EIO);
  cr_expect_str_eq(ferry_last_error(), "block 0: HTTP 503");
  cr_expect_eq(stats_of(c).resident_bytes, 0u);
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK, "the next reader fetches it: %s", ferry_last_error());
  cr_expect_eq(atomic_load(&src.requests[0]), 2);
  ferry__block_cache_close(c);
}

/* Waits (up to 10 s, polling) until `count` reaches `at_least`: for the read-ahead
 * thread's fetch to have got that far. What is asserted is the count, not the time. */
static int wait_for(atomic_int *count, int at_least) {
  for (int i = 0; i < 10000 && atomic_load(count) < at_least; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
  return atomic_load(count) >= at_least;
}

Test(block_cache, read_ahead_fetches_the_plan_without_evicting_and_goes_on_when_there_is_room) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 3, LENS(100, 100, 100), MEMBERS(2, 2, 2), 1, 200, 0);
  BEGIN_PASS(c, 0, 1, 2);
  /* the run fills blocks 0 and 1, finds no room for block 2 without evicting one of
   * them (their members still to come), and no wait is allowed: it ends there */
  cr_assert(wait_for(&src.stopped[1], 1), "the run did not end after block 1");
  cr_expect_eq(atomic_load(&src.filled[2]), 0);
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 1, 0, 10), FERRY_OK);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.reader_fetches, 0u, "the readers found blocks 0 and 1 read ahead");
  cr_expect_eq(s.resident_bytes, 200u);
  cr_assert_eq(copy_checked(c, 0, 10, 10), FERRY_OK);  /* block 0 read through: room */
  cr_assert(wait_for(&src.filled[2], 1), "block 2 was not read ahead once there was room for it");
  cr_assert_eq(copy_checked(c, 2, 0, 10), FERRY_OK);
  s = stats_of(c);
  cr_expect_eq(s.fetches, 2u, "the run of blocks 0-1 and one of block 2");
  cr_expect_eq(atomic_load(&src.requests[2]), 1);
  cr_expect_eq(s.reader_fetches, 0u);
  cr_expect_eq(s.evictions, 0u);
  ferry__block_cache_close(c);
}

Test(block_cache, read_ahead_fetches_the_plan_in_its_order) {
  static source src;
  /* three objects of one block each, planned 2, 0, 1: one request each, in that order */
  ferry__block_cache *c = open_cache(&src, 3, LENS(100, 100, 100), MEMBERS(1, 1, 1), 0, 1000, 0);
  BEGIN_PASS(c, 2, 0, 1);
  cr_assert(wait_for(&src.filled[1], 1), "block 1 was not read ahead");
  cr_expect_eq(atomic_load(&src.order[2]), 1);
  cr_expect_eq(atomic_load(&src.order[0]), 2);
  cr_expect_eq(atomic_load(&src.order[1]), 3);
  for (size_t b = 0; b < 3; b++) cr_assert_eq(copy_checked(c, b, 0, 10), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(stats_of(c).reader_fetches, 0u);
  ferry__block_cache_close(c);
}

Test(block_cache, a_block_needed_later_never_takes_the_room_of_one_needed_sooner) {
  static source src;
  /* room for two blocks: planned 3, 1, then 0 and 2, which wait for room (block 3, two
   * members, stays after its first read) */
  ferry__block_cache *c = open_cache(&src, 4, LENS(100, 100, 100, 100), MEMBERS(1, 1, 1, 2), 0, 200, 0);
  BEGIN_PASS(c, 3, 1, 0, 2);
  cr_assert(wait_for(&src.filled[1], 1), "block 1 was not read ahead");
  cr_assert_eq(copy_checked(c, 3, 0, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.filled[0]) + atomic_load(&src.filled[2]), 0, "a block planned later took the room");
  cr_assert_eq(copy_checked(c, 1, 0, 10), FERRY_OK);  /* block 1 read through: room for block 0 */
  cr_assert(wait_for(&src.filled[0], 1), "block 0 was not read ahead once there was room for it");
  cr_expect_eq(atomic_load(&src.filled[2]), 0, "block 2 before block 0");
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);
  cr_assert(wait_for(&src.filled[2], 1), "block 2 was not read ahead once there was room for it");
  cr_assert_eq(copy_checked(c, 2, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 3, 10, 10), FERRY_OK);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.reader_fetches, 0u);
  cr_expect_eq(s.evictions, 0u);
  cr_expect(s.peak_bytes <= 200, "peak %zu", s.peak_bytes);
  ferry__block_cache_close(c);
}

Test(block_cache, read_ahead_leaves_the_room_kept_for_readers) {
  static source src;
  make_source(&src, 3, LENS(100, 100, 100), MEMBERS(2, 1, 1), 1);
  ferry__block_cache *c = open_config(&src, 300, 0, 200);  /* read-ahead kept to 200 of the 300 bytes */
  BEGIN_PASS(c, 0, 1, 2);
  cr_assert(wait_for(&src.filled[1], 1), "block 1 was not read ahead");
  /* the reader of block 2 waits for the run, which has no room for it: it fetches it */
  cr_assert_eq(copy_checked(c, 2, 0, 10), FERRY_OK, "%s", ferry_last_error());
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(atomic_load(&src.requests[2]), 1, "block 2 was not the reader's own request");
  cr_expect_eq(s.reader_fetches, 1u);
  cr_expect_eq(s.evictions, 0u, "the reader found the room the read-ahead left");
  cr_expect_eq(s.peak_bytes, 300u);
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 0, 10, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 1, 0, 10), FERRY_OK);
  cr_expect_eq(stats_of(c).fetches, 2u);
  ferry__block_cache_close(c);
}

Test(block_cache, a_block_with_no_member_to_read_is_not_read_ahead) {
  static source src;
  /* block 1 lies inside a member too large for blocks (read by a GET of its own) */
  ferry__block_cache *c = open_cache(&src, 3, LENS(100, 100, 100), MEMBERS(1, 0, 1), 1, 1000, 0);
  BEGIN_PASS(c, 0, 1, 2);
  cr_assert(wait_for(&src.filled[2], 1), "block 2 was not read ahead");
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 2u, "a run of block 0 that stops before block 1, and one of block 2");
  cr_expect_eq(s.resident_bytes, 200u);
  ferry__block_cache_close(c);
  cr_expect_eq(atomic_load(&src.requests[1]), 0);
  cr_expect_eq(atomic_load(&src.filled[1]), 0);
}

Test(block_cache, a_block_a_run_failed_in_is_passed_over_and_fetched_by_its_reader) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 4, LENS(100, 100, 100, 100), MEMBERS(1, 1, 1, 1), 1, 1000, 0);
  atomic_store(&src.fail_next[2], 1);
  BEGIN_PASS(c, 0, 1, 2, 3);
  cr_assert(wait_for(&src.filled[3], 1), "the read-ahead did not go on after the failed block");
  for (size_t b = 0; b < 4; b++) cr_assert_eq(copy_checked(c, b, 0, 10), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(atomic_load(&src.requests[0]), 1);
  cr_expect_eq(atomic_load(&src.requests[1]), 0, "block 1 kept from the run");
  cr_expect_eq(atomic_load(&src.requests[2]), 1, "the block the run failed in: its reader's own request");
  cr_expect_eq(atomic_load(&src.requests[3]), 1, "block 3: a run of its own");
  cr_expect_eq(stats_of(c).reader_fetches, 1u);
  ferry__block_cache_close(c);
}

/* Once the read-ahead has filled block n - 1 of the plan 0 .. n - 1, blocks 0 .. n - 1
 * read (`len` bytes of each): the cache's counts after. */
static ferry__block_cache_stats read_ahead_of_readers(ferry__block_cache *c, source *src, size_t n, size_t len) {
  size_t plan[MAX_BLOCKS];
  for (size_t b = 0; b < n; b++) plan[b] = b;
  cr_assert_eq(ferry__block_cache_begin_pass(c, plan, n), FERRY_OK, "%s", ferry_last_error());
  cr_assert(wait_for(&src->filled[n - 1], 1), "block %zu was not read ahead", n - 1);
  for (size_t b = 0; b < n; b++) cr_assert_eq(copy_checked(c, b, 0, len), FERRY_OK, "%s", ferry_last_error());
  return stats_of(c);
}

Test(block_cache, the_blocks_after_are_read_ahead_in_one_request) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 6, LENS(100, 100, 100, 100, 100, 60), MEMBERS(1, 1, 1, 1, 1, 1), 1, 1000, 0);
  ferry__block_cache_stats s = read_ahead_of_readers(c, &src, 6, 50);
  cr_expect_eq(s.fetches, 1u, "one run");
  cr_expect_eq(s.reader_fetches, 0u);
  cr_expect_eq(s.blocks_fetched, 6u);
  cr_expect_eq(s.resident_bytes, 0u);
  ferry__block_cache_close(c);
}

typedef struct nested_read {
  ferry__block_cache *c;
  ferry_status st;
} nested_read;

static void *read_block_1(void *arg) {
  nested_read *r = arg;
  r->st = copy_checked(r->c, 1, 0, 10);
  return NULL;
}

Test(block_cache, a_reader_of_the_block_a_run_fills_next_waits_for_it) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 2, LENS(100, 100), MEMBERS(1, 1), 1, 1000, 0);
  atomic_store(&src.hold, 1);  /* the run waits before block 0's last piece */
  BEGIN_PASS(c, 0, 1);
  cr_assert(wait_for(&src.holding, 1), "the run did not begin");
  pthread_t t;
  nested_read r = {c, FERRY_EAGAIN};
  cr_assert_eq(pthread_create(&t, NULL, read_block_1, &r), 0);
  nanosleep(&(struct timespec){0, 50000000}, NULL);  /* time for a reader that would not wait to fetch */
  atomic_store(&src.release, 1);
  pthread_join(t, NULL);
  cr_expect_eq(r.st, FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(atomic_load(&src.requests[1]), 0, "the reader fetched the block the run was about to fill");
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 1u);
  cr_expect_eq(s.reader_fetches, 0u);
  ferry__block_cache_close(c);
}

Test(block_cache, a_freed_block_s_buffer_is_reused_by_the_next) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 5, LENS(100, 100, 100, 100, 60), MEMBERS(1, 1, 1, 1, 1), 0, 1000, 0);
  for (size_t b = 0; b < 5; b++) cr_assert_eq(copy_checked(c, b, 0, 50), FERRY_OK, "%s", ferry_last_error());
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.blocks_fetched, 5u);
  cr_expect_eq(s.buffers_allocated, 2u, "block 0's buffer served blocks 1-3; the 60-byte block 4 has its own");
  ferry__block_cache_close(c);
}

/* Under a cap of 300, block 0 (two members) and blocks 1-2 read ahead by one run,
 * which then needs room for block 3 (the plan 0-3). */
static ferry__block_cache *run_short_of_room(source *src, long room_wait_ms) {
  ferry__block_cache *c = open_cache(src, 4, LENS(100, 100, 100, 100), MEMBERS(2, 1, 1, 1), 1, 300, room_wait_ms);
  BEGIN_PASS(c, 0, 1, 2, 3);
  cr_assert(wait_for(&src->filled[2], 1), "block 2 was not read ahead");
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);  /* block 0 stays: its second member is to come */
  return c;
}

Test(block_cache, a_run_waits_for_room_and_goes_on_when_a_reader_frees_it) {
  static source src;
  ferry__block_cache *c = run_short_of_room(&src, 60000);
  cr_expect_eq(atomic_load(&src.filled[3]), 0, "block 3 read with no room for it");
  cr_assert_eq(copy_checked(c, 0, 10, 10), FERRY_OK);  /* block 0 read through: room */
  cr_assert(wait_for(&src.filled[3], 1), "the run did not go on to block 3");
  for (size_t b = 1; b < 4; b++) cr_assert_eq(copy_checked(c, b, 0, 10), FERRY_OK);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 1u, "one run");
  cr_expect(s.peak_bytes <= 300, "peak %zu", s.peak_bytes);
  ferry__block_cache_close(c);
}

Test(block_cache, a_run_with_no_room_in_time_ends_and_the_next_begins_when_there_is_room) {
  static source src;
  ferry__block_cache *c = run_short_of_room(&src, 0);
  cr_assert(wait_for(&src.stopped[2], 1), "the run did not end after block 2");
  cr_assert_eq(copy_checked(c, 0, 10, 10), FERRY_OK);  /* block 0 read through: room */
  cr_assert(wait_for(&src.filled[3], 1), "block 3 was not read ahead once there was room for it");
  for (size_t b = 1; b < 4; b++) cr_assert_eq(copy_checked(c, b, 0, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.requests[3]), 1, "block 3: a request of its own");
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 2u);
  cr_expect_eq(s.reader_fetches, 0u);
  ferry__block_cache_close(c);
}

Test(block_cache, a_run_that_fails_keeps_the_blocks_it_filled) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 3, LENS(100, 100, 100), MEMBERS(1, 1, 1), 1, 1000, 0);
  atomic_store(&src.fail_next[2], 1);
  BEGIN_PASS(c, 0, 1, 2);
  cr_assert(wait_for(&src.filled[1], 1), "block 1 was not read ahead");
  cr_assert_eq(copy_checked(c, 1, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.requests[1]) + atomic_load(&src.requests[0]), 1, "blocks 0 and 1 kept from the run");
  cr_assert_eq(copy_checked(c, 2, 0, 10), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(atomic_load(&src.requests[2]), 1, "the block the run failed in: its reader's own request");
  ferry__block_cache_close(c);
}

Test(block_cache, one_run_carries_more_than_the_cap_as_readers_free_room) {
  static source src;
  ferry__block_cache *c = open_cache(&src, 6, LENS(100, 100, 100, 100, 100, 100), MEMBERS(1, 1, 1, 1, 1, 1), 1, 300,
                                     60000);
  BEGIN_PASS(c, 0, 1, 2, 3, 4, 5);
  cr_assert(wait_for(&src.filled[2], 1), "blocks 0-2 were not read ahead");
  /* each block read frees room for one more: the run waits for it, then goes on (the
   * reader, faster than a thread's wake-up here, waits to see it) */
  for (size_t b = 0; b < 3; b++) {
    cr_assert_eq(copy_checked(c, b, 0, 10), FERRY_OK, "%s", ferry_last_error());
    cr_assert(wait_for(&src.filled[b + 3], 1), "block %zu was not read ahead when block %zu was freed", b + 3, b);
  }
  for (size_t b = 3; b < 6; b++) cr_assert_eq(copy_checked(c, b, 0, 10), FERRY_OK, "%s", ferry_last_error());
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 1u, "one run of 600 bytes under a cap of 300");
  cr_expect_eq(s.reader_fetches, 0u);
  cr_expect(s.peak_bytes <= 300, "peak %zu", s.peak_bytes);
  ferry__block_cache_close(c);
}

/* Two objects of two 100-byte blocks each, {0, 1} and {2, 3}, one member in each block. */
static ferry__block_cache *two_objects(source *src, size_t cap) {
  make_source(src, 4, LENS(100, 100, 100, 100), MEMBERS(1, 1, 1, 1), 1);
  src->info[1].continues = 0;
  return open_config(src, cap, 0, 0);
}

Test(block_cache, read_ahead_goes_from_one_object_into_the_next_in_the_plan_s_order) {
  static source src;
  ferry__block_cache *c = two_objects(&src, 1000);
  BEGIN_PASS(c, 2, 3, 0, 1);
  cr_assert(wait_for(&src.filled[1], 1), "the second object planned was not read ahead");
  cr_expect_eq(atomic_load(&src.order[2]), 1, "the object planned first was not fetched first");
  cr_expect_eq(atomic_load(&src.order[0]), 2);
  for (size_t b = 0; b < 4; b++) cr_assert_eq(copy_checked(c, b, 0, 10), FERRY_OK, "%s", ferry_last_error());
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 2u, "a run of each object");
  cr_expect_eq(s.blocks_fetched, 4u);
  cr_expect_eq(s.reader_fetches, 0u);
  ferry__block_cache_close(c);
}

Test(block_cache, a_plan_names_the_cache_s_blocks) {
  static source src;
  ferry__block_cache *c = two_objects(&src, 1000);
  cr_expect_eq(ferry__block_cache_begin_pass(c, PLAN(0, 4)), FERRY_EINVAL, "there is no block 4");
  cr_expect(strstr(ferry_last_error(), "block 4") != NULL, "%s", ferry_last_error());
  cr_expect_eq(ferry__block_cache_begin_pass(c, PLAN(0, 1, 2, 3, 0)), FERRY_EINVAL, "five blocks of four");
  cr_assert_eq(copy_checked(c, 3, 0, 10), FERRY_OK, "the pass began without a plan: %s", ferry_last_error());
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.fetches, 1u, "a refused plan was read ahead");
  cr_expect_eq(s.reader_fetches, 1u);
  ferry__block_cache_close(c);
}

Test(block_cache, read_ahead_fetches_nothing_twice_in_a_pass) {
  static source src;
  make_source(&src, 4, LENS(100, 100, 100, 100), MEMBERS(2, 1, 1, 1), 1);
  ferry__block_cache *c = open_config(&src, 400, 60000, 200);  /* read-ahead holds two blocks */
  BEGIN_PASS(c, 0, 1, 2, 3);
  cr_assert(wait_for(&src.filled[1], 1), "block 1 was not read ahead");
  /* a reader ahead of the others: block 2 read through by its own request while the run
   * waits for room for it; the run then ends there rather than fetch it again */
  cr_assert_eq(copy_checked(c, 2, 0, 10), FERRY_OK, "%s", ferry_last_error());
  cr_assert(wait_for(&src.stopped[1], 1), "the run did not end at block 2");
  cr_assert_eq(copy_checked(c, 0, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 0, 10, 10), FERRY_OK);
  cr_assert(wait_for(&src.filled[3], 1), "block 3 was not read ahead once there was room for it");
  cr_assert_eq(copy_checked(c, 1, 0, 10), FERRY_OK);
  cr_assert_eq(copy_checked(c, 3, 0, 10), FERRY_OK);
  cr_expect_eq(atomic_load(&src.filled[2]), 1, "block 2 fetched twice in the pass");
  cr_expect_eq(atomic_load(&src.requests[3]), 1, "block 3: a run of its own");
  /* the next pass: every block fetched again, once */
  BEGIN_PASS(c, 0, 1, 2, 3);
  for (size_t b = 0; b < 4; b++)
    for (size_t m = 0; m < src.info[b].members; m++)
      cr_assert_eq(copy_checked(c, b, m * 10, 10), FERRY_OK, "%s", ferry_last_error());
  ferry__block_cache_close(c);
  for (size_t b = 0; b < 4; b++) cr_expect_eq(atomic_load(&src.filled[b]), 2, "block %zu: once a pass", b);
}

/* Two passes over 4 blocks of 100 bytes in one object (2 members each), planned in
 * order, every member read; the cache's counts after. */
static ferry__block_cache_stats two_passes(ferry__block_cache *c, source *src, size_t resident_after_first[1]) {
  for (int pass = 0; pass < 2; pass++) {
    BEGIN_PASS(c, 0, 1, 2, 3);
    for (size_t b = 0; b < 4; b++)
      for (size_t m = 0; m < 2; m++) cr_assert_eq(copy_checked(c, b, m * 50, 50), FERRY_OK, "%s", ferry_last_error());
    if (!pass) resident_after_first[0] = stats_of(c).resident_bytes;
    wait_for(&src->filled[3], 1);
  }
  return stats_of(c);
}

Test(block_cache, blocks_that_all_fit_are_kept_and_fetched_once) {
  static source src;
  make_source(&src, 4, LENS(100, 100, 100, 100), MEMBERS(2, 2, 2, 2), 1);
  ferry__block_cache *c = open_keeping(&src, 1000, 0, 0, 1);
  size_t resident;
  ferry__block_cache_stats s = two_passes(c, &src, &resident);
  cr_expect_eq(s.keeps_all, 1);
  cr_expect_eq(resident, 400u, "the blocks read through stay");
  for (size_t b = 0; b < 4; b++) cr_expect_eq(atomic_load(&src.filled[b]), 1, "block %zu fetched again", b);
  cr_expect_eq(s.blocks_fetched, 4u);
  cr_expect(s.peak_bytes <= 1000, "peak %zu", s.peak_bytes);
  ferry__block_cache_close(c);
}

Test(block_cache, blocks_are_freed_when_they_do_not_all_fit_under_the_read_ahead_s_cap) {
  static source src;
  make_source(&src, 4, LENS(100, 100, 100, 100), MEMBERS(2, 2, 2, 2), 1);
  ferry__block_cache *c = open_keeping(&src, 1000, 0, 399, 1); /* the read-ahead may hold 3 */
  size_t resident;
  ferry__block_cache_stats s = two_passes(c, &src, &resident);
  cr_expect_eq(s.keeps_all, 0);
  cr_expect_eq(resident, 0u, "every block read through is freed");
  ferry__block_cache_close(c);
  for (size_t b = 0; b < 4; b++) cr_expect_eq(atomic_load(&src.filled[b]), 2, "block %zu: once a pass", b);
}

Test(block_cache, close_ends_a_run_waiting_for_room) {
  static source src;
  ferry__block_cache *c = run_short_of_room(&src, 600000);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ferry__block_cache_close(c);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* it waited up to 600 s for room; the margin is for a loaded CI machine */
  cr_expect(t1.tv_sec - t0.tv_sec < 30, "close waited %ld s", (long)(t1.tv_sec - t0.tv_sec));
  cr_expect_eq(atomic_load(&src.filled[3]), 0);
}

/* Many readers, every one reading one member of each block in turn, as workers read
 * neighbouring samples, the readers' own fetches alone (no plan: nothing read ahead):
 * every block filled once (its count reaches 0 only when all have read it), every byte
 * right; the first fetch of block 0 fails, which exactly one reader sees while the
 * others fetch it again. The case after it adds the read-ahead. */
#define READERS 8
#define BLOCKS 16
typedef struct reader {
  ferry__block_cache *cache;
  int reader, failures, wrong;
} reader;

static void *read_all(void *arg) {
  reader *r = arg;
  for (size_t b = 0; b < BLOCKS; b++) {
    ferry_status st = copy_checked(r->cache, b, (size_t)r->reader * 32, 32);
    if (st == FERRY_EIO) r->failures++;
    else if (st != FERRY_OK) r->wrong++;
  }
  return NULL;
}

Test(block_cache, readers_at_once_fetch_each_block_once) {
  static source src;
  size_t lens[BLOCKS];
  uint32_t members[BLOCKS];
  for (size_t b = 0; b < BLOCKS; b++) lens[b] = 256, members[b] = READERS;
  /* room for all: a reader far ahead of the others evicts nothing (the cap's test is above) */
  ferry__block_cache *c = open_cache(&src, BLOCKS, lens, members, 1, BLOCKS * 256, 0);
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
  cr_expect_eq(atomic_load(&src.requests[0]), 2, "block 0: the failed fetch and one more");
  for (size_t b = 0; b < BLOCKS; b++) cr_expect_eq(atomic_load(&src.filled[b]), 1, "block %zu", b);
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.evictions, 0u);
  cr_expect_eq(s.resident_bytes, 256u, "only block 0, one member short (the failed read), is left");
  ferry__block_cache_close(c);
}

Test(block_cache, readers_and_the_read_ahead_at_once_fetch_each_block_once) {
  static source src;
  size_t lens[BLOCKS], plan[BLOCKS];
  uint32_t members[BLOCKS];
  for (size_t b = 0; b < BLOCKS; b++) lens[b] = 256, members[b] = READERS, plan[b] = b;
  /* the read-ahead has room for a quarter of the blocks: readers wait for its run, take
   * blocks it has no room for, and free room as they go; the cap holds all, so that no
   * block is evicted (the cap's test is above) */
  make_source(&src, BLOCKS, lens, members, 1);
  ferry__block_cache *c = open_config(&src, BLOCKS * 256, 1000, BLOCKS / 4 * 256);
  cr_assert_eq(ferry__block_cache_begin_pass(c, plan, BLOCKS), FERRY_OK, "%s", ferry_last_error());
  pthread_t threads[READERS];
  reader readers[READERS];
  for (int i = 0; i < READERS; i++) {
    readers[i] = (reader){c, i, 0, 0};
    cr_assert_eq(pthread_create(&threads[i], NULL, read_all, &readers[i]), 0);
  }
  for (int i = 0; i < READERS; i++) {
    pthread_join(threads[i], NULL);
    cr_expect_eq(readers[i].failures + readers[i].wrong, 0, "reader %d", i);
  }
  ferry__block_cache_stats s = stats_of(c);
  cr_expect_eq(s.resident_bytes, 0u, "every block read through and freed");
  cr_expect_eq(s.evictions, 0u);
  ferry__block_cache_close(c);
  for (size_t b = 0; b < BLOCKS; b++) cr_expect_eq(atomic_load(&src.filled[b]), 1, "block %zu", b);
}
