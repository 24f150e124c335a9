/* source/shard_walk.c - the open-time walk of a shard set (source/shard_walk.h): each
 * shard read forward once through a ranged reader in stream mode (source/reader.h),
 * its tar members (source/tar.h) grouped by key into samples, the bytes the caller
 * asks for, the spill, the index's counts.
 *
 * Owns, while opening: one read buffer, the shard being walked (its reader, the tar
 * walk, the sample being gathered), where each sidecar is, the shard the second pass
 * reads again, and for shards at URLs the spill: an unnamed file each sidecar is
 * copied into as it is read, which the second pass reads instead of fetching every
 * shard again. The set's samples are the caller's (filled here). Runs on the opening
 * thread.
 * Invariants: samples are appended in shard order, each counted at once so that
 * ferry__shard_set_free frees what it holds; sidecars[i] is sample i's sidecar member
 * (its copy in the spill at `spilled`, or NOT_SPILLED); spill_end is the end of the
 * copies made, and nothing is copied once a write has failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "source/reader.h"
#include "source/shard_walk.h"
#include "source/tar.h"

static const char *const image_extensions[] = {"jpg", "jpeg", "png", "webp", "bmp"};

#define NOT_SPILLED UINT64_MAX

/* The members of one sample, as they came. */
typedef struct sample_members {
  char key[FERRY__TAR_NAME_MAX];
  ferry__tar_member image, json;
  int has_image, has_json, members;
  char duplicate[16]; /* an extension seen twice, if any */
} sample_members;

/* Where a sample's sidecar is, read again when its annotations are parsed. */
typedef struct sidecar_at {
  uint64_t offset, size;
  uint64_t spilled; /* its copy's offset in the spill, or NOT_SPILLED */
} sidecar_at;

struct ferry__shard_walk {
  ferry__shard_set *set;
  const ferry__shard_index *index;
  const char *spec;
  sidecar_at *sidecars; /* [cap], as set->samples */
  size_t cap;
  uint8_t *buf;
  size_t buf_cap;
  ferry__reader *shard; /* the shard being walked, and the sample being gathered in it */
  sample_members cur;
  ferry__reader *again; /* the second pass's shard (again_shard), read forward too */
  uint32_t again_shard;
  char label[FERRY__TAR_NAME_MAX + 32];
  int spill_fd;         /* shards at URLs: the sidecars read, for the second pass; -1: none */
  ferry__reader *spill; /* reads it (and owns it) */
  int spilling;         /* copying into it: 0 once a write has failed (the copies made stay) */
  uint64_t spill_end;
};

/* The spill of a split at URLs: an unnamed file (O_TMPFILE) in $TMPDIR, else /tmp,
 * gone when closed; none, and the second pass fetches the sidecars from their shards
 * again, when it cannot be made. Local shards are read again as cheaply as a spill. */
static ferry_status open_spill(ferry__shard_walk *w) {
  if (!w->set->remote) return FERRY_OK;
  const char *dir = getenv("TMPDIR");
  int fd = open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return FERRY_OK;
  ferry_status st = ferry__reader_adopt_fd(fd, "the sidecars' spill", &w->spill);
  if (st == FERRY_OK) w->spill_fd = fd, w->spilling = 1;
  return st;
}

ferry_status ferry__shard_walk_open(ferry__shard_set *set, const ferry__shard_index *index, const char *spec,
                                    ferry__shard_walk **out) {
  *out = ferry__calloc(1, sizeof **out);
  if (!*out) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", spec);
  ferry__shard_walk *w = *out;
  w->set = set;
  w->index = index;
  w->spec = spec;
  w->spill_fd = -1;
  return open_spill(w);
}

void ferry__shard_walk_close(ferry__shard_walk *w) {
  if (!w) return;
  ferry__reader_close(w->shard);
  ferry__reader_close(w->again);
  ferry__reader_close(w->spill);
  ferry__free(w->sidecars);
  ferry__free(w->buf);
  ferry__free(w);
}

/* ---- reading ------------------------------------------------------------------------ */

/* `len` bytes at `offset` of `r` into the buffer (NUL-terminated); `shard` and
 * `member` name them. */
static ferry_status read_member(ferry__shard_walk *w, ferry__reader *r, const char *shard, const char *member,
                                uint64_t offset, size_t len) {
  if (len + 1 > w->buf_cap) {
    uint8_t *grown = ferry__realloc(w->buf, len + 1);
    if (!grown) return ferry__fail(FERRY_ENOMEM, "%s: out of memory reading member '%s'", shard, member);
    w->buf = grown;
    w->buf_cap = len + 1;
  }
  size_t got = 0;
  ferry_status st = ferry__reader_read(r, offset, w->buf, len, &got);
  if (st == FERRY_OK && got < len)
    st = ferry__fail(FERRY_EFORMAT, "%s: member '%s': the shard ends inside it", shard, member);
  if (st == FERRY_OK) w->buf[len] = 0;
  return st;
}

/* The sidecar just read (the buffer) copied to the spill, where the second pass reads
 * it rather than fetching its shard again. A write that fails (a full disk, a file
 * size limit) ends the copying: the second pass reads the copies made from the spill
 * and fetches the rest. */
