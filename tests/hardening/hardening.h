/* tests/hardening/hardening.h - helpers of the hardening tests: the real data beside
 * the repo, scratch folders made at test time, and small subsets of real datasets. */
#ifndef FERRY_TESTS_HARDENING_H
#define FERRY_TESTS_HARDENING_H

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/realdata.h"

#define HARD_PATH 4096

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  chmod(path, 0700); /* the unreadable-folder cases */
  return remove(path);
}

/* A fresh folder for this test, removed at exit (also when an assertion fails). */
static char hard_dir[HARD_PATH];
static void remove_scratch(void) {
  if (hard_dir[0]) nftw(hard_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
static inline const char *scratch_dir(void) {
  if (hard_dir[0]) return hard_dir;
  const char *tmp = getenv("TMPDIR");
  snprintf(hard_dir, sizeof hard_dir, "%.3000s/ferry-hardening-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  cr_assert_not_null(mkdtemp(hard_dir), "mkdtemp: %s", strerror(errno));
  atexit(remove_scratch);
  return hard_dir;
}

/* scratch/<name> (a static buffer of 8). */
static inline const char *scratch_path(const char *name) {
  static char buf[8][2 * HARD_PATH];
  static int next;
  char *out = buf[next++ % 8];
  snprintf(out, sizeof buf[0], "%s/%.4000s", scratch_dir(), name);
  return out;
}

static inline const char *write_scratch(const char *name, const void *data, size_t len) {
  const char *path = scratch_path(name);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  cr_assert_eq(fwrite(data, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
  return path;
}

static inline const char *write_scratch_text(const char *name, const char *text) {
  return write_scratch(name, text, strlen(text));
}

/* Read a whole file into a malloc'd buffer. */
static inline unsigned char *read_whole(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  cr_assert_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  cr_assert_geq(n, 0);
  rewind(f);
  unsigned char *data = malloc((size_t)n + 1);
  cr_assert_not_null(data);
  cr_assert_eq(fread(data, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return data;
}

/* The first `count` images of the COCO file `src` with their annotations (all its
 * categories), written to scratch/<name>; returns its path. */
static inline const char *write_subset(const char *src, size_t count, const char *name) {
  json_error_t err;
  json_t *root = json_load_file(src, 0, &err);
  cr_assert_not_null(root, "%s: %s", src, err.text);
  json_t *images = json_object_get(root, "images"), *anns = json_object_get(root, "annotations");
  json_t *kept_images = json_array(), *kept_anns = json_array();
  for (size_t i = 0; i < json_array_size(images) && i < count; i++) {
    json_t *img = json_array_get(images, i);
    json_array_append(kept_images, img);
    json_int_t id = json_integer_value(json_object_get(img, "id"));
    for (size_t a = 0; a < json_array_size(anns); a++) {
      json_t *ann = json_array_get(anns, a);
      if (json_integer_value(json_object_get(ann, "image_id")) == id) json_array_append(kept_anns, ann);
    }
  }
  json_t *out = json_pack("{s:o, s:o, s:O}", "images", kept_images, "annotations", kept_anns,
                          "categories", json_object_get(root, "categories"));
  const char *path = scratch_path(name);
  cr_assert_eq(json_dump_file(out, path, JSON_COMPACT), 0, "cannot write %s", path);
  json_decref(out);
  json_decref(root);
  return path;
}

/* ---- tar shards, made by hand (issue 26) ----------------------------------------- */

/* A tar archive, hostile headers included (the library's writer only makes valid
 * ones). Allocate it (calloc): it is large. */
typedef struct tar_bytes {
  unsigned char data[4 << 20];
  size_t len;
} tar_bytes;

enum { TAR_BAD_CHECKSUM = 1 };

static inline void tar_octal(unsigned char *field, size_t len, unsigned long long v) {
  snprintf((char *)field, len, "%0*llo", (int)len - 1, v);
}

/* One header (name up to 100 bytes, type flag, the size it claims) and `len` bytes of
 * data, padded to a block. */
static inline void tar_add(tar_bytes *t, const char *name, char type, unsigned long long size, const void *data,
                           size_t len, int flags) {
  unsigned char *h = t->data + t->len;
  cr_assert_leq(t->len + 512 + len + 512 + 1024, sizeof t->data);
  memset(h, 0, 512);
  memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
  tar_octal(h + 100, 8, 0644);
  tar_octal(h + 108, 8, 0);
  tar_octal(h + 116, 8, 0);
  tar_octal(h + 124, 12, size);
  tar_octal(h + 136, 12, 0);
  h[156] = (unsigned char)type;
  memcpy(h + 257, "ustar\0" "00", 8);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum + (flags & TAR_BAD_CHECKSUM ? 1 : 0));
  t->len += 512;
  if (len) memcpy(t->data + t->len, data, len);
  t->len += (len + 511) / 512 * 512;
}

static inline void tar_text(tar_bytes *t, const char *name, const char *text) {
  tar_add(t, name, '0', strlen(text), text, strlen(text), 0);
}

static inline void tar_end(tar_bytes *t) {
  memset(t->data + t->len, 0, 1024);
  t->len += 1024;
}

/* The COCO file `annotations` (images in `images`) as one shard, scratch/<name>: per
 * image, %08d.EXT and its sidecar, as RF-DETR's packer writes them; returns its path. */
static inline const char *write_shard(const char *annotations, const char *images, const char *name) {
  json_error_t err;
  json_t *root = json_load_file(annotations, 0, &err);
  cr_assert_not_null(root, "%s: %s", annotations, err.text);
  json_t *list = json_object_get(root, "images"), *anns = json_object_get(root, "annotations");
  tar_bytes *t = calloc(1, sizeof *t);
  cr_assert_not_null(t);
  for (size_t i = 0; i < json_array_size(list); i++) {
    json_t *img = json_array_get(list, i), *own = json_array();
    for (size_t a = 0; a < json_array_size(anns); a++)
      if (json_equal(json_object_get(json_array_get(anns, a), "image_id"), json_object_get(img, "id")))
        json_array_append(own, json_array_get(anns, a));
    const char *file = json_string_value(json_object_get(img, "file_name"));
    json_t *sidecar = json_pack("{s:O, s:s, s:o}", "image_id", json_object_get(img, "id"), "file_name", file,
                                "annotations", own);
    char *text = json_dumps(sidecar, 0), path[2 * HARD_PATH], member[64];
    snprintf(path, sizeof path, "%s/%s", images, file);
    size_t len;
    unsigned char *bytes = read_whole(path, &len);
    snprintf(member, sizeof member, "%08zu.%s", i, strrchr(file, '.') + 1);
    tar_add(t, member, '0', len, bytes, len, 0);
    snprintf(member, sizeof member, "%08zu.json", i);
    tar_text(t, member, text);
    free(bytes);
    free(text);
    json_decref(sidecar);
  }
  tar_end(t);
  const char *out = write_scratch(name, t->data, t->len);
  free(t);
  json_decref(root);
  return out;
}

#endif
