/* source/block_cache.c - the shared block cache of remote shards (block_cache.h says
 * what it promises).
 *
 * Owns the blocks: a slot per block number (NULL when not resident), the resident ones
 * also on a list for eviction, their bytes, and the byte count against the cap; the
 * pass's plan and the read-ahead thread (ferry-ahead) that walks it, and the runs it
 * fetches; all under one mutex. Readers wait on `fetched`, broadcast when a block is
 * published, a fetch fails or the run's next block changes: fetches are few (a block
 * each, or a run), so a broadcast wakes few threads. The read-ahead thread waits on
 * `room`, broadcast when resident bytes go down, a pass begins or the cache closes:
 * between runs for a planned block to fit (no request open, so no bound), inside a run
 * for its next block to fit (a request open: room_wait_ms at most).
 * Invariants: `bytes` is the sum of the resident blocks' lengths, fetching ones
 * included, and never exceeds `cap`; read-ahead adds a block only while `bytes` stays
 * within `ahead_cap`; a block is on the list iff its slot is set; a block with no data
 * belongs to exactly one fetch, which publishes it (sets data) or removes it; it is
 * freed only by the thread that finds it with users == 0 and remaining == 0 (never
 * when keep_all), or by an eviction of a fetched block with users == 0, or by the
 * fetch that owns it, all under the lock, or at close; keep_all is fixed at open;
 * plan[0 .. plan_at) are planned blocks the read-ahead has passed (fetched, or found
 * resident or not worth it); run_next is NO_BLOCK but while the read-ahead's run
 * fills the block before it and may claim it next, so a reader waiting for it is woken
 * by that block's publication (or the run's end) and then finds it claimed or takes it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "lib/thread.h"
#include "source/block_cache.h"

/* Buffers kept beyond the cap for the next blocks: a fresh 4 MiB buffer is a thousand
 * page faults, each page zeroed, for every block fetched. */
#define SPARE_BUFFERS 2
#define NO_BLOCK SIZE_MAX

typedef struct block {
  uint8_t *data;           /* NULL while fetching */
  size_t number, len;
  uint32_t remaining;      /* members of the block still to be read */
  uint32_t users;          /* readers copying out of data now */
  uint64_t last_use;       /* the cache's tick at the last copy or the fetch: LRU order */
  struct block *prev, *next;
} block;

struct ferry__block_cache {
  pthread_mutex_t mutex;   /* the cache's own, never the loader's lock */
  pthread_cond_t fetched;  /* a block was published, a fetch failed, or run_next changed */
  pthread_cond_t room;     /* resident bytes went down, a pass began, or the cache closes
                              (CLOCK_MONOTONIC): the read-ahead thread's waits */
  pthread_t ahead;         /* the read-ahead thread */
  int ahead_started;
  atomic_int closing;      /* also read by a run's sink, without the lock */
  block **slots;           /* [num_blocks] */
  ferry__block_info *info; /* [num_blocks] */
  size_t *plan;            /* [num_blocks]: the pass's blocks in the order readers first need them */
  size_t plan_len, plan_at; /* plan_at: the read-ahead's place in the plan */
  size_t run_next;         /* the block the read-ahead's run fills next, or NO_BLOCK (Invariants) */
  uint64_t *fetched_pass;  /* [num_blocks]: the pass a block was last published in, or failed in a
                              run (0: never) */
  uint64_t pass;           /* the current pass, from 1 */
  int keep_all;            /* every block with a member fits under ahead_cap: none is freed
                              when read through, so each is fetched once, not once a pass */
  size_t num_blocks, cap, ahead_cap, bytes, peak;  /* ahead_cap <= cap: read-ahead's */
  long room_wait_ms;
  block *resident;         /* the list of resident blocks */
  size_t max_len;          /* the longest block: only buffers of this length are kept */
  uint8_t *spares[SPARE_BUFFERS];  /* buffers of max_len bytes freed by blocks, for the next */
  int num_spares;
  uint64_t tick, fetches, reader_fetches, blocks_fetched, evictions, buffers_allocated;
  ferry__block_fetch_fn fetch;
  void *ctx;
};

