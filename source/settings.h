/* source/settings.h - the remote client's and the block cache's settings, resolved
 * once from the loader's ferry_source_options (ferry/source.h) and the environment
 * (internal; used by source/shards.h's descriptor, remote.c and shard_source.c).
 *
 * Precedence, field by field: FERRY_REMOTE_<FIELD> when set to a number in the
 * field's range; else the option when not 0 (its -1: zero); else the default.
 */
#ifndef FERRY_SOURCE_SETTINGS_H
#define FERRY_SOURCE_SETTINGS_H

#include "ferry/error.h"
#include "ferry/source.h"

/* The client's defaults (remote.h says what each does). */
#define FERRY__REMOTE_RETRIES 5
#define FERRY__REMOTE_BACKOFF_MS 100
#define FERRY__REMOTE_STALL_S 30
#define FERRY__REMOTE_CONNECT_TIMEOUT_MS 10000
/* The blocks' defaults (shard_source.c says why). */
#define FERRY__BLOCK_BYTES_DEFAULT (4L << 20)
#define FERRY__ROOM_WAIT_MS_DEFAULT 2000L
/* cache_bytes: derived from the loader's reads (shard_source.c's cache_cap). */
#define FERRY__CACHE_DERIVED (-1L)

typedef struct ferry__source_settings {
  long retries, backoff_ms, stall_s, connect_timeout_ms; /* the client's (remote.h) */
  long block_bytes, cache_bytes, room_wait_ms;           /* the blocks' (shard_source.c) */
} ferry__source_settings;

/* `options` (NULL: every default) with the environment over it. FERRY_EINVAL, naming
 * the field as config.source.FIELD, for an option outside its range. */
ferry_status ferry__source_settings_resolve(const ferry_source_options *options, ferry__source_settings *out);

#endif
