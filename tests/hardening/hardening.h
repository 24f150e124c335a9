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

#endif