static void spill_sidecar(ferry__shard_walk *w, size_t index, size_t len) {
  size_t done = 0;
  while (w->spilling && done < len) {
    ssize_t n = pwrite(w->spill_fd, w->buf + done, len - done, (off_t)(w->spill_end + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) w->spilling = 0;
    else done += (size_t)n;
  }
  if (!w->spilling) return;
  w->sidecars[index].spilled = w->spill_end;
  w->spill_end += len;
}

ferry_status ferry__shard_walk_sidecar(ferry__shard_walk *w, size_t index, const char **bytes, size_t *len,
                                       const char **member) {
  const ferry__tar_member *m = &w->cur.json;
  const char *path = w->set->paths[w->set->samples[index].shard];
  if (m->size > FERRY__SHARD_MAX_SIDECAR)
    return ferry__fail(FERRY_ELIMIT, "%s: member '%s': a sidecar of %llu bytes (at most %llu)", path, m->name,
                       (unsigned long long)m->size, (unsigned long long)FERRY__SHARD_MAX_SIDECAR);
  ferry_status st = read_member(w, w->shard, path, m->name, m->offset, (size_t)m->size);
  if (st < 0) return st;
  spill_sidecar(w, index, (size_t)m->size);
  *bytes = (const char *)w->buf;
  *len = (size_t)m->size;
  *member = m->name;
  return FERRY_OK;
}

ferry_status ferry__shard_walk_image(ferry__shard_walk *w, size_t index, size_t len, const uint8_t **bytes) {
  const ferry__shard_sample *rec = &w->set->samples[index];
  ferry_status st = read_member(w, w->shard, w->set->paths[rec->shard], rec->member, rec->offset,
                                len < rec->size ? len : (size_t)rec->size);
  *bytes = w->buf;
  return st;
}

ferry_status ferry__shard_walk_settle(ferry__shard_walk *w, size_t index, ferry_status st) {
  if (st == FERRY_OK || st == FERRY_EIO) return st; /* EIO: the shard could not be read, not the sample's fault */
  ferry__shard_sample *rec = &w->set->samples[index];
  if (st != FERRY_ENOMEM && (rec->problem = ferry__strdup(ferry_last_error()))) return FERRY_OK;
  return ferry__fail(FERRY_ENOMEM, "%s: out of memory", w->spec);
}

/* The second pass's reader on `shard`, opened when the sample before was elsewhere. */
static ferry_status reread_shard(ferry__shard_walk *w, uint32_t shard) {
  if (w->again && w->again_shard == shard) return FERRY_OK;
  ferry__reader_close(w->again);
  w->again = NULL;
  w->again_shard = shard;
  return ferry__reader_open(w->set->remote, w->set->paths[shard], FERRY__READER_STREAM, &w->again);
}

ferry_status ferry__shard_walk_reread(ferry__shard_walk *w, size_t index, const char **bytes, size_t *len,
                                      const char **shard, const char **label) {
  const ferry__shard_sample *rec = &w->set->samples[index];
  const sidecar_at *at = &w->sidecars[index];
  *shard = w->set->paths[rec->shard];
  snprintf(w->label, sizeof w->label, "the sidecar of %s", rec->member);
  *label = w->label;
  ferry_status st = FERRY_OK;
  if (at->spilled != NOT_SPILLED) st = read_member(w, w->spill, *shard, w->label, at->spilled, (size_t)at->size);
  else if ((st = reread_shard(w, rec->shard)) == FERRY_OK)
    st = read_member(w, w->again, *shard, w->label, at->offset, (size_t)at->size);
  *bytes = (const char *)w->buf;
  *len = (size_t)at->size;
  return st;
}

/* ---- the walk ----------------------------------------------------------------------- */

/* key = the member's name up to the first '.' of its last component; ext = the rest. */
static void split_name(const char *name, char *key, const char **ext) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  const char *dot = strchr(base, '.');
  size_t n = dot ? (size_t)(dot - name) : strlen(name);
  memcpy(key, name, n);
  key[n] = '\0';
  *ext = dot ? dot + 1 : "";
}

static int is_image_extension(const char *ext) {
  for (size_t i = 0; i < sizeof image_extensions / sizeof image_extensions[0]; i++)
    if (!strcasecmp(ext, image_extensions[i])) return 1;
  return 0;
}

/* A member into the sample being gathered; other extensions are ignored. */
static void gather(sample_members *s, const ferry__tar_member *m, const char *ext) {
  s->members++;
  int image = is_image_extension(ext), json = !strcasecmp(ext, "json");
  if ((image && s->has_image) || (json && s->has_json)) snprintf(s->duplicate, sizeof s->duplicate, "%s", ext);
  if (image) s->image = *m, s->has_image = 1;
  if (json) s->json = *m, s->has_json = 1;
}

/* Why a gathered sample cannot be used, or NULL. */
static char *missing_member(const char *path, const sample_members *s) {
  if (s->duplicate[0])
    return ferry__shard_format("%s: sample '%s': two members with extension '%s'", path, s->key, s->duplicate);
  if (!s->has_json) return ferry__shard_format("%s: sample '%s': no .json sidecar", path, s->key);
  if (!s->has_image)
    return ferry__shard_format("%s: sample '%s': no image member (jpg, jpeg, png, webp, bmp)", path, s->key);
  return NULL;
}

