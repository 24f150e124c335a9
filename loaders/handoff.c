/* loaders/handoff.c - what passes between the loader's threads: the plans in flight,
 * the ready queue and its items, delivery of complete plans, recycling, the batches
 * that exist, and the waits and wake-ups.
 *
 * Owns loader->hand (loader_internal.h): only this file writes it. The consumer
 * (loader.c), the coordinator (coordinator.c) and the workers (workers.c) all call in
 * here; nothing here calls back into them, so the folder's dependencies stay one-way:
 * loader_open.c starts the coordinator and the workers, the coordinator hands plans to the
 * workers, and all three meet here.
 *
 * Invariants, all under loader->lock (every function here expects it held, except
 * ferry__loader_release_hook, which takes it, ferry__loader_unlock, which lets it go,
 * and ferry__handoff_close, which runs once no other thread is left), and checked by
 * ferry__loader_check at every release of the lock in the checking builds:
 *   - the ready queue holds items in delivery order; `ready` is its length;
 *   - a plan is in flight, spare, or being laid out by the coordinator (held by it
 *     alone, on neither list); it goes back to spare only once no worker holds one
 *     of its slots. The work queue (workers.c) links in-flight plans that still
 *     have unclaimed slots;
 *   - only the head plan of the in-flight list is ever delivered, and only when it
 *     is complete, good (no failures), not cancelled and of the current generation:
 *     batch k of an epoch is therefore the k-th plan laid out, whoever completes it;
 *   - `outstanding` counts batches made (or being made: `laying_out`) and not yet
 *     released: those in flight, ready, held by the consumer and being laid out;
 *   - a wake-up owed (owed_ready, owed_coord, owed_workers) is sent by the next
 *     thread to let the lock go through ferry__loader_unlock or ferry__loader_wait,
 *     and the thread that owed it is always one of those: the lock is let go nowhere
 *     else. Each worker is owed at most once (only the thread that took it off the
 *     idle stack owes it, and it sends before anyone else can take it off again), so
 *     owed_workers never holds more than the workers.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/alloc.h"
#include "loaders/handoff.h"
#include "loaders/loader_internal.h"
#include "loaders/loader_check.h"

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- wake-ups and the lock ------------------------------------------------------- */

void ferry__loader_owe_ready(ferry_loader *l) { l->hand.owed_ready = 1; }
void ferry__loader_owe_coord(ferry_loader *l) { l->hand.owed_coord = 1; }
void ferry__loader_owe_worker(ferry_loader *l, ferry__cond *wake) {
  l->hand.owed_workers[l->hand.nowed_workers++] = wake;
}

static int owes_wakeups(const ferry_loader *l) {
  return l->hand.owed_ready || l->hand.owed_coord || l->hand.nowed_workers;
}

/* Workers woken at once past this many are signalled before the lock is let go:
 * the copy taken under the lock lives on the stack. It takes more idle workers than
 * a batch has samples, or than the process has free cores, to get there. */
enum { OWED_WORKERS_MAX = 32 };

void ferry__loader_unlock(ferry_loader *l) {
  ferry__loader_check(l);
  ferry__handoff *h = &l->hand;
  ferry__cond *workers[OWED_WORKERS_MAX];
  while (h->nowed_workers > OWED_WORKERS_MAX) ferry__cond_wake(h->owed_workers[--h->nowed_workers]);
  size_t nworkers = h->nowed_workers;
  int ready = h->owed_ready, coord = h->owed_coord;
  if (nworkers) memcpy(workers, h->owed_workers, nworkers * sizeof *workers);
  h->nowed_workers = 0;
  h->owed_ready = h->owed_coord = 0;
  pthread_mutex_unlock(&l->lock);
  /* After the unlock the loader is still there: close joins every thread that
   * could be here before it frees anything, and the consumer does not close while it
   * is inside a call of its own. */
  if (ready) ferry__cond_wake(&l->ready_cv);
  if (coord) ferry__cond_wake(&l->coord_cv);
  for (size_t i = 0; i < nworkers; i++) ferry__cond_wake(workers[i]);
}

