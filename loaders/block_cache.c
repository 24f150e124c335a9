/* loaders/block_cache.c - the shared block cache of remote shards (block_cache.h says
 * what it promises).
 *
 * Owns the blocks: a slot per block number (NULL when not resident), the resident ones
 * also on a list for eviction, their bytes, and the byte count against the cap; the
 * read-ahead queue and its thread (ferry-ahead); all under one mutex. Readers wait on
 * one condition variable, broadcast when a fetch ends (well or not): fetches are few
 * (one per block), so a broadcast wakes few threads. The read-ahead thread waits on
 * its own for the queue.
 * Invariants: `bytes` is the sum of the resident blocks' lengths, fetching and queued
 * ones included, and never exceeds `cap`; a block is on the list iff its slot is set;
 * a queued block is in the queue iff `queued`, has no data, and is fetched by the
 * thread or taken over by the first reader that needs it (so no reader waits behind
 * the queue); it is freed only by the thread that finds it with users == 0 and
 * remaining == 0, or by an eviction of a fetched block with users == 0, or by a failed
 * fetch, all under the lock, or at close.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "lib/thread.h"
#include "loaders/block_cache.h"

typedef struct block {
  uint8_t *data;           /* NULL while fetching (or queued for the read-ahead thread) */
  size_t number, len;
  int queued;              /* waiting in the read-ahead queue, not yet begun */
  struct block *queue_next;
  uint32_t remaining;      /* members of the block still to be read */
  uint32_t users;          /* readers copying out of data now */
  uint64_t last_use;       /* the cache's tick at the last copy: LRU order */
  struct block *prev, *next;
} block;

struct ferry__block_cache {
  pthread_mutex_t mutex;   /* the cache's own, never the loader's lock */
  pthread_cond_t fetched;  /* a fetch ended */
  pthread_cond_t queued;   /* the read-ahead queue has a block, or the cache closes */
  block *queue_head, *queue_tail;
  pthread_t ahead;         /* the read-ahead thread */
  int ahead_started, closing;
  block **slots;           /* [num_blocks] */
  uint32_t *members;       /* [num_blocks] */
  size_t num_blocks, cap, bytes, peak;
  block *resident;         /* the list of resident blocks */
  uint64_t tick, fetches, evictions;
  ferry__block_fetch_fn fetch;
  void *ctx;
};

static void *read_ahead_thread(void *arg);

