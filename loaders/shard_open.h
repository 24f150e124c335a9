/* loaders/shard_open.h - the loader's annotations and where its images are, opened
 * from its source descriptor (internal; used by loader_open.c).
 *
 * A JSON is ferry_coco_open's, and the images stay in config.images (*source NULL). A
 * shard spec is walked once (source/), each image's size probed from its first bytes
 * (image/), and its sidecars built into the coco (coco/sidecars.h): this is the one
 * file that joins the three, which is why the loader, not coco/, opens shards.
 */
#ifndef FERRY_LOADERS_SHARD_OPEN_H
#define FERRY_LOADERS_SHARD_OPEN_H

#include "ferry/coco.h"
#include "source/image_source.h"
#include "source/shards.h"

/* *coco the split's annotations; *source NULL for a JSON (the images folder), else a
 * source of the shards' images. Errors name the spec, the shard and the member. */
ferry_status ferry__loader_open_annotations(const ferry__source_desc *desc, const ferry_coco_options *opts,
                                            ferry_coco **coco, ferry__image_source **source);

#endif
