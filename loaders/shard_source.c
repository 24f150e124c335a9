/* loaders/shard_source.c - the image source of a split packed as tar shards, local or
 * at URLs, and the choice, at open, between it and the images folder.
 *
 * Owns the shard set (coco/shards.h) and, for local shards, one read-only descriptor
 * per shard, opened at open and closed at close. Workers read through pread at the
 * member's offset, or, for URLs, one ranged GET of the member's bytes through the set's
 * client (lib/remote.h: a handle per request from its pool, retried from the byte it
 * stopped at); so no position is shared and no lock is taken here. Nothing is cached:
 * a member's bytes go straight into the worker's buffer. Sizes are learnt at open from
 * each image's header (ferry_image_probe), which is why the loader, not coco/, opens
 * shards.
 * Invariants: fds[i] is shard i of the set (fds is NULL for URLs); a sample with a
 * problem is never read, its problem is returned instead, so the loader's error policy
 * decides (fail or skip).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "coco/shards.h"
#include "ferry/image.h"
#include "lib/alloc.h"
#include "lib/remote.h"
#include "lib/status.h"
#include "loaders/image_source.h"

typedef struct shard_source {
  ferry__image_source base;  /* first: the source is handed around as its base */
  ferry__shard_set *set;
  int *fds;
  size_t *shard_samples;     /* base.shard_samples */
} shard_source;

static void describe(const ferry__image_source *self, size_t index, char *name, size_t size) {
  const shard_source *s = (const shard_source *)self;
  const ferry__shard_sample *r = &s->set->samples[index];
  snprintf(name, size, "%s: member '%s'", s->set->paths[r->shard], r->member);
}

static ferry_status read_member(const ferry__image_source *self, size_t index, uint8_t **buf, size_t *cap,
                                size_t *len) {
  const shard_source *s = (const shard_source *)self;
  const ferry__shard_sample *r = &s->set->samples[index];
  if (r->problem) return ferry__fail(FERRY_EFORMAT, "%s", r->problem);
  size_t want = (size_t)r->size;
  if (want + 1 > *cap) {
    uint8_t *grown = ferry__realloc(*buf, want + 1);
    if (!grown) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for member '%s'", s->set->paths[r->shard], r->member);
    *buf = grown;
    *cap = want + 1;
  }
  size_t got = 0;
  if (s->set->remote) {
    ferry_status st = ferry__remote_read(s->set->remote, s->set->paths[r->shard], r->offset, *buf, want, &got);
    if (st < 0) return ferry__error_prefix(st, "member '%s' of ", r->member);
    if (got < want)
      return ferry__fail(FERRY_EFORMAT, "%s: member '%s': the shard ends inside it (it changed since the open)",
                         s->set->paths[r->shard], r->member);
  }
  while (got < want) {
    ssize_t n = pread(s->fds[r->shard], *buf + got, want - got, (off_t)(r->offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return ferry__fail(n < 0 ? FERRY_EIO : FERRY_EFORMAT, "%s: member '%s': %s", s->set->paths[r->shard], r->member,
                         n < 0 ? strerror(errno) : "the shard ends inside it (it changed since the open)");
    got += (size_t)n;
  }
  *len = want;
  return FERRY_OK;
}

static void close_source(ferry__image_source *self) {
  shard_source *s = (shard_source *)self;
  if (!s) return;
  for (size_t i = 0; s->fds && i < s->set->num_shards; i++)
    if (s->fds[i] >= 0) close(s->fds[i]);
  ferry__free(s->fds);
  ferry__free(s->shard_samples);
  ferry__shard_set_free(s->set);
  ferry__free(s);
}

static ferry_status probe(const void *data, size_t len, const char *name, int *width, int *height) {
  return ferry_image_probe(data, len, name, width, height);
}

static ferry_status open_fds(shard_source *s) {
  if (s->set->remote) return FERRY_OK;
  s->fds = ferry__malloc((s->set->num_shards ? s->set->num_shards : 1) * sizeof *s->fds);
  if (!s->fds) return ferry__fail(FERRY_ENOMEM, "shards: out of memory");
  for (size_t i = 0; i < s->set->num_shards; i++) s->fds[i] = -1;
  for (size_t i = 0; i < s->set->num_shards; i++) {
    s->fds[i] = open(s->set->paths[i], O_RDONLY | O_CLOEXEC);
    if (s->fds[i] < 0) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", s->set->paths[i], strerror(errno));
  }
  return FERRY_OK;
}

/* Samples per shard. The set's samples are in shard order (coco/shards.h), which is
 * what lets a count stand for a run of dataset indices: checked, not assumed. */
static ferry_status count_shard_samples(shard_source *s) {
  s->shard_samples = ferry__calloc(s->set->num_shards ? s->set->num_shards : 1, sizeof *s->shard_samples);
  if (!s->shard_samples) return ferry__fail(FERRY_ENOMEM, "shards: out of memory");
  for (size_t i = 0; i < s->set->num_samples; i++) {
    if (i && s->set->samples[i].shard < s->set->samples[i - 1].shard)
      return ferry__fail(FERRY_EFORMAT, "shards: sample %zu comes before the samples of the shard before it", i);
    s->shard_samples[s->set->samples[i].shard]++;
  }
  s->base.shard_samples = s->shard_samples;
  s->base.num_shards = s->set->num_shards;
  return FERRY_OK;
}

ferry_status ferry__loader_open_annotations(const char *annotations, const ferry_coco_options *opts,
                                           ferry_coco **coco, ferry__image_source **source) {
  *source = NULL;
  if (!ferry__shards_recognise(annotations)) return ferry_coco_open(annotations, opts, coco);
  shard_source *s = ferry__calloc(1, sizeof *s);
  if (!s) return ferry__fail(FERRY_ENOMEM, "loader: out of memory");
  s->base = (ferry__image_source){read_member, describe, close_source, NULL, 0};
  ferry_status st = ferry__shards_open(annotations, opts, probe, coco, &s->set);
  if (st == FERRY_OK) st = open_fds(s);
  if (st == FERRY_OK) st = count_shard_samples(s);
  if (st < 0) {
    ferry_coco_close(*coco);
    *coco = NULL;
    close_source(&s->base);
    return st;
  }
  *source = &s->base;
  return FERRY_OK;
}
