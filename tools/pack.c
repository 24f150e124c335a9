/* tools/pack.c - `ferry-coco pack`: a COCO split into WebDataset tar shards and RF-DETR's
 * shard index (docs/shards.md), the format pack_coco_to_shards writes, so that one
 * packed copy serves ferry and RF-DETR alike.
 *
 * Image i (in "images" order) becomes members %08d.EXT (its file, byte for byte) and
 * %08d.json ({"image_id", "file_name", "annotations"}: its annotations in file order);
 * a shard is closed once its members reach --max-shard-bytes (a sample is never split).
 * Shards are written under temporary names and renamed into place once all are
 * complete (a failure removes them); the index SPLIT-index.json is written last, to a
 * temporary name then renamed, so that a reader never sees an index whose shards are
 * not all there. Shards are named
 * SPLIT-NNNNNN.tar (RF-DETR adds a content token; readers take the names from the
 * index either way).
 * Refused before anything is written: a file_name that is absolute or has "..", an
 * image extension RF-DETR's reader cannot decode, an annotation whose image_id names no
 * image; a missing image file stops the pack naming it.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "source/tar.h"
#include "tools/pack.h"

static const char *const image_extensions[] = {"jpg", "jpeg", "png", "webp", "bmp"};
/* Python's tarfile pads an archive to whole records of 20 blocks. */
#define RECORD_BYTES (20 * FERRY__TAR_BLOCK)

typedef struct pack_options {
  const char *annotations, *images, *out, *split, *policy;
  unsigned long long max_shard_bytes;
} pack_options;

typedef struct shard_writer {
  FILE *f;
  char path[4096], tmp[4096];
  unsigned long long bytes;   /* counted as RF-DETR counts: members only */
  unsigned long long written; /* what is in the file */
  size_t samples;
} shard_writer;

static int complain(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "ferry-coco pack: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
  return 1;
}

static int write_bytes(shard_writer *w, const void *data, size_t len) {
  if (len && fwrite(data, 1, len, w->f) != len) return complain("%s: write error: %s", w->tmp, strerror(errno));
  w->written += len;
  return 0;
}

static int write_member(shard_writer *w, const char *name, const void *data, size_t len) {
  uint8_t header[FERRY__TAR_BLOCK];
  static const uint8_t zeros[FERRY__TAR_BLOCK];
  if (ferry__tar_header(name, len, header) < 0) return complain("%s%s", ferry_last_error(), "");
  size_t pad = (FERRY__TAR_BLOCK - len % FERRY__TAR_BLOCK) % FERRY__TAR_BLOCK;
  if (write_bytes(w, header, sizeof header) || write_bytes(w, data, len) || write_bytes(w, zeros, pad)) return 1;
  w->bytes += ferry__tar_member_bytes(len);
  return 0;
}

/* Two zero blocks, then zeros to a whole record: up to two blocks short of a record
 * and two more, so the zeros cover a record and two blocks. The shard keeps its
 * temporary name until every shard is written (publish). */
static int close_shard(shard_writer *w) {
  static const uint8_t zeros[RECORD_BYTES + 2 * FERRY__TAR_BLOCK];
  size_t end = 2 * FERRY__TAR_BLOCK;
  size_t rest = (size_t)((w->written + end) % RECORD_BYTES);
  if (rest) end += RECORD_BYTES - rest;
  int bad = write_bytes(w, zeros, end);
  bad |= fclose(w->f) != 0;
  w->f = NULL;
  if (bad) return complain("%s: cannot write: %s", w->tmp, strerror(errno));
  return 0;
}

/* Every shard written: rename them into place (ok), or remove them all. */
static int publish(const pack_options *o, const json_t *shards, int ok) {
  size_t i;
  json_t *name;
  json_array_foreach(shards, i, name) {
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/%s", o->out, json_string_value(name));
    snprintf(tmp, sizeof tmp, "%s/.%s.partial", o->out, json_string_value(name));
    if (!ok) remove(tmp);
    else if (rename(tmp, path) != 0) return complain("%s: cannot rename: %s", tmp, strerror(errno));
  }
  return !ok;
}

static int open_shard(shard_writer *w, const pack_options *o, size_t number, json_t *names) {
  char name[256];
  snprintf(name, sizeof name, "%s-%06zu.tar", o->split, number);
  snprintf(w->path, sizeof w->path, "%s/%s", o->out, name);
  snprintf(w->tmp, sizeof w->tmp, "%s/.%s.partial", o->out, name);
  w->f = fopen(w->tmp, "wb");
  w->bytes = w->written = 0;
  w->samples = 0;
  if (!w->f) return complain("%s: cannot create: %s", w->tmp, strerror(errno));
  return json_array_append_new(names, json_string(name)) != 0;
}

