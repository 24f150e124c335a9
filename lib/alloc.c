/* lib/alloc.c - host allocation wrappers with optional failure injection.
 *
 * Owns: in injection builds (-Dalloc_failure_injection=true), two process-wide
 * counters, `attempts` and `fail_at`; nothing otherwise.
 * Callers: any code of ferry, from any thread; the counters are atomics, so no lock.
 *
 * Invariants:
 *   - NULL means "out of memory" and nothing else: a request for 0 bytes asks the C
 *     library for 1, so a caller can always test the result for NULL and turn it into
 *     FERRY_ENOMEM (malloc(0) may legitimately return NULL, realloc(p, 0) may free p).
 *   - Every allocating call (malloc, calloc, realloc, aligned_alloc, and strdup through
 *     malloc) counts as one attempt, whether or not it is the one that fails; freeing
 *     is never an attempt and never fails.
 *   - One arming (ferry__alloc_fail_after) fails exactly one attempt: the one whose
 *     process-wide number is `fail_at`. Attempts are numbered across all threads, so
 *     with several threads allocating, which call draws the failure is a race; the
 *     sweep (tests/hardening/test_alloc_failure.c) needs only that some allocation
 *     fails and that the failure comes back as a status.
 *
 * Not done here: no sizes are tracked (device memory is accounted in device.c), no
 * message is set (the caller knows what it was allocating and says so).
 */
#include <stdlib.h>
#include <string.h>

#include "ferry_config.h"
#include "lib/alloc.h"

#if FERRY_ALLOC_INJECTION
#include <stdatomic.h>
static atomic_long attempts;
static atomic_long fail_at = -1;

/* True when this attempt is the one chosen to fail. */
static int injected_failure(void) {
  long n = atomic_fetch_add(&attempts, 1);
  long target = atomic_load(&fail_at);
  return target >= 0 && n == target;
}
/* Counted from the attempts made so far, so n = 0 is the next attempt of any thread. */
void ferry__alloc_fail_after(long n) {
  atomic_store(&fail_at, n < 0 ? -1 : atomic_load(&attempts) + n);
}
long ferry__alloc_attempts(void) { return atomic_load(&attempts); }
int ferry__alloc_injection_available(void) { return 1; }
#else
static int injected_failure(void) { return 0; }
void ferry__alloc_fail_after(long n) { (void)n; }
long ferry__alloc_attempts(void) { return 0; }
int ferry__alloc_injection_available(void) { return 0; }
#endif

void *ferry__malloc(size_t size) {
  if (injected_failure()) return NULL;
  return malloc(size ? size : 1);
}

void *ferry__calloc(size_t count, size_t size) {
  if (injected_failure()) return NULL;
  if (count == 0 || size == 0) return calloc(1, 1);
  return calloc(count, size);
}

/* An injected failure leaves ptr allocated and unchanged, as a real one does. */
void *ferry__realloc(void *ptr, size_t size) {
  if (injected_failure()) return NULL;
  return realloc(ptr, size ? size : 1);
}

void ferry__free(void *ptr) { free(ptr); }

char *ferry__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *copy = ferry__malloc(n);
  if (copy) memcpy(copy, s, n);
  return copy;
}

/* posix_memalign rather than C11 aligned_alloc, which wants size to be a multiple of
 * the alignment; both are released by free. */
void *ferry__aligned_alloc(size_t alignment, size_t size) {
  void *ptr = NULL;
  if (injected_failure()) return NULL;
  if (posix_memalign(&ptr, alignment, size ? size : 1) != 0) return NULL;
  return ptr;
}
