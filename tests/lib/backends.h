/* tests/lib/backends.h - run a test body on every backend this machine has.
 * The host backend always runs; CUDA runs when a device answers, and otherwise the
 * test says it was skipped and why, or fails when FERRY_REQUIRE_CUDA=1
 * (tests/common/require_cuda.h, shared with the transfer suite). */
#ifndef FERRY_TESTS_BACKENDS_H
#define FERRY_TESTS_BACKENDS_H

#include "../common/require_cuda.h"

#define BACKEND_TESTS(suite, name, body_fn)                      \
  Test(suite, name##_host) { body_fn(open_device("host")); }     \
  Test(suite, name##_cuda) { body_fn(open_device("cuda")); }

#endif
