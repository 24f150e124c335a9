/* lib/ptrmap.c - open addressing with linear probing and tombstones.
 *
 * Owns: the key and value arrays of one map. Callers: device.c only, for the sizes of
 * a device's live allocations, under that device's accounting_lock; no lock here.
 *
 * Invariants between calls:
 *   - capacity is 0 (nothing ever put) or a power of two of at least 64;
 *   - every slot holds EMPTY (0), REMOVED (1, a tombstone) or a live key; 0 and 1 are
 *     never real keys, since allocators return NULL or aligned pointers;
 *   - used counts the slots that are not EMPTY, live the live keys: live <= used, and
 *     used <= capacity / 2 after every put, so at least half the slots are EMPTY and
 *     every probe loop below ends;
 *   - a key is held at most once: put does not look for it first, because the device
 *     never hands out a pointer that is still live.
 * Not done here: no shrinking (a rehash on growth drops tombstones), no iteration, no
 * duplicate check.
 */
#include "lib/ptrmap.h"

#include "lib/alloc.h"

#define EMPTY ((uintptr_t)0)
#define REMOVED ((uintptr_t)1)

void ferry__ptrmap_init(ferry__ptrmap *map) {
  map->keys = NULL;
  map->values = NULL;
  map->capacity = map->used = map->live = 0;
}

void ferry__ptrmap_destroy(ferry__ptrmap *map) {
  ferry__free(map->keys);
  ferry__free(map->values);
  ferry__ptrmap_init(map);
}

/* Multiplicative (Fibonacci) hashing: bits 17 and up of the product mix many bits of
 * the key, whereas the key's own low bits are zero in aligned pointers and would put
 * every allocation in a few slots. */
static size_t slot_of(uintptr_t key, size_t capacity) {
  uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 17) & (capacity - 1);
}

/* Put into the first EMPTY or REMOVED slot of the key's probe chain; only taking an
 * EMPTY one makes the chain longer, so only that counts in `used`. */
static void insert_fresh(ferry__ptrmap *map, uintptr_t key, size_t value) {
  size_t i = slot_of(key, map->capacity);
  while (map->keys[i] > REMOVED) i = (i + 1) & (map->capacity - 1);
  if (map->keys[i] == EMPTY) map->used++;
  map->keys[i] = key;
  map->values[i] = value;
  map->live++;
}

/* Rehash into a table of at least 4 x (live + 1) slots (at least 64), dropping
 * tombstones: right after it the table is at most a quarter full, so the next rehash
 * is about capacity / 4 puts away. On failure the map is left as it was. */
static int rehash(ferry__ptrmap *map) {
  size_t capacity = 64;
  while (capacity < 4 * (map->live + 1)) capacity *= 2;
  uintptr_t *keys = ferry__calloc(capacity, sizeof *keys);
  size_t *values = ferry__calloc(capacity, sizeof *values);
  if (!keys || !values) {
    ferry__free(keys);
    ferry__free(values);
    return -1;
  }
  ferry__ptrmap old = *map;
  map->keys = keys;
  map->values = values;
  map->capacity = capacity;
  map->used = map->live = 0;
  for (size_t i = 0; i < old.capacity; i++)
    if (old.keys[i] > REMOVED) insert_fresh(map, old.keys[i], old.values[i]);
  ferry__free(old.keys);
  ferry__free(old.values);
  return 0;
}

int ferry__ptrmap_put(ferry__ptrmap *map, const void *ptr, size_t size) {
  if (2 * (map->used + 1) > map->capacity && rehash(map) != 0) return -1;
  insert_fresh(map, (uintptr_t)ptr, size);
  return 0;
}

/* The slot becomes a tombstone, not EMPTY: an EMPTY slot would cut the probe chain of
 * any key inserted after this one that collided with it. */
int ferry__ptrmap_take(ferry__ptrmap *map, const void *ptr, size_t *size) {
  if (map->capacity == 0) return 0;
  uintptr_t key = (uintptr_t)ptr;
  for (size_t i = slot_of(key, map->capacity);; i = (i + 1) & (map->capacity - 1)) {
    if (map->keys[i] == EMPTY) return 0;
    if (map->keys[i] == key) {
      map->keys[i] = REMOVED;
      map->live--;
      *size = map->values[i];
      return 1;
    }
  }
}
