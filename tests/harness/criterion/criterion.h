/* tests/harness/criterion/criterion.h - a minimal stand-in for Criterion, used only
 * in ThreadSanitizer builds.
 *
 * Why: Criterion's sandbox (boxfort) cannot map its shared arena under TSan
 * (Snaipe/Criterion#274, "Could not initialize inheritable arena"), so TSan builds
 * compile the very same test sources against this header instead. Tests run in one
 * process, in order; a failed assertion or a skip leaves the test through longjmp.
 * It prints Criterion's synthesis line so the summary reads both alike.
 * Only the macros ferry's tests use are provided.
 */
#ifndef FERRY_TEST_SHIM_H
#define FERRY_TEST_SHIM_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shim_test {
  const char *suite, *name;
  void (*fn)(void);
  struct shim_test *next;
} shim_test;

extern shim_test *shim_tests;
extern jmp_buf shim_jump;
void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...);
void shim_skip(const char *fmt, ...);

#define Test(suite, name, ...)                                                        \
  static void suite##_##name(void);                                                   \
  static shim_test suite##_##name##_entry = {#suite, #name, suite##_##name, NULL};    \
  __attribute__((constructor)) static void suite##_##name##_register(void) {          \
    suite##_##name##_entry.next = shim_tests;                                         \
    shim_tests = &suite##_##name##_entry;                                             \
  }                                                                                   \
  static void suite##_##name(void)

/* A suite's options: like Criterion's, .init runs before each of its tests and .fini
 * after each (also after a failed or skipped one). */
typedef struct shim_suite {
  void (*init)(void);
  void (*fini)(void);
  const char *name;
  struct shim_suite *next;
} shim_suite;

extern shim_suite *shim_suites;

#define TestSuite(suite, ...)                                                         \
  static shim_suite suite##_suite_entry = {__VA_ARGS__};                              \
  __attribute__((constructor)) static void suite##_suite_register(void) {             \
    suite##_suite_entry.name = #suite;                                                \
    suite##_suite_entry.next = shim_suites;                                           \
    shim_suites = &suite##_suite_entry;                                               \
  }

#define SHIM_CHECK(cond, expr, ...) \
  do { if (!(cond)) shim_fail(__FILE__, __LINE__, expr, "" __VA_ARGS__); } while (0)

#define cr_assert(c, ...) SHIM_CHECK((c), #c, __VA_ARGS__)
#define cr_assert_not(c, ...) SHIM_CHECK(!(c), "!(" #c ")", __VA_ARGS__)
#define cr_assert_eq(a, b, ...) SHIM_CHECK((a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) SHIM_CHECK((a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) SHIM_CHECK((a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) SHIM_CHECK((a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) SHIM_CHECK((a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) SHIM_CHECK((a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_assert_null(p, ...) SHIM_CHECK((p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) SHIM_CHECK((p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) SHIM_CHECK(strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) SHIM_CHECK(strcmp((a), (b)) != 0, #a " differs from " #b, __VA_ARGS__)
#define cr_assert_str_empty(a, ...) SHIM_CHECK((a)[0] == '\0', #a " is empty", __VA_ARGS__)
#define cr_assert_str_not_empty(a, ...) SHIM_CHECK((a)[0] != '\0', #a " is not empty", __VA_ARGS__)
#define cr_assert_arr_eq(a, b, n, ...) SHIM_CHECK(memcmp((a), (b), (n)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_assert_float_eq(a, b, eps, ...) \
  SHIM_CHECK(((a) - (b)) <= (eps) && ((b) - (a)) <= (eps), #a " ~= " #b, __VA_ARGS__)
/* Criterion's expectations let a test go on after a failure; here they end it. */
#define cr_expect cr_assert
#define cr_expect_eq cr_assert_eq
#define cr_expect_neq cr_assert_neq
#define cr_expect_lt cr_assert_lt
#define cr_expect_leq cr_assert_leq
#define cr_expect_gt cr_assert_gt
#define cr_expect_geq cr_assert_geq
#define cr_expect_null cr_assert_null
#define cr_expect_not_null cr_assert_not_null
#define cr_expect_str_eq cr_assert_str_eq
#define cr_expect_str_neq cr_assert_str_neq
#define cr_expect_str_empty cr_assert_str_empty
#define cr_expect_str_not_empty cr_assert_str_not_empty
#define cr_fail(...) shim_fail(__FILE__, __LINE__, "cr_fail", "" __VA_ARGS__)
#define cr_assert_fail(...) cr_fail(__VA_ARGS__)
#define cr_skip_test(...) shim_skip("" __VA_ARGS__)
#define cr_log_info(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))
#define cr_log_warn cr_log_info

#endif
