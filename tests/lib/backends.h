/* tests/lib/backends.h - run a test body on every backend this machine has.
 * The host backend always runs; CUDA runs when a device answers, and otherwise the
 * test says it was skipped and why. */
#ifndef FERRY_TESTS_BACKENDS_H
#define FERRY_TESTS_BACKENDS_H

#include <criterion/criterion.h>

#include "ferry/ferry.h"

/* Open `name`, or skip the test with the reason when it is a CUDA device that
 * this machine does not have. */
static inline ferry_device *open_or_skip(const char *name) {
  ferry_device *d = NULL;
  ferry_status st = ferry_device_open(name, &d);
  if (st == FERRY_ENODEV) cr_skip_test("skipped on %s: %s", name, ferry_last_error());
  cr_assert_eq(st, FERRY_OK, "open %s: %s", name, ferry_last_error());
  return d;
}

#define BACKEND_TESTS(suite, name, body_fn)                      \
  Test(suite, name##_host) { body_fn(open_or_skip("host")); }    \
  Test(suite, name##_cuda) { body_fn(open_or_skip("cuda")); }

#endif
