/* tests/common/require_cuda.h - the one way a test opens a device by name.
 *
 * The host backend always opens. A CUDA device this machine lacks skips the test and
 * says why, UNLESS the environment has FERRY_REQUIRE_CUDA=1 (repro/gpu_check.sh sets it
 * on a GPU node): then the test fails, so a GPU check cannot pass on CUDA variants that
 * only skipped. Every suite with CUDA variants opens its devices here.
 */
#ifndef FERRY_TESTS_REQUIRE_CUDA_H
#define FERRY_TESTS_REQUIRE_CUDA_H

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"

static inline int cuda_is_required(void) {
  const char *require = getenv("FERRY_REQUIRE_CUDA");
  return require && strcmp(require, "1") == 0;
}

static inline ferry_device *open_device(const char *name) {
  ferry_device *d = NULL;
  ferry_status st = ferry_device_open(name, &d);
  if (st == FERRY_ENODEV && cuda_is_required())
    cr_assert_fail("FERRY_REQUIRE_CUDA=1 but %s did not open: %s", name, ferry_last_error());
  if (st == FERRY_ENODEV) cr_skip_test("skipped on %s: %s", name, ferry_last_error());
  cr_assert_eq(st, FERRY_OK, "open %s: %s", name, ferry_last_error());
  return d;
}

#endif
