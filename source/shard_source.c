/* source/shard_source.c - the image source of a split packed as tar shards, local or
 * at URLs (source/image_source.h).
 *
 * Owns the shard set (source/shards.h), one ranged reader per shard (source/reader.h:
 * opened at open, closed at close), and for URLs the block layout and block cache
 * (block_cache.h). A member is read through its shard's reader at the member's offset
 * (a local file: pread; a URL: one ranged GET through the set's client, remote.h: a
 * handle per request from its pool, retried from the byte it stopped at), except that
 * a member of a shard at a URL is copied out of the shard's blocks (fixed-size byte
 * ranges, aligned at multiples of the block size, shared by the workers, freed once
 * their members are read; blocks are read ahead in the order the epoch's samples first
 * need them, by one ranged GET from a block to its shard's end, cut where the cache's
 * room ends, and a block a worker needs before that is one ranged GET: block_cache.h)
 * when the loader reads neighbours together (plan_reads: the shard order, or shuffle
 * off on one rank), unless the member is larger than a block or the cache has no room.
 * Invariants: readers[i] is shard i of the set; a sample with a problem is never read,
 * its problem is returned instead, so the loader's error policy decides (fail or
 * skip); shard i's blocks are numbers first_block[i] .. first_block[i + 1] - 1 and
 * cover the members read through blocks, which are the readable ones of 1 ..
 * block_bytes bytes, each counted in every block it overlaps.
 */
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "source/block_cache.h"
#include "source/image_source.h"
#include "source/reader.h"
#include "source/settings.h"
#include "source/shards.h"

typedef struct shard_source {
  ferry__image_source base;  /* first: the source is handed around as its base */
  ferry__shard_set *set;
  ferry__source_settings settings; /* the blocks' sizes, cap and wait (settings.h) */
  ferry__reader **readers;         /* [num_shards] */
  size_t *shard_samples;     /* base.shard_samples */
  /* URLs read through blocks (plan_reads); cache NULL: one GET per member */
  ferry__block_cache *cache;
  size_t block_bytes;
  size_t *first_block;       /* [num_shards + 1] */
  size_t *plan;              /* [blocks]: plan_epoch's scratch (the coordinator's thread alone) */
  uint8_t *block_seen;       /* [blocks]: the same */
} shard_source;

/* Blocks: 4 MiB by default (settings.h's FERRY__BLOCK_BYTES_DEFAULT; block_bytes, or
 * FERRY_REMOTE_BLOCK_BYTES, ferry/source.h): a ranged GET's latency on an
 * object store (30-100 ms) amortised over ~25 COCO images, and few blocks per worker in
 * memory. The cache's cap when cache_bytes (or FERRY_REMOTE_CACHE_BYTES) does not give one: the readers'
 * window (twice the shuffle buffer's samples at the mean member size, as a sample is
 * read up to buffer - 1 positions either side of its place), two blocks per worker
 * (the block it reads and the next, partly read), and READ_AHEAD_BLOCKS for the
 * read-ahead's lead, kept within [16 MiB, 1 GiB]. The read-ahead may fill all but the
 * workers' two blocks each: a window with no room beyond it had the read-ahead take
 * the last free bytes, and each worker's miss then evicted a block still being read,
 * fetched again for its next member (a cap 4 blocks over the window: 85 evictions in
 * 3,160 images of a 5,000-image split, and 0 with 8 blocks more). */
#define READ_AHEAD_BLOCKS 8
#define CACHE_BYTES_MIN ((size_t)16 << 20)
#define CACHE_BYTES_MAX ((size_t)1 << 30)
/* How long a run of read-ahead waits for the readers to free room for its next block
 * before it ends its request (room_wait_ms, 2 s by default: settings.h's
 * FERRY__ROOM_WAIT_MS_DEFAULT): a training step's worth, so that a reader a little
 * slower than the network keeps one request per shard, while a request held open much
 * longer would meet servers' idle timeouts (nginx: 60 s). */

static void describe(const ferry__image_source *self, size_t index, char *name, size_t size) {
  const shard_source *s = (const shard_source *)self;
  const ferry__shard_sample *r = &s->set->samples[index];
  snprintf(name, size, "%s: member '%s'", s->set->paths[r->shard], r->member);
}