static const char *extension_of(const char *file_name) {
  const char *base = strrchr(file_name, '/');
  const char *dot = strrchr(base ? base : file_name, '.');
  if (!dot) return NULL;
  for (size_t i = 0; i < sizeof image_extensions / sizeof image_extensions[0]; i++)
    if (!strcasecmp(dot + 1, image_extensions[i])) return image_extensions[i];
  return NULL;
}

/* The whole file, malloc'ed. */
static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *data = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len == cap) {
      uint8_t *grown = realloc(data, cap = cap ? 2 * cap : 1 << 16);
      if (!grown) break;
      data = grown;
    }
    size_t n = fread(data + *len, 1, cap - *len, f);
    *len += n;
    if (n == 0) {
      fclose(f);
      return data;
    }
  }
  fclose(f);
  free(data);
  return NULL;
}

/* Each image's annotations in file order (an array per image, in an object keyed by
 * the image's position); an annotation whose image_id names no image is refused. */
static int group_annotations(const pack_options *o, const json_t *images, const json_t *anns, json_t *by_image,
                             json_t *annotated) {
  json_t *position = json_object();
  char key[32];
  size_t i;
  json_t *v;
  json_array_foreach(images, i, v) {
    const json_t *id = json_object_get(v, "id");
    snprintf(key, sizeof key, "%zu", i);
    if (!json_is_integer(id)) {
      json_decref(position);
      return complain("%s: images[%s].id: expected an integer", o->annotations, key);
    }
    snprintf(key, sizeof key, "%lld", (long long)json_integer_value(id));
    json_object_set_new(position, key, json_integer((json_int_t)i));
    json_array_append_new(by_image, json_array());
  }
  json_array_foreach(anns, i, v) {
    const json_t *id = json_object_get(v, "image_id"), *cat = json_object_get(v, "category_id");
    snprintf(key, sizeof key, "%lld", (long long)json_integer_value(id));
    const json_t *at = json_is_integer(id) ? json_object_get(position, key) : NULL;
    if (!at) {
      json_decref(position);
      return complain("%s: an annotation's image_id %s matches no image: it would be dropped", o->annotations, key);
    }
    json_array_append(json_array_get(by_image, (size_t)json_integer_value(at)), v);
    if (json_is_integer(cat)) {
      snprintf(key, sizeof key, "%lld", (long long)json_integer_value(cat));
      json_object_set_new(annotated, key, json_true());
    }
  }
  json_decref(position);
  return 0;
}

static int compare_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return x < y ? -1 : x > y;
}

/* annotated_category_ids: the category ids the annotations use, sorted. */
static json_t *sorted_ids(json_t *annotated) {
  size_t n = json_object_size(annotated), k = 0;
  long long *ids = malloc((n ? n : 1) * sizeof *ids);
  json_t *out = json_array();
  const char *key;
  json_t *v;
  if (!ids) return out;
  json_object_foreach(annotated, key, v) ids[k++] = strtoll(key, NULL, 10);
  qsort(ids, k, sizeof *ids, compare_ll);
  for (size_t i = 0; i < k; i++) json_array_append_new(out, json_integer(ids[i]));
  free(ids);
  return out;
}

static int check_image(const pack_options *o, const json_t *img, const char **file_name) {
  *file_name = json_string_value(json_object_get(img, "file_name"));
  if (!*file_name) return complain("%s: an image has no file_name%s", o->annotations, "");
  if (ferry__tar_name_refused(*file_name))
    return complain("file_name '%s' in %s is absolute or leaves the images folder with '..'", *file_name, o->annotations);
  if (!extension_of(*file_name))
    return complain("%s: not an image RF-DETR's shard reader decodes (jpg, jpeg, png, webp, bmp) in %s", *file_name,
                    o->annotations);
  return 0;
}

/* One sample's two members. */
static int write_sample(shard_writer *w, const pack_options *o, size_t position, const json_t *img, json_t *anns) {
  const char *file_name = json_string_value(json_object_get(img, "file_name"));
  char path[4096], name[64];
  snprintf(path, sizeof path, "%s/%s", o->images, file_name);
  size_t len = 0;
  uint8_t *data = read_file(path, &len);
  if (!data) return complain("%s: cannot read: %s (listed in the annotations; nothing is dropped silently)", path, strerror(errno));
  json_t *sidecar = json_pack("{s:O, s:O, s:O}", "image_id", json_object_get(img, "id"), "file_name",
                              json_object_get(img, "file_name"), "annotations", anns);
  char *text = sidecar ? json_dumps(sidecar, JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17)) : NULL;
  snprintf(name, sizeof name, "%08zu.%s", position, extension_of(file_name));
  int bad = !text || write_member(w, name, data, len);
  snprintf(name, sizeof name, "%08zu.json", position);
  if (!bad) bad = write_member(w, name, text, strlen(text));
  free(data);
  free(text);
  json_decref(sidecar);
  w->samples++;
  return bad;
}

