/* loaders/shard_open.c - opening a split packed as tar shards (loaders/shard_open.h):
 * the walk (source/shard_walk.h), each image's size (ferry_image_probe) and each
 * sidecar handed to coco/'s builder (coco/sidecars.h), then the image source over the
 * set (source/image_source.h).
 *
 * Owns, while opening, the set (until the image source takes it), the index, the walk
 * and the builder. Runs on the opening thread.
 * Invariants: the builder is given one entry per sample of the set, in order, so image
 * i of the coco is sample i; a sample's problem is settled by the walk before its
 * entry is added, so an entry with a problem has no annotations.
 */
#include <stdio.h>

#include "coco/sidecars.h"
#include "ferry/image.h"
#include "lib/status.h"
#include "loaders/shard_open.h"
#include "source/shard_walk.h"
#include "source/tar.h"

/* The first bytes of an image that its size is read from; a header further in (a big
 * EXIF block) gets the whole member. */
#define PROBE_PREFIX (64u << 10)

typedef struct shard_open {
  ferry__shard_set *set;
  ferry__shard_walk *walk;
  ferry__sidecars *sidecars;
} shard_open;

static ferry_status probe_size(shard_open *g, size_t i, int *w, int *h) {
  const ferry__shard_sample *rec = &g->set->samples[i];
  char name[FERRY__TAR_NAME_MAX + 4096];
  snprintf(name, sizeof name, "%s: member '%s'", g->set->paths[rec->shard], rec->member);
  size_t prefix = rec->size < PROBE_PREFIX ? (size_t)rec->size : PROBE_PREFIX;
  const uint8_t *bytes = NULL;
  ferry_status st = ferry__shard_walk_image(g->walk, i, prefix, &bytes);
  if (st == FERRY_OK) st = ferry_image_probe(bytes, prefix, name, w, h);
  if (st < 0 && st != FERRY_ENOMEM && prefix < rec->size && rec->size <= FERRY__SHARD_MAX_SIDECAR) {
    st = ferry__shard_walk_image(g->walk, i, (size_t)rec->size, &bytes);
    if (st == FERRY_OK) st = ferry_image_probe(bytes, (size_t)rec->size, name, w, h);
  }
  return st;
}

/* A sample's sidecar (image id, file name, how many annotations) and its image's size. */
static ferry_status read_sample(shard_open *g, size_t i, int *w, int *h) {
  const char *bytes, *member;
  size_t len;
  ferry_status st = ferry__shard_walk_sidecar(g->walk, i, &bytes, &len, &member);
  if (st == FERRY_OK)
    st = ferry__sidecars_read(g->sidecars, g->set->paths[g->set->samples[i].shard], member, bytes, len);
  return st == FERRY_OK ? probe_size(g, i, w, h) : st;
}

/* ferry__shard_walk_fn: a sample read, settled, and its entry added. A problem it has
 * is recorded, not returned: only an unreadable shard or running out of memory ends
 * the open. */
static ferry_status on_sample(void *user, ferry__shard_walk *walk, size_t i) {
  shard_open *g = user;
  int w = 1, h = 1;
  ferry_status st = g->set->samples[i].problem ? FERRY_OK : read_sample(g, i, &w, &h);
  if ((st = ferry__shard_walk_settle(walk, i, st)) < 0) return st;
  const ferry__shard_sample *rec = &g->set->samples[i];
  return ferry__sidecars_add(g->sidecars, rec->member, rec->problem != NULL, w, h);
}

static ferry_status reread(void *user, size_t sample, const char **bytes, size_t *len, const char **shard,
                           const char **label) {
  const shard_open *g = user;
  return ferry__shard_walk_reread(g->walk, sample, bytes, len, shard, label);
}

static void name_sample(void *user, size_t sample, const char **shard, const char **member) {
  const shard_open *g = user;
  const ferry__shard_sample *rec = &g->set->samples[sample];
  *shard = g->set->paths[rec->shard];
  *member = rec->member;
}

/* The spec walked and its coco built; g->set then holds where each image is. */
static ferry_status build(shard_open *g, const ferry__source_desc *desc, const ferry_coco_options *opts,
                          ferry_coco **coco) {
  const char *spec = desc->annotations;
  ferry__shard_index ix;
  ferry_status st = ferry__sidecars_new(spec, &g->sidecars); /* first: it installs jansson's allocator */
  if (st == FERRY_OK) st = ferry__shard_spec_open(spec, &desc->settings, &g->set, &ix);
  if (st < 0) return st;
  st = ferry__shard_walk_open(g->set, &ix, spec, &g->walk);
  if (st == FERRY_OK) st = ferry__shard_walk_run(g->walk, on_sample, g);
  ferry__sidecar_labels labels = {ix.doc != NULL, ix.raw, ix.categories, ix.annotated};
  if (st == FERRY_OK) st = ferry__sidecars_finish(g->sidecars, &labels, opts, reread, name_sample, g, coco);
  ferry__shard_index_free(&ix);
  return st;
}

ferry_status ferry__loader_open_annotations(const ferry__source_desc *desc, const ferry_coco_options *opts,
                                            ferry_coco **coco, ferry__image_source **source) {
  *source = NULL;
  *coco = NULL;
  if (!ferry__source_is_shards(desc)) return ferry_coco_open(desc->annotations, opts, coco);
  shard_open g = {0};
  ferry_status st = build(&g, desc, opts, coco);
  ferry__shard_walk_close(g.walk);
  ferry__sidecars_free(g.sidecars);
  if (st == FERRY_OK)
    st = ferry__shard_source_open(g.set, &desc->settings, source); /* takes the set, even when it fails */
  else ferry__shard_set_free(g.set);
  if (st < 0) {
    ferry_coco_close(*coco);
    *coco = NULL;
  }
  return st;
}