ferry_status ferry__block_cache_open(size_t num_blocks, const uint32_t *members, size_t cap_bytes,
                                     ferry__block_fetch_fn fetch, void *ctx, ferry__block_cache **out) {
  *out = NULL;
  ferry__block_cache *c = ferry__calloc(1, sizeof *c);
  size_t n = num_blocks ? num_blocks : 1;
  if (c) c->slots = ferry__calloc(n, sizeof *c->slots);
  if (c && c->slots) c->members = ferry__malloc(n * sizeof *c->members);
  if (!c || !c->members) {
    if (c) ferry__free(c->slots);
    ferry__free(c);
    return ferry__fail(FERRY_ENOMEM, "shards: out of memory for a cache of %zu blocks", num_blocks);
  }
  if (num_blocks) memcpy(c->members, members, num_blocks * sizeof *members);
  pthread_mutex_init(&c->mutex, NULL);
  pthread_cond_init(&c->fetched, NULL);
  pthread_cond_init(&c->queued, NULL);
  c->num_blocks = num_blocks;
  c->cap = cap_bytes;
  c->fetch = fetch;
  c->ctx = ctx;
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

/* Called with the lock held, `b` in its slot with no data; returns with the lock held
 * and b fetched, or b gone (its slot emptied, waiters woken) and the fetch's error. */
static ferry_status fetch_block(ferry__block_cache *c, block *b) {
  c->fetches++;
  pthread_mutex_unlock(&c->mutex);
  uint8_t *data = ferry__malloc(b->len ? b->len : 1);
  /* no memory for the block is no room for it: the caller reads the bytes itself */
  ferry_status st = data ? c->fetch(c->ctx, b->number, data, b->len) : FERRY_EAGAIN;
  pthread_mutex_lock(&c->mutex);
  pthread_cond_broadcast(&c->fetched);
  if (st == FERRY_OK) {
    b->data = data;
    return FERRY_OK;
  }
  unlink_block(c, b);
  ferry__free(data);
  ferry__free(b);
  return st;
}

/* Under the lock: a new block `number` of `len` bytes, resident (counted, in its slot,
 * on the list) but not fetched; NULL when there is no room (evicting into *evicted
 * where allowed, evicted NULL: no eviction) or no memory. */
static block *make_resident(ferry__block_cache *c, size_t number, size_t len, block **evicted) {
  if (evicted ? !make_room(c, len, evicted) : c->bytes + len > c->cap) return NULL;
  block *b = ferry__calloc(1, sizeof *b);
  if (!b) return NULL;
  *b = (block){.number = number, .len = len, .remaining = c->members[number], .next = c->resident};
  if (c->resident) c->resident->prev = b;
  c->resident = b;
  c->slots[number] = b;
  c->bytes += len;
  if (c->bytes > c->peak) c->peak = c->bytes;
  return b;
}

/* Under the lock: `b` out of the read-ahead queue (a reader takes it over). */
static void dequeue(ferry__block_cache *c, block *b) {
  block **at = &c->queue_head, *prev = NULL;
  while (*at != b) {
    prev = *at;
    at = &(*at)->queue_next;
  }
  *at = b->queue_next;
  if (c->queue_tail == b) c->queue_tail = prev;
  b->queued = 0;
  b->queue_next = NULL;
}

/* Under the lock: block `number` (len bytes) fetched by the read-ahead thread, when it
 * is not resident, holds a member to read (not the inside of a member too large for
 * blocks) and fits without evicting anything: read-ahead never pushes out a block a
 * reader may still need. */
static void ask_ahead(ferry__block_cache *c, size_t number, size_t len) {
  if (!c->ahead_started || c->closing || number >= c->num_blocks || c->slots[number] || !c->members[number]) return;
  block *b = make_resident(c, number, len, NULL);
  if (!b) return;
  b->queued = 1;
  if (c->queue_tail) c->queue_tail->queue_next = b;
  else c->queue_head = b;
  c->queue_tail = b;
  pthread_cond_signal(&c->queued);
}

/* The read-ahead thread: fetches the queued blocks in order, until the cache closes. */
static void *read_ahead_thread(void *arg) {
  ferry__block_cache *c = arg;
  pthread_mutex_lock(&c->mutex);
  for (;;) {
    while (!c->queue_head && !c->closing) pthread_cond_wait(&c->queued, &c->mutex);
    if (c->closing) break;
    block *b = c->queue_head;
    dequeue(c, b);
    fetch_block(c, b);  /* a failure removes it: its reader fetches it again, and sees the error */
  }
  pthread_mutex_unlock(&c->mutex);
  return NULL;
}

/* Under the lock: block `number` resident and fetched, with one more user; NULL with
 * *st set when it cannot be (no room: FERRY_EAGAIN; a failed fetch: its error). */
static block *acquire(ferry__block_cache *c, size_t number, size_t len, block **evicted, ferry_status *st) {
  for (;;) {
    block *b = c->slots[number];
    if (b && b->queued) {  /* asked for ahead but not begun: fetch it now, here */
      dequeue(c, b);
      *st = fetch_block(c, b);
      if (*st != FERRY_OK) return NULL;
    } else if (b && !b->data) {  /* being fetched: wait, then look again */
      pthread_cond_wait(&c->fetched, &c->mutex);
      continue;
    }
    if (!b) {
      b = make_resident(c, number, len, evicted);
      if (!b) {
        *st = FERRY_EAGAIN;
        return NULL;
      }
      *st = fetch_block(c, b);
      if (*st != FERRY_OK) return NULL;
    }
    b->users++;
    b->last_use = ++c->tick;
    *st = FERRY_OK;
    return b;
  }
}

ferry_status ferry__block_cache_copy(ferry__block_cache *c, size_t number, size_t block_len, size_t from, size_t len,
                                     void *dst, size_t next, size_t next_len) {
  if (number >= c->num_blocks || from > block_len || len > block_len - from)
    return ferry__fail(FERRY_EINVAL, "shards: bytes %zu+%zu are not in block %zu", from, len, number);
  block *evicted = NULL, *done = NULL;
  ferry_status st;
  pthread_mutex_lock(&c->mutex);
  block *b = acquire(c, number, block_len, &evicted, &st);
  pthread_mutex_unlock(&c->mutex);
  free_list(evicted);
  if (!b) return st;
  memcpy(dst, b->data + from, len);
  pthread_mutex_lock(&c->mutex);
  b->users--;
  /* the block's first member read: the reader has reached it, the next comes soon */
  if (b->remaining == c->members[number] && next != SIZE_MAX) ask_ahead(c, next, next_len);
  if (b->remaining) b->remaining--;
  /* The block's last member read: nobody needs it before it is fetched again. */
  if (b->remaining == 0 && b->users == 0) {
    unlink_block(c, b);
    done = b;
  }
  pthread_mutex_unlock(&c->mutex);
  free_block(done);
  return FERRY_OK;
}

void ferry__block_cache_stats_get(ferry__block_cache *c, ferry__block_cache_stats *out) {
  pthread_mutex_lock(&c->mutex);
  *out = (ferry__block_cache_stats){c->fetches, c->evictions, c->bytes, c->peak, c->cap};
  pthread_mutex_unlock(&c->mutex);
}

void ferry__block_cache_close(ferry__block_cache *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mutex);
  c->closing = 1;
  pthread_cond_signal(&c->queued);
  pthread_mutex_unlock(&c->mutex);
  if (c->ahead_started) pthread_join(c->ahead, NULL);
  free_list(c->resident);  /* blocks still queued too: they are resident, not fetched */
  pthread_cond_destroy(&c->queued);
  pthread_cond_destroy(&c->fetched);
  pthread_mutex_destroy(&c->mutex);
  ferry__free(c->slots);
  ferry__free(c->members);
  ferry__free(c);
}