void ferry__loader_wait(ferry_loader *l, ferry__cond *cv, uint64_t *idle_ns) {
  ferry__loader_wait_until(l, cv, idle_ns, NULL);
}

int ferry__loader_wait_until(ferry_loader *l, ferry__cond *cv, uint64_t *idle_ns, const struct timespec *deadline) {
  if (owes_wakeups(l)) {
    ferry__loader_unlock(l);
    pthread_mutex_lock(&l->lock);
    return 0;
  }
  ferry__loader_check(l);
  uint64_t before = idle_ns ? thread_cpu_ns() : 0;
  int rc = ferry__cond_wait_until(cv, &l->lock, deadline);
  if (idle_ns) *idle_ns += thread_cpu_ns() - before;
  return rc;
}

/* ---- plans and items ------------------------------------------------------------- */

static void plan_free(ferry__plan *p) {
  if (!p) return;
  ferry__free(p->item);
  ferry__free(p->dataset_index);
  ferry__free(p->position);
  ferry__free(p->status);
  ferry__free(p->message);
  ferry__free(p->rows);
  ferry__free(p->sample_hw);
  ferry__free(p->augment);
  ferry__free(p);
}

/* Sized for batch_size once, so a recycled plan fits any batch, the short last one
 * too. */
ferry__plan *ferry__handoff_plan_new(size_t batch_size, size_t nfields) {
  ferry__plan *p = ferry__calloc(1, sizeof *p);
  if (!p) return NULL;
  p->dataset_index = ferry__calloc(batch_size, sizeof *p->dataset_index);
  p->position = ferry__calloc(batch_size, sizeof *p->position);
  p->status = ferry__calloc(batch_size, sizeof *p->status);
  p->message = ferry__calloc(batch_size, sizeof *p->message);
  p->rows = ferry__calloc(nfields * batch_size + 1, sizeof *p->rows);
  p->sample_hw = ferry__calloc(2 * batch_size, sizeof *p->sample_hw);
  p->augment = ferry__calloc(batch_size, sizeof *p->augment);
  if (!p->dataset_index || !p->position || !p->status || !p->message || !p->rows || !p->sample_hw || !p->augment) {
    plan_free(p);
    return NULL;
  }
  return p;
}

ferry__plan *ferry__handoff_plan_spare(ferry_loader *l) {
  ferry__plan *p = l->hand.spare_plans;
  if (p) {
    l->hand.spare_plans = p->next;
    p->next = NULL;
  }
  return p;
}

void ferry__handoff_plan_put(ferry_loader *l, ferry__plan *p) {
  p->batch = NULL;
  p->next = l->hand.spare_plans;
  l->hand.spare_plans = p;
}

void ferry__handoff_free_spare_plans(ferry_loader *l) {
  while (l->hand.spare_plans) {
    ferry__plan *p = l->hand.spare_plans;
    l->hand.spare_plans = p->next;
    plan_free(p);
  }
}

ferry__ready_item *ferry__handoff_item_get(ferry_loader *l) {
  ferry__ready_item *item = l->hand.spare_items;
  if (item) l->hand.spare_items = item->next;
  else item = ferry__calloc(1, sizeof *item);
  if (item) memset(item, 0, sizeof *item);
  return item;
}

void ferry__handoff_item_put(ferry_loader *l, ferry__ready_item *item) {
  if (!item) return;
  ferry__free(item->message);
  item->message = NULL;
  item->batch = NULL;
  item->next = l->hand.spare_items;
  l->hand.spare_items = item;
}

ferry__ready_item *ferry__handoff_marker_item(ferry_loader *l) {
  ferry__ready_item *item = ferry__handoff_item_get(l);
  if (!item) {
    item = l->hand.reserve_item;
    l->hand.reserve_item = NULL;
  }
  return item;
}

/* Its failure is absorbed: the reserve is only the fallback of marker_item, whose
 * caller reports what it cannot queue. */
void ferry__handoff_restock_reserve(ferry_loader *l) {
  if (!l->hand.reserve_item) l->hand.reserve_item = ferry__calloc(1, sizeof *l->hand.reserve_item);
}

