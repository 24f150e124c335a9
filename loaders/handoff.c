/* loaders/handoff.c - what passes between the loader's threads: ready items and
 * their queue, delivery of complete plans, recycling, and the waits and wake-ups.
 *
 * The consumer (loader.c), the coordinator (coordinator.c) and the workers
 * (workers.c) all call in here; nothing here calls back into them, so the folder's
 * dependencies stay one-way: loader.c starts the coordinator and the workers, the
 * coordinator hands plans to the workers, and all three meet here.
 *
 * Invariants, all under loader->lock (every function here expects it held, except
 * ferry__loader_release_hook, which takes it, and ferry__loader_unlock, which lets
 * it go):
 *   - the ready queue holds items in delivery order; `ready` is its length;
 *   - a plan is in flight, spare, or being laid out by the coordinator (held by it
 *     alone, on neither list); it goes back to spare only once no worker holds one
 *     of its slots. The work queue (workers.c) links in-flight plans that still
 *     have unclaimed slots;
 *   - only the head plan of the in-flight list is ever delivered, and only when it
 *     is complete, good (no failures), not cancelled and of the current generation:
 *     batch k of an epoch is therefore the k-th plan laid out, whoever completes it;
 *   - `outstanding` counts batches made and not yet released;
 *   - a wake-up owed (owed_ready, owed_coord, owed_workers) is sent by the next
 *     thread to let the lock go through ferry__loader_unlock or ferry__loader_wait,
 *     and the thread that owed it is always one of those: none is left behind by a
 *     plain unlock. Each worker is owed at most once (only the thread that took it
 *     off the idle stack owes it, and it sends before anyone else can take it off
 *     again), so owed_workers never holds more than the workers.
 */
#include <string.h>
#include <time.h>

#include "lib/alloc.h"
#include "loaders/loader_internal.h"

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void ferry__loader_owe_ready(ferry_loader *l) { l->owed_ready = 1; }
void ferry__loader_owe_coord(ferry_loader *l) { l->owed_coord = 1; }
void ferry__loader_owe_worker(ferry_loader *l, ferry__cond *wake) {
  l->owed_workers[l->nowed_workers++] = wake;
}

static int owes_wakeups(const ferry_loader *l) {
  return l->owed_ready || l->owed_coord || l->nowed_workers;
}

/* Workers woken at once past this many are signalled before the lock is let go:
 * the copy taken under the lock lives on the stack. It takes more idle workers than
 * a batch has samples, or than the process has free cores, to get there. */
enum { OWED_WORKERS_MAX = 32 };

void ferry__loader_unlock(ferry_loader *l) {
  ferry__cond *workers[OWED_WORKERS_MAX];
  while (l->nowed_workers > OWED_WORKERS_MAX) ferry__cond_wake(l->owed_workers[--l->nowed_workers]);
  size_t nworkers = l->nowed_workers;
  int ready = l->owed_ready, coord = l->owed_coord;
  if (nworkers) memcpy(workers, l->owed_workers, nworkers * sizeof *workers);
  l->nowed_workers = 0;
  l->owed_ready = l->owed_coord = 0;
  pthread_mutex_unlock(&l->lock);
  /* After the unlock the loader is still there: close joins every thread that
   * could be here before it frees anything, and the consumer does not close while it
   * is inside a call of its own. */
  if (ready) ferry__cond_wake(&l->ready_cv);
  if (coord) ferry__cond_wake(&l->coord_cv);
  for (size_t i = 0; i < nworkers; i++) ferry__cond_wake(workers[i]);
}

void ferry__loader_wait(ferry_loader *l, ferry__cond *cv, uint64_t *idle_ns) {
  if (owes_wakeups(l)) {
    ferry__loader_unlock(l);
    pthread_mutex_lock(&l->lock);
    return;
  }
  uint64_t before = idle_ns ? thread_cpu_ns() : 0;
  ferry__cond_wait(cv, &l->lock);
  if (idle_ns) *idle_ns += thread_cpu_ns() - before;
}

ready_item *ferry__loader_item_get(ferry_loader *l) {
  ready_item *item = l->spare_items;
  if (item) l->spare_items = item->next;
  else item = ferry__calloc(1, sizeof *item);
  if (item) memset(item, 0, sizeof *item);
  return item;
}

void ferry__loader_item_put(ferry_loader *l, ready_item *item) {
  if (!item) return;
  ferry__free(item->message);
  item->message = NULL;
  item->batch = NULL;
  item->next = l->spare_items;
  l->spare_items = item;
}

void ferry__loader_push_item(ferry_loader *l, ready_item *item) {
  item->next = NULL;
  if (l->ready_tail) l->ready_tail->next = item;
  else l->ready_head = item;
  l->ready_tail = item;
  l->ready++;
  ferry__loader_owe_ready(l);
}

void ferry__loader_plan_put(ferry_loader *l, plan *p) {
  p->batch = NULL;
  p->next = l->spare_plans;
  l->spare_plans = p;
}

void ferry__loader_deliver_head(ferry_loader *l) {
  plan *head = l->inflight_head;
  ready_item *item = head->item;
  head->item = NULL;
  l->inflight_head = head->next;
  if (!l->inflight_head) l->inflight_tail = NULL;
  l->inflight--;
  if (l->inflight == 0 && l->coordinator_waits == COORD_WAITS_DRAIN) {
    l->coordinator_waits = COORD_BUSY;
    ferry__loader_owe_coord(l);
  }
  item->kind = ITEM_BATCH;
  item->generation = head->generation;
  item->epoch = head->epoch;
  item->cursor_after = head->end;
  item->count = head->count;
  item->skipped = l->epoch_skipped;
  item->batch = head->batch;
  ferry__loader_plan_put(l, head);
  ferry__loader_push_item(l, item);
}

int ferry__loader_deliver_complete(ferry_loader *l) {
  plan *head;
  while ((head = l->inflight_head) && head->pending == 0) {
    if (head->failures || head->canceled || head->generation != l->generation) return 0;
    ferry__loader_deliver_head(l);
  }
  return 1;
}

void ferry__loader_wake_coordinator_for_room(ferry_loader *l) {
  if (l->coordinator_waits != COORD_WAITS_ROOM) return;
  size_t taken = l->inflight + l->ready;
  size_t room = taken < l->prefetch ? l->prefetch - taken : 0;
  size_t arenas = l->outstanding < l->arenas ? l->arenas - l->outstanding : 0;
  if ((room < arenas ? room : arenas) < l->refill) return;
  /* Not idle any more: whoever comes next does not owe it a second wake-up. */
  l->coordinator_waits = COORD_BUSY;
  ferry__loader_owe_coord(l);
}

void ferry__loader_room_freed(ferry_loader *l) {
  if (l->inflight == 0) ferry__loader_wake_coordinator_for_room(l);
}

void ferry__loader_release_hook(ferry_batch *batch, void *arg) {
  ferry_loader *l = arg;
  pthread_mutex_lock(&l->lock);
  for (size_t i = 0; i < l->nheld; i++)
    if (l->held[i] == batch) {
      l->held[i] = l->held[--l->nheld];
      break;
    }
  l->outstanding--;
  ferry__loader_room_freed(l);
  ferry__loader_unlock(l);
}
