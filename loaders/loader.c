/* loaders/loader.c - the public loader's calls once it is open: next, state, close.
 *
 * Owns the consumer's side of the pipeline (ferry_loader_next, set_epoch, state,
 * stats), close, the counting of the public calls in progress, and fork detection.
 * Opening (the config, its checks, the field table, the sizing of the pipeline) is in
 * loader_open.c; the coordinator and workers are in coordinator.c and workers.c, the
 * release hook and the other hand-offs in handoff.c; the lock and the condition
 * variables they share are described in loader_internal.h.
 * Callers: the user's threads. next from one thread at a time (loader.h); set_epoch,
 * state_get/set and stats_get from any, each under loader->lock; close from any,
 * also while those are in progress on other threads (not while one begins).
 *
 * Invariants:
 *   - what open computed (loader_open.c) is read here without the lock and never
 *     written;
 *   - the consumer's view (state, samples_in_epoch, skipped_in_epoch) moves only with
 *     what next takes off the ready queue, or at once with a restart; it is what
 *     state_get saves, so a resumed loader continues with the batch after it;
 *   - `held` lists the batches delivered and not yet released; there are never more
 *     than `arenas` (the coordinator makes no more), so next can tell a consumer
 *     that holds them all instead of waiting forever;
 *   - close accepts a loader stopped at any step of open (loader_open.c closes a
 *     loader it could not finish with it);
 *   - every public call but the two constant counts is counted in `calls` (enter,
 *     leave) from its first touch of the lock to its last touch of the loader, and
 *     close, once `stopping` is set (no call enters after it), frees nothing until
 *     `calls` is 0: a next waiting for a batch is woken and returns FERRY_ECANCELED;
 *   - in a child of fork() (`forks` differs from the process's count, taken at open
 *     by ferry__loader_forks_so_far), no call takes the lock, which a thread that is
 *     not in the child may have held: they fail, and close forgets the loader.
 * Not done here: the order of batches (coordinator.c), filling (workers.c, fill.c,
 * gpu_fill.c), the wait for a batch's events before its arena is reused
 * (lib/pool.c).
 */
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include "lib/alloc.h"
#include "lib/struct_size.h"
#include "image/gpu/jpeg_stage.h"
#include "loaders/gpu_route.h"
#include "loaders/loader.h"
#include "loaders/loader_internal.h"
#include "loaders/coordinator.h"
#include "loaders/handoff.h"
#include "loaders/workers.h"
#include "ferry/advanced.h"

/* ---- calls in progress, close and fork ---------------------------------------- */

/* Children fork() has made in this process's line (pthread_atfork, installed at the
 * first open): a loader opened under another count is a child's copy of its parent's. */
static atomic_uint fork_count;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;
static void count_fork(void) { atomic_fetch_add_explicit(&fork_count, 1, memory_order_relaxed); }
static void install_fork_hook(void) { pthread_atfork(NULL, NULL, count_fork); }

unsigned ferry__loader_forks_so_far(void) {
  pthread_once(&fork_hook_once, install_fork_hook);
  return atomic_load_explicit(&fork_count, memory_order_relaxed);
}

static int in_fork_child(const ferry_loader *l) {
  return atomic_load_explicit(&fork_count, memory_order_relaxed) != l->forks;
}

/* Count a call in and return with the lock held; or refuse it, without the lock: in
 * a fork child (its lock may be held by a parent's thread, which will never let it
 * go), or once close has begun. */
static ferry_status enter(ferry_loader *l, const char *call) {
  if (in_fork_child(l))
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: the loader was opened before fork() and its threads are in the "
                       "parent process; open a new loader in the child", call);
  pthread_mutex_lock(&l->lock);
  if (l->stopping) {
    ferry__loader_unlock(l);
    return ferry__fail(FERRY_ECANCELED, "%s: the loader is being closed", call);
  }
  l->calls++;
  return FERRY_OK;
}

/* Count a call out, the lock not held, once it touches the loader no more. Nothing is
 * owed after the decrement, so the unlock is the last touch: close may free next. */
static void leave(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  if (--l->calls == 0 && l->stopping) ferry__cond_wake(&l->close_cv);
  ferry__loader_unlock(l);
}

