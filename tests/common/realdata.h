/* tests/common/realdata.h - the one way a C test finds the real files beside the repo.
 *
 * They live in $FERRY_SHARED/realdata (tests/meson.build points FERRY_SHARED at
 * ../shared). A user's clone has no ../shared: there a test that needs them skips and
 * says why, UNLESS CI is set (CI=true ./run test), where their absence fails the test,
 * so CI can never pass by skipping. Only the folder's absence skips: a file missing
 * from a realdata folder that is there fails the test that opens it.
 * tests/common/realdata.py and realdata.sh apply the same rule to the script tests.
 */
#ifndef FERRY_TESTS_REALDATA_H
#define FERRY_TESTS_REALDATA_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define REALDATA_PATH_MAX 4096

static inline int ci_is_set(void) {
  const char *ci = getenv("CI");
  return ci && *ci;
}

/* $FERRY_SHARED/realdata/<rel> (rel may be ""), or skip (fail under CI) when the folder is
 * not there. The result lives in one of 8 rotating buffers: use it before 8 more calls. */
static inline const char *realdata_path(const char *rel) {
  static char buf[8][REALDATA_PATH_MAX];
  static int next;
  const char *root = getenv("FERRY_SHARED");
  char dir[REALDATA_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/realdata", root ? root : "$FERRY_SHARED");
  struct stat st;
  if (!root || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (ci_is_set())
      cr_assert_fail("CI is set but the real data is missing: no folder %s (../shared beside the repo)", dir);
    cr_skip_test("skipped: needs the real data in %s (../shared beside the repo, absent from this "
                 "clone); with CI set this fails", dir);
  }
  char *out = buf[next++ % 8];
  int n = snprintf(out, REALDATA_PATH_MAX, "%s/%s", dir, rel);
  cr_assert(n > 0 && n < REALDATA_PATH_MAX, "path too long: %s/%s", dir, rel);
  return out;
}

#endif
