/* lib/ptrmap.h - pointer -> size map, so frees can be accounted exactly (internal).
 * Not thread-safe: the device's accounting lock guards it. */
#ifndef FERRY_LIB_PTRMAP_H
#define FERRY_LIB_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ferry__ptrmap {
  uintptr_t *keys;   /* 0 = empty slot, 1 = removed slot */
  size_t *values;
  size_t capacity;   /* power of two */
  size_t used;       /* live + removed slots */
  size_t live;
} ferry__ptrmap;

void ferry__ptrmap_init(ferry__ptrmap *map);
void ferry__ptrmap_destroy(ferry__ptrmap *map);
/* 0 on success, -1 when memory for growth is unavailable. */
int ferry__ptrmap_put(ferry__ptrmap *map, const void *ptr, size_t size);
/* Remove ptr; 1 and its size if it was there, else 0. */
int ferry__ptrmap_take(ferry__ptrmap *map, const void *ptr, size_t *size);

#endif
