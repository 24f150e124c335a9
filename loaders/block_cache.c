/* loaders/block_cache.c - the shared block cache of remote shards (block_cache.h says
 * what it promises).
 *
 * Owns the blocks: a slot per block number (NULL when not resident), the resident ones
 * also on a list for eviction, their bytes, and the byte count against the cap, all
 * under one mutex. Readers wait on one condition variable, broadcast when a fetch ends
 * (well or not): fetches are few (one per block), so a broadcast wakes few threads.
 * Invariants: `bytes` is the sum of the resident blocks' lengths, fetching ones
 * included, and never exceeds `cap`; a block is on the list iff its slot is set; it is
 * freed only by the thread that finds it with users == 0 and remaining == 0, or by an
 * eviction of a fetched block with users == 0, both under the lock.
 */
#include <pthread.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "loaders/block_cache.h"

typedef struct block {
  uint8_t *data;           /* NULL while fetching */
  size_t number, len;
  uint32_t remaining;      /* members of the block still to be read */
  uint32_t users;          /* readers copying out of data now */
  uint64_t last_use;       /* the cache's tick at the last copy: LRU order */
  struct block *prev, *next;
} block;

struct ferry__block_cache {
  pthread_mutex_t lock;
  pthread_cond_t fetched;  /* a fetch ended */
  block **slots;           /* [num_blocks] */
  uint32_t *members;       /* [num_blocks] */
  size_t num_blocks, cap, bytes, peak;
  block *resident;         /* the list of resident blocks */
  uint64_t tick, fetches, evictions;
  ferry__block_fetch_fn fetch;
  void *ctx;
};

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
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->fetched, NULL);
  c->num_blocks = num_blocks;
  c->cap = cap_bytes;
  c->fetch = fetch;
  c->ctx = ctx;
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
  pthread_mutex_unlock(&c->lock);
  uint8_t *data = ferry__malloc(b->len ? b->len : 1);
  /* no memory for the block is no room for it: the caller reads the bytes itself */
  ferry_status st = data ? c->fetch(c->ctx, b->number, data, b->len) : FERRY_EAGAIN;
  pthread_mutex_lock(&c->lock);
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

/* Under the lock: block `number` resident and fetched, with one more user; NULL with
 * *st set when it cannot be (no room: FERRY_EAGAIN; a failed fetch: its error). */
static block *acquire(ferry__block_cache *c, size_t number, size_t len, block **evicted, ferry_status *st) {
  for (;;) {
    block *b = c->slots[number];
    if (b && !b->data) {  /* another reader fetches it: wait, then look again */
      pthread_cond_wait(&c->fetched, &c->lock);
      continue;
    }
    if (!b) {
      if (!make_room(c, len, evicted)) {
        *st = FERRY_EAGAIN;
        return NULL;
      }
      b = ferry__calloc(1, sizeof *b);
      if (!b) {
        *st = FERRY_EAGAIN;
        return NULL;
      }
      *b = (block){.number = number, .len = len, .remaining = c->members[number], .next = c->resident};
      if (c->resident) c->resident->prev = b;
      c->resident = b;
      c->slots[number] = b;
      c->bytes += len;
      if (c->bytes > c->peak) c->peak = c->bytes;
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
                                     void *dst) {
  if (number >= c->num_blocks || from > block_len || len > block_len - from)
    return ferry__fail(FERRY_EINVAL, "shards: bytes %zu+%zu are not in block %zu", from, len, number);
  block *evicted = NULL, *done = NULL;
  ferry_status st;
  pthread_mutex_lock(&c->lock);
  block *b = acquire(c, number, block_len, &evicted, &st);
  pthread_mutex_unlock(&c->lock);
  free_list(evicted);
  if (!b) return st;
  memcpy(dst, b->data + from, len);
  pthread_mutex_lock(&c->lock);
  b->users--;
  if (b->remaining) b->remaining--;
  /* The block's last member read: nobody needs it before it is fetched again. */
  if (b->remaining == 0 && b->users == 0) {
    unlink_block(c, b);
    done = b;
  }
  pthread_mutex_unlock(&c->lock);
  free_block(done);
  return FERRY_OK;
}

void ferry__block_cache_stats_get(ferry__block_cache *c, ferry__block_cache_stats *out) {
  pthread_mutex_lock(&c->lock);
  *out = (ferry__block_cache_stats){c->fetches, c->evictions, c->bytes, c->peak, c->cap};
  pthread_mutex_unlock(&c->lock);
}

void ferry__block_cache_close(ferry__block_cache *c) {
  if (!c) return;
  free_list(c->resident);
  pthread_cond_destroy(&c->fetched);
  pthread_mutex_destroy(&c->lock);
  ferry__free(c->slots);
  ferry__free(c->members);
  ferry__free(c);
}
