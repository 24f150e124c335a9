/* lib/alloc.h - the one door through which ferry allocates host memory (internal).
 *
 * All host allocations go through these wrappers so that a test build
 * (-Dalloc_failure_injection=true) can make the n-th allocation fail and prove that
 * every caller turns it into FERRY_ENOMEM without crashing or leaking.
 * In normal builds they are thin calls to the C library.
 */
#ifndef FERRY_LIB_ALLOC_H
#define FERRY_LIB_ALLOC_H

#include <stddef.h>

void *ferry__malloc(size_t size);
void *ferry__calloc(size_t count, size_t size);
void *ferry__realloc(void *ptr, size_t size);
void ferry__free(void *ptr);
char *ferry__strdup(const char *s);
/* Memory aligned to `alignment` (a power of two, at least sizeof(void *)); free with ferry__free. */
void *ferry__aligned_alloc(size_t alignment, size_t size);

/* Test builds only (no-ops otherwise): make the allocation that is `n` allocations
 * from now fail (0 = the next one); a negative n disables injection. */
void ferry__alloc_fail_after(long n);
/* Allocations attempted since the process started (test builds only; else 0). */
long ferry__alloc_attempts(void);
/* 1 when this build can inject failures. */
int ferry__alloc_injection_available(void);

#endif
