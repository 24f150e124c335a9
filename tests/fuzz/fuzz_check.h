/* tests/fuzz/fuzz_check.h - what every ferry fuzz target shares.
 *
 * A target is compiled twice: as a libFuzzer binary (FUZZ_ENTRY unset, so it defines
 * LLVMFuzzerTestOneInput) and into the Criterion test that replays every input the
 * fuzzers ever crashed on (FUZZ_ENTRY set to a name of its own). FUZZ_CHECK states an
 * invariant the library promises; breaking one aborts, which both harnesses report.
 */
#ifndef FERRY_FUZZ_CHECK_H
#define FERRY_FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "%s:%d: invariant broken: %s (last error: %s)\n", __FILE__,       \
              __LINE__, #cond, ferry_last_error());                                     \
      abort();                                                                          \
    }                                                                                   \
  } while (0)

/* A failing call must say why: a negative status and a non-empty message. */
#define FUZZ_CHECK_FAILURE(st) FUZZ_CHECK((st) < 0 && ferry_last_error()[0] != '\0')

#endif
