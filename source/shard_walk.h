/* source/shard_walk.h - the open-time walk of a shard set: each shard's tar members
 * read forward once, grouped by key into samples, and the sidecar and image bytes the
 * caller asks for (internal; used by loaders/shard_open.c, which turns the sidecars
 * into a ferry_coco through coco/sidecars.h and probes the image sizes).
 *
 * The walk fills the set's samples (shard, offset, size, member, and a problem when a
 * member is missing or doubled) and tells the caller of each, in order, while the
 * shard is open: the caller reads what it needs (ferry__shard_walk_sidecar,
 * ferry__shard_walk_image), then settles the sample (ferry__shard_walk_settle: a
 * failure that is the sample's own becomes its problem). After the last shard the
 * index's counts (samples_per_shard, num_samples) are checked. For the second pass
 * each sidecar can be read again (ferry__shard_walk_reread): for shards at URLs out of
 * the spill, an unnamed file each sidecar was copied into as it was read, else (or
 * when the spill could not be written) from its shard.
 * A shard that is not a valid tar (source/tar.h), or cannot be read (FERRY_EIO, a
 * disk or a network: never a sample's fault), ends the walk naming the shard.
 */
#ifndef FERRY_SOURCE_SHARD_WALK_H
#define FERRY_SOURCE_SHARD_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "source/shards.h"

typedef struct ferry__shard_walk ferry__shard_walk;

/* Told of sample `index` of the set, its record made (its problem set when a member is
 * missing); returns FERRY_OK, or an error that ends the walk. */
typedef ferry_status (*ferry__shard_walk_fn)(void *user, ferry__shard_walk *w, size_t index);

/* A walk of `set` (borrowed, filled by run) for `spec` (messages) and its index
 * (borrowed; doc NULL: nothing to check the counts against). */
ferry_status ferry__shard_walk_open(ferry__shard_set *set, const ferry__shard_index *index, const char *spec,
                                    ferry__shard_walk **out);
/* Every shard in order, `fn` told of each sample; then the index's counts checked. */
ferry_status ferry__shard_walk_run(ferry__shard_walk *w, ferry__shard_walk_fn fn, void *user);

/* From fn: the sample's sidecar, NUL-terminated in the walk's buffer (valid until the
 * walk's next read); at most FERRY__SHARD_MAX_SIDECAR bytes; *member its member's name. */
ferry_status ferry__shard_walk_sidecar(ferry__shard_walk *w, size_t index, const char **bytes, size_t *len,
                                       const char **member);
/* From fn: the first `len` bytes (at most the member's size) of the sample's image
 * member, in the walk's buffer (valid until its next read). */
ferry_status ferry__shard_walk_image(ferry__shard_walk *w, size_t index, size_t len, const uint8_t **bytes);
/* From fn: what reading sample `index` gave. FERRY_OK stays; FERRY_EIO (the shard
 * could not be read) is returned; FERRY_ENOMEM fails naming the spec; any other error
 * becomes the sample's problem (the thread's message) and FERRY_OK is returned. */
ferry_status ferry__shard_walk_settle(ferry__shard_walk *w, size_t index, ferry_status st);

/* After run: sample `index`'s sidecar again (in the walk's buffer, valid until its
 * next read); *shard and *label name it for messages ("the sidecar of MEMBER"). */
ferry_status ferry__shard_walk_reread(ferry__shard_walk *w, size_t index, const char **bytes, size_t *len,
                                      const char **shard, const char **label);

void ferry__shard_walk_close(ferry__shard_walk *w);

#endif
