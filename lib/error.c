/* lib/error.c - status strings and the thread-local message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/status.h"

static _Thread_local char last_message[FERRY_ERROR_MAX];

const char *ferry_strerror(ferry_status status) {
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