static int write_index(const pack_options *o, json_t *doc, json_t *shards, json_t *counts, json_t *annotated,
                       size_t samples) {
  json_t *categories = json_object_get(doc, "categories");
  categories = json_is_array(categories) ? json_incref(categories) : json_array();
  json_t *index = json_pack("{s:i, s:s, s:O, s:I, s:o, s:o, s:s, s:O}", "version", 1, "split", o->split, "shards",
                            shards, "num_samples", (json_int_t)samples, "categories", categories,
                            "annotated_category_ids", sorted_ids(annotated),
                            "category_ids", o->policy, "samples_per_shard", counts);
  char path[4096], tmp[4096];
  snprintf(path, sizeof path, "%s/%s-index.json", o->out, o->split);
  snprintf(tmp, sizeof tmp, "%s/.%s-index.json.partial", o->out, o->split);
  int bad = !index || json_dump_file(index, tmp, JSON_ENSURE_ASCII | JSON_REAL_PRECISION(17)) != 0 || rename(tmp, path) != 0;
  json_decref(index);
  if (bad) return complain("%s: cannot write%s", path, "");
  printf("%s: %zu samples in %zu shard(s)\n", path, samples, json_array_size(shards));
  return 0;
}

static int pack(const pack_options *o) {
  json_error_t err;
  json_t *doc = json_load_file(o->annotations, 0, &err);
  if (!doc) return complain("%s: %s", o->annotations, err.text);
  json_t *images = json_object_get(doc, "images"), *anns = json_object_get(doc, "annotations");
  json_t *by_image = json_array(), *annotated = json_object(), *shards = json_array(), *counts = json_array();
  int bad = 0;
  if (!json_is_array(images) || json_array_size(images) == 0)
    bad = complain("%s lists no images; nothing to pack%s", o->annotations, "");
  if (!bad) bad = group_annotations(o, images, json_is_array(anns) ? anns : NULL, by_image, annotated);
  size_t i;
  json_t *img;
  json_array_foreach(images, i, img) if (!bad) bad = check_image(o, img, &(const char *){NULL});
  if (!bad && mkdir(o->out, 0755) != 0 && errno != EEXIST) bad = complain("%s: cannot create: %s", o->out, strerror(errno));
  shard_writer w = {0};
  json_array_foreach(images, i, img) {
    if (bad) break;
    if (!w.f) bad = open_shard(&w, o, json_array_size(shards), shards);
    if (!bad) bad = write_sample(&w, o, i, img, json_array_get(by_image, i));
    if (!bad && w.bytes >= o->max_shard_bytes) {
      json_array_append_new(counts, json_integer((json_int_t)w.samples));
      bad = close_shard(&w);
    }
  }
  if (!bad && w.f) {
    json_array_append_new(counts, json_integer((json_int_t)w.samples));
    bad = close_shard(&w);
  }
  if (w.f) fclose(w.f);
  bad = publish(o, shards, !bad);
  if (!bad) bad = write_index(o, doc, shards, counts, annotated, json_array_size(images));
  json_decref(by_image);
  json_decref(annotated);
  json_decref(shards);
  json_decref(counts);
  json_decref(doc);
  return bad;
}

int ferry_coco_pack(int argc, char **argv) {
  pack_options o = {.split = "train", .policy = "remap", .max_shard_bytes = 100ull << 20};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' && !o.annotations) o.annotations = a;
    else if (i + 1 >= argc) return -1;
    else if (!strcmp(a, "--images")) o.images = argv[++i];
    else if (!strcmp(a, "--out")) o.out = argv[++i];
    else if (!strcmp(a, "--split")) o.split = argv[++i];
    else if (!strcmp(a, "--category-ids")) o.policy = argv[++i];
    else if (!strcmp(a, "--max-shard-bytes")) o.max_shard_bytes = strtoull(argv[++i], NULL, 10);
    else return -1;
  }
  if (!o.annotations || !o.images || !o.out || o.max_shard_bytes == 0) return -1;
  if (strcmp(o.policy, "remap") && strcmp(o.policy, "raw")) return -1;
  if (!o.split[0] || strpbrk(o.split, "/\\:*?[]") || !strcmp(o.split, ".") || !strcmp(o.split, ".."))
    return complain("--split '%s': a split is a plain name (no path separator, '..' or glob character)%s", o.split, "");
  return pack(&o);
}
