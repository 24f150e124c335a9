/* source/block_cache.h - blocks of remote shards shared by the workers, each fetched
 * once and freed when its last member has been read (or kept, when all of them fit),
 * read ahead in the order the readers will need them, in runs of one request
 * (internal; used by shard_source.c, tested on its own by
 * tests/source/test_block_cache.c).
 *
 * A block is a numbered byte range the caller knows how to fetch (shard_source.c: a
 * ranged GET of a shard at a URL). The cache knows no shard, URL or tar: it is given,
 * at open, each block's length, how many members lie in it, and whether the next block
 * is the next bytes of the same object; and a fetch function.
 *   - Shared: one mutex and condition variables. A block being fetched is marked so; a
 *     second reader of it waits for that fetch instead of fetching it again. The
 *     fetch and the copy out run without the lock.
 *   - Residency: a block holds a count of the members still to be read in it, set to
 *     its members when it is fetched; each copy out of it takes one off, and at 0 it
 *     is freed at once: memory follows the readers' window. A block fetched again (the
 *     next epoch, wrap padding) starts from the full count again, so no epoch reset is
 *     needed; a count that never reaches 0 (a run's ends, a failed sample, an epoch
 *     stopped early) is what the byte cap is for: the least recently used block
 *     nobody is copying from is evicted to make room.
 *     Unless they all fit (and the caller allows it, keep_if_all_fit): when the blocks
 *     with a member add up to no more than the read-ahead's cap, a block read through
 *     stays resident, and a pass after the first finds every block it has fetched (a
 *     small split is fetched once, not once an epoch); begin_pass sets the kept
 *     blocks' counts back to their members. The cap bounds memory as before: the kept
 *     blocks are at most the read-ahead's cap.
 *   - Never fails for lack of room: a block that does not fit under the cap (even
 *     after evicting all it may), or whose memory cannot be allocated, is
 *     FERRY_EAGAIN, and the caller reads the bytes itself.
 *   - A failed fetch removes the block being filled and wakes its waiters, who may
 *     fetch it themselves; the failing reader gets the fetch's status and message.
 *   - Read-ahead: each pass comes with a plan (begin_pass): the blocks in the order the
 *     readers will first need them (shard_source.c draws it from the epoch's order).
 *     The cache's own thread (ferry-ahead) walks it, and fetches each planned block
 *     that is not resident and was not fetched in the pass, when it fits under the
 *     read-ahead's cap (the cap, or less: room kept for readers, so that a reader that
 *     needs a block the read-ahead has not reached finds room without evicting a block
 *     still being read) without evicting anything; when it does not fit yet, the
 *     thread waits for readers to free room, with no request open. Its fetch is a run:
 *     one request from that block to the end of its object (or to its last block with
 *     a member), whose bytes fill the block and then the blocks after it, each
 *     published to its readers as soon as it is full. Before it fills the next block
 *     the run claims it, under the same rule (it fits without evicting anything,
 *     waiting up to room_wait_ms for readers to free room, as its request is open);
 *     the run ends, its request cut, at a block it cannot claim, at a block already
 *     resident or fetched by a reader, at one with no member, at the object's end and
 *     at close, and the thread goes on with the plan. One request per run rather than
 *     per block: an object store's per-request cost (latency, and a server that reads
 *     the whole object for every range) is paid once for the blocks read ahead. In the
 *     plan's order, the room goes to the blocks needed first: a block needed later
 *     never takes the room of one needed sooner, which a reader would then fetch
 *     itself, evicting the later one to make room. A reader that needs the block a run
 *     will fill next waits for the run rather than fetch it itself (a second request,
 *     and the run cut there); one that needs a block no fetch has claimed fetches it
 *     itself. A failed run leaves the blocks it published; the block it was filling is
 *     removed, and its readers fetch it again and see the error.
 *   - Passes: read-ahead never fetches a block already fetched in the current pass
 *     (an epoch: ferry__block_cache_begin_pass). Readers have been there: a block
 *     fetched and gone was read through (or evicted, and a reader still needing it
 *     fetches it itself), so a run that falls behind the readers, who fetch what
 *     they reach first, ends rather than fetch again what they have finished.
 *   - Memory: the resident blocks, at most the cap, and at most two buffers of the
 *     longest block's length kept, beyond it, for the next blocks (a fresh buffer costs
 *     a page fault and a zeroed page per 4 KiB).
 * Invariants: resident bytes (fetched, being fetched, queued) <= cap; a block is freed
 * only when nobody copies from it; every wait is for a fetch in progress, which ends, or
 * (the run's wait for room) bounded by room_wait_ms and ended by close.
 */
