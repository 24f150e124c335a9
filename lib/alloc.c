/* lib/alloc.c - host allocation wrappers with optional failure injection. */
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

void *ferry__aligned_alloc(size_t alignment, size_t size) {
  void *ptr = NULL;
  if (injected_failure()) return NULL;
  if (posix_memalign(&ptr, alignment, size ? size : 1) != 0) return NULL;
  return ptr;
}
