/* loaders/block_cache.h - blocks of remote shards shared by the workers, each fetched
 * once and freed when its last member has been read (internal; used by
 * shard_source.c, tested on its own by tests/loaders/test_block_cache.c).
 *
 * A block is a numbered byte range the caller knows how to fetch (shard_source.c: one
 * ranged GET of a shard at a URL). The cache knows no shard, URL or tar: it is given,
 * at open, how many members lie in each block, and a fetch function.
 *   - Shared: one mutex and one condition variable. A block being fetched is marked
 *     so; a second reader of it waits for that fetch instead of fetching it again.
 *     The fetch and the copy out run without the lock.
 *   - Residency: a block holds a count of the members still to be read in it, set to
 *     members[block] when it is fetched; each copy out of it takes one off, and at 0
 *     it is freed at once: memory follows the readers' window. A block fetched again
 *     (the next epoch, wrap padding) starts from the full count again, so no epoch
 *     reset is needed; a count that never reaches 0 (a run's ends, a failed sample, an
 *     epoch stopped early) is what the byte cap is for: the least recently used
 *     block nobody is copying from is evicted to make room.
 *   - Never fails for lack of room: a block that does not fit under the cap (even
 *     after evicting all it may), or whose memory cannot be allocated, is
 *     FERRY_EAGAIN, and the caller reads the bytes itself.
 *   - A failed fetch removes the block and wakes its waiters, who may fetch it
 *     themselves; the failing reader gets the fetch's status and message.
 *   - Read-ahead: the first read of a block asks for the block the caller names as
 *     its next (the shard's following block) to be fetched by the cache's own thread,
 *     when it is not resident and fits under the cap without evicting anything; a
 *     reader that needs it before that fetch has begun fetches it itself. A failed
 *     read-ahead leaves nothing: the reader fetches the block again and sees the
 *     error.
 * Invariants: resident bytes (fetched and being fetched) <= cap; a block is freed only
 * when nobody copies from it; every wait is for a fetch in progress, which ends.
 */
#ifndef FERRY_LOADERS_BLOCK_CACHE_H
#define FERRY_LOADERS_BLOCK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry__block_cache ferry__block_cache;

/* Bytes [0, len) of block `block` into buf; FERRY_OK only when all of them came. */
typedef ferry_status (*ferry__block_fetch_fn)(void *ctx, size_t block, uint8_t *buf, size_t len);

/* A cache of num_blocks blocks, block b holding members[b] members (copied), at most
 * cap_bytes resident; starts the read-ahead thread (without it, blocks are fetched
 * only by their readers). */
ferry_status ferry__block_cache_open(size_t num_blocks, const uint32_t *members, size_t cap_bytes,
                                     ferry__block_fetch_fn fetch, void *ctx, ferry__block_cache **out);
/* Bytes [from, from + len) of block `block` (block_len bytes long) into dst, counting
 * one member of that block read; when it is the block's first, block `next`
 * (next_len bytes; SIZE_MAX: none) is read ahead. FERRY_EAGAIN (no message) when the
 * block cannot be held (the cap, or no memory): read the bytes another way.
 * Thread-safe. */
ferry_status ferry__block_cache_copy(ferry__block_cache *c, size_t block, size_t block_len, size_t from, size_t len,
                                     void *dst, size_t next, size_t next_len);
/* After the readers are gone; stops the read-ahead thread (after its fetch in
 * progress, if any). */
void ferry__block_cache_close(ferry__block_cache *c);

typedef struct ferry__block_cache_stats {
  uint64_t fetches;        /* blocks fetched (failed fetches too) */
  uint64_t evictions;      /* blocks evicted with members still to read */
  size_t resident_bytes, peak_bytes, cap_bytes;
} ferry__block_cache_stats;
void ferry__block_cache_stats_get(ferry__block_cache *c, ferry__block_cache_stats *out);

#endif
