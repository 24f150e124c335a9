/* lib/thread.c - see thread.h. Naming is best effort: a failure changes nothing
 * that ferry relies on, so it is not reported.
 *
 * Owns no state. Callers: whoever starts one of ferry's threads (the loader's
 * workers and coordinator, a host stream). The creator names the thread rather than
 * the thread itself: a thread not yet scheduled would otherwise show its creator's
 * name for as long as the machine is busy (the coordinator's first arena starts the
 * host stream's thread, which showed as a second ferry-coord), while the creator's
 * write lands before pthread_create's caller goes on. The name is built in a 16-byte
 * buffer because glibc's pthread_setname_np refuses a longer one (ERANGE) rather
 * than cutting it: cutting is done here, keeping the number, which is what tells
 * ferry-worker-12 from ferry-worker-13.
 */
#include "lib/thread.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { NAME_MAX_CHARS = 15 }; /* what the kernel keeps, without the terminator */

static void thread_name(pthread_t thread, const char *prefix, size_t index) {
  char number[24] = "", name[NAME_MAX_CHARS + 1];
  if (index != SIZE_MAX) snprintf(number, sizeof number, "%zu", index);
  size_t digits = strlen(number);
  /* Only a 64-bit index of 16+ digits gets here; the cut keeps the name in bounds. */
  if (digits > NAME_MAX_CHARS) digits = NAME_MAX_CHARS;
  size_t keep = NAME_MAX_CHARS - digits, head = strlen(prefix) < keep ? strlen(prefix) : keep;
  memcpy(name, prefix, head);
  memcpy(name + head, number, digits);
  name[head + digits] = '\0';
  pthread_setname_np(thread, name);
}

int ferry__thread_start(pthread_t *out, void *(*fn)(void *), void *arg, const char *prefix, size_t index) {
  int rc = pthread_create(out, NULL, fn, arg);
  if (rc == 0) thread_name(*out, prefix, index);
  return rc;
}
