/* tests/loaders/invariant_abort.c - a loader whose ready count is broken under the
 * lock, then the lock released: in the checking builds (FERRY_LOADER_CHECKS) the
 * release must abort, naming the invariant (check_invariant_abort.py runs this and
 * reads how it died). Elsewhere the checks compile to nothing: exit 77, skipped.
 *
 *   invariant_abort ANNOTATIONS IMAGES
 */
#include <pthread.h>
#include <stdio.h>

#include "ferry/ferry.h"
#include "ferry_config.h"
#include "loaders/handoff.h"
#include "loaders/loader_internal.h"

int main(int argc, char **argv) {
  if (!FERRY_LOADER_CHECKS) {
    printf("skipped: this build does not check the loader's invariants (FERRY_LOADER_CHECKS 0)\n");
    return 77;
  }
  if (argc != 3) return fprintf(stderr, "usage: invariant_abort ANNOTATIONS IMAGES\n"), 2;
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  c.annotations = argv[1];
  c.images = argv[2];
  c.workers = 2;
  c.resolution = 32;
  ferry_loader *l;
  ferry_batch *b;
  if (ferry_loader_open(&c, &l) != FERRY_OK || ferry_loader_next(l, &b) != FERRY_OK)
    return fprintf(stderr, "%s\n", ferry_last_error()), 1;
  pthread_mutex_lock(&l->lock);
  l->hand.ready++;
  fflush(stdout);
  ferry__loader_unlock(l); /* must not return */
  printf("the release returned: the broken invariant was not caught\n");
  return 1;
}
