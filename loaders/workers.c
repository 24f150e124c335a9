/* loaders/workers.c - the threads that fill samples, one decoder each.
 *
 * Owns loader->work (loader_internal.h): the work queue, plans with unclaimed slots,
 * oldest first, and the worker threads, their wake-up condition variables, the idle
 * stack, and each thread's ferry_decoder (opened and closed on the thread that uses
 * it). A worker claims the next slot of the head plan under the loader's lock, fills
 * it without the lock, then retakes the lock once to record the result and claim its
 * next slot. Of the plans it writes only the claim (claimed, pending) and its own
 * slot's result; of the counters samples_decoded and peak_busy_workers.
 * Callers: loader_open.c starts the workers at open and loader.c stops them at
 * close, after the coordinator has been joined; the coordinator dispatches and
 * withdraws plans, under the loader's lock; the `workers` threads run worker_main.
 *
 * Invariants, under loader->lock:
 *   - a slot is claimed by exactly one worker; a plan leaves the queue when its last
 *     slot is claimed (or it is withdrawn); `pending` counts claimed-or-not slots
 *     whose result is not recorded yet, and the plan is not freed before it is 0
 *     (cancel_inflight in coordinator.c waits for that);
 *   - busy_workers counts workers between claim and finish, and never exceeds
 *     max_busy (the usable cores);
 *   - idle_workers workers are on the idle stack, each with woken == 0; `waking`
 *     counts those taken off it and not yet running again;
 *   - `unclaimed` is the number of unclaimed slots of the plans on the work queue;
 *   - a worker writes only its own slot of a plan (status, message, the sample's
 *     slices of the batch), so no two fills touch the same bytes.
 * Not done here: what a sample is (fill.c), the order batches go out in (handoff.c,
 * coordinator.c), retries. Decoders are opened by start_workers, before any thread
 * starts: a loader that cannot give every worker one fails to open, rather than have
 * the workers without one fail (or, under the skip policy, skip) whichever samples
 * they happened to claim, which would make batch k depend on timing.
 */
#include <stdio.h>

#include "lib/alloc.h"
#include "lib/thread.h"
#include "loaders/gpu_fill.h"
#include "loaders/loader_internal.h"
#include "loaders/handoff.h"
#include "loaders/workers.h"

/* One worker thread: what it was started with, and its own wake-up. */
typedef struct worker_slot {
  ferry_loader *loader;
  size_t index;
  ferry__cond wake;
  int woken;           /* set by wake_worker when it takes the worker off the idle stack */
  ferry_decoder *decoder; /* opened by start_workers, then used and closed by this worker only */
  ferry__gpu_worker *gpu; /* the same, with the GPU decoder: this worker's nvJPEG parser */
  ferry__fill_scratch scratch; /* its augmented fills' buffers */
} worker_slot;

/* Wake one idle worker if there are unclaimed slots no running worker will take
 * and a free core, and no more: a broadcast would wake every worker for each batch,
 * and on a node with 64 of them the wake-ups and the lock they all retake become
 * the serial cost the pipeline is bounded by. The coordinator wakes one when it
 * queues a plan; each worker woken, once it has claimed its slot, wakes the next if
 * slots are left (claim), so the wake-ups are spread over the workers instead of
 * being serial work of the coordinator (each is a system call and often an
 * interrupt to an idle core). Idle workers wait on a stack and the last to go idle
 * is woken first: its decoder's buffers and filters are the likeliest to be in
 * cache (16 workers on 2 cores ran 7 % slower than 2 while the wake-ups went round
 * all 16). `waking` counts workers woken and not yet running: they will claim too,
 * so they count against both the slots left and the free cores. */
static void wake_worker(ferry_loader *l) {
  size_t taken = l->work.busy + l->work.waking;
  if (l->work.unclaimed > l->work.waking && l->work.max_busy > taken && l->work.idle > 0) {
    worker_slot *w = l->work.idle_stack[--l->work.idle];
    w->woken = 1;
    l->work.waking++;
    ferry__loader_owe_worker(l, &w->wake);
  }
}

void ferry__loader_dispatch(ferry_loader *l, ferry__plan *p) {
  p->claimed = 0;
  p->pending = p->count;
  p->failures = 0;
  p->next_work = NULL;
  if (l->work.tail) l->work.tail->next_work = p;
  else l->work.head = p;
  l->work.tail = p;
  l->work.unclaimed += p->count;
  wake_worker(l);
}