#ifndef FERRY_SOURCE_BLOCK_CACHE_H
#define FERRY_SOURCE_BLOCK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry__block_cache ferry__block_cache;

/* Takes n bytes that follow the `at` bytes handed before; returns 0 to go on, nonzero
 * to end the fetch after them. */
typedef int (*ferry__block_sink_fn)(void *sink_ctx, size_t at, const uint8_t *bytes, size_t n);

/* Hands `len` bytes from the start of block `first` (its bytes, then those of the
 * blocks after it in the same object) to `sink`, in order, each once; FERRY_OK when all
 * len bytes were handed or the sink ended the fetch, an error (with its message)
 * otherwise, including the object ending first. */
typedef ferry_status (*ferry__block_fetch_fn)(void *ctx, size_t first, size_t len, ferry__block_sink_fn sink,
                                              void *sink_ctx);

typedef struct ferry__block_info {
  size_t len;          /* bytes, > 0 */
  uint32_t members;    /* members read from it (0: none; it is never fetched ahead) */
  uint8_t continues;   /* block number + 1 holds the object's next bytes */
} ferry__block_info;

typedef struct ferry__block_cache_config {
  size_t num_blocks;
  const ferry__block_info *blocks;  /* [num_blocks], copied */
  size_t cap_bytes;                 /* resident bytes at most */
  long room_wait_ms;                /* how long a run waits for room for its next block */
  ferry__block_fetch_fn fetch;
  void *ctx;
  size_t ahead_cap_bytes;           /* resident bytes read-ahead may bring the cache to (0 or
                                       more than cap_bytes: cap_bytes); below the cap, the rest
                                       is kept for readers' own fetches */
  int keep_if_all_fit;              /* nonzero: when the blocks with a member add up to no more
                                       than the read-ahead's cap, keep every block fetched
                                       (Residency); 0: free each when read through */
} ferry__block_cache_config;

/* A cache as configured; starts the read-ahead thread (without it, blocks are fetched
 * only by their readers, one request each). */
ferry_status ferry__block_cache_open(const ferry__block_cache_config *config, ferry__block_cache **out);
/* Bytes [from, from + len) of block `block` into dst, counting one member of that
 * block read. FERRY_EAGAIN (no message) when the block cannot be held (the cap, or no
 * memory): read the bytes another way. Thread-safe. */
ferry_status ferry__block_cache_copy(ferry__block_cache *c, size_t block, size_t from, size_t len, void *dst);
/* The readers begin a pass over the blocks (an epoch; the first too: before it nothing
 * is read ahead), reading them first in the order of `plan` (n blocks, each at most
 * once; the read-ahead fetches those, in that order, and no other). Read-ahead may
 * fetch again what was fetched in the passes before. FERRY_EINVAL (with a message)
 * when a planned block is not one of the cache's, or n exceeds their number: the pass
 * begins with nothing to read ahead. Thread-safe. */
ferry_status ferry__block_cache_begin_pass(ferry__block_cache *c, const size_t *plan, size_t n);
/* After the readers are gone; ends the read-ahead thread's run and stops it. */
void ferry__block_cache_close(ferry__block_cache *c);

typedef struct ferry__block_cache_stats {
  uint64_t fetches;        /* requests made (failed ones too): a run is one */
  uint64_t reader_fetches; /* of those, a reader's own, for the block it needed (not read ahead) */
  uint64_t blocks_fetched; /* blocks filled by them */
  uint64_t evictions;      /* blocks evicted with members still to read */
  uint64_t buffers_allocated; /* block buffers allocated: the rest were kept ones, reused */
  size_t resident_bytes, peak_bytes, cap_bytes;
  int keeps_all;           /* the blocks with a member fit under the read-ahead's cap: every
                              block fetched stays (Residency) */
} ferry__block_cache_stats;
void ferry__block_cache_stats_get(ferry__block_cache *c, ferry__block_cache_stats *out);

#endif
