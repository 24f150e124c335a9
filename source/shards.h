/* source/shards.h - a split packed as WebDataset tar shards: what names it (the
 * source descriptor, the shard spec) and where its samples are (the shard set)
 * (internal; used by source/shard_walk.c, source/shard_source.c and the loader's
 * loaders/shard_open.c and loader_open.c).
 *
 * A shard spec is one of:
 *   - RF-DETR's shard index (pack_coco_to_shards' SPLIT-index.json): a JSON object
 *     whose first key is "version" (or "shards"), naming the shards relative to its
 *     folder, the categories and the category_ids policy ("remap" or "raw");
 *   - a brace pattern, "train-{000000..000127}.tar", or one ".tar" path.
 * Local, or at an http(s):// or s3:// URL (source/remote.h): a URL is always a shard
 * spec. Each sample of a shard is the consecutive members sharing a key (the name up
 * to the first '.' of its last component): one image (jpg, jpeg, png, webp, bmp) and
 * one "json" sidecar with "image_id", "file_name" and the image's "annotations".
 * docs/shards.md states the format and the rules.
 *
 * Opening a spec (ferry__shard_spec_open, shard_spec.c) gives its shard paths (or
 * URLs, with the client they are read through) and, for an index, its fields; the
 * walk (source/shard_walk.h) then fills the set's samples. What turns the sidecars
 * into a ferry_coco is coco/'s (coco/sidecars.h), joined to the walk by the loader.
 * Invariants of a walked set: samples are in shard order, sample i is image i of the
 * coco; every sample without a problem has offset + size inside its shard as the tar
 * reader checked it; a sample with a problem says why, naming the shard and member.
 */
#ifndef FERRY_SOURCE_SHARDS_H
#define FERRY_SOURCE_SHARDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"
#include "ferry/source.h"
#include "source/settings.h"

/* What the loader's annotations name, resolved once at open (ferry__source_resolve)
 * and kept: every later question (are images in a folder? may the shard order be
 * used? can the GPU decoder read them?) is answered from it. */
typedef enum ferry__source_kind {
  FERRY__SOURCE_JSON = 0,     /* a COCO JSON (or its binary index) and a folder of images */
  FERRY__SOURCE_SHARDS_LOCAL, /* a shard spec of local files */
  FERRY__SOURCE_SHARDS_URL,   /* a shard spec at a URL */
} ferry__source_kind;

typedef struct ferry__source_desc {
  ferry__source_kind kind;
  const char *annotations;         /* the JSON or the spec, borrowed */
  ferry__source_settings settings; /* how a URL is read (source/settings.h) */
} ferry__source_desc;

/* Which kind `annotations` is: a URL, a brace pattern, a ".tar", or a file whose JSON
 * starts with the key "version" or "shards" is a shard spec; anything else (NULL too)
 * is a JSON. Reads at most the file's first 64 bytes. With the settings of `options`
 * (NULL: the defaults) and the environment: FERRY_EINVAL for an option out of range. */
ferry_status ferry__source_resolve(const char *annotations, const ferry_source_options *options,
                                   ferry__source_desc *out);

static inline int ferry__source_is_shards(const ferry__source_desc *d) { return d->kind != FERRY__SOURCE_JSON; }

typedef struct ferry__shard_sample {
  uint32_t shard;        /* in ferry__shard_set.paths */
  uint64_t offset, size; /* the image member's bytes in its shard */
  char *member;          /* the image member's name, or the sample's key when it has none */
  char *problem;         /* NULL, or why the sample cannot be read (names shard and member) */
} ferry__shard_sample;

typedef struct ferry__remote ferry__remote;

typedef struct ferry__shard_set {
  char **paths;          /* the shards, as opened: paths, or URLs */
  ferry__remote *remote; /* the client the URLs are read through (source/remote.h); NULL for paths */
  size_t num_shards;
  ferry__shard_sample *samples; /* one per image of the coco, in its order */
  size_t num_samples;
} ferry__shard_set;

/* An index's fields that the open uses (RF-DETR's ShardIndex.to_json), borrowed from
 * `doc`; doc NULL for a pattern or a tar (then nothing else is set). */
typedef struct ferry__shard_index {
  json_t *doc;
  const json_t *categories; /* array, or NULL */
  const json_t *annotated;  /* annotated_category_ids: array, or NULL */
  const json_t *per_shard;  /* samples_per_shard: an array of one count per shard, or NULL */
  int raw;                  /* category_ids "raw" (else "remap") */
  int64_t num_samples;
} ferry__shard_index;

/* The spec's shards into a new set with no samples (*set), and an index's fields
 * (*index; doc NULL for a pattern or a tar). For a URL the set gets its client (with
 * `settings`), after
 * refusing a URL with a query, fragment or user:password. Errors name the spec.
 * Call coco/'s ferry__coco_json_use_ferry_allocator first: the index is parsed with
 * jansson. Free with ferry__shard_set_free and ferry__shard_index_free. */
ferry_status ferry__shard_spec_open(const char *spec, const ferry__source_settings *settings, ferry__shard_set **set,
                                    ferry__shard_index *index);
void ferry__shard_index_free(ferry__shard_index *index);

void ferry__shard_set_free(ferry__shard_set *set);

/* A new string (ferry__malloc'd; NULL when out of memory) formatted as printf does:
 * the shard paths and the samples' problems. */
char *ferry__shard_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Limits: the largest member read (an image or a sidecar), and the most shards a
 * pattern expands to. */
#define FERRY__SHARD_MAX_MEMBER ((uint64_t)1 << 30)
#define FERRY__SHARD_MAX_SIDECAR ((uint64_t)64 << 20)
#define FERRY__SHARD_MAX_SHARDS 1000000

#endif