void ferry__loader_withdraw(ferry_loader *l, ferry__plan *p) {
  ferry__plan **link = &l->work.head, *prev = NULL;
  while (*link && *link != p) {
    prev = *link;
    link = &(*link)->next_work;
  }
  if (*link) {
    *link = p->next_work;
    if (l->work.tail == p) l->work.tail = prev;
  }
  p->pending -= p->count - p->claimed;
  l->work.unclaimed -= p->count - p->claimed;
  p->claimed = p->count;
}

/* Claim the next slot: its plan in *out, the slot returned. SIZE_MAX once the
 * workers are told to stop. At most max_busy workers hold a slot at once: with more
 * workers than cores, the rest sleep here rather than take turns on the cores, since
 * a worker preempted halfway through a sample of the head batch holds back every
 * batch behind it for as long as the others keep the cores (and a worker that goes
 * on to its next slot without sleeping costs no wake-up at all). */
static size_t claim(ferry_loader *l, worker_slot *self, ferry__plan **out) {
  while ((!l->work.head || l->work.busy >= l->work.max_busy) && !l->work.stop) {
    self->woken = 0;
    l->work.idle_stack[l->work.idle++] = self;
    while (!self->woken && !l->work.stop) ferry__loader_wait(l, &self->wake, NULL);
    if (self->woken) l->work.waking--;
  }
  ferry__plan *p = l->work.head;
  if (!p || l->work.stop) return SIZE_MAX;
  if (++l->work.busy > l->stats.peak_busy_workers) l->stats.peak_busy_workers = l->work.busy;
  size_t slot = p->claimed++;
  l->work.unclaimed--;
  if (p->claimed == p->count) {
    l->work.head = p->next_work;
    if (!l->work.head) l->work.tail = NULL;
  }
  wake_worker(l); /* the next in the chain, if slots and cores are left */
  *out = p;
  return slot;
}

/* Record a slot's result. The worker that completes the head plan hands it (and any
 * complete plans behind it) to the consumer itself, so a batch reaches the consumer
 * without waking the coordinator; the coordinator is woken only for what needs it:
 * a head plan with failures (skip or fail policy), cancelled plans (to free them),
 * and room to plan ahead when it waits for that (the consumer made the room and
 * leaves the wake-up to the workers: handoff.c room_freed). */
static void finish(ferry_loader *l, ferry__plan *p, size_t slot, ferry_status st) {
  /* No wake-up for the core this frees: the caller goes straight back to claim and
   * takes the next slot itself. */
  l->work.busy--;
  p->status[slot] = st;
  if (st != FERRY_OK) p->failures++;
  ferry__handoff_wake_coordinator_for_room(l);
  if (--p->pending != 0) return;
  /* A complete plan behind an unfinished head waits: it goes out after the head,
   * delivered by whichever thread completes that (or by the coordinator). */
  if (p->canceled || (p == l->hand.inflight_head && !ferry__handoff_deliver_complete(l)))
    ferry__loader_owe_coord(l);
}

/* A filled (or failed) sample in the stats. With the GPU decoder, a sample laid out
 * again (FERRY_EAGAIN) is counted once, when its layout is the right one; one that
 * failed on the CPU path still counts as a fallback (why it went there). */
static void count_sample(ferry_loader_stats *stats, int gpu, ferry_status st, int fallback) {
  if (st == FERRY_EAGAIN) return;
  stats->samples_decoded++;
  if (!gpu) return;
  size_t slot = ferry__loader_fallback_slot(fallback);
  if (slot < FERRY_LOADER_FALLBACK_SLOTS) stats->samples_cpu_fallback[slot]++;
  else if (st == FERRY_OK) stats->samples_gpu_decode++;
}