static void *read_ahead_thread(void *arg);

/* Under the lock: a kept buffer for a block of `len` bytes, or NULL (then the caller
 * allocates one, without the lock). */
static uint8_t *take_buffer(ferry__block_cache *c, size_t len) {
  return len == c->max_len && c->num_spares > 0 ? c->spares[--c->num_spares] : NULL;
}

/* Under the lock: `buf` (a block's `len` bytes) kept for the next block; 0 when it is
 * not (the caller frees it, without the lock). */
static int keep_buffer(ferry__block_cache *c, uint8_t *buf, size_t len) {
  if (!buf || len != c->max_len || c->num_spares == SPARE_BUFFERS) return 0;
  c->spares[c->num_spares++] = buf;
  return 1;
}

ferry_status ferry__block_cache_open(const ferry__block_cache_config *config, ferry__block_cache **out) {
  *out = NULL;
  ferry__block_cache *c = ferry__calloc(1, sizeof *c);
  size_t n = config->num_blocks ? config->num_blocks : 1;
  if (c) c->slots = ferry__calloc(n, sizeof *c->slots);
  if (c && c->slots) c->info = ferry__malloc(n * sizeof *c->info);
  if (c && c->info) c->plan = ferry__malloc(n * sizeof *c->plan);
  if (c && c->plan) c->fetched_pass = ferry__calloc(n, sizeof *c->fetched_pass);
  if (!c || !c->fetched_pass) {
    if (c) {
      ferry__free(c->slots);
      ferry__free(c->info);
      ferry__free(c->plan);
    }
    ferry__free(c);
    return ferry__fail(FERRY_ENOMEM, "shards: out of memory for a cache of %zu blocks", config->num_blocks);
  }
  if (config->num_blocks) memcpy(c->info, config->blocks, config->num_blocks * sizeof *c->info);
  size_t readable = 0; /* the bytes of the blocks with a member: all the cache may hold */
  for (size_t b = 0; b < config->num_blocks; b++) {
    if (c->info[b].len > c->max_len) c->max_len = c->info[b].len;
    if (c->info[b].members) readable += c->info[b].len;
  }
  pthread_mutex_init(&c->mutex, NULL);
  pthread_cond_init(&c->fetched, NULL);
  pthread_condattr_t monotonic;
  pthread_condattr_init(&monotonic);
  pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
  pthread_cond_init(&c->room, &monotonic);
  pthread_condattr_destroy(&monotonic);
  c->num_blocks = config->num_blocks;
  c->pass = 1;
  c->run_next = NO_BLOCK;
  c->cap = config->cap_bytes;
  c->ahead_cap = config->ahead_cap_bytes && config->ahead_cap_bytes < c->cap ? config->ahead_cap_bytes : c->cap;
  c->room_wait_ms = config->room_wait_ms > 0 ? config->room_wait_ms : 0;
  c->keep_all = config->keep_if_all_fit && readable <= c->ahead_cap;
  c->fetch = config->fetch;
  c->ctx = config->ctx;
  /* without the thread the cache still works, fetching only on demand */
  c->ahead_started = ferry__thread_start(&c->ahead, read_ahead_thread, c, "ferry-ahead", SIZE_MAX) == 0;
  *out = c;
  return FERRY_OK;
}

/* Under the lock: out of the slot and off the list; its bytes no longer count. The
 * caller frees it (without the lock). */
static void unlink_block(ferry__block_cache *c, block *b) {
  c->slots[b->number] = NULL;
  if (b->prev) b->prev->next = b->next;
  else c->resident = b->next;
  if (b->next) b->next->prev = b->prev;
  c->bytes -= b->len;
  pthread_cond_broadcast(&c->room);
}

static void free_block(block *b) {
  if (!b) return;
  ferry__free(b->data);
  ferry__free(b);
}

