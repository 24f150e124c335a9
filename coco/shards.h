/* coco/shards.h - a split packed as WebDataset tar shards, opened as annotations
 * (internal; used by loaders/shard_source.c and tools/).
 *
 * A shard spec is one of:
 *   - RF-DETR's shard index (pack_coco_to_shards' SPLIT-index.json): a JSON object
 *     whose first key is "version" (or "shards"), naming the shards relative to its
 *     folder, the categories and the category_ids policy ("remap" or "raw");
 *   - a brace pattern, "train-{000000..000127}.tar", or one ".tar" path.
 * Each sample of a shard is the consecutive members sharing a key (the name up to the
 * first '.' of its last component): one image (jpg, jpeg, png, webp, bmp) and one
 * "json" sidecar with "image_id", "file_name" and the image's "annotations".
 * docs/shards.md states the format and the rules.
 *
 * Opening a spec walks every shard once (headers, sidecars, and the first bytes of each
 * image for its size, through the caller's size function: coco/ has no decoder) and
 * builds the same ferry_coco the split's JSON would give: images in shard order, their
 * annotations in sidecar order, labels per the index's category_ids. What it keeps
 * besides: where each image's bytes are (shard, offset, size). A sample that cannot be
 * used (no sidecar, no image, a sidecar that is not the expected JSON, an image whose
 * size cannot be read) stays in the dataset as an image without annotations whose
 * `problem` says why, naming the shard and the member: the loader fails or skips that
 * sample by its policy. A shard that is not a valid tar (coco/tar.h) fails the open.
 */
#ifndef FERRY_COCO_SHARDS_H
#define FERRY_COCO_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/coco.h"

/* An image's width and height from its first `len` bytes (its whole member when the
 * first bytes were not enough); `name` for messages. */
typedef ferry_status (*ferry__image_size_fn)(const void *data, size_t len, const char *name, int *width,
                                            int *height);

typedef struct ferry__shard_sample {
  uint32_t shard;           /* in ferry__shard_set.paths */
  uint64_t offset, size;    /* the image member's bytes in its shard */
  char *member;             /* the image member's name, or the sample's key when it has none */
  char *problem;            /* NULL, or why the sample cannot be read (names shard and member) */
} ferry__shard_sample;

typedef struct ferry__remote ferry__remote;

typedef struct ferry__shard_set {
  char **paths;             /* the shards, as opened: paths, or URLs */
  ferry__remote *remote;    /* the client the URLs are read through (lib/remote.h); NULL for paths */
  size_t num_shards;
  ferry__shard_sample *samples;  /* one per image of the coco, in its order */
  size_t num_samples;
} ferry__shard_set;

/* 1 when `path` is a shard spec (a brace pattern, a ".tar", or a shard index by its
 * first key): what the loader asks before choosing how to open its annotations. */
int ferry__shards_recognise(const char *path);

/* Open the spec: *coco the split's annotations, *set where its images are. `opts`
 * (may be NULL): remap_categories applies to a pattern or a tar only; an index's
 * category_ids decides for an index. Errors name the spec, the shard and the member. */
ferry_status ferry__shards_open(const char *spec, const ferry_coco_options *opts, ferry__image_size_fn size,
                                ferry_coco **coco, ferry__shard_set **set);

void ferry__shard_set_free(ferry__shard_set *set);

/* Limits: the largest member read (an image or a sidecar), and the most shards a
 * pattern expands to. */
#define FERRY__SHARD_MAX_MEMBER ((uint64_t)1 << 30)
#define FERRY__SHARD_MAX_SIDECAR ((uint64_t)64 << 20)
#define FERRY__SHARD_MAX_SHARDS 1000000

#endif
