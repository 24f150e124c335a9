/* loaders/loader_check.h - the invariants of the loader's shared state (loader_check.c;
 * internal).
 *
 * Declares the checker that handoff.c runs at every release of loader->lock in the
 * debug and sanitizer builds (FERRY_LOADER_CHECKS), and its report, which the tests
 * call (tests/loaders/test_loader_check.c). Both only read the state, with the lock
 * held.
 */
#ifndef FERRY_LOADERS_LOADER_CHECK_H
#define FERRY_LOADERS_LOADER_CHECK_H

#include <stddef.h>

#include "ferry/error.h"
#include "ferry/loader.h"

/* FERRY_OK, or FERRY_EINVAL with the first broken invariant in `why` (loader->lock
 * held). */
ferry_status ferry__loader_check_report(const ferry_loader *loader, char *why, size_t size);
/* In the checking builds (FERRY_LOADER_CHECKS: debug and sanitizer builds), abort with
 * the broken invariant on stderr; elsewhere nothing. Called at every release of the
 * lock (handoff.c). */
void ferry__loader_check(const ferry_loader *loader);

#endif
