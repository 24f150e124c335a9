/* loaders/loader_check.c - the loader's invariants, asserted (issue 23).
 *
 * Every comment of loader_internal.h, handoff.c, workers.c and coordinator.c that
 * states what holds under loader->lock is checked here, at every release of the lock
 * (ferry__loader_unlock, and ferry__loader_wait before it sleeps) in the builds that
 * define FERRY_LOADER_CHECKS: debug, ASan+UBSan and TSan (meson.build). A race that
 * leaves a count or a list inconsistent then fails the run that makes it, at the
 * release that lets it out, naming the invariant, instead of the rare run that hangs
 * or hands out a wrong batch.
 *
 * Owns nothing. Reads every part of the loader's state, writes none, calls nothing of
 * the other files: any file may call it. Cost: O(plans in flight + ready items +
 * workers) per release, which the checking builds can afford and the others never
 * pay (the call compiles to nothing there).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "ferry_config.h"
#include "loaders/loader_check.h"
#include "loaders/loader_internal.h"

typedef struct report {
  char *why;
  size_t size;
  int broken;
} report;

/* Record the first broken invariant; later ones are not looked at. */
static int broken(report *r, const char *fmt, ...) {
  if (r->broken++) return 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->why, r->size, fmt, ap);
  va_end(ap);
  return 1;
}

/* The plans in flight: counts, claims, cursor order (contiguous within a generation,
 * the generation never ahead of the loader's), the tail. */
static int check_inflight(const ferry_loader *l, report *r, size_t *batches) {
  const ferry__handoff *h = &l->hand;
  size_t n = 0;
  const ferry__plan *last = NULL;
  for (const ferry__plan *p = h->inflight_head; p; last = p, p = p->next, n++) {
    if (p->claimed > p->count || p->pending > p->count || p->count - p->claimed > p->pending)
      return broken(r, "plan %zu in flight: count %zu, claimed %zu, pending %zu", n, p->count, p->claimed,
                    p->pending);
    if (p->failures > p->count - p->pending)
      return broken(r, "plan %zu in flight: %zu failures but only %zu slots finished", n, p->failures,
                    p->count - p->pending);
    if (p->generation > l->generation) return broken(r, "plan %zu in flight is of a future generation", n);
    if (last && last->generation == p->generation && last->end != p->start)
      return broken(r, "plans %zu and %zu in flight are not contiguous: [%llu, %llu) then [%llu, ...)", n - 1, n,
                    (unsigned long long)last->start, (unsigned long long)last->end,
                    (unsigned long long)p->start);
    if (!p->batch) return broken(r, "plan %zu in flight has no batch", n);
  }
  if (n != h->inflight) return broken(r, "inflight is %zu but the list holds %zu plans", h->inflight, n);
  if (h->inflight_tail != last) return broken(r, "inflight_tail is not the last plan in flight");
  *batches += n;
  return 0;
}

/* The ready queue: its length, its tail, batches in batch items, generations. */
static int check_ready(const ferry_loader *l, report *r, size_t *batches) {
  const ferry__handoff *h = &l->hand;
  size_t n = 0;
  const ferry__ready_item *last = NULL;
  for (const ferry__ready_item *it = h->ready_head; it; last = it, it = it->next, n++) {
    if (it->generation > l->generation) return broken(r, "ready item %zu is of a future generation", n);
    if ((it->kind == ITEM_BATCH) != (it->batch != NULL))
      return broken(r, "ready item %zu: kind %d with batch %p", n, (int)it->kind, (void *)it->batch);
    *batches += it->batch != NULL;
  }
  if (n != h->ready) return broken(r, "ready is %zu but the queue holds %zu items", h->ready, n);
  if (h->ready_tail != last) return broken(r, "ready_tail is not the last ready item");
  return 0;
}

static int is_in_flight(const ferry_loader *l, const ferry__plan *q) {
  for (const ferry__plan *p = l->hand.inflight_head; p; p = p->next)
    if (p == q) return 1;
  return 0;
}

/* The work queue: plans in flight with unclaimed slots, their sum, the workers'
 * counts and the idle stack. */
static int check_work(const ferry_loader *l, report *r) {
  const ferry__work_queue *w = &l->work;
  size_t unclaimed = 0, n = 0;
  const ferry__plan *last = NULL;
  for (const ferry__plan *p = w->head; p; last = p, p = p->next_work, n++) {
    if (p->claimed >= p->count) return broken(r, "plan %zu on the work queue has no unclaimed slot", n);
    if (p->canceled || !is_in_flight(l, p))
      return broken(r, "plan %zu on the work queue is cancelled or not in flight", n);
    unclaimed += p->count - p->claimed;
  }
  if (unclaimed != w->unclaimed)
    return broken(r, "unclaimed is %zu but the work queue's plans have %zu unclaimed slots", w->unclaimed, unclaimed);
  if (w->tail != last) return broken(r, "the work queue's tail is not its last plan");
  if (w->busy > w->max_busy) return broken(r, "%zu workers busy, more than max_busy %zu", w->busy, w->max_busy);
  if (w->idle + w->waking + w->busy > w->nworkers)
    return broken(r, "%zu idle + %zu waking + %zu busy workers, of %zu", w->idle, w->waking, w->busy, w->nworkers);
  if (l->hand.nowed_workers > w->nworkers)
    return broken(r, "%zu wake-ups owed to %zu workers", l->hand.nowed_workers, w->nworkers);
  return 0;
}

/* Every batch that exists is in flight, ready, held by the consumer, or being laid
 * out, and there are never more than arenas. */
static int check_batches(const ferry_loader *l, report *r, size_t made) {
  const ferry__handoff *h = &l->hand;
  if (h->laying_out > 1) return broken(r, "laying_out is %zu", h->laying_out);
  if (h->nheld > l->arenas || h->outstanding > l->arenas)
    return broken(r, "%zu batches outstanding, %zu held, for %zu arenas", h->outstanding, h->nheld, l->arenas);
  size_t counted = made + h->nheld + h->laying_out;
  if (counted != h->outstanding)
    return broken(r, "outstanding is %zu but %zu batches are in flight or ready, %zu held and %zu being laid out",
                  h->outstanding, made, h->nheld, h->laying_out);
  return 0;
}

ferry_status ferry__loader_check_report(const ferry_loader *l, char *why, size_t size) {
  report r = {why, size, 0};
  size_t made = 0;
  if (why && size) why[0] = '\0';
  (void)(check_inflight(l, &r, &made) || check_ready(l, &r, &made) || check_work(l, &r) ||
         check_batches(l, &r, made));
  return r.broken ? FERRY_EINVAL : FERRY_OK;
}

void ferry__loader_check(const ferry_loader *l) {
#if FERRY_LOADER_CHECKS
  char why[256];
  if (ferry__loader_check_report(l, why, sizeof why) == FERRY_OK) return;
  fprintf(stderr, "ferry: loader invariant broken at a release of its lock: %s\n", why);
  abort();
#else
  (void)l;
#endif
}
