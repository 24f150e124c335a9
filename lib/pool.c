/* lib/pool.c - a fixed set of pinned arenas with backpressure and deferred return.
 *
 * Owns: `count` arenas (the number never changes after open), each arena's pinned
 * memory (ferry_device_host_alloc of the pool's device), and, while an arena is
 * pending, the events it waits for.
 * Callers: acquire, try_acquire, release, cancel and stats from any threads at once
 * (the loader's coordinator acquires, the consumer releases); open and close from one
 * thread, close after every other call has returned.
 *
 * An arena's life:  FREE --acquire--> IN_USE --release_after--> PENDING
 *                   PENDING --all its events complete--> FREE
 *                   PENDING --an acquirer waits on it--> REAPING --> FREE
 * Invariants, under `lock`:
 *   - every arena is in exactly one of those states; stats.in_use counts IN_USE,
 *     stats.pending counts PENDING and REAPING;
 *   - stats.in_use_bytes is the sum of the capacities of the arenas that are not
 *     FREE; stats.reserved_bytes the sum of all capacities. A capacity changes only
 *     while its arena is FREE (ensure_capacity, before it is handed out);
 *   - a FREE or IN_USE arena owns no events; a PENDING or REAPING one owns `nevents`
 *     events, destroyed when it goes back to FREE;
 *   - pending_since is the arena's place in the order of releases (release_seq only
 *     grows): the oldest pending arena is the likeliest to complete first, and the
 *     newest free one the likeliest to be warm in cache;
 *   - the lock is never held while waiting for an event (reap_completed only
 *     queries) or calling out of lib/: the pool never calls back into the loader.
 * Not done here: the pool never hands out more arenas than it has (that is the
 * backpressure), never shrinks an arena, never clears memory, and never takes an arena
 * back on its own: close frees acquired arenas too.
 */
#include <pthread.h>
#include <string.h>

#include "ferry/pool.h"
#include "lib/alloc.h"
#include "lib/status.h"
#include "lib/struct_size.h"

enum { GROW_QUANTUM = 64 * 1024 };

typedef enum { ARENA_FREE, ARENA_IN_USE, ARENA_PENDING, ARENA_REAPING } arena_state;

struct ferry_arena {
  ferry_pool *pool;
  void *data;
  size_t capacity;
  arena_state state;
  uint64_t pending_since;  /* order of release, to wait on the oldest first */
  ferry_event **events;
  size_t nevents;
};

struct ferry_pool {
  ferry_device *device;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  ferry_arena *arenas;
  size_t count;
  int canceled;
  uint64_t release_seq;
  ferry_pool_stats stats;
};

static void destroy_events(ferry_arena *a) {
  for (size_t i = 0; i < a->nevents; i++) ferry_event_destroy(a->events[i]);
  ferry__free(a->events);
  a->events = NULL;
  a->nevents = 0;
}

static void update_usage(ferry_pool *p, int64_t delta) {
  p->stats.in_use_bytes += delta;
  if (p->stats.in_use_bytes > p->stats.peak_in_use_bytes)
    p->stats.peak_in_use_bytes = p->stats.in_use_bytes;
}

/* PENDING or REAPING -> FREE. */
static void mark_free(ferry_pool *p, ferry_arena *a) {
  destroy_events(a);
  a->state = ARENA_FREE;
  p->stats.pending--;
  update_usage(p, -(int64_t)a->capacity);
}

/* Move every pending arena whose events have all completed back to free. */
static void reap_completed(ferry_pool *p) {
  for (size_t i = 0; i < p->count; i++) {
    ferry_arena *a = &p->arenas[i];
    if (a->state != ARENA_PENDING) continue;
    /* A failed query (negative) counts as done: an event of a stream in error would
     * otherwise hold its arena out of use for good. */
    size_t done = 0;
    while (done < a->nevents && ferry_event_query(a->events[done]) != 0) done++;
    if (done == a->nevents) mark_free(p, a);
  }
}

ferry_status ferry_pool_open(ferry_device *device, size_t count, size_t initial_bytes,
                             ferry_pool **out) {
  if (!device || !out || count == 0)
    return ferry__fail(FERRY_EINVAL, "ferry_pool_open: a device, an out pointer and at least one arena are required");
  ferry_pool *p = ferry__calloc(1, sizeof *p);
  ferry_arena *arenas = p ? ferry__calloc(count, sizeof *arenas) : NULL;
  if (!arenas) {
    ferry__free(p);
    return ferry__fail(FERRY_ENOMEM, "pool: out of memory for %zu arenas", count);
  }
  p->device = device;
  p->arenas = arenas;
  p->count = count;
  p->stats.arenas = count;
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->changed, NULL);
  /* close copes with a half-built pool: the arenas not reached yet are zeroed (no
   * memory, no events), and the lock already exists. */
  for (size_t i = 0; i < count && initial_bytes; i++) {
    ferry_status st = ferry_device_host_alloc(device, initial_bytes, &arenas[i].data);
    if (st != FERRY_OK) {
      ferry_pool_close(p);
      return ferry__error_prefix(st, "pool: arena %zu of %zu: ", i, count);
    }
    arenas[i].capacity = initial_bytes;
    p->stats.reserved_bytes += initial_bytes;
  }
  for (size_t i = 0; i < count; i++) arenas[i].pool = p;
  p->stats.peak_reserved_bytes = p->stats.reserved_bytes;
  *out = p;
  return FERRY_OK;
}