void ferry__handoff_push_item(ferry_loader *l, ferry__ready_item *item) {
  ferry__handoff *h = &l->hand;
  item->next = NULL;
  if (h->ready_tail) h->ready_tail->next = item;
  else h->ready_head = item;
  h->ready_tail = item;
  h->ready++;
  ferry__loader_owe_ready(l);
}

/* ---- the coordinator's side ------------------------------------------------------- */

void ferry__handoff_layout_begin(ferry_loader *l) {
  l->hand.outstanding++; /* before the layout may block, so the count never overshoots */
  l->hand.laying_out = 1;
}

void ferry__handoff_layout_end(ferry_loader *l, int made) {
  l->hand.laying_out = 0;
  if (!made) l->hand.outstanding--;
}

void ferry__handoff_append(ferry_loader *l, ferry__plan *p) {
  ferry__handoff *h = &l->hand;
  p->next = NULL;
  if (h->inflight_tail) h->inflight_tail->next = p;
  else h->inflight_head = p;
  h->inflight_tail = p;
  h->inflight++;
}

/* The hook must go first: it takes loader->lock, which the caller holds, and it would
 * look for the batch among those the consumer holds. For a packed batch the pool's
 * lock is taken inside, under loader->lock: the order loader_internal.h states. */
void ferry__handoff_discard(ferry_loader *l, ferry_batch *b) {
  ferry_batch_set_release_hook(b, NULL, NULL);
  ferry_batch_release(b);
  l->hand.outstanding--;
}

void ferry__handoff_release_inflight(ferry_loader *l) {
  ferry__handoff *h = &l->hand;
  while (h->inflight_head) {
    ferry__plan *p = h->inflight_head;
    h->inflight_head = p->next;
    h->inflight--;
    ferry__handoff_discard(l, p->batch);
    ferry__handoff_plan_put(l, p);
  }
  h->inflight_tail = NULL;
}

/* The list is relinked in place, keeping the current generation's items in order;
 * ready_tail is rebuilt as the walk goes. With UINT64_MAX, a generation never
 * reached, every item goes (the coordinator's exit). */
size_t ferry__handoff_drop_stale(ferry_loader *l, uint64_t generation) {
  ferry__handoff *h = &l->hand;
  size_t batches = 0;
  ferry__ready_item **link = &h->ready_head;
  h->ready_tail = NULL;
  while (*link) {
    ferry__ready_item *item = *link;
    if (item->generation == generation) {
      h->ready_tail = item;
      link = &item->next;
      continue;
    }
    *link = item->next;
    if (item->batch) {
      ferry__handoff_discard(l, item->batch);
      batches++;
    }
    ferry__handoff_item_put(l, item);
    h->ready--;
  }
  return batches;
}

void ferry__handoff_coordinator_idle(ferry_loader *l, int drain) {
  l->hand.coordinator_waits = drain ? COORD_WAITS_DRAIN : COORD_WAITS_ROOM;
}

void ferry__handoff_coordinator_busy(ferry_loader *l) { l->hand.coordinator_waits = COORD_BUSY; }

/* ---- delivery --------------------------------------------------------------------- */

void ferry__handoff_deliver_head(ferry_loader *l) {
  ferry__handoff *h = &l->hand;
  ferry__plan *head = h->inflight_head;
  ferry__ready_item *item = head->item;
  head->item = NULL;
  h->inflight_head = head->next;
  if (!h->inflight_head) h->inflight_tail = NULL;
  h->inflight--;
  if (h->inflight == 0 && h->coordinator_waits == COORD_WAITS_DRAIN) {
    h->coordinator_waits = COORD_BUSY;
    ferry__loader_owe_coord(l);
  }
  item->kind = ITEM_BATCH;
  item->generation = head->generation;
  item->epoch = head->epoch;
  item->cursor_after = head->end;
  item->count = head->count;
  item->skipped = l->coord.epoch_skipped;
  item->batch = head->batch;
  ferry__handoff_plan_put(l, head);
  ferry__handoff_push_item(l, item);
}