static void *worker_main(void *arg) {
  worker_slot *self = arg;
  ferry_loader *l = self->loader;
  ferry_decoder *decoder = self->decoder; /* this thread's alone from here on */
  ferry__gpu_worker *gpu = self->gpu;
  pthread_mutex_lock(&l->lock);
  ferry__plan *p;
  for (size_t slot; (slot = claim(l, self, &p)) != SIZE_MAX;) {
    ferry__loader_unlock(l);
    /* Without the lock: the fill reads only what is fixed at open (l->fill) and this
     * slot's fields of the plan, which no one changes while it is claimed (the GPU
     * decoder's routes, which it points to, are gpu_route.c's: atomics). */
    size_t index = p->dataset_index[slot];
    int fallback = -1;
    ferry_status st = ferry__loader_check_instances(&l->fill, index, l->instances[index]);
    if (st == FERRY_OK)
      st = gpu ? ferry__gpu_fill_sample(&l->fill, gpu, decoder, p->batch, slot, index, &fallback)
               : ferry__loader_fill_sample(&l->fill, decoder, &self->scratch, p->batch, slot, index,
                                           l->fill.varies ? p->augment[slot] : NULL);
    /* The message is this thread's (error.c): copied into the slot here, so that the
     * consumer's thread can restore it with the status. */
    if (st != FERRY_OK) snprintf(p->message[slot], FERRY_ERROR_MAX, "%s", ferry_last_error());
    pthread_mutex_lock(&l->lock);
    count_sample(&l->stats, gpu != NULL, st, fallback);
    finish(l, p, slot, st);
  }
  ferry__loader_unlock(l);
  ferry__gpu_worker_close(gpu);
  self->gpu = NULL;
  ferry_decoder_close(decoder);
  self->decoder = NULL;
  return NULL;
}

/* On failure the threads already started are left running: close stops them
 * (workers_started counts them), as it does on every failed open. */
ferry_status ferry__loader_start_workers(ferry_loader *l, size_t count, size_t max_busy) {
  l->work.max_busy = max_busy;
  l->work.threads = ferry__calloc(count, sizeof *l->work.threads);
  l->work.slots = ferry__calloc(count, sizeof *l->work.slots);
  l->work.idle_stack = ferry__calloc(count, sizeof *l->work.idle_stack);
  if (!l->work.threads || !l->work.slots || !l->work.idle_stack)
    return ferry__fail(FERRY_ENOMEM, "loader: out of memory for %zu workers", count);
  l->work.nworkers = count;
  for (size_t i = 0; i < count; i++) {
    l->work.slots[i].loader = l;
    l->work.slots[i].index = i;
  }
  /* Every decoder before any thread: opening one allocates, and a worker without one
   * could only fail the samples it claims. Those opened stay with their slots and are
   * closed by ferry__loader_stop_workers if the open fails here. */
  for (size_t i = 0; i < count; i++) {
    ferry_status st = ferry_decoder_open(&l->work.slots[i].decoder);
    if (st == FERRY_OK && l->fill.gpu.api) st = ferry__gpu_worker_open(&l->fill, &l->work.slots[i].gpu);
    if (st != FERRY_OK) return ferry__error_prefix(st, "loader: worker %zu of %zu: ", i + 1, count);
  }
  for (size_t i = 0; i < count; i++) {
    if (ferry__thread_start(&l->work.threads[i], worker_main, &l->work.slots[i], "ferry-worker-", i) != 0)
      return ferry__fail(FERRY_ENOMEM, "loader: could not start worker %zu of %zu (out of threads or memory)",
                        i + 1, count);
    l->work.started++;
  }
  return FERRY_OK;
}

/* Every worker is signalled, idle or not: an idle one wakes to see workers_stop, a
 * busy one sees it at its next claim. The plans are gone by now (the coordinator
 * exited first), so no worker is inside a fill that would need them. */
void ferry__loader_stop_workers(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  l->work.stop = 1;
  for (size_t i = 0; i < l->work.started; i++) ferry__cond_wake(&l->work.slots[i].wake);
  ferry__loader_unlock(l);
  for (size_t i = 0; i < l->work.started; i++) pthread_join(l->work.threads[i], NULL);
  for (size_t i = 0; l->work.slots && i < l->work.nworkers; i++) {
    ferry_decoder_close(l->work.slots[i].decoder); /* NULL once its worker closed it */
    ferry__gpu_worker_close(l->work.slots[i].gpu);
    ferry__fill_scratch_free(&l->work.slots[i].scratch);
  }
  pthread_mutex_lock(&l->lock);
  l->work.started = l->work.nworkers = l->work.idle = 0;
  ferry__free(l->work.threads);
  ferry__free(l->work.slots);
  ferry__free(l->work.idle_stack);
  l->work.threads = NULL;
  l->work.slots = NULL;
  l->work.idle_stack = NULL;
  ferry__loader_unlock(l);
}