/* Under the lock: the least recently used fetched block nobody copies from, or NULL. */
static block *eviction_candidate(const ferry__block_cache *c) {
  block *best = NULL;
  for (block *b = c->resident; b; b = b->next)
    if (b->data && b->users == 0 && (!best || b->last_use < best->last_use)) best = b;
  return best;
}

/* Under the lock: room for `len` more bytes, evicting least recently used blocks into
 * *evicted (a list through next, for the caller to free without the lock). 0 when
 * there is no room even so. */
static int make_room(ferry__block_cache *c, size_t len, block **evicted) {
  if (len > c->cap) return 0;
  while (c->bytes + len > c->cap) {
    block *b = eviction_candidate(c);
    if (!b) return 0;
    unlink_block(c, b);
    if (keep_buffer(c, b->data, b->len)) b->data = NULL;
    c->evictions++;
    b->next = *evicted;
    *evicted = b;
  }
  return 1;
}

static void free_list(block *b) {
  while (b) {
    block *next = b->next;
    free_block(b);
    b = next;
  }
}

/* Under the lock: a new block `number`, resident (counted, in its slot, on the list)
 * but not fetched; NULL when there is no room (a reader's: under the cap, evicting into
 * *evicted; evicted NULL, the read-ahead's: under ahead_cap, evicting nothing) or no
 * memory. */
static block *make_resident(ferry__block_cache *c, size_t number, block **evicted) {
  size_t len = c->info[number].len;
  if (evicted ? !make_room(c, len, evicted) : c->bytes + len > c->ahead_cap) return NULL;
  block *b = ferry__calloc(1, sizeof *b);
  if (!b) return NULL;
  *b = (block){.number = number, .len = len, .remaining = c->info[number].members, .next = c->resident};
  if (c->resident) c->resident->prev = b;
  c->resident = b;
  c->slots[number] = b;
  c->bytes += len;
  if (c->bytes > c->peak) c->peak = c->bytes;
  return b;
}

/* Under the lock: whether read-ahead may fetch block `number`: the cache is open, the
 * block holds a member to read (not the inside of a member too large for blocks), and
 * it was not fetched already in this pass (its readers have been there), nor failed in
 * a run of it (its readers fetch it). */
static int worth_reading_ahead(const ferry__block_cache *c, size_t number) {
  return !atomic_load(&c->closing) && c->info[number].members && c->fetched_pass[number] != c->pass;
}

/* Under the lock: the block readers may wait for, as the one the run claims after the
 * block it fills now (NO_BLOCK: none); readers waiting for the one it replaces look
 * again (and fetch it themselves if nobody has). */
static void set_run_next(ferry__block_cache *c, size_t number) {
  if (c->run_next == number) return;
  c->run_next = number;
  pthread_cond_broadcast(&c->fetched);
}

/* Under the lock: block `number` taken for a run to fill next: made resident when it
 * fits under ahead_cap without evicting anything, waiting up to room_wait_ms for
 * readers to free room (readers waiting for it then fetch it themselves). NULL: the
 * run ends before it (closing, no member to read, resident or fetched already in this
 * pass, no room in time). */