int ferry__handoff_deliver_complete(ferry_loader *l) {
  ferry__plan *head;
  while ((head = l->hand.inflight_head) && head->pending == 0) {
    if (head->failures || head->canceled || head->generation != l->generation) return 0;
    ferry__handoff_deliver_head(l);
  }
  return 1;
}

void ferry__handoff_wake_coordinator_for_room(ferry_loader *l) {
  ferry__handoff *h = &l->hand;
  if (h->coordinator_waits != COORD_WAITS_ROOM) return;
  size_t taken = h->inflight + h->ready;
  size_t room = taken < l->prefetch ? l->prefetch - taken : 0;
  size_t arenas = h->outstanding < l->arenas ? l->arenas - h->outstanding : 0;
  if ((room < arenas ? room : arenas) < l->refill) return;
  /* Not idle any more: whoever comes next does not owe it a second wake-up. */
  h->coordinator_waits = COORD_BUSY;
  ferry__loader_owe_coord(l);
}

/* The consumer took a batch or released one. It wakes the coordinator only when
 * nothing is in flight: otherwise a worker is bound to finish a slot soon and does it.
 * A wake-up is a system call and, when the coordinator's core is idle, an interrupt to
 * another core (several microseconds in a virtual machine); on the consumer it would be
 * serial work per batch, on a worker it is not. The pipeline never waits on it: with
 * nothing in flight or ready, the whole depth is free, and the coordinator is also
 * woken when its head plan needs it. */
static void room_freed(ferry_loader *l) {
  if (l->hand.inflight == 0) ferry__handoff_wake_coordinator_for_room(l);
}

/* ---- the consumer's side ---------------------------------------------------------- */

ferry__ready_item *ferry__handoff_pop_ready(ferry_loader *l) {
  ferry__handoff *h = &l->hand;
  ferry__ready_item *item = h->ready_head;
  /* An item of an older generation is left for the coordinator to drop (it wakes on
   * the restart that made it stale). */
  if (!item || item->generation != l->generation) return NULL;
  h->ready_head = item->next;
  if (!h->ready_head) h->ready_tail = NULL;
  h->ready--;
  room_freed(l);
  return item;
}

void ferry__handoff_hold(ferry_loader *l, ferry_batch *batch) { l->hand.held[l->hand.nheld++] = batch; }

void ferry__loader_release_hook(ferry_batch *batch, void *arg) {
  ferry_loader *l = arg;
  ferry__handoff *h = &l->hand;
  pthread_mutex_lock(&l->lock);
  for (size_t i = 0; i < h->nheld; i++)
    if (h->held[i] == batch) {
      h->held[i] = h->held[--h->nheld];
      break;
    }
  h->outstanding--;
  room_freed(l);
  ferry__loader_unlock(l);
}

ferry_status ferry__handoff_open(ferry_loader *l, size_t workers, size_t arenas) {
  l->hand.held = ferry__calloc(arenas, sizeof *l->hand.held);
  l->hand.owed_workers = ferry__calloc(workers ? workers : 1, sizeof *l->hand.owed_workers);
  if (!l->hand.held || !l->hand.owed_workers) return ferry__fail(FERRY_ENOMEM, "loader: out of memory");
  return FERRY_OK;
}

void ferry__handoff_close(ferry_loader *l) {
  ferry__handoff *h = &l->hand;
  for (size_t i = 0; i < h->nheld; i++) {
    ferry_batch_set_release_hook(h->held[i], NULL, NULL);
    ferry_batch_release(h->held[i]);
  }
  h->nheld = 0;
  ferry__free(h->held);
  h->held = NULL;
  while (h->spare_items) {
    ferry__ready_item *next = h->spare_items->next;
    ferry__free(h->spare_items->message);
    ferry__free(h->spare_items);
    h->spare_items = next;
  }
  ferry__free(h->reserve_item);
  h->reserve_item = NULL;
  ferry__free(h->owed_workers);
  h->owed_workers = NULL;
}
