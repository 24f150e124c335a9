/* lib/thread.h: ferry's threads carry their names from the moment they are started.
 * A thread that has not run yet must not show its creator's name: the loader test
 * that counts ferry-coord threads once saw the host stream's thread, started by the
 * coordinator and not yet scheduled, as a second one. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "backends.h"
#include "lib/thread.h"

/* The started thread does nothing until the test lets go of `gate`: every name read
 * below was set by ferry__thread_start, never by the thread. */
static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;

static void *wait_at_gate(void *arg) {
  (void)arg;
  pthread_mutex_lock(&gate);
  pthread_mutex_unlock(&gate);
  return NULL;
}

static void expect_name(const char *prefix, size_t index, const char *want) {
  pthread_t t;
  char name[32] = "";
  pthread_mutex_lock(&gate);
  cr_assert_eq(ferry__thread_start(&t, wait_at_gate, NULL, prefix, index), 0);
  cr_assert_eq(pthread_getname_np(t, name, sizeof name), 0);
  pthread_mutex_unlock(&gate);
  pthread_join(t, NULL);
  cr_assert_str_eq(name, want, "%s and %zu", prefix, index);
}

Test(thread, named_before_it_runs) {
  expect_name("ferry-worker-", 3, "ferry-worker-3");
  expect_name("ferry-coord", SIZE_MAX, "ferry-coord");
}

Test(thread, a_long_name_keeps_its_number) {
  expect_name("ferry-worker-", 12345, "ferry-work12345"); /* 15 characters at most */
  expect_name("ferry-worker-", 123, "ferry-worker123");
  expect_name("a-very-long-thread-prefix", SIZE_MAX, "a-very-long-thr");
  expect_name("x", (size_t)1234567890123456789u, "123456789012345");
}