static block *claim(ferry__block_cache *c, size_t number) {
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += c->room_wait_ms / 1000;
  deadline.tv_nsec += (c->room_wait_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  for (;;) {
    if (!worth_reading_ahead(c, number) || c->slots[number]) return NULL;
    block *b = make_resident(c, number, NULL);
    if (b) return b;
    set_run_next(c, NO_BLOCK);
    if (c->info[number].len > c->ahead_cap || pthread_cond_timedwait(&c->room, &c->mutex, &deadline) == ETIMEDOUT)
      return NULL;
  }
}

/* One fetch's progress: the block it fills now, which it owns until it publishes it. */
typedef struct run {
  ferry__block_cache *c;
  block *cur;      /* resident, no data; NULL once the run has ended */
  uint8_t *buf;    /* cur's bytes so far */
  size_t filled;
  size_t last;     /* the last block the request reaches */
  int for_reader;  /* a reader's fetch of its block: the reader is counted as a user when it
                      is published, before the lock is let go, so that nobody frees or
                      evicts it before the reader's copy */
  uint64_t published;
} run;

/* Under the lock: cur's bytes out to its readers. */
static void publish(ferry__block_cache *c, run *r) {
  r->cur->data = r->buf;
  r->cur->last_use = ++c->tick;  /* newer than what readers have left behind */
  if (r->for_reader) r->cur->users++;
  r->published++;
  c->fetched_pass[r->cur->number] = c->pass;
  c->blocks_fetched++;
  pthread_cond_broadcast(&c->fetched);
}

/* Under the lock: a block a fetch claimed but did not fill, removed; its waiters
 * look again (and fetch it themselves). The caller frees it without the lock. */
static void drop_unfilled(ferry__block_cache *c, block *b) {
  unlink_block(c, b);
  pthread_cond_broadcast(&c->fetched);
}

/* Under the lock: after the run has claimed `b` (NULL: it ends), the block readers may
 * wait for: the next one, when the request reaches it and it is worth reading ahead. */
static void tell_run_next(ferry__block_cache *c, const run *r, const block *b) {
  if (r->for_reader) return;  /* a reader's fetch is of its block alone */
  size_t next = b ? b->number + 1 : NO_BLOCK;
  set_run_next(c, next != NO_BLOCK && next <= r->last && worth_reading_ahead(c, next) ? next : NO_BLOCK);
}

/* cur is full: published, and the next block claimed when the request reaches it;
 * 0 when the run ends here. */
static int next_block(run *r) {
  ferry__block_cache *c = r->c;
  pthread_mutex_lock(&c->mutex);
  size_t number = r->cur->number;  /* read before publishing: a reader may free it after */
  publish(c, r);
  block *b = number < r->last ? claim(c, number + 1) : NULL;
  tell_run_next(c, r, b);
  r->buf = b ? take_buffer(c, b->len) : NULL;
  if (b && !r->buf) c->buffers_allocated++;
  pthread_mutex_unlock(&c->mutex);
  r->filled = 0;
  if (b && !r->buf) r->buf = ferry__malloc(b->len);
  r->cur = r->buf ? b : NULL;
  if (b && !r->buf) {  /* no memory for it: the run ends, its readers fetch it */
    pthread_mutex_lock(&c->mutex);
    drop_unfilled(c, b);
    pthread_mutex_unlock(&c->mutex);
    ferry__free(b);
  }
  return r->cur != NULL;
}

/* ferry__block_sink_fn: the bytes into cur, then the blocks the run claims after it. */
static int run_sink(void *ctx, size_t at, const uint8_t *bytes, size_t n) {
  run *r = ctx;
  (void)at;  /* bytes come in order: cur and filled say where they go */
  while (n > 0) {
    if (!r->cur || atomic_load(&r->c->closing)) return 1;
    size_t k = n < r->cur->len - r->filled ? n : r->cur->len - r->filled;
    memcpy(r->buf + r->filled, bytes, k);
    r->filled += k;
    bytes += k;
    n -= k;
    if (r->filled == r->cur->len && !next_block(r)) return 1;
  }
  return 0;
}

/* Under the lock: the last block a run from `number` asks for: the object's blocks
 * after it while each has a member to read. The claims, not the request's length,
 * keep the run under the cap: a reader frees room as the run goes, so one request may
 * carry more than the cap in all. */
static size_t run_last(const ferry__block_cache *c, size_t number) {
  size_t last = number;
  while (c->info[last].continues && last + 1 < c->num_blocks && c->info[last + 1].members) last++;
  return last;
}

/* Called with the lock held and `b` claimed (resident, no data): one request for b
 * (for_reader: b alone, the caller counted as its user; else the run: and the blocks
 * after it, as it claims them); returns with the lock held, FERRY_OK when b was
 * published, else b removed (its waiters woken) and the fetch's error (FERRY_EAGAIN: no
 * memory for it). */
static ferry_status fetch_run(ferry__block_cache *c, block *b, int for_reader) {
  run r = {.c = c, .cur = b, .last = for_reader ? b->number : run_last(c, b->number), .for_reader = for_reader};
  size_t len = 0;
  for (size_t k = b->number; k <= r.last; k++) len += c->info[k].len;
  c->fetches++;
  if (for_reader) c->reader_fetches++;
  tell_run_next(c, &r, b);
  if (!(r.buf = take_buffer(c, b->len))) c->buffers_allocated++;
  pthread_mutex_unlock(&c->mutex);
  if (!r.buf) r.buf = ferry__malloc(b->len);
  ferry_status st = r.buf ? c->fetch(c->ctx, b->number, len, run_sink, &r) : FERRY_EAGAIN;
  if (st == FERRY_OK && r.cur && !atomic_load(&c->closing))
    st = ferry__fail(FERRY_EFORMAT, "shards: block %zu: its fetch ended %zu bytes into its %zu", r.cur->number,
                     r.filled, r.cur->len);
  pthread_mutex_lock(&c->mutex);
  tell_run_next(c, &r, NULL);
  if (r.cur) {  /* the block being filled when the fetch failed or the cache closed */
    if (!for_reader) c->fetched_pass[r.cur->number] = c->pass;  /* read-ahead passes it over: its readers fetch it */
    drop_unfilled(c, r.cur);
    int kept = keep_buffer(c, r.buf, r.cur->len);
    pthread_mutex_unlock(&c->mutex);
    if (!kept) ferry__free(r.buf);
    ferry__free(r.cur);
    pthread_mutex_lock(&c->mutex);
  }
  if (r.published) return FERRY_OK;
  return st < 0 ? st : FERRY_EAGAIN;
}

/* Under the lock: the plan's next block to read ahead, from plan_at on: the first not
 * resident, worth reading ahead and within the read-ahead's cap; the blocks before it
 * are passed over for good (a block held now and freed later in the pass is its
 * readers' to fetch). NO_BLOCK: the plan is done. */
static size_t next_planned(ferry__block_cache *c) {
  for (; c->plan_at < c->plan_len; c->plan_at++) {
    size_t number = c->plan[c->plan_at];
    if (!c->slots[number] && worth_reading_ahead(c, number) && c->info[number].len <= c->ahead_cap) return number;
  }
  return NO_BLOCK;
}

/* The read-ahead thread: a run from each planned block in turn, as room allows, until
 * the cache closes. A failed run removes the block it was filling and marks it fetched
 * in the pass, so that the plan passes it over: its readers fetch it again, and see the
 * error if it stands. */
static void *read_ahead_thread(void *arg) {
  ferry__block_cache *c = arg;
  pthread_mutex_lock(&c->mutex);
  while (!atomic_load(&c->closing)) {
    size_t number = next_planned(c);
    block *b = number == NO_BLOCK ? NULL : make_resident(c, number, NULL);
    if (!b) {  /* the plan done, or no room for its next block yet */
      pthread_cond_wait(&c->room, &c->mutex);
      continue;
    }
    fetch_run(c, b, 0);  /* b published (resident), or failed and marked: next_planned passes it */
  }
  pthread_mutex_unlock(&c->mutex);
  return NULL;
}

/* Under the lock: block `number` resident and fetched, with one more user; NULL with
 * *st set when it cannot be (no room: FERRY_EAGAIN; a failed fetch: its error). */
static block *acquire(ferry__block_cache *c, size_t number, block **evicted, ferry_status *st) {
  for (;;) {
    block *b = c->slots[number];
    if (b ? !b->data : number == c->run_next) {  /* being fetched, or the run's next: wait, look again */
      pthread_cond_wait(&c->fetched, &c->mutex);
      continue;
    }
    if (!b) {
      if (!(b = make_resident(c, number, evicted))) {
        *st = FERRY_EAGAIN;
        return NULL;
      }
      return (*st = fetch_run(c, b, 1)) == FERRY_OK ? b : NULL;  /* the user counted at publish */
    }
    b->users++;
    b->last_use = ++c->tick;
    *st = FERRY_OK;
    return b;
  }
}

ferry_status ferry__block_cache_copy(ferry__block_cache *c, size_t number, size_t from, size_t len, void *dst) {
  if (number >= c->num_blocks || from > c->info[number].len || len > c->info[number].len - from)
    return ferry__fail(FERRY_EINVAL, "shards: bytes %zu+%zu are not in block %zu", from, len, number);
  block *evicted = NULL, *done = NULL;
  ferry_status st;
  pthread_mutex_lock(&c->mutex);
  block *b = acquire(c, number, &evicted, &st);
  pthread_mutex_unlock(&c->mutex);
  free_list(evicted);
  if (!b) return st;
  memcpy(dst, b->data + from, len);
  pthread_mutex_lock(&c->mutex);
  b->users--;
  if (b->remaining) b->remaining--;
  /* The block's last member read: nobody needs it before the next pass, which fetches
   * it again unless every block stays. */
  if (b->remaining == 0 && b->users == 0 && !c->keep_all) {
    unlink_block(c, b);
    if (keep_buffer(c, b->data, b->len)) b->data = NULL;
    done = b;
  }
  pthread_mutex_unlock(&c->mutex);
  free_block(done);
  return FERRY_OK;
}

void ferry__block_cache_stats_get(ferry__block_cache *c, ferry__block_cache_stats *out) {
  pthread_mutex_lock(&c->mutex);
  *out = (ferry__block_cache_stats){c->fetches, c->reader_fetches, c->blocks_fetched, c->evictions, c->buffers_allocated, c->bytes, c->peak,
                                    c->cap, c->keep_all};
  pthread_mutex_unlock(&c->mutex);
}

/* Kept blocks count their members again, as a fresh block's. The previous pass's last
 * readers may still be taking counts off; with every block kept a count frees nothing. */
ferry_status ferry__block_cache_begin_pass(ferry__block_cache *c, const size_t *plan, size_t n) {
  size_t bad = n > c->num_blocks ? n : 0;
  for (size_t i = 0; !bad && i < n; i++)
    if (plan[i] >= c->num_blocks) bad = i + 1;
  pthread_mutex_lock(&c->mutex);
  c->pass++;
  if (c->keep_all)
    for (block *b = c->resident; b; b = b->next)
      if (b->data) b->remaining = c->info[b->number].members;
  c->plan_len = bad ? 0 : n;
  if (c->plan_len) memcpy(c->plan, plan, n * sizeof *plan);
  c->plan_at = 0;
  pthread_cond_broadcast(&c->room);
  pthread_mutex_unlock(&c->mutex);
  if (n > c->num_blocks)
    return ferry__fail(FERRY_EINVAL, "shards: a plan of %zu blocks for a cache of %zu", n, c->num_blocks);
  if (bad)
    return ferry__fail(FERRY_EINVAL, "shards: the plan's block %zu is not one of the cache's %zu", plan[bad - 1],
                       c->num_blocks);
  return FERRY_OK;
}

void ferry__block_cache_close(ferry__block_cache *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mutex);
  atomic_store(&c->closing, 1);
  pthread_cond_broadcast(&c->room);
  pthread_mutex_unlock(&c->mutex);
  if (c->ahead_started) pthread_join(c->ahead, NULL);
  free_list(c->resident);
  while (c->num_spares > 0) ferry__free(c->spares[--c->num_spares]);
  pthread_cond_destroy(&c->room);
  pthread_cond_destroy(&c->fetched);
  pthread_mutex_destroy(&c->mutex);
  ferry__free(c->slots);
  ferry__free(c->info);
  ferry__free(c->plan);
  ferry__free(c->fetched_pass);
  ferry__free(c);
}