/* Bytes [at, at + len) of the sample's shard, through its reader (a pread, or one
 * ranged GET). */
static ferry_status read_at(const shard_source *s, const ferry__shard_sample *r, uint64_t at, uint8_t *dst,
                            size_t len) {
  size_t got = 0;
  ferry_status st = ferry__reader_read(s->readers[r->shard], at, dst, len, &got);
  if (st < 0) return ferry__error_prefix(st, "member '%s' of ", r->member);
  if (got < len)
    return ferry__fail(FERRY_EFORMAT, "%s: member '%s': the shard ends inside it (it changed since the open)",
                       s->set->paths[r->shard], r->member);
  return FERRY_OK;
}

static int through_blocks(const shard_source *s, const ferry__shard_sample *r) {
  return !r->problem && r->size > 0 && r->size <= s->block_bytes;
}

/* The blocks a member read through blocks lies in: *first .. *last (one, or two when
 * it crosses a boundary). */
static void member_blocks(const shard_source *s, const ferry__shard_sample *r, size_t *first, size_t *last) {
  *first = s->first_block[r->shard] + (size_t)(r->offset / s->block_bytes);
  *last = s->first_block[r->shard] + (size_t)((r->offset + r->size - 1) / s->block_bytes);
}

/* The member's bytes out of the blocks it lies in (one, or two when it crosses a
 * boundary); from a block the cache cannot hold, the rest is one direct GET. */
static ferry_status read_through_blocks(const shard_source *s, const ferry__shard_sample *r, uint8_t *dst) {
  uint64_t at = r->offset, end = r->offset + r->size;
  size_t first = s->first_block[r->shard];
  while (at < end) {
    uint64_t k = at / s->block_bytes, start = k * s->block_bytes;
    size_t n = (size_t)((end < start + s->block_bytes ? end : start + s->block_bytes) - at);
    ferry_status st = ferry__block_cache_copy(s->cache, first + k, (size_t)(at - start), n, dst + (at - r->offset));
    if (st == FERRY_EAGAIN) return read_at(s, r, at, dst + (at - r->offset), (size_t)(end - at));
    if (st < 0) return ferry__error_prefix(st, "member '%s' of ", r->member);
    at += n;
  }
  return FERRY_OK;
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
  *len = want;
  if (s->cache && through_blocks(s, r)) return read_through_blocks(s, r, *buf);
  return read_at(s, r, r->offset, *buf, want);
}

static void close_source(ferry__image_source *self) {
  shard_source *s = (shard_source *)self;
  if (!s) return;
  for (size_t i = 0; s->readers && i < s->set->num_shards; i++) ferry__reader_close(s->readers[i]);
  ferry__free(s->readers);
  ferry__free(s->shard_samples);
  ferry__block_cache_close(s->cache);
  ferry__free(s->first_block);
  ferry__free(s->plan);
  ferry__free(s->block_seen);
  ferry__shard_set_free(s->set);
  ferry__free(s);
}

static ferry_status open_readers(shard_source *s) {
  s->readers = ferry__calloc(s->set->num_shards ? s->set->num_shards : 1, sizeof *s->readers);
  if (!s->readers) return ferry__fail(FERRY_ENOMEM, "shards: out of memory");
  ferry_status st = FERRY_OK;
  for (size_t i = 0; st == FERRY_OK && i < s->set->num_shards; i++)
    st = ferry__reader_open(s->set->remote, s->set->paths[i], FERRY__READER_RANGED, &s->readers[i]);
  return st;
}

/* Samples per shard. The set's samples are in shard order (source/shards.h), which is
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

/* The cache's sink, and whether it ended the read (a short read it did not end is the
 * shard ending early). */
typedef struct sink_call {
  ferry__block_sink_fn sink;
  void *ctx;
  int ended;
} sink_call;

static int through_sink(void *ctx, size_t at, const uint8_t *bytes, size_t n) {
  sink_call *call = ctx;
  return call->ended = call->sink(call->ctx, at, bytes, n);
}

