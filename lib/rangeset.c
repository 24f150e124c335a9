/* lib/rangeset.c - sorted array of disjoint ranges; lookups by binary search.
 * Invariant: items[0..count) are sorted by start and do not overlap, so the only range
 * that can hold an address is the last one starting at or before it.
 *
 * Owns: the items array (count <= capacity). Callers: device.c only, for a device's
 * live pinned allocations, under that device's accounting_lock; no lock here.
 * Not done here: put does not check that the new range is disjoint from the others
 * (live allocations of one allocator are), and take finds a range only by its exact
 * start, so freeing an interior pointer finds nothing (and frees nothing).
 */
#include "lib/rangeset.h"

#include <string.h>

#include "lib/alloc.h"

void ferry__rangeset_init(ferry__rangeset *set) {
  set->items = NULL;
  set->count = set->capacity = 0;
}

void ferry__rangeset_destroy(ferry__rangeset *set) {
  ferry__free(set->items);
  ferry__rangeset_init(set);
}

/* Index of the first range starting after `addr` (count if none). */
static size_t upper_bound(const ferry__rangeset *set, uintptr_t addr) {
  size_t lo = 0, hi = set->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (set->items[mid].start <= addr) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* On failure the set keeps its old array: a failed put changes nothing. */
static int grow(ferry__rangeset *set) {
  size_t cap = set->capacity ? 2 * set->capacity : 8;
  ferry__range *items = ferry__realloc(set->items, cap * sizeof *items);
  if (!items) return -1;
  set->items = items;
  set->capacity = cap;
  return 0;
}

int ferry__rangeset_put(ferry__rangeset *set, const void *start, size_t size) {
  if (set->count == set->capacity && grow(set) != 0) return -1;
  uintptr_t addr = (uintptr_t)start;
  size_t at = upper_bound(set, addr);
  memmove(&set->items[at + 1], &set->items[at], (set->count - at) * sizeof *set->items);
  set->items[at] = (ferry__range){addr, size};
  set->count++;
  return 0;
}

int ferry__rangeset_take(ferry__rangeset *set, const void *start, size_t *size) {
  uintptr_t addr = (uintptr_t)start;
  size_t at = upper_bound(set, addr);
  if (at == 0 || set->items[at - 1].start != addr) return 0;
  at--;
  *size = set->items[at].size;
  set->count--;
  memmove(&set->items[at], &set->items[at + 1], (set->count - at) * sizeof *set->items);
  return 1;
}

int ferry__rangeset_covers(const ferry__rangeset *set, const void *ptr, size_t n) {
  uintptr_t addr = (uintptr_t)ptr;
  size_t at = upper_bound(set, addr);
  if (at == 0) return 0;
  /* Compared as offset and remaining size, never as ptr + n, which could wrap. */
  const ferry__range *r = &set->items[at - 1];
  size_t offset = addr - r->start; /* start <= addr, so no wrap */
  return offset < r->size && n <= r->size - offset;
}
