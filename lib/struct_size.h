/* lib/struct_size.h - handing a struct that grows out to a caller (internal).
 *
 * The public stats structs (ferry_memory_stats, ferry_pool_stats, ferry_loader_stats)
 * start with `size_t struct_size`, which the caller sets to the size of its struct, the
 * size its header gave (ferry/device.h states the rule). Every getter goes through these
 * two functions, so that the rule is written once: a caller built against an older
 * header is never written past its struct, one built against a newer header finds
 * what this library lacks zeroed, and struct_size comes back as what was written.
 */
#ifndef FERRY_LIB_STRUCT_SIZE_H
#define FERRY_LIB_STRUCT_SIZE_H

#include <stddef.h>

#include "ferry/error.h"

/* FERRY_EINVAL, naming `call` and `init_macro`, when the struct_size at the start of
 * `out` is below `least` (the end of the struct's first counter: 0 is a struct that was
 * never initialised, and its struct_size is then no size at all); else FERRY_OK. Run it
 * before the getter does any work, so that a refused call has touched nothing. */
ferry_status ferry__struct_size_check(const void *out, size_t least, const char *call, const char *init_macro);

/* Copy this library's `ours` (`our_size` bytes, struct_size first) into the caller's
 * `out`, checked with ferry__struct_size_check: its first min(struct_size, our_size)
 * bytes, then zeros over the rest of its struct_size (fields this library does not
 * know). Sets out's struct_size, last, to the bytes of fields written, min of the two
 * sizes, and returns it. Nothing is written past the caller's struct_size. */
size_t ferry__struct_copy_out(void *out, const void *ours, size_t our_size);

/* The struct_size a struct of `size` bytes embedded at `offset` in a caller's struct of
 * `outer_size` bytes gets: how many of its own bytes the outer copy writes, `size`
 * when it lies entirely within outer_size, the covered part when it is cut, 0 when it
 * lies past the end. */
size_t ferry__struct_nested_size(size_t outer_size, size_t offset, size_t size);

#endif
