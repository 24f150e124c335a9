/* ferry/pool.h - a fixed pool of pinned host arenas, reused batch after batch.
 *
 * The pool owns `count` arenas of pinned memory (cudaHostAlloc under CUDA,
 * page-aligned memory under host). ferry_pool_acquire hands out a free arena at
 * least as large as asked, growing it only when a batch needs more than it has
 * (each growth is counted, and gives the arena a quarter more than asked, so
 * batches of wandering sizes stop regrowing it). When every arena is in use, acquire blocks until one
 * comes back: that is the backpressure that keeps memory bounded.
 *
 * An arena released with ferry_arena_release_after stays out of use until its
 * events have completed (the copies that read it have finished); release itself
 * never waits, so the caller's stream never stalls.
 */
#ifndef FERRY_POOL_H
#define FERRY_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/device.h"
#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_pool ferry_pool;
typedef struct ferry_arena ferry_arena;

/* ferry_pool_stats, the pool's counts and byte totals, is declared in ferry/device.h
 * (the stable API), since the loader reports its pool's with it. */

/* A pool of `count` arenas for staging data bound for `device`. Each arena starts
 * with `initial_bytes` (0: allocated on first acquire). */
FERRY_API ferry_status ferry_pool_open(ferry_device *device, size_t count, size_t initial_bytes,
                                       ferry_pool **out);
/* Wait for pending arenas' events, then free every arena, acquired or not. */
FERRY_API void ferry_pool_close(ferry_pool *pool);

/* Take a free arena of at least `bytes`, blocking while none is free.
 * Returns FERRY_ECANCELED once ferry_pool_cancel has been called. */
FERRY_API ferry_status ferry_pool_acquire(ferry_pool *pool, size_t bytes, ferry_arena **out);
/* As acquire, but FERRY_EAGAIN instead of blocking. */
FERRY_API ferry_status ferry_pool_try_acquire(ferry_pool *pool, size_t bytes, ferry_arena **out);
/* Wake every waiter with FERRY_ECANCELED; later acquires fail the same way. */
FERRY_API void ferry_pool_cancel(ferry_pool *pool);

/* The pool's counts and byte totals now (see ferry_pool_stats). out->struct_size must be
 * set first (ferry_pool_stats_init; the rule is in ferry/device.h, above
 * ferry_memory_stats). */
FERRY_API ferry_status ferry_pool_stats_get(ferry_pool *pool, ferry_pool_stats *out);
/* The device the arenas are pinned for. */
FERRY_API ferry_device *ferry_pool_device(const ferry_pool *pool);

/* The arena's memory: ferry_arena_capacity bytes, valid while the arena is acquired. */
FERRY_API void *ferry_arena_data(const ferry_arena *arena);
/* Bytes the arena holds now: at least what acquire asked for. */
FERRY_API size_t ferry_arena_capacity(const ferry_arena *arena);
/* Hand the arena back now. */
FERRY_API void ferry_arena_release(ferry_arena *arena);
/* Hand the arena back once every one of `events` has completed. Takes ownership of
 * the events (each is destroyed once complete), not of the array. Never blocks,
 * except when memory to remember the events runs out: then it waits for them. */
FERRY_API void ferry_arena_release_after(ferry_arena *arena, ferry_event *const *events, size_t count);

#ifdef __cplusplus
}
#endif
#endif
