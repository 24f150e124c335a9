/* tests/common/canary.h - a caller's struct laid at the start of a buffer of canary
 * bytes, to see what a getter wrote and what it left alone: how the tests of
 * struct_size (include/ferry/device.h, above ferry_memory_stats) show that a struct of
 * an older layout is never written past its end, and that one of a newer layout gets
 * its unknown tail zeroed. */
#ifndef FERRY_TESTS_CANARY_H
#define FERRY_TESTS_CANARY_H

#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

#define CANARY 0xAB

/* Fill `bytes` bytes of `buf` with CANARY, then set the struct_size at its start. */
static inline void canary_struct(void *buf, size_t bytes, size_t struct_size) {
  memset(buf, CANARY, bytes);
  memcpy(buf, &struct_size, sizeof struct_size);
}

/* The struct_size at the start of `buf`, as the getter left it. */
static inline size_t struct_size_in(const void *buf) {
  size_t size;
  memcpy(&size, buf, sizeof size);
  return size;
}

/* Every byte of `buf` in [from, to) still holds CANARY. */
static inline void expect_canary(const void *buf, size_t from, size_t to, const char *what) {
  const unsigned char *b = buf;
  for (size_t i = from; i < to; i++)
    cr_assert_eq(b[i], CANARY, "%s: byte %zu, past the caller's struct, was written", what, i);
}

/* Every byte of `buf` in [from, to) is 0. */
static inline void expect_zeros(const void *buf, size_t from, size_t to, const char *what) {
  const unsigned char *b = buf;
  for (size_t i = from; i < to; i++) cr_assert_eq(b[i], 0, "%s: byte %zu, unknown to the library, is not 0", what, i);
}

#endif
