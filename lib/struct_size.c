/* lib/struct_size.c - the one copy of a growing struct out to its caller.
 *
 * Owns nothing: it moves bytes between a struct the getter filled (`ours`, this
 * library's layout) and the caller's (`out`, the layout of the header it was built
 * with, of struct_size bytes).
 * Invariants:
 *   - no byte of `out` past its struct_size is read or written, whatever its size;
 *   - struct_size is written last and only ever shrinks to what was written, so a
 *     struct that came back can be passed to the same getter again as it is.
 * Why zeros past this library's size rather than leaving those bytes: a caller built
 * against a newer header reads counters this library lacks; zero is what a counter
 * that never counted reads, and the struct_size that comes back tells the two apart.
 */
#include <string.h>

#include "lib/status.h"
#include "lib/struct_size.h"

/* The caller's struct_size: the struct's first field, read without assuming which
 * struct it is. */
static size_t struct_size_of(const void *out) {
  size_t size;
  memcpy(&size, out, sizeof size);
  return size;
}

ferry_status ferry__struct_size_check(const void *out, size_t least, const char *call, const char *init_macro) {
  size_t size = struct_size_of(out);
  if (size >= least) return FERRY_OK;
  return ferry__fail(FERRY_EINVAL, "%s: out->struct_size is %zu, less than its first counter needs (%zu): "
                     "initialise the struct with %s before the call", call, size, least, init_macro);
}

size_t ferry__struct_copy_out(void *out, const void *ours, size_t our_size) {
  size_t theirs = struct_size_of(out);
  size_t written = theirs < our_size ? theirs : our_size;
  memcpy(out, ours, written);
  if (theirs > our_size) memset((char *)out + our_size, 0, theirs - our_size);
  memcpy(out, &written, sizeof written);
  return written;
}

size_t ferry__struct_nested_size(size_t outer_size, size_t offset, size_t size) {
  if (outer_size <= offset) return 0;
  return outer_size - offset < size ? outer_size - offset : size;
}
