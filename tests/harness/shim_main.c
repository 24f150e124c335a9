/* tests/harness/shim_main.c - runs the tests registered through the TSan shim. */
#include <fnmatch.h>

#include "criterion/criterion.h"

shim_test *shim_tests;
shim_suite *shim_suites;
jmp_buf shim_jump;
static enum { PASSED, FAILED, SKIPPED } outcome;

static void vreport(const char *tag, const char *fmt, va_list ap) {
  fprintf(stderr, "%s", tag);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "[----] %s:%d: Assertion failed: %s\n", file, line, expr);
  va_start(ap, fmt);
  if (*fmt) vreport("[----]   ", fmt, ap);
  va_end(ap);
  outcome = FAILED;
  longjmp(shim_jump, 1);
}

void shim_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport("[SKIP] ", fmt, ap);
  va_end(ap);
  outcome = SKIPPED;
  longjmp(shim_jump, 1);
}

/* Criterion's --filter PATTERN, matched against "suite/name"; NULL runs all. */
static const char *filter_of(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], "--filter") == 0) return argv[i + 1];
  return NULL;
}

static int selected(const shim_test *t, const char *filter) {
  char id[512];
  snprintf(id, sizeof id, "%s/%s", t->suite, t->name);
  return !filter || fnmatch(filter, id, 0) == 0;
}

static const shim_suite *suite_of(const shim_test *t) {
  for (const shim_suite *s = shim_suites; s; s = s->next)
    if (strcmp(s->name, t->suite) == 0) return s;
  return NULL;
}

int main(int argc, char **argv) {
  const char *filter = filter_of(argc, argv);
  /* volatile: these live across setjmp/longjmp. */
  volatile int tested = 0, passed = 0, failed = 0, skipped = 0;
  for (shim_test *volatile t = shim_tests; t; t = t->next) {
    if (!selected(t, filter)) continue;
    outcome = PASSED;
    fprintf(stderr, "[RUN ] %s::%s\n", t->suite, t->name);
    const shim_suite *volatile suite = suite_of(t);
    if (setjmp(shim_jump) == 0) {
      if (suite && suite->init) suite->init();
      t->fn();
    }
    if (suite && suite->fini) suite->fini();
    if (outcome == SKIPPED) {
      skipped++;
      continue;
    }
    tested++;
    if (outcome == PASSED) passed++;
    else failed++;
    fprintf(stderr, "[%s] %s::%s\n", outcome == PASSED ? "PASS" : "FAIL", t->suite, t->name);
  }
  fprintf(stderr, "[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: 0 \n",
          tested, passed, failed);
  fprintf(stderr, "[====] Skipped: %d\n", skipped);
  return failed ? 1 : 0;
}
