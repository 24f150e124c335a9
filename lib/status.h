/* lib/status.h - how ferry code reports failures (internal).
 *
 * Every failing path returns through ferry__fail so that the thread's message and the
 * returned status can never disagree. ferry__error_prefix adds context as an error
 * travels up ("sample 12 (val2017/x.jpg): " in front of the decoder's message).
 */
#ifndef FERRY_LIB_STATUS_H
#define FERRY_LIB_STATUS_H

#include <stddef.h>
#include "ferry/error.h"

#if defined(__GNUC__)
#define FERRY_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FERRY_PRINTF(a, b)
#endif

/* Set this thread's message and return status. */
ferry_status ferry__fail(ferry_status status, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* Put formatted context in front of this thread's message; returns status. */
ferry_status ferry__error_prefix(ferry_status status, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* Restore a message captured on another thread (worker -> consumer). */
ferry_status ferry__error_restore(ferry_status status, const char *message);

#define FERRY_ERROR_MAX 1024

#endif
