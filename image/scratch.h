/* image/scratch.h - what image/scratch.c exports: the growable buffers every decoder and
 * resize keeps (internal to image/).
 *
 * Invariant: a scratch only grows (its contents are not kept across a reserve), so a
 * worker stops allocating once it has seen its largest image.
 */
#ifndef FERRY_IMAGE_SCRATCH_H
#define FERRY_IMAGE_SCRATCH_H

#include <stddef.h>

#include "ferry/error.h"

/* A heap buffer that only grows. */
typedef struct ferry__scratch {
  void *data;
  size_t cap;
} ferry__scratch;

/* Make b hold at least n bytes (contents not kept). FERRY_ENOMEM names `what`. */
ferry_status ferry__scratch_reserve(ferry__scratch *b, size_t n, const char *what);
void ferry__scratch_free(ferry__scratch *b);

#endif