/* ferry__block_fetch_fn: from block `first` on, in the shard it belongs to, one ranged GET. */
static ferry_status fetch_blocks(void *ctx, size_t first, size_t len, ferry__block_sink_fn sink, void *sink_ctx) {
  const shard_source *s = ctx;
  size_t lo = 0, hi = s->set->num_shards;  /* the shard whose blocks hold `first` */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->first_block[mid] <= first) lo = mid;
    else hi = mid;
  }
  uint64_t start = (uint64_t)(first - s->first_block[lo]) * s->block_bytes;
  size_t got = 0;
  sink_call call = {sink, sink_ctx, 0};
  ferry_status st = ferry__reader_read_into(s->readers[lo], start, len, through_sink, &call, &got);
  if (st == FERRY_OK && got < len && !call.ended)
    return ferry__fail(FERRY_EFORMAT, "%s: bytes %llu-%llu: the shard ends inside them (it changed since the open)",
                       s->set->paths[lo], (unsigned long long)(start + got), (unsigned long long)(start + len - 1));
  return st;
}

/* The blocks each shard's members read through blocks lie in (first_block), given
 * where those members end in each shard (ends). */
static ferry_status number_blocks(shard_source *s, const uint64_t *ends) {
  size_t n = s->set->num_shards;
  s->first_block = ferry__calloc(n + 1, sizeof *s->first_block);
  if (!s->first_block) return ferry__fail(FERRY_ENOMEM, "shards: out of memory for the blocks");
  for (size_t i = 0; i < n; i++)
    s->first_block[i + 1] = s->first_block[i] + (size_t)((ends[i] + s->block_bytes - 1) / s->block_bytes);
  return FERRY_OK;
}

/* The blocks (first_block), and each one's length (the last of a shard cut at the end
 * of its last member read through blocks), members and whether the shard goes on after
 * it: into *info, for the cache. */
static ferry_status lay_out_blocks(shard_source *s, ferry__block_info **info) {
  size_t n = s->set->num_shards;
  uint64_t *ends = ferry__calloc(n ? n : 1, sizeof *ends);
  if (!ends) return ferry__fail(FERRY_ENOMEM, "shards: out of memory for the blocks");
  for (size_t i = 0; i < s->set->num_samples; i++) {
    const ferry__shard_sample *r = &s->set->samples[i];
    if (through_blocks(s, r) && r->offset + r->size > ends[r->shard]) ends[r->shard] = r->offset + r->size;
  }
  ferry_status st = number_blocks(s, ends);
  size_t blocks = st == FERRY_OK ? s->first_block[n] : 0;
  if (st == FERRY_OK && !(*info = ferry__calloc(blocks ? blocks : 1, sizeof **info)))
    st = ferry__fail(FERRY_ENOMEM, "shards: out of memory for %zu blocks", blocks);
  for (size_t i = 0; st == FERRY_OK && i < n; i++)
    for (size_t b = s->first_block[i]; b < s->first_block[i + 1]; b++) {
      uint64_t start = (uint64_t)(b - s->first_block[i]) * s->block_bytes;
      (*info)[b].len = (size_t)(ends[i] - start < s->block_bytes ? ends[i] - start : s->block_bytes);
      (*info)[b].continues = b + 1 < s->first_block[i + 1];
    }
  for (size_t i = 0; st == FERRY_OK && i < s->set->num_samples; i++) {
    const ferry__shard_sample *r = &s->set->samples[i];
    if (!through_blocks(s, r)) continue;
    size_t k, last;
    member_blocks(s, r, &k, &last);
    for (; k <= last; k++) (*info)[k].members++;
  }
  ferry__free(ends);
  return st;
}

/* The cache's cap: the settings' cache_bytes, else the readers' window and the blocks
 * beyond it (see READ_AHEAD_BLOCKS). */
static size_t cache_cap(const shard_source *s, size_t buffer, int workers) {
  uint64_t bytes = 0, count = 0;
  for (size_t i = 0; i < s->set->num_samples; i++)
    if (through_blocks(s, &s->set->samples[i])) {
      bytes += s->set->samples[i].size;
      count++;
    }
  double window = 2.0 * (double)buffer * (double)(count ? bytes / count : 0) +
                  (2.0 * workers + READ_AHEAD_BLOCKS) * (double)s->block_bytes;
  size_t derived = window < (double)CACHE_BYTES_MIN ? CACHE_BYTES_MIN
                 : window > (double)CACHE_BYTES_MAX ? CACHE_BYTES_MAX : (size_t)window;
  return s->settings.cache_bytes == FERRY__CACHE_DERIVED ? derived : (size_t)s->settings.cache_bytes;
}

