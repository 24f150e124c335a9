/* lib/error.c - status strings and the thread-local message.
 *
 * Owns: one FERRY_ERROR_MAX-byte message buffer per thread (_Thread_local), and the
 * fixed strings of ferry_strerror.
 * Callers: every thread, with no lock: each thread touches only its own buffer. A
 * message made on one thread (a worker, a stream's host function) reaches another
 * only as a copy, through ferry__error_restore.
 *
 * Invariants:
 *   - the buffer is always NUL-terminated; a message longer than FERRY_ERROR_MAX - 1
 *     bytes is cut, never refused (every write is bounded by the buffer's size);
 *   - a failing path sets the message and returns the status in one call
 *     (ferry__fail), so the two cannot disagree;
 *   - nothing clears the message but ferry_clear_error: a call that succeeds leaves
 *     the old one (or one of a failure it recovered from), so ferry_last_error means
 *     something only right after a call that failed (ferry/error.h).
 *
 * Not done here: no allocation (the out-of-memory path must be able to report), no
 * logging, no errno translation (callers put strerror() into their message).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/status.h"

static _Thread_local char last_message[FERRY_ERROR_MAX];

const char *ferry_strerror(ferry_status status) {
  /* No default: -Wswitch then names any status added to error.h but not here. */
  switch (status) {
    case FERRY_OK: return "success";
    case FERRY_EINVAL: return "invalid argument";
    case FERRY_ENOMEM: return "out of memory";
    case FERRY_EIO: return "input/output error";
    case FERRY_EFORMAT: return "malformed input";
    case FERRY_ENODEV: return "no such device";
    case FERRY_EDEVICE: return "device error";
    case FERRY_EUNSUPPORTED: return "unsupported";
    case FERRY_ELIMIT: return "limit exceeded";
    case FERRY_ENOTFOUND: return "not found";
    case FERRY_ECANCELED: return "canceled";
    case FERRY_EAGAIN: return "try again";
    case FERRY_EEND: return "end of epoch";
  }
  return "unknown status";
}

const char *ferry_last_error(void) { return last_message; }

void ferry_clear_error(void) { last_message[0] = '\0'; }

/* The arguments must not point into this thread's message (vsnprintf into the
 * buffer it reads from is undefined): to add context, use ferry__error_prefix. */
ferry_status ferry__fail(ferry_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  return status;
}

ferry_status ferry__error_prefix(ferry_status status, const char *fmt, ...) {
  char prefix[FERRY_ERROR_MAX];
  char old[FERRY_ERROR_MAX];
  /* Format the prefix before touching the message, so that its arguments may point
   * into the message itself; then put the old message after it. */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, last_message, sizeof old);
  size_t n = strlen(prefix);
  memcpy(last_message, prefix, n + 1);
  snprintf(last_message + n, sizeof last_message - n, "%s", old);
  return status;
}

ferry_status ferry__error_restore(ferry_status status, const char *message) {
  snprintf(last_message, sizeof last_message, "%s", message ? message : "");
  return status;
}