void ferry_pool_close(ferry_pool *pool) {
  if (!pool) return;
  /* A pending arena may still be read by a queued copy: wait for its events before its
   * memory goes. */
  for (size_t i = 0; i < pool->count; i++) {
    ferry_arena *a = &pool->arenas[i];
    for (size_t e = 0; e < a->nevents; e++) ferry_event_synchronize(a->events[e]);
    destroy_events(a);
    ferry_device_host_free(pool->device, a->data);
  }
  pthread_mutex_destroy(&pool->lock);
  pthread_cond_destroy(&pool->changed);
  ferry__free(pool->arenas);
  ferry__free(pool);
}

/* A free arena, NULL if none is free: one already big enough, and of those the
 * one released last, whose lines are likeliest still in cache (writing a batch
 * into cold memory costs the workers more than anything but decoding). */
static ferry_arena *pick_free(ferry_pool *p, size_t bytes) {
  ferry_arena *fit = NULL, *any = NULL;
  for (size_t i = 0; i < p->count; i++) {
    ferry_arena *a = &p->arenas[i];
    if (a->state != ARENA_FREE) continue;
    if (a->capacity >= bytes && (!fit || a->pending_since > fit->pending_since)) fit = a;
    /* When none fits, the largest grows: reserved bytes grow the least. */
    if (!any || a->capacity > any->capacity) any = a;
  }
  return fit ? fit : any;
}

static ferry_arena *oldest_pending(ferry_pool *p) {
  ferry_arena *oldest = NULL;
  for (size_t i = 0; i < p->count; i++) {
    ferry_arena *a = &p->arenas[i];
    if (a->state == ARENA_PENDING && (!oldest || a->pending_since < oldest->pending_since))
      oldest = a;
  }
  return oldest;
}

/* Make a free arena at least `bytes` large; counted as growth if it had memory.
 * An arena sized on demand gets a quarter more than asked: batch sizes wander (a
 * loader's batches differ in instance counts), and each growth is a fresh pinned
 * allocation whose pages fault in as they are first written. */
static ferry_status ensure_capacity(ferry_pool *p, ferry_arena *a, size_t bytes) {
  if (a->capacity >= bytes) return FERRY_OK;
  /* Past this the rounding below would wrap to a tiny size: no allocator can give
   * it anyway, so say so rather than hand out an arena smaller than asked. */
  if (bytes > SIZE_MAX / 2)
    return ferry__fail(FERRY_ENOMEM, "pool: an arena of %zu bytes cannot be allocated", bytes);
  size_t ask = bytes <= SIZE_MAX - bytes / 4 ? bytes + bytes / 4 : bytes;
  size_t want = (ask + GROW_QUANTUM - 1) / GROW_QUANTUM * GROW_QUANTUM;
  /* The new memory first, then the old freed: an arena that cannot grow keeps what it
   * had and stays FREE, usable by a smaller batch. This runs under the pool's lock (a
   * cudaHostAlloc can take milliseconds), which the quarter of headroom keeps rare. */
  void *data = NULL;
  ferry_status st = ferry_device_host_alloc(p->device, want, &data);
  if (st != FERRY_OK) return ferry__error_prefix(st, "pool: growing an arena to %zu bytes: ", want);
  if (a->capacity) p->stats.growths++;
  ferry_device_host_free(p->device, a->data);
  p->stats.reserved_bytes += want - a->capacity;
  if (p->stats.reserved_bytes > p->stats.peak_reserved_bytes)
    p->stats.peak_reserved_bytes = p->stats.reserved_bytes;
  a->data = data;
  a->capacity = want;
  return FERRY_OK;
}

/* Wait for the oldest pending arena's events with the lock dropped, then free it.
 * REAPING, set before the lock is dropped, keeps everyone else off the arena meanwhile:
 * oldest_pending skips it, so no second acquirer waits on it, and reap_completed skips
 * it, so nobody destroys the events this thread is waiting on. */
static void wait_oldest(ferry_pool *p, ferry_arena *a) {
  a->state = ARENA_REAPING;
  pthread_mutex_unlock(&p->lock);
  for (size_t i = 0; i < a->nevents; i++) ferry_event_synchronize(a->events[i]);
  pthread_mutex_lock(&p->lock);
  mark_free(p, a);
  pthread_cond_broadcast(&p->changed);
}

