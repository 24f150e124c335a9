/* lib/rangeset.h - a set of disjoint address ranges, sorted by start (internal).
 *
 * Holds a device's pinned host allocations, so that "is [p, p+n) inside one of them?"
 * is a binary search: ferry_memcpy_async asks it for every copy, and the transfer
 * stage copies once per sample and field. Inserting and removing move the tail of the
 * array, which is fine for pinned memory: a handful of pool arenas, allocated rarely.
 * Not thread-safe: the device's accounting lock guards it.
 */
#ifndef FERRY_LIB_RANGESET_H
#define FERRY_LIB_RANGESET_H

#include <stddef.h>
#include <stdint.h>

typedef struct ferry__range {
  uintptr_t start;
  size_t size;
} ferry__range;

typedef struct ferry__rangeset {
  ferry__range *items; /* sorted by start, pairwise disjoint */
  size_t count, capacity;
} ferry__rangeset;

void ferry__rangeset_init(ferry__rangeset *set);
void ferry__rangeset_destroy(ferry__rangeset *set);
/* Add [start, start+size), disjoint from every range held. 0, or -1 out of memory. */
int ferry__rangeset_put(ferry__rangeset *set, const void *start, size_t size);
/* Remove the range that starts exactly at `start`: 1 and its size, or 0 if none does. */
int ferry__rangeset_take(ferry__rangeset *set, const void *start, size_t *size);
/* 1 when [ptr, ptr+n) lies inside one range held (n = 0 asks about ptr alone). */
int ferry__rangeset_covers(const ferry__rangeset *set, const void *ptr, size_t n);

#endif
