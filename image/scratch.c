/* image/scratch.c - the decoder's growable scratch buffers.
 *
 * A ferry__scratch only grows: its capacity never shrinks while the decoder lives, so
 * a worker stops allocating once it has met its largest image. Its contents are not
 * kept across a reserve that grows it (every user rewrites the buffer it reserved).
 * Used by image.c, jpeg.c, png.c and resize.c; it calls nothing of theirs, which keeps
 * the folder's dependencies one-way.
 */
#include "lib/alloc.h"
#include "lib/status.h"
#include "image/scratch.h"

ferry_status ferry__scratch_reserve(ferry__scratch *b, size_t n, const char *what) {
  if (n <= b->cap) return FERRY_OK;
  /* grow by half again so a run of slightly larger images does not realloc each time */
  size_t cap = n + n / 2;
  void *p = ferry__malloc(cap);
  if (!p) return ferry__fail(FERRY_ENOMEM, "%s: cannot allocate %zu bytes of decoder scratch",
                            what, cap);
  ferry__free(b->data);
  b->data = p;
  b->cap = cap;
  return FERRY_OK;
}

void ferry__scratch_free(ferry__scratch *b) {
  ferry__free(b->data);
  b->data = NULL;
  b->cap = 0;
}
