/* coco/shards.c - opening a split packed as WebDataset tar shards (coco/shards.h): the
 * spec (index, pattern, tar) to shard paths, each shard walked once, the sidecars made
 * into the COCO object that parse.c checks like any file.
 *
 * Owns the shard set it returns (paths, each sample's shard/offset/size and names) and,
 * while opening, the images' entries, where each sidecar is, one read buffer and, for
 * shards at URLs, the spill: an unnamed file the walk copies each sidecar into, which
 * the second pass reads instead of fetching every shard again. Runs on the opening
 * thread.
 * Two passes, so that no tree of every annotation is built (it costs several times the
 * text, as coco/json_stream.c says of a JSON): the walk reads each sidecar for its
 * image's entry (id, file name, probed size) and checks it, keeping only where it is and
 * how many annotations it has; then the head (categories, images) is parsed and each
 * sidecar read again, its annotations added one by one (ferry__coco_open_stepwise).
 * Invariants of a returned set: num_samples == the coco's image count, sample i is image
 * i; every sample without a problem has offset + size inside its shard as the tar
 * reader checked it; a sample with a problem has no annotations in the coco. parse.c's
 * messages name "annotations[i]" over the whole split: name_element adds the sample.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco/coco.h"
#include "coco/json_load.h"
#include "coco/shards.h"
#include "coco/tar.h"
#include "lib/alloc.h"
#include "lib/remote.h"
#include "lib/status.h"

/* The first bytes of an image that its size is read from; a header further in (a big
 * EXIF block) gets the whole member. */
#define PROBE_PREFIX (64u << 10)

static const char *const image_extensions[] = {"jpg", "jpeg", "png", "webp", "bmp"};

/* ---- what the spec names ----------------------------------------------------------- */

/* The index's content that the open uses (borrowed from `doc`). */
typedef struct split_index {
  json_t *doc;              /* NULL for a pattern or a tar */
  const json_t *categories; /* array */
  const json_t *annotated;  /* annotated_category_ids, array */
  const json_t *per_shard;  /* samples_per_shard, array or NULL */
  int raw;                  /* category_ids "raw" */
  int64_t num_samples;
} split_index;

static ferry_status add_path(ferry__shard_set *set, char *path) {
  if (!path) return ferry__fail(FERRY_ENOMEM, "shards: out of memory");
  if (set->num_shards >= FERRY__SHARD_MAX_SHARDS) {
    ferry__free(path);
    return ferry__fail(FERRY_ELIMIT, "shards: more than %d shards", FERRY__SHARD_MAX_SHARDS);
  }
  char **grown = ferry__realloc(set->paths, (set->num_shards + 1) * sizeof *grown);
  if (!grown) {
    ferry__free(path);
    return ferry__fail(FERRY_ENOMEM, "shards: out of memory");
  }
  set->paths = grown;
  set->paths[set->num_shards++] = path;
  return FERRY_OK;
}