static ferry_status grow_samples(ferry__shard_walk *w) {
  if (w->set->num_samples < w->cap) return FERRY_OK;
  size_t cap = w->cap ? 2 * w->cap : 1024;
  ferry__shard_sample *s = ferry__realloc(w->set->samples, cap * sizeof *s);
  if (s) w->set->samples = s;
  sidecar_at *at = ferry__realloc(w->sidecars, cap * sizeof *at);
  if (at) w->sidecars = at;
  if (!s || !at) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for %zu samples", w->spec, cap);
  w->cap = cap;
  return FERRY_OK;
}

/* The gathered sample's record in the set, then the caller told of it. */
static ferry_status finish_sample(ferry__shard_walk *w, uint32_t shard, ferry__shard_walk_fn fn, void *user) {
  ferry_status st = grow_samples(w);
  if (st < 0) return st;
  const sample_members *s = &w->cur;
  size_t index = w->set->num_samples++; /* counted at once: ferry__shard_set_free frees what it holds */
  ferry__shard_sample *rec = &w->set->samples[index];
  memset(rec, 0, sizeof *rec);
  rec->shard = shard;
  rec->offset = s->image.offset;
  rec->size = s->image.size;
  rec->member = ferry__strdup(s->has_image ? s->image.name : s->key);
  rec->problem = missing_member(w->set->paths[shard], s);
  w->sidecars[index] = (sidecar_at){s->json.offset, s->json.size, NOT_SPILLED};
  if (!rec->member || (!rec->problem && (s->duplicate[0] || !s->has_json || !s->has_image)))
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory", w->spec);
  return fn(user, w, index);
}

static ferry_status walk_shard(ferry__shard_walk *w, uint32_t shard, ferry__shard_walk_fn fn, void *user) {
  const char *path = w->set->paths[shard];
  ferry_status st = ferry__reader_open(w->set->remote, path, FERRY__READER_STREAM, &w->shard);
  if (st < 0) return st;
  ferry__tar tar;
  ferry__tar_init(&tar, path, ferry__reader_size(w->shard), FERRY__SHARD_MAX_MEMBER, ferry__reader_read_at, w->shard);
  memset(&w->cur, 0, sizeof w->cur);
  ferry__tar_member m;
  while ((st = ferry__tar_next(&tar, &m)) == FERRY_OK) {
    char key[FERRY__TAR_NAME_MAX];
    const char *ext;
    split_name(m.name, key, &ext);
    if (w->cur.members && strcmp(key, w->cur.key) != 0) {
      if ((st = finish_sample(w, shard, fn, user)) < 0) break;
      memset(&w->cur, 0, sizeof w->cur);
    }
    memcpy(w->cur.key, key, sizeof key);
    gather(&w->cur, &m, ext);
  }
  if (st == FERRY_EEND) st = w->cur.members ? finish_sample(w, shard, fn, user) : FERRY_OK;
  if (st == FERRY_EIO || st == FERRY_ENOTFOUND)
    st = ferry__error_prefix(st, "shard %zu, at member '%s': ", (size_t)shard, tar.last[0] ? tar.last : "(the first)");
  ferry__reader_close(w->shard);
  w->shard = NULL;
  return st;
}

/* The index's counts must be what the shards hold. */
static ferry_status check_counts(const ferry__shard_walk *w, const size_t *per_shard) {
  const ferry__shard_index *ix = w->index;
  for (size_t s = 0; ix->per_shard && s < w->set->num_shards; s++) {
    const json_t *want = json_array_get(ix->per_shard, s);
    if (!json_is_integer(want) || (uint64_t)json_integer_value(want) != per_shard[s])
      return ferry__fail(FERRY_EFORMAT, "%s: samples_per_shard[%zu] says %lld samples, but %s holds %zu", w->spec, s,
                         (long long)json_integer_value(want), w->set->paths[s], per_shard[s]);
  }
  if (ix->doc && (uint64_t)ix->num_samples != w->set->num_samples)
    return ferry__fail(FERRY_EFORMAT, "%s: num_samples says %lld, but the shards hold %zu samples", w->spec,
                       (long long)ix->num_samples, w->set->num_samples);
  return FERRY_OK;
}

ferry_status ferry__shard_walk_run(ferry__shard_walk *w, ferry__shard_walk_fn fn, void *user) {
  size_t *per_shard = ferry__calloc(w->set->num_shards ? w->set->num_shards : 1, sizeof *per_shard);
  if (!per_shard) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", w->spec);
  ferry_status st = FERRY_OK;
  for (size_t s = 0; st == FERRY_OK && s < w->set->num_shards; s++) {
    size_t before = w->set->num_samples;
    st = walk_shard(w, (uint32_t)s, fn, user);
    per_shard[s] = w->set->num_samples - before;
  }
  if (st == FERRY_OK) st = check_counts(w, per_shard);
  ferry__free(per_shard);
  return st;
}
