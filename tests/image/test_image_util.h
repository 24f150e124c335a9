/* tests/loaders/test_image_util.h - small helpers shared by the image tests. */
#ifndef FERRY_TEST_IMAGE_UTIL_H
#define FERRY_TEST_IMAGE_UTIL_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/image.h"
#include "../common/realdata.h"

/* FERRY_SHARED/realdata/<rel> into buf; skips the test (fails it under CI) when the real
 * data is not beside the repo (tests/common/realdata.h). */
static inline const char *realdata(char *buf, size_t n, const char *rel) {
  snprintf(buf, n, "%s", realdata_path(rel));
  return buf;
}

/* The whole file, malloc'ed; fails the test if it cannot be read. */
static inline unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *data = malloc(n > 0 ? (size_t)n : 1);
  cr_assert_not_null(data);
  *len = fread(data, 1, (size_t)n, f);
  fclose(f);
  cr_assert_eq(*len, (size_t)n, "short read of %s", path);
  return data;
}

static inline ferry_decoder *open_decoder(void) {
  ferry_decoder *d = NULL;
  cr_assert_eq(ferry_decoder_open(&d), FERRY_OK, "%s", ferry_last_error());
  return d;
}

/* The last error mentions `name` (every image error names its file). */
static inline void assert_error_names(const char *name) {
  cr_assert_not_null(strstr(ferry_last_error(), name), "message \"%s\" does not name %s",
                     ferry_last_error(), name);
}

#endif
