/* source/image_source.h - where a sample's image bytes come from when they are not a
 * file of config.images (internal; used by the loader's fill and open).
 *
 * The fill asks the source for the bytes of dataset image `index` and decodes them
 * from memory; the targets come from the coco as for a folder, so nothing downstream
 * knows the difference. The source is tar shards (shard_source.c): local ones read
 * with pread at the member's offset, remote ones (HTTP, S3) through blocks shared by
 * the workers when the loader reads neighbours together (plan_reads), else one ranged
 * GET per member; only where the bytes wait differs.
 * Contract: read is called by many workers at once, each with its own buffer; it
 * writes nothing shared. Every error names where the bytes are (shard and member).
 */
#ifndef FERRY_SOURCE_IMAGE_SOURCE_H
#define FERRY_SOURCE_IMAGE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry__image_source ferry__image_source;
struct ferry__image_source {
  /* The bytes of image `index` into *buf (grown with ferry__realloc; *cap its size),
   * *len of them. Thread-safe. */
  ferry_status (*read)(const ferry__image_source *self, size_t index, uint8_t **buf, size_t *cap, size_t *len);
  /* Where image `index` is, for messages ("SHARD: member 'NAME'"), into name. */
  void (*describe)(const ferry__image_source *self, size_t index, char *name, size_t size);
  void (*close)(ferry__image_source *self);
  /* The shards' sizes in samples, in dataset order: shard i holds the next
   * shard_samples[i] dataset indices (what the shard order permutes, sampler.h). */
  const size_t *shard_samples;
  size_t num_shards;
  /* Optional (NULL: the source reads alike in any order). How the loader will read,
   * told once at open before any read: `neighbours` 1 when a sample is read close in
   * time to its neighbours in the shards (the shard order, or shuffle off on one rank;
   * then a remote source reads blocks, shard_source.c), `buffer` the shuffle buffer
   * in samples (1 without), `workers` the readers at once. */
  ferry_status (*plan_reads)(ferry__image_source *self, int neighbours, size_t buffer, int workers);
  /* Optional. The order the loader reads an epoch in: the rank's dataset indices from
   * the next one to be read on, told by the coordinator as it begins each epoch (a
   * resumed one from its cursor); a remote source reads ahead across shards in the
   * order their samples first come. Advice only: it fails nothing. */
  void (*plan_epoch)(ferry__image_source *self, const size_t *order, size_t n);
};

typedef struct ferry__shard_set ferry__shard_set;
typedef struct ferry__source_settings ferry__source_settings;

/* The source of a walked shard set's images (source/shards.h), which it takes: freed
 * with the source, or here when the open fails. Opens a ranged reader per shard
 * (source/reader.h); `settings` (copied): its blocks' (source/settings.h). */
ferry_status ferry__shard_source_open(ferry__shard_set *set, const ferry__source_settings *settings,
                                      ferry__image_source **out);

#endif