/* leave, from a call that holds the lock: the wake-ups it owes go out first. */
static void leave_locked(ferry_loader *l) {
  ferry__loader_unlock(l);
  leave(l);
}

/* close, after `stopping`: the calls in progress have all returned. */
static void wait_for_calls(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  while (l->calls) ferry__loader_wait(l, &l->close_cv, NULL);
  ferry__loader_unlock(l);
}

/* The absolute CLOCK_MONOTONIC time `ms` from now (ms >= 0). */
static struct timespec deadline_after(int ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

/* Wait for the next current-generation item; NULL with the status set if none can come.
 * An item of an older generation at the head is left for the coordinator to drop
 * (it wakes on the restart that made it stale). With nothing ready and every arena
 * held by the consumer, no batch can be made until one is released: that is an
 * error, not a wait that would never end. With a deadline (NULL: none), the wait
 * also ends, FERRY_EAGAIN, when it passes or a signal handler ran on this thread. */
static ferry__ready_item *wait_item(ferry_loader *l, const struct timespec *deadline, ferry_status *st) {
  for (;;) {
    if (l->stopping) {
      *st = ferry__fail(FERRY_ECANCELED, "loader: closed");
      return NULL;
    }
    if (l->coord.failed) {
      *st = ferry__error_restore(l->coord.fatal_status, l->coord.fatal_message);
      return NULL;
    }
    ferry__ready_item *item = ferry__handoff_pop_ready(l);
    if (item) return item;
    if (!l->hand.ready_head && l->hand.nheld >= l->arenas) {
      *st = ferry__fail(FERRY_ELIMIT, "loader: the consumer holds all %zu batches; release one "
                       "(ferry_batch_release) before asking for the next", l->arenas);
      return NULL;
    }
    if (ferry__loader_wait_until(l, &l->ready_cv, &l->stats.consumer_idle_cpu_ns, deadline) != 0) {
      *st = ferry__fail(FERRY_EAGAIN, "loader: no batch yet (the wait was bounded or interrupted)");
      return NULL;
    }
  }
}

/* After an end or an error, the consumer's view moves to the next epoch, as the
 * coordinator did when it queued the marker (coordinator.c begin_epoch). */
static void next_epoch_view(ferry_loader *l, int64_t ended) {
  ferry__consumer_view *v = &l->view;
  v->state.epoch = ended + 1;
  v->state.batches_delivered = 0;
  v->state.cursor = 0;
  v->samples_in_epoch = v->skipped_in_epoch = 0;
}

/* The view and `held` change under the lock; the progress callback runs after it is
 * let go, so that the callback may call the loader (stats_get, state_get). An item
 * is recycled whatever its kind: a batch's item carries only its address. */
ferry_status ferry_loader_next_timed(ferry_loader *l, ferry_batch **out, int timeout_ms) {
  if (!l || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_next: loader and out are required");
  *out = NULL;
  ferry_status st = enter(l, "ferry_loader_next");
  if (st != FERRY_OK) return st;
  struct timespec deadline = deadline_after(timeout_ms > 0 ? timeout_ms : 0);
  ferry__ready_item *item = wait_item(l, timeout_ms >= 0 ? &deadline : NULL, &st);
  ferry_loader_progress progress = {0};
  ferry__consumer_view *v = &l->view;
  if (item && item->kind == ITEM_BATCH) {
    ferry__handoff_hold(l, item->batch);
    v->state.epoch = item->epoch;
    v->state.batches_delivered++;
    v->state.cursor = item->cursor_after;
    v->samples_in_epoch += item->count;
    v->skipped_in_epoch = item->skipped;
    l->stats.batches_delivered++;
    progress = (ferry_loader_progress){v->state.epoch, v->state.batches_delivered,
                                       ferry_loader_batches_per_epoch(l), v->samples_in_epoch,
                                       v->skipped_in_epoch, 0};
    *out = item->batch;
  } else if (item) {
    if (item->kind == ITEM_END) /* the final counts, before the view moves on */
      progress = (ferry_loader_progress){item->epoch, v->state.batches_delivered,
                                         ferry_loader_batches_per_epoch(l), v->samples_in_epoch,
                                         item->skipped, 1};
    next_epoch_view(l, item->epoch);
    st = item->kind == ITEM_END ? FERRY_EEND : ferry__error_restore(item->status, item->message);
  }
  ferry__handoff_item_put(l, item);
  ferry__loader_unlock(l);
  if ((*out || progress.epoch_ended) && l->config.progress)
    l->config.progress(&progress, l->config.progress_user);
  leave(l);
  if (st == FERRY_EEND) ferry__fail(FERRY_EEND, "end of epoch"); /* the callback may call ferry */
  return st;
}

ferry_status ferry_loader_next(ferry_loader *l, ferry_batch **out) { return ferry_loader_next_timed(l, out, -1); }

/* Restart the coordinator at (epoch, cursor); what was in flight is dropped
 * (coordinator.c). The view is set in the same hold of the lock, so a state_get right
 * after already says where the loader stands, and no batch of the old generation can
 * be taken in between. Batches the consumer holds stay valid. The lock is held. */
static void restart(ferry_loader *l, int64_t epoch, uint64_t cursor, uint64_t delivered) {
  ferry__coordinator_restart(l, epoch, cursor, delivered);
  ferry__consumer_view *v = &l->view;
  v->state.epoch = epoch;
  v->state.batches_delivered = delivered;
  v->state.cursor = cursor;
  v->samples_in_epoch = v->skipped_in_epoch = 0;
}

/* Nothing of `epoch` delivered yet, and the coordinator laying it out from its start:
 * just opened (or restarted there), or the previous epoch's end or error taken (the
 * coordinator begins the next epoch as it queues either: coordinator.c). What is in
 * flight is then exactly what a restart would make again. */
static int stands_at_start_of(const ferry_loader *l, int64_t epoch) {
  const ferry_loader_state *s = &l->view.state;
  return s->epoch == epoch && s->batches_delivered == 0 && s->cursor == 0 && !l->coord.failed;
}

/* The recommended loop calls set_epoch before every epoch, at the epoch the loader
 * already stands at: a restart there would throw the prefetched batches away. */
ferry_status ferry_loader_set_epoch(ferry_loader *l, int64_t epoch) {
  if (!l || epoch < 0) return ferry__fail(FERRY_EINVAL, "ferry_loader_set_epoch: a loader and an epoch >= 0 are required");
  ferry_status st = enter(l, "ferry_loader_set_epoch");
  if (st != FERRY_OK) return st;
  if (!stands_at_start_of(l, epoch)) restart(l, epoch, 0, 0);
  leave_locked(l);
  return FERRY_OK;
}

ferry_status ferry_loader_state_get(ferry_loader *l, ferry_loader_state *out) {
  if (!l || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_state_get: loader and out are required");
  ferry_status st = enter(l, "ferry_loader_state_get");
  if (st != FERRY_OK) return st;
  *out = l->view.state;
  leave_locked(l);
  return FERRY_OK;
}

/* The seed draws every epoch's order: a state saved under another seed names
 * positions in a different order, so it is refused rather than resumed. */
ferry_status ferry_loader_state_set(ferry_loader *l, const ferry_loader_state *s) {
  if (!l || !s) return ferry__fail(FERRY_EINVAL, "ferry_loader_state_set: loader and state are required");
  if (s->seed != l->config.seed)
    return ferry__fail(FERRY_EINVAL, "loader state: seed %llu was saved, but this loader uses seed %llu",
                      (unsigned long long)s->seed, (unsigned long long)l->config.seed);
  if (s->epoch < 0 || s->cursor > l->sampler.per_rank)
    return ferry__fail(FERRY_EINVAL, "loader state: epoch %lld / cursor %llu are out of range (%zu samples per epoch)",
                      (long long)s->epoch, (unsigned long long)s->cursor, l->sampler.per_rank);
  ferry_status st = enter(l, "ferry_loader_state_set");
  if (st != FERRY_OK) return st;
  restart(l, s->epoch, s->cursor, s->batches_delivered);
  leave_locked(l);
  return FERRY_OK;
}

/* CPU time of the coordinator thread so far: the serial part of the pipeline that
 * repro/throughput reports per batch (0 before it starts). */
static uint64_t coordinator_cpu_ns(const ferry_loader *l) {
  clockid_t clock;
  struct timespec ts;
  if (!l->coord.started || pthread_getcpuclockid(l->coord.thread, &clock) != 0 ||
      clock_gettime(clock, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The counters are gathered in this library's layout, then copied out as far as the
 * caller's struct_size reaches (loader.h, ferry_loader_stats; lib/struct_size.h): the
 * caller's struct is written once, at the end, and not at all on failure. The embedded
 * pool stats' struct_size is the part of them the caller's struct covers. */
ferry_status ferry_loader_stats_get(ferry_loader *l, ferry_loader_stats *out) {
  if (!l || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_stats_get: loader and out are required");
  ferry_status st = ferry__struct_size_check(out, offsetof(ferry_loader_stats, samples_decoded) +
                                                      sizeof out->samples_decoded,
                                             "ferry_loader_stats_get", "ferry_loader_stats_init");
  if (st == FERRY_OK) st = enter(l, "ferry_loader_stats_get");
  if (st != FERRY_OK) return st;
  ferry_loader_stats s = l->stats;
  ferry__loader_unlock(l);
  s.samples_skipped += ferry__gpu_routes_skipped(l->fill.gpu.routes);
  s.coordinator_cpu_ns = coordinator_cpu_ns(l);
  ferry_pool_stats_init(&s.pool);
  if (l->pool) st = ferry_pool_stats_get(l->pool, &s.pool);
  leave(l);
  if (st != FERRY_OK) return st;
  s.pool.struct_size = ferry__struct_nested_size(out->struct_size, offsetof(ferry_loader_stats, pool), sizeof s.pool);
  ferry__struct_copy_out(out, &s, sizeof s);
  return FERRY_OK;
}

uint64_t ferry_loader_samples_per_epoch(const ferry_loader *l) { return l->sampler.per_rank; }

/* Nominal: skipped samples make an epoch shorter, never longer. */
uint64_t ferry_loader_batches_per_epoch(const ferry_loader *l) {
  uint64_t n = l->sampler.per_rank, b = l->config.batch_size;
  return l->config.drop_last ? n / b : (n + b - 1) / b;
}

/* The order matters. stopping and a new generation make the consumer and the
 * coordinator give up, and no call enters after it; the calls in progress return
 * (a next waiting for a batch with FERRY_ECANCELED); cancelling the pool frees a
 * coordinator blocked on an arena;
 * the coordinator is joined before the workers, since its exit waits for the slots
 * they hold; the consumer's batches go back before the pool that owns their arenas
 * is closed, and the pool before the device whose memory it pinned. Their hooks are
 * removed first: the loader they point to is going away. */
void ferry_loader_close(ferry_loader *l) {
  if (!l) return;
  if (in_fork_child(l)) { /* the threads to join and the locks are the parent's: forget it */
    ferry__fail(FERRY_EUNSUPPORTED, "ferry_loader_close: the loader was opened before fork(); the child "
                "only forgets it (its memory stays, as the parent's copy)");
    return;
  }
  ferry__coordinator_stop(l);
  wait_for_calls(l);
  if (l->pool) ferry_pool_cancel(l->pool);
  ferry__coordinator_join(l);
  ferry__loader_stop_workers(l);
  ferry__handoff_close(l);
  ferry__jpeg_stage_close(l->fill.gpu.stage); /* after the batches: it waits for their device work */
  ferry__gpu_routes_close(l->fill.gpu.routes); /* after the stage, whose hooks point at them */
  ferry_pool_close(l->pool);
  if (l->owns_device) ferry_device_close(l->device);
  ferry__sampler_destroy(&l->sampler);
  ferry__free(l->instances);
  ferry__free(l->fill.gpu.file_bytes);
  ferry_coco_close(l->coco);
  if (l->source) l->source->close(l->source);
  ferry__free(l->annotations_path);
  ferry__free(l->images_dir);
  pthread_mutex_destroy(&l->lock);
  ferry__free(l);
}
