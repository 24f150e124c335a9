/* loaders/image_source.h - where a sample's image bytes come from when they are not a
 * file of config.images (internal).
 *
 * The fill asks the source for the bytes of dataset image `index` and decodes them
 * from memory; the targets come from the coco as for a folder, so nothing downstream
 * knows the difference. Today's source is local tar shards (shard_source.c: pread at
 * the member's offset). A streamed remote source (HTTP, S3) fits the same read: it
 * would hold the shards in flight and hand a worker the member's bytes when they
 * have arrived; only where the bytes wait differs.
 * Contract: read is called by many workers at once, each with its own buffer; it
 * writes nothing shared. Every error names where the bytes are (shard and member).
 */
#ifndef FERRY_LOADERS_IMAGE_SOURCE_H
#define FERRY_LOADERS_IMAGE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/coco.h"

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
};

/* Open the loader's annotations: a shard spec (coco/shards.h) gives its coco and a
 * source of its images; anything else is ferry_coco_open's, with *source NULL (the
 * images folder). */
ferry_status ferry__loader_open_annotations(const char *annotations, const ferry_coco_options *opts,
                                           ferry_coco **coco, ferry__image_source **source);

#endif