/* What the read-ahead may fill of `cap`: all but two blocks per worker, kept for the
 * workers' own fetches; half of it when those take more than half. */
static size_t ahead_cap(const shard_source *s, size_t cap, int workers) {
  size_t kept = 2 * (size_t)(workers > 0 ? workers : 1) * s->block_bytes;
  return kept < cap / 2 ? cap - kept : cap / 2;
}

/* image_source.h's plan_reads: blocks for URLs read in neighbours' order. */
static ferry_status plan_reads(ferry__image_source *self, int neighbours, size_t buffer, int workers) {
  shard_source *s = (shard_source *)self;
  if (!s->set->remote || !neighbours || s->cache) return FERRY_OK;
  s->block_bytes = (size_t)s->settings.block_bytes;
  size_t cap = cache_cap(s, buffer, workers);
  if (cap < s->block_bytes) return FERRY_OK;  /* blocks turned off (0), or none fits: a GET per member */
  ferry__block_info *info = NULL;
  ferry_status st = lay_out_blocks(s, &info);
  ferry__block_cache_config config = {.num_blocks = s->first_block ? s->first_block[s->set->num_shards] : 0,
                                      .blocks = info,
                                      .cap_bytes = cap,
                                      .room_wait_ms = s->settings.room_wait_ms,
                                      .fetch = fetch_blocks,
                                      .ctx = s,
                                      .ahead_cap_bytes = ahead_cap(s, cap, workers),
                                      .keep_if_all_fit = 1};
  size_t blocks = config.num_blocks ? config.num_blocks : 1;
  if (st == FERRY_OK && (!(s->plan = ferry__malloc(blocks * sizeof *s->plan)) || !(s->block_seen = ferry__malloc(blocks))))
    st = ferry__fail(FERRY_ENOMEM, "shards: out of memory for %zu blocks", config.num_blocks);
  if (st == FERRY_OK) st = ferry__block_cache_open(&config, &s->cache);
  ferry__free(info);
  return st;
}

/* image_source.h's plan_epoch: a new pass of the cache (block_cache.h), planned as the
 * blocks in the order the epoch's samples first need them, which is the order the
 * read-ahead fetches them in: with the shuffle buffer, the blocks of the shards around
 * the readers' place, a block needed sooner before one needed later, and from one
 * shard's end into the next one's start. Runs on the coordinator's thread, under the
 * loader's lock: O(samples) once an epoch. */
static void plan_epoch(ferry__image_source *self, const size_t *order, size_t n) {
  shard_source *s = (shard_source *)self;
  if (!s->cache) return;
  size_t blocks = s->first_block[s->set->num_shards], planned = 0;
  memset(s->block_seen, 0, blocks);
  for (size_t i = 0; i < n && planned < blocks; i++) {
    const ferry__shard_sample *r = &s->set->samples[order[i]];
    if (!through_blocks(s, r)) continue;
    size_t k, last;
    member_blocks(s, r, &k, &last);
    for (; k <= last; k++)
      if (!s->block_seen[k]) {
        s->block_seen[k] = 1;
        s->plan[planned++] = k;
      }
  }
  (void)ferry__block_cache_begin_pass(s->cache, s->plan, planned);  /* advice: the blocks are the cache's */
}

ferry_status ferry__shard_source_open(ferry__shard_set *set, const ferry__source_settings *settings,
                                      ferry__image_source **out) {
  *out = NULL;
  shard_source *s = ferry__calloc(1, sizeof *s);
  if (!s) {
    ferry__shard_set_free(set);
    return ferry__fail(FERRY_ENOMEM, "loader: out of memory");
  }
  s->base = (ferry__image_source){read_member, describe, close_source, NULL, 0, plan_reads, plan_epoch};
  s->set = set;
  s->settings = *settings;
  ferry_status st = open_readers(s);
  if (st == FERRY_OK) st = count_shard_samples(s);
  if (st < 0) {
    close_source(&s->base);
    return st;
  }
  *out = &s->base;
  return FERRY_OK;
}
