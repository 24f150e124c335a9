/* lib/thread.c - see thread.h. Naming is best effort: a failure changes nothing
 * that ferry relies on, so it is not reported. */
#include "lib/thread.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { NAME_MAX_CHARS = 15 }; /* what the kernel keeps, without the terminator */

void ferry__thread_name(const char *prefix, size_t index) {
  char number[24] = "", name[NAME_MAX_CHARS + 1];
  if (index != SIZE_MAX) snprintf(number, sizeof number, "%zu", index);
  size_t digits = strlen(number);
  if (digits > NAME_MAX_CHARS) digits = NAME_MAX_CHARS;
  size_t keep = NAME_MAX_CHARS - digits, head = strlen(prefix) < keep ? strlen(prefix) : keep;
  memcpy(name, prefix, head);
  memcpy(name + head, number, digits);
  name[head + digits] = '\0';
  pthread_setname_np(pthread_self(), name);
}