static char *format_path(const char *fmt, ...) FERRY_PRINTF(1, 2);
static char *format_path(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n >= 0 ? ferry__malloc((size_t)n + 1) : NULL;
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* Decimal digits of [s, end) into *v; 0 when not all digits or too long. */
static int parse_digits(const char *s, const char *end, uint64_t *v) {
  if (s == end || end - s > 18) return 0;
  for (*v = 0; s < end; s++) {
    if (*s < '0' || *s > '9') return 0;
    *v = *v * 10 + (uint64_t)(*s - '0');
  }
  return 1;
}

/* PREFIX{A..B}SUFFIX: one brace group of decimal numbers, zero-padded to the wider of
 * A and B when either starts with a 0 (as WebDataset's braceexpand writes them). */
static ferry_status expand_pattern(const char *spec, ferry__shard_set *set) {
  const char *open = strchr(spec, '{'), *close = open ? strchr(open, '}') : NULL;
  const char *dots = open ? strstr(open, "..") : NULL;
  uint64_t a, b;
  if (!close || !dots || dots > close || !parse_digits(open + 1, dots, &a) || !parse_digits(dots + 2, close, &b) ||
      strchr(close, '{') || b < a)
    return ferry__fail(FERRY_EINVAL, "%s: a shard pattern is PREFIX{A..B}SUFFIX with decimal A <= B, once", spec);
  if (b - a >= FERRY__SHARD_MAX_SHARDS)
    return ferry__fail(FERRY_ELIMIT, "%s: %llu shards, more than %d", spec, (unsigned long long)(b - a + 1),
                       FERRY__SHARD_MAX_SHARDS);
  int padded = open[1] == '0' || dots[2] == '0';
  int width = padded ? (int)((dots - open - 1) > (close - dots - 2) ? dots - open - 1 : close - dots - 2) : 0;
  for (uint64_t i = a; i <= b; i++) {
    ferry_status st = add_path(set, format_path("%.*s%0*llu%s", (int)(open - spec), spec, width, (unsigned long long)i,
                                                close + 1));
    if (st < 0) return st;
  }
  return FERRY_OK;
}

static const json_t *index_array(const char *spec, const json_t *doc, const char *key, int required,
                                 ferry_status *st) {
  const json_t *v = json_object_get(doc, key);
  if (!v && !required) return NULL;
  if (!json_is_array(v)) *st = ferry__fail(FERRY_EFORMAT, "%s: \"%s\": expected an array", spec, key);
  return v;
}

/* The index's fields (RF-DETR's ShardIndex.to_json) and its shard paths, each relative
 * to the index's folder and refused if it would leave it. */
static ferry_status read_index(const char *spec, split_index *ix, ferry__shard_set *set) {
  char *text = NULL;
  size_t len = 0;
  ferry_status st = set->remote ? ferry__remote_get(set->remote, spec, FERRY__SHARD_MAX_SIDECAR, &text, &len)
                                : ferry__coco_read_file(spec, &text, &len);
  if (st < 0) return st;
  json_error_t err;
  int oom = 0;
  ix->doc = ferry__coco_json_load(text, len, &err, &oom);
  ferry__free(text);
  if (oom) return ferry__fail(FERRY_ENOMEM, "%s: out of memory parsing the JSON", spec);
  if (!ix->doc) return ferry__fail(FERRY_EFORMAT, "%s: line %d, column %d: invalid JSON: %s", spec, err.line, err.column, err.text);
  const json_t *version = json_object_get(ix->doc, "version"), *policy = json_object_get(ix->doc, "category_ids");
  const json_t *num = json_object_get(ix->doc, "num_samples");
  if (!json_is_integer(version) || json_integer_value(version) != 1)
    return ferry__fail(FERRY_EFORMAT, "%s: \"version\": expected 1 (RF-DETR's shard index version 1)", spec);
  if (policy && !(json_is_string(policy) && (!strcmp(json_string_value(policy), "remap") || !strcmp(json_string_value(policy), "raw"))))
    return ferry__fail(FERRY_EFORMAT, "%s: \"category_ids\": expected \"remap\" or \"raw\"", spec);
  if (!json_is_integer(num) || json_integer_value(num) < 0)
    return ferry__fail(FERRY_EFORMAT, "%s: \"num_samples\": expected a count", spec);
  ix->raw = policy && !strcmp(json_string_value(policy), "raw");
  ix->num_samples = json_integer_value(num);
  const json_t *shards = index_array(spec, ix->doc, "shards", 1, &st);
  if (st == FERRY_OK) ix->categories = index_array(spec, ix->doc, "categories", 0, &st);
  if (st == FERRY_OK) ix->annotated = index_array(spec, ix->doc, "annotated_category_ids", 0, &st);
  if (st == FERRY_OK) ix->per_shard = index_array(spec, ix->doc, "samples_per_shard", 0, &st);
  if (st < 0) return st;
  if (ix->per_shard && json_array_size(ix->per_shard) == 0) ix->per_shard = NULL;  /* an older index */
  if (ix->per_shard && json_array_size(ix->per_shard) != json_array_size(shards))
    return ferry__fail(FERRY_EFORMAT, "%s: \"samples_per_shard\" has %zu counts for %zu shards", spec,
                       json_array_size(ix->per_shard), json_array_size(shards));
  const char *slash = strrchr(spec, '/');
  int dir_len = slash ? (int)(slash - spec) : 1;
  const char *dir = slash ? spec : ".";
  for (size_t i = 0; st == FERRY_OK && i < json_array_size(shards); i++) {
    const json_t *name = json_array_get(shards, i);
    const char *why = json_is_string(name) ? ferry__tar_name_refused(json_string_value(name)) : "not a string";
    if (why) return ferry__fail(FERRY_EFORMAT, "%s: shards[%zu]: %s (a shard must be inside the index's folder)", spec, i, why);
    st = add_path(set, format_path("%.*s/%s", dir_len, dir, json_string_value(name)));
  }
  return st;
}

/* ---- one shard ----------------------------------------------------------------------- */

/* A shard being read: a local file (fd) or a URL (stream), never both. */
typedef struct shard_file {
  int fd;
  ferry__remote_stream *stream;
  const char *path;
} shard_file;

static ferry_status pread_at(void *user, uint64_t offset, void *buf, size_t len, size_t *got) {
  const shard_file *f = user;
  if (f->stream) return ferry__remote_stream_read(f->stream, offset, buf, len, got);
  *got = 0;
  while (*got < len) {
    ssize_t n = pread(f->fd, (char *)buf + *got, len - *got, (off_t)(offset + *got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ferry__fail(FERRY_EIO, "%s: read error at byte %llu: %s", f->path, (unsigned long long)offset, strerror(errno));
    if (n == 0) break;
    *got += (size_t)n;
  }
  return FERRY_OK;
}

/* Open shard `path` of `set`: its size, UINT64_MAX for a URL (a tar walk finds the end). */
static ferry_status open_shard(const ferry__shard_set *set, const char *path, shard_file *f, uint64_t *size) {
  *f = (shard_file){.fd = -1, .path = path};
  if (set->remote) {
    *size = UINT64_MAX;
    return ferry__remote_stream_open(set->remote, path, &f->stream);
  }
  f->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (f->fd < 0) return ferry__fail(errno == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(f->fd);
    f->fd = -1;
    return ferry__fail(FERRY_EIO, "%s: not a regular file", path);
  }
  *size = (uint64_t)sb.st_size;
  return FERRY_OK;
}

static int shard_is_open(const shard_file *f) { return f->fd >= 0 || f->stream; }

static void close_shard(shard_file *f) {
  if (f->fd >= 0) close(f->fd);
  ferry__remote_stream_close(f->stream);
  f->fd = -1;
  f->stream = NULL;
}

/* The members of one sample, as they came. */
typedef struct sample_members {
  char key[FERRY__TAR_NAME_MAX];
  ferry__tar_member image, json;
  int has_image, has_json, members;
  char duplicate[16];       /* an extension seen twice, if any */
} sample_members;

/* Where a sample's sidecar is, read again when its annotations are parsed. */
typedef struct sidecar_at {
  uint64_t offset, size;
  size_t annotations;       /* 0 for a sample with a problem */
  uint64_t spilled;         /* its copy's offset in the builder's spill, or NOT_SPILLED */
} sidecar_at;

#define NOT_SPILLED UINT64_MAX

typedef struct builder {
  const char *spec;
  ferry__image_size_fn size;
  ferry__shard_set *set;
  size_t cap;               /* of set->samples, sidecars and ann_first */
  sidecar_at *sidecars;
  size_t *ann_first;        /* each sample's first annotation over the split */
  size_t num_annotations;
  int64_t *category_ids;    /* every annotation's category_id (an index-less spec's categories) */
  size_t num_category_ids, category_cap;
  json_t *images;
  int64_t max_id;
  int any_id;
  uint8_t *buf;
  size_t buf_cap;
  int spill_fd;             /* shards at URLs: the sidecars read, for the second pass; -1: none */
  int spilling;             /* copying into it: 0 once a write has failed (the copies made stay) */
  uint64_t spill_end;
} builder;

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

static ferry_status read_member(builder *b, const shard_file *f, const ferry__tar_member *m, size_t len) {
  if (len + 1 > b->buf_cap) {
    uint8_t *grown = ferry__realloc(b->buf, len + 1);
    if (!grown) return ferry__fail(FERRY_ENOMEM, "%s: out of memory reading member '%s'", f->path, m->name);
    b->buf = grown;
    b->buf_cap = len + 1;
  }
  size_t got = 0;
  ferry_status st = pread_at((void *)f, m->offset, b->buf, len, &got);
  if (st == FERRY_OK && got < len)
    st = ferry__fail(FERRY_EFORMAT, "%s: member '%s': the shard ends inside it", f->path, m->name);
  if (st == FERRY_OK) b->buf[len] = 0;
  return st;
}

/* The sidecar's image_id, file_name and annotations, checked; each annotation gets the
 * sidecar's image_id when it has none, and must have that one when it has one. */
static ferry_status read_sidecar(builder *b, const shard_file *f, const ferry__tar_member *m, int64_t *id,
                                 json_t **file_name, json_t **anns) {
  if (m->size > FERRY__SHARD_MAX_SIDECAR)
    return ferry__fail(FERRY_ELIMIT, "%s: member '%s': a sidecar of %llu bytes (at most %llu)", f->path, m->name,
                       (unsigned long long)m->size, (unsigned long long)FERRY__SHARD_MAX_SIDECAR);
  ferry_status st = read_member(b, f, m, (size_t)m->size);
  if (st < 0) return st;
  json_error_t err;
  int oom = 0;
  json_t *doc = ferry__coco_json_load((const char *)b->buf, (size_t)m->size, &err, &oom);
  if (oom) return ferry__fail(FERRY_ENOMEM, "%s: member '%s': out of memory", f->path, m->name);
  if (!doc) return ferry__fail(FERRY_EFORMAT, "%s: member '%s': invalid JSON: %s", f->path, m->name, err.text);
  const json_t *image_id = json_object_get(doc, "image_id"), *name = json_object_get(doc, "file_name");
  json_t *list = json_object_get(doc, "annotations");
  if (!json_is_integer(image_id) || (name && !json_is_string(name)) || !json_is_array(list)) {
    json_decref(doc);
    return ferry__fail(FERRY_EFORMAT, "%s: member '%s': a sidecar is an object with an integer \"image_id\", a "
                       "string \"file_name\" and an array \"annotations\"", f->path, m->name);
  }
  *id = json_integer_value(image_id);
  for (size_t k = 0; k < json_array_size(list); k++) {
    json_t *ann = json_array_get(list, k);
    const json_t *own = json_object_get(ann, "image_id");
    if (json_is_object(ann) && !own && json_object_set_new(ann, "image_id", json_integer(*id)) != 0) st = FERRY_ENOMEM;
    else if (own && !(json_is_integer(own) && json_integer_value(own) == *id)) st = FERRY_EFORMAT;
    if (st < 0) {
      json_decref(doc);
      return st == FERRY_ENOMEM ? ferry__fail(st, "%s: out of memory", f->path)
                                : ferry__fail(st, "%s: member '%s': annotations[%zu].image_id is not the sidecar's "
                                              "image_id %lld", f->path, m->name, k, (long long)*id);
    }
  }
  *file_name = name ? json_incref((json_t *)name) : NULL;
  *anns = json_incref(list);
  json_decref(doc);
  return FERRY_OK;
}

static ferry_status probe_size(builder *b, const shard_file *f, const ferry__tar_member *m, int *w, int *h) {
  char name[FERRY__TAR_NAME_MAX + 4096];
  snprintf(name, sizeof name, "%s: member '%s'", f->path, m->name);
  size_t prefix = m->size < PROBE_PREFIX ? (size_t)m->size : PROBE_PREFIX;
  ferry_status st = read_member(b, f, m, prefix);
  if (st == FERRY_OK) st = b->size(b->buf, prefix, name, w, h);
  if (st < 0 && st != FERRY_ENOMEM && prefix < m->size && m->size <= FERRY__SHARD_MAX_SIDECAR) {
    st = read_member(b, f, m, (size_t)m->size);
    if (st == FERRY_OK) st = b->size(b->buf, (size_t)m->size, name, w, h);
  }
  return st;
}

/* Append the sample's image entry; its annotations come later (next_annotation). */
static ferry_status add_entry(builder *b, size_t index, int64_t id, json_t *file_name, const char *member, int w,
                              int h) {
  /* json_pack takes file_name ("o") and json_array_append_new the entry even when they
   * fail: nothing is left to free here. */
  json_t *img = file_name ? json_pack("{s:o, s:I, s:i, s:i}", "file_name", file_name, "id", (json_int_t)id, "width", w,
                                      "height", h)
                          : json_pack("{s:s, s:I, s:i, s:i}", "file_name", member, "id", (json_int_t)id, "width", w,
                                      "height", h);
  int bad = json_array_append_new(b->images, img) != 0;
  b->ann_first[index] = b->num_annotations;
  b->num_annotations += b->sidecars[index].annotations;
  return bad ? ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec) : FERRY_OK;
}

/* The category ids of a sample's annotations, kept for a spec without categories. */
static ferry_status note_categories(builder *b, const json_t *anns) {
  for (size_t k = 0; k < json_array_size(anns); k++) {
    const json_t *c = json_object_get(json_array_get(anns, k), "category_id");
    if (!json_is_integer(c)) continue;
    if (b->num_category_ids == b->category_cap) {
      size_t cap = b->category_cap ? 2 * b->category_cap : 1024;
      int64_t *grown = ferry__realloc(b->category_ids, cap * sizeof *grown);
      if (!grown) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
      b->category_ids = grown;
      b->category_cap = cap;
    }
    b->category_ids[b->num_category_ids++] = json_integer_value(c);
  }
  return FERRY_OK;
}

static ferry_status grow_samples(builder *b) {
  if (b->set->num_samples < b->cap) return FERRY_OK;
  size_t cap = b->cap ? 2 * b->cap : 1024;
  ferry__shard_sample *s = ferry__realloc(b->set->samples, cap * sizeof *s);
  if (s) b->set->samples = s;
  size_t *first = ferry__realloc(b->ann_first, cap * sizeof *first);
  if (first) b->ann_first = first;
  sidecar_at *at = ferry__realloc(b->sidecars, cap * sizeof *at);
  if (at) b->sidecars = at;
  if (!s || !first || !at) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for %zu samples", b->spec, cap);
  b->cap = cap;
  return FERRY_OK;
}

/* The sidecar just read (b->buf) copied to the spill, where the second pass reads it
 * rather than fetching its shard again. A write that fails (a full disk, a file size
 * limit) ends the copying: the second pass reads the copies made from the spill and
 * fetches the rest. */
static void spill_sidecar(builder *b, size_t index, size_t len) {
  size_t done = 0;
  while (b->spilling && done < len) {
    ssize_t n = pwrite(b->spill_fd, b->buf + done, len - done, (off_t)(b->spill_end + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) b->spilling = 0;
    else done += (size_t)n;
  }
  if (!b->spilling) return;
  b->sidecars[index].spilled = b->spill_end;
  b->spill_end += len;
}

/* Why a gathered sample cannot be used, or NULL. */
static char *missing_member(const shard_file *f, const sample_members *s) {
  if (s->duplicate[0])
    return format_path("%s: sample '%s': two members with extension '%s'", f->path, s->key, s->duplicate);
  if (!s->has_json) return format_path("%s: sample '%s': no .json sidecar", f->path, s->key);
  if (!s->has_image) return format_path("%s: sample '%s': no image member (jpg, jpeg, png, webp, bmp)", f->path, s->key);
  return NULL;
}

/* A sample's sidecar (image id, file name, how many annotations) and its image's size.
 * A problem with either is recorded in the sample; only running out of memory is
 * returned. The annotations are dropped: read again one sidecar at a time, when the
 * coco is built (next_annotation). */
static ferry_status read_sample(builder *b, const shard_file *f, const sample_members *s, size_t index, int64_t *id,
                                json_t **file_name, int *w, int *h) {
  json_t *anns = NULL;
  ferry_status st = read_sidecar(b, f, &s->json, id, file_name, &anns);
  if (st == FERRY_OK) spill_sidecar(b, index, (size_t)s->json.size);
  if (st == FERRY_OK) st = note_categories(b, anns);
  if (st == FERRY_OK) st = probe_size(b, f, &s->image, w, h);
  if (st == FERRY_OK) b->sidecars[index].annotations = json_array_size(anns);
  json_decref(anns);
  ferry__shard_sample *rec = &b->set->samples[index];
  if (st == FERRY_EIO) return st;  /* the shard could not be read (a disk, a network): not the sample's fault */
  if (st < 0 && st != FERRY_ENOMEM && !(rec->problem = ferry__strdup(ferry_last_error()))) st = FERRY_ENOMEM;
  else if (st < 0 && st != FERRY_ENOMEM) st = FERRY_OK;
  if (st == FERRY_ENOMEM) {
    json_decref(*file_name);
    *file_name = NULL;
    return ferry__fail(st, "%s: out of memory", b->spec);
  }
  return FERRY_OK;
}

/* One sample: its entry in the tree and its record in the set. A problem it has is
 * recorded, not returned: only running out of memory ends the open. */
static ferry_status finish_sample(builder *b, uint32_t shard, const shard_file *f, const sample_members *s) {
  ferry_status st = grow_samples(b);
  if (st < 0) return st;
  size_t index = b->set->num_samples++;  /* counted at once: ferry__shard_set_free frees what it holds */
  ferry__shard_sample *rec = &b->set->samples[index];
  memset(rec, 0, sizeof *rec);
  rec->shard = shard;
  rec->offset = s->image.offset;
  rec->size = s->image.size;
  rec->member = ferry__strdup(s->has_image ? s->image.name : s->key);
  rec->problem = missing_member(f, s);
  b->sidecars[index] = (sidecar_at){s->json.offset, s->json.size, 0, NOT_SPILLED};
  if (!rec->member || (!rec->problem && (s->duplicate[0] || !s->has_json || !s->has_image)))
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  int64_t id = 0;
  json_t *file_name = NULL;
  int w = 1, h = 1;
  if (!rec->problem && (st = read_sample(b, f, s, index, &id, &file_name, &w, &h)) < 0) return st;
  if (rec->problem) {
    w = h = 1;
    id = 0;  /* given an unused id once every id is known (place_problems) */
  } else if (!b->any_id || id > b->max_id) {
    b->max_id = id;
    b->any_id = 1;
  }
  return add_entry(b, index, id, file_name, rec->member, w, h);
}

static ferry_status walk_shard(builder *b, uint32_t shard) {
  const char *path = b->set->paths[shard];
  shard_file f;
  uint64_t size;
  ferry_status st = open_shard(b->set, path, &f, &size);
  if (st < 0) return st;
  ferry__tar tar;
  ferry__tar_init(&tar, path, size, FERRY__SHARD_MAX_MEMBER, pread_at, &f);
  sample_members s;
  memset(&s, 0, sizeof s);
  ferry__tar_member m;
  while ((st = ferry__tar_next(&tar, &m)) == FERRY_OK) {
    char key[FERRY__TAR_NAME_MAX];
    const char *ext;
    split_name(m.name, key, &ext);
    if (s.members && strcmp(key, s.key) != 0) {
      if ((st = finish_sample(b, shard, &f, &s)) < 0) break;
      memset(&s, 0, sizeof s);
    }
    memcpy(s.key, key, sizeof key);
    gather(&s, &m, ext);
  }
  if (st == FERRY_EEND) st = s.members ? finish_sample(b, shard, &f, &s) : FERRY_OK;
  if (st == FERRY_EIO || st == FERRY_ENOTFOUND)
    st = ferry__error_prefix(st, "shard %zu, at member '%s': ", (size_t)shard, tar.last[0] ? tar.last : "(the first)");
  close_shard(&f);
  return st;
}

/* ---- the categories ---------------------------------------------------------------- */

static int compare_int64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

/* Without an index: one category per category_id the annotations use, sorted, named by
 * nothing (the sidecars carry no names). Sorts b->category_ids. */
static ferry_status seen_categories(builder *b, json_t **out) {
  int64_t *ids = b->category_ids;
  size_t k = b->num_category_ids;
  *out = json_array();
  if (!*out) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  if (k) qsort(ids, k, sizeof *ids, compare_int64);
  int bad = 0;
  for (size_t i = 0; i < k; i++) {
    if (i && ids[i] == ids[i - 1]) continue;
    bad |= json_array_append_new(*out, json_pack("{s:I, s:s}", "id", (json_int_t)ids[i], "name", "")) != 0;
  }
  return bad ? ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec) : FERRY_OK;
}

/* ---- the annotations, read again one sidecar at a time ------------------------------- */

typedef struct annotation_stream {
  builder *b;
  size_t sample;            /* the next sample to read */
  json_t *anns;             /* the current sample's annotations */
  size_t k;                 /* the next of them */
  shard_file f;             /* the current sample's shard (none open: fd -1, no stream) */
  uint32_t shard;
} annotation_stream;

/* The sidecar of `sample`, read again: its annotations, as the first reading saw them;
 * from the spill when it was copied there, else from its shard. */
static ferry_status reread_sidecar(annotation_stream *s, size_t sample) {
  builder *b = s->b;
  const ferry__shard_sample *rec = &b->set->samples[sample];
  shard_file spill = {.fd = b->spill_fd, .path = b->set->paths[rec->shard]};
  const shard_file *from = &spill;
  uint64_t offset = b->sidecars[sample].spilled;
  if (offset == NOT_SPILLED) {
    from = &s->f;
    offset = b->sidecars[sample].offset;
  }
  if (from == &s->f && (!shard_is_open(&s->f) || s->shard != rec->shard)) {
    close_shard(&s->f);
    s->shard = rec->shard;
    uint64_t size;
    ferry_status st = open_shard(b->set, b->set->paths[rec->shard], &s->f, &size);
    if (st < 0) return st;
  }
  ferry__tar_member m = {.offset = offset, .size = b->sidecars[sample].size};
  snprintf(m.name, sizeof m.name, "the sidecar of %s", rec->member);
  int64_t id;
  json_t *file_name = NULL;
  ferry_status st = read_sidecar(b, from, &m, &id, &file_name, &s->anns);
  json_decref(file_name);
  if (st == FERRY_OK && json_array_size(s->anns) != b->sidecars[sample].annotations)
    st = ferry__fail(FERRY_EFORMAT, "%s: member '%s' changed while the split was opened", from->path, m.name);
  return st;
}

static ferry_status next_annotation(void *user, json_t **out) {
  annotation_stream *s = user;
  *out = NULL;
  while (!s->anns || s->k >= json_array_size(s->anns)) {
    json_decref(s->anns);
    s->anns = NULL;
    s->k = 0;
    if (s->sample >= s->b->set->num_samples) return FERRY_OK;
    size_t sample = s->sample++;
    if (s->b->sidecars[sample].annotations == 0) continue;
    ferry_status st = reread_sidecar(s, sample);
    if (st < 0) return st;
  }
  *out = json_incref(json_array_get(s->anns, s->k++));
  return FERRY_OK;
}

/* ---- the open --------------------------------------------------------------------- */

/* Samples with a problem get ids after every real one, so that none collides. */
static ferry_status place_problems(builder *b) {
  int64_t next = b->any_id ? b->max_id + 1 : 0;
  for (size_t i = 0; i < b->set->num_samples; i++)
    if (b->set->samples[i].problem && json_object_set_new(json_array_get(b->images, i), "id", json_integer(next++)))
      return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  return FERRY_OK;
}

/* The index's counts must be what the shards hold. */
static ferry_status check_counts(const builder *b, const split_index *ix, const size_t *per_shard) {
  for (size_t s = 0; ix->per_shard && s < b->set->num_shards; s++) {
    const json_t *want = json_array_get(ix->per_shard, s);
    if (!json_is_integer(want) || (uint64_t)json_integer_value(want) != per_shard[s])
      return ferry__fail(FERRY_EFORMAT, "%s: samples_per_shard[%zu] says %lld samples, but %s holds %zu", b->spec, s,
                         (long long)json_integer_value(want), b->set->paths[s], per_shard[s]);
  }
  if (ix->doc && (uint64_t)ix->num_samples != b->set->num_samples)
    return ferry__fail(FERRY_EFORMAT, "%s: num_samples says %lld, but the shards hold %zu samples", b->spec,
                       (long long)ix->num_samples, b->set->num_samples);
  return FERRY_OK;
}

/* A message parse.c gave about "images[i]" or "annotations[i]" of the built object,
 * with the sample it came from. */
static ferry_status name_element(const builder *b, ferry_status st) {
  const char *msg = ferry_last_error();
  const char *at = strstr(msg, ": images["), *ann = strstr(msg, ": annotations[");
  size_t i = 0, sample = SIZE_MAX;
  if (at && sscanf(at, ": images[%zu]", &i) == 1 && i < b->set->num_samples) sample = i;
  if (ann && sscanf(ann, ": annotations[%zu]", &i) == 1) {
    for (size_t s = 0; s < b->set->num_samples && b->ann_first[s] <= i; s++) sample = s;
  }
  if (sample == SIZE_MAX) return st;
  const ferry__shard_sample *r = &b->set->samples[sample];
  return ferry__error_prefix(st, "%s, sample of member '%s': ", b->set->paths[r->shard], r->member);
}

static ferry_status walk_all(builder *b, const split_index *ix) {
  size_t *per_shard = ferry__calloc(b->set->num_shards ? b->set->num_shards : 1, sizeof *per_shard);
  if (!per_shard) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  ferry_status st = FERRY_OK;
  for (size_t s = 0; st == FERRY_OK && s < b->set->num_shards; s++) {
    size_t before = b->set->num_samples;
    st = walk_shard(b, (uint32_t)s);
    per_shard[s] = b->set->num_samples - before;
  }
  if (st == FERRY_OK) st = check_counts(b, ix, per_shard);
  ferry__free(per_shard);
  return st;
}

/* The spill of a split at URLs: an unnamed file (O_TMPFILE) in $TMPDIR, else /tmp,
 * gone when closed; -1 when there is none, and the second pass fetches the sidecars
 * from their shards again. */
static int open_spill(const ferry__shard_set *set) {
  if (!set->remote) return -1;  /* local shards are read again as cheaply as a spill */
  const char *dir = getenv("TMPDIR");
  return open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

static ferry_status build(builder *b, split_index *ix, const ferry_coco_options *opts, ferry_coco **coco) {
  b->spill_fd = open_spill(b->set);
  b->spilling = b->spill_fd >= 0;
  ferry_status st = walk_all(b, ix);
  if (st == FERRY_OK) st = place_problems(b);
  if (st < 0) return st;
  ferry_coco_options o;
  if (opts) o = *opts;
  else ferry_coco_options_default(&o);
  /* An index's categories as they are; its policy says how they label: "raw" ids, or
   * RF-DETR's rule over the index's own annotated_category_ids (ShardIndex.cat2label;
   * an index without that list names no category annotated). */
  json_t *categories = NULL, *annotated = NULL;
  if (ix->doc) {
    categories = ix->categories ? json_incref((json_t *)ix->categories) : json_array();
    o.remap_categories = ix->raw ? FERRY_CATEGORIES_RAW : FERRY_CATEGORIES_RFDETR;
    o.labels_from = NULL;
    if (!ix->raw) annotated = ix->annotated ? json_incref((json_t *)ix->annotated) : json_array();
    if (!ix->raw && !annotated) st = ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  } else {
    st = seen_categories(b, &categories);
  }
  json_t *head = json_object();
  if (st == FERRY_OK && (!head || !categories || json_object_set(head, "categories", categories) ||
                         json_object_set(head, "images", b->images)))
    st = ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  annotation_stream stream = {.b = b, .f = {.fd = -1, .stream = NULL}};
  if (st == FERRY_OK && (st = ferry__coco_open_stepwise(head, annotated, b->spec, &o, next_annotation, &stream, coco)) < 0)
    st = name_element(b, st);
  json_decref(stream.anns);
  close_shard(&stream.f);
  json_decref(categories);
  json_decref(annotated);
  json_decref(head);
  return st;
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && !strcmp(s + n - k, tail);
}

static int is_pattern(const char *path) {
  const char *open = strchr(path, '{');
  return open && strstr(open, "..") && strchr(open, '}');
}

int ferry__shards_recognise(const char *path) {
  if (!path) return 0;
  if (ferry__remote_is_url(path)) return 1;  /* ferry reads only shards from a URL */
  if (is_pattern(path) || ends_with(path, ".tar")) return 1;
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char head[64] = {0};
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = '\0';
  const char *p = head;
  while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
  if (*p++ != '{') return 0;
  while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
  return !strncmp(p, "\"version\"", 9) || !strncmp(p, "\"shards\"", 8);
}

void ferry__shard_set_free(ferry__shard_set *set) {
  if (!set) return;
  for (size_t i = 0; i < set->num_shards; i++) ferry__free(set->paths[i]);
  ferry__remote_close(set->remote);
  for (size_t i = 0; i < set->num_samples; i++) {
    ferry__free(set->samples[i].member);
    ferry__free(set->samples[i].problem);
  }
  ferry__free(set->paths);
  ferry__free(set->samples);
  ferry__free(set);
}

/* A URL's client. A query string (a presigned URL) would not survive the shard names
 * being made from the index's URL, and a user:password would be in every message that
 * names a shard: both are refused. */
static ferry_status open_remote(const char *spec, ferry__shard_set *set) {
  char shown[2048];
  ferry__remote_display(spec, shown, sizeof shown);
  if (strpbrk(spec, "?#"))
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: a shard URL with a query or fragment is not supported", shown);
  if (strcmp(shown, spec) != 0)  /* shard URLs appear in messages: they must hold no password */
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: a user name or password in a shard URL is not supported", shown);
  return ferry__remote_open(&set->remote);
}

ferry_status ferry__shards_open(const char *spec, const ferry_coco_options *opts, ferry__image_size_fn size,
                                ferry_coco **coco, ferry__shard_set **out) {
  if (!spec || !size || !coco || !out) return ferry__fail(FERRY_EINVAL, "ferry__shards_open: NULL argument");
  *coco = NULL;
  *out = NULL;
  ferry__coco_json_use_ferry_allocator();
  builder b = {.spec = spec, .size = size, .spill_fd = -1};
  split_index ix = {0};
  b.set = ferry__calloc(1, sizeof *b.set);
  b.images = json_array();
  ferry_status st = b.set && b.images ? FERRY_OK : ferry__fail(FERRY_ENOMEM, "%s: out of memory", spec);
  if (st == FERRY_OK && ferry__remote_is_url(spec)) st = open_remote(spec, b.set);
  if (st == FERRY_OK && is_pattern(spec)) st = expand_pattern(spec, b.set);
  else if (st == FERRY_OK && ends_with(spec, ".tar")) st = add_path(b.set, ferry__strdup(spec));
  else if (st == FERRY_OK) st = read_index(spec, &ix, b.set);
  if (st == FERRY_OK) st = build(&b, &ix, opts, coco);
  json_decref(ix.doc);
  json_decref(b.images);
  if (b.spill_fd >= 0) close(b.spill_fd);
  ferry__free(b.buf);
  ferry__free(b.ann_first);
  ferry__free(b.sidecars);
  ferry__free(b.category_ids);
  if (st < 0) {
    ferry__shard_set_free(b.set);
    return st;
  }
  *out = b.set;
  return FERRY_OK;
}