static ferry_status acquire(ferry_pool *p, size_t bytes, int block, ferry_arena **out) {
  pthread_mutex_lock(&p->lock);
  ferry_status st = FERRY_OK;
  for (;;) {
    /* Checked on every turn: a waiter woken by cancel (or back from waiting on an
     * arena's events) leaves at once. Cancel is for good. */
    if (p->canceled) {
      st = ferry__fail(FERRY_ECANCELED, "pool: canceled while waiting for an arena");
      break;
    }
    reap_completed(p);
    ferry_arena *a = pick_free(p, bytes);
    if (a) {
      st = ensure_capacity(p, a, bytes);
      if (st == FERRY_OK) {
        a->state = ARENA_IN_USE;
        p->stats.in_use++;
        p->stats.acquisitions++;
        update_usage(p, (int64_t)a->capacity);
        *out = a;
      }
      break;
    }
    if (!block) {
      st = ferry__fail(FERRY_EAGAIN, "pool: all %zu arenas are in use", p->count);
      break;
    }
    /* Every arena is out. Block on the events of the oldest released one rather than
     * poll; with none released, wait for a release (or a cancel) to signal. */
    ferry_arena *pending = oldest_pending(p);
    if (pending) wait_oldest(p, pending);
    else pthread_cond_wait(&p->changed, &p->lock);
  }
  pthread_mutex_unlock(&p->lock);
  return st;
}

ferry_status ferry_pool_acquire(ferry_pool *pool, size_t bytes, ferry_arena **out) {
  if (!pool || !out) return ferry__fail(FERRY_EINVAL, "ferry_pool_acquire: pool and out are required");
  return acquire(pool, bytes, 1, out);
}

ferry_status ferry_pool_try_acquire(ferry_pool *pool, size_t bytes, ferry_arena **out) {
  if (!pool || !out) return ferry__fail(FERRY_EINVAL, "ferry_pool_try_acquire: pool and out are required");
  return acquire(pool, bytes, 0, out);
}

void ferry_pool_cancel(ferry_pool *pool) {
  pthread_mutex_lock(&pool->lock);
  pool->canceled = 1;
  pthread_cond_broadcast(&pool->changed);
  pthread_mutex_unlock(&pool->lock);
}

/* pool->stats is in this library's layout; the caller's struct gets as much of it as its
 * struct_size reaches (device.h, above ferry_memory_stats). */
ferry_status ferry_pool_stats_get(ferry_pool *pool, ferry_pool_stats *out) {
  if (!pool || !out) return ferry__fail(FERRY_EINVAL, "ferry_pool_stats_get: pool and out are required");
  ferry_status st = ferry__struct_size_check(out, offsetof(ferry_pool_stats, arenas) + sizeof out->arenas,
                                             "ferry_pool_stats_get", "ferry_pool_stats_init");
  if (st != FERRY_OK) return st;
  pthread_mutex_lock(&pool->lock);
  reap_completed(pool);
  ferry__struct_copy_out(out, &pool->stats, sizeof pool->stats);
  pthread_mutex_unlock(&pool->lock);
  return FERRY_OK;
}

ferry_device *ferry_pool_device(const ferry_pool *pool) { return pool->device; }
void *ferry_arena_data(const ferry_arena *arena) { return arena->data; }
size_t ferry_arena_capacity(const ferry_arena *arena) { return arena->capacity; }

void ferry_arena_release(ferry_arena *arena) { ferry_arena_release_after(arena, NULL, 0); }

void ferry_arena_release_after(ferry_arena *arena, ferry_event *const *events, size_t count) {
  ferry_pool *p = arena->pool;
  ferry_event **owned = count ? ferry__malloc(count * sizeof *owned) : NULL;
  if (count && !owned) {
    /* No memory to remember the events: wait for them here instead, so the arena
     * can never be reused while a copy still reads it. */
    for (size_t i = 0; i < count; i++) {
      ferry_event_synchronize(events[i]);
      ferry_event_destroy(events[i]);
    }
    count = 0;
  }
  /* The events are the pool's from here on (copied before the lock is taken, so no
   * allocation or wait happens under it). An arena whose events have all completed
   * already, or that has none, is free again before this returns. */
  for (size_t i = 0; i < count; i++) owned[i] = events[i];
  pthread_mutex_lock(&p->lock);
  p->stats.in_use--;
  p->stats.pending++;
  arena->state = ARENA_PENDING;
  arena->pending_since = ++p->release_seq;
  arena->events = owned;
  arena->nevents = count;
  reap_completed(p);
  pthread_cond_broadcast(&p->changed);
  pthread_mutex_unlock(&p->lock);
}
