/* ferry/source.h - how a split packed as tar shards at an http(s):// or s3:// URL is
 * read: the remote client's retries and timeouts, and the blocks the workers share
 * (docs/shards.md, "Remote shards").
 *
 * Every field's 0 is its documented default, so a zeroed struct (what
 * ferry_loader_config_default gives) is the defaults. Where zero itself is a setting
 * (no retry, no backoff, blocks off, no wait), it is -1. A value outside a field's
 * range fails the loader's open with FERRY_EINVAL naming the field.
 *
 * Each field has an environment variable, FERRY_REMOTE_<FIELD> (FERRY_REMOTE_RETRIES,
 * ..._BACKOFF_MS, ..._STALL_S, ..._CONNECT_TIMEOUT_MS, ..._BLOCK_BYTES, ..._CACHE_BYTES,
 * ..._ROOM_WAIT_MS), which, when set to a number in its range, overrides the option
 * (zero there is zero): an operator can retune a job without changing its code. A
 * variable set to anything else is ignored. Local shards and JSON splits read none of
 * this.
 */
#ifndef FERRY_SOURCE_H
#define FERRY_SOURCE_H

#include <stdint.h>

typedef struct ferry_source_options {
  /* Retries of a failed read (a connection refused or reset, a stall, a body cut short,
   * HTTP 5xx, 429 or 408), each from the first byte not yet received: 0: 5; -1: none;
   * at most 1000. */
  int retries;
  /* The first retry's backoff, doubled each time up to 5 s: 0: 100 ms; -1: none; at
   * most 60000. */
  int backoff_ms;
  /* Seconds without a byte before a read is a stall (and retried): 0: 30; 1..3600. */
  int stall_s;
  /* A connection not made in this long is a fault: 0: 10000 ms; 1..600000. */
  int connect_timeout_ms;
  /* The blocks the workers share in the shard order: 0: 4 MiB; 65536..268435456. */
  int64_t block_bytes;
  /* The block cache's cap: 0: derived from the shuffle buffer, the workers and the
   * block size, within [16 MiB, 1 GiB]; -1: no blocks (one ranged GET per image). */
  int64_t cache_bytes;
  /* How long a read-ahead request waits for room for its next block before it ends:
   * 0: 2000 ms; -1: not at all; at most 3600000. */
  int room_wait_ms;
} ferry_source_options;

#endif
