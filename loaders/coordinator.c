/* loaders/coordinator.c - lays batches out ahead of the consumer and commits them
 * in order (see loader_internal.h for the plan protocol).
 *
 * Owns loader->coord (loader_internal.h) and the coordinator thread (started and
 * joined through ferry__coordinator_start/_join by loader_open.c and loader.c's
 * close), `stopping` and the
 * generation (ferry__coordinator_restart and _stop, called by the consumer's
 * set_epoch, state_set and close), and, on the thread alone: the epoch being laid out
 * (epoch_run: its generation, the next cursor position, the positions known to fail),
 * the sampler's order (drawn here by begin_epoch, read by plan_create, told to the
 * image source as advice: image_source.h's plan_epoch, O(samples) once an epoch), and a plan
 * being laid out. Plans in flight, ready items and the batches that exist are
 * handoff.c's: it is asked to append, discard, release and recycle them. Of the
 * counters it writes samples_skipped, replans, batches_dropped and
 * coordinator_idle_cpu_ns.
 *
 * Invariants: plans in flight are in cursor order and contiguous (each starts where
 * the previous one ended); only the head plan is ever committed; at most
 * `prefetch` plans are in flight or ready, and at most `arenas` batches exist; a
 * plan's memory goes back to the spare list only once no worker can touch it
 * (pending == 0). Everything here runs on the coordinator thread with the lock held,
 * except plan_create, which may block in the pool and runs without it.
 * Also: every plan in flight is of run->generation, older ones are cancelled before
 * the first plan of a new one is laid out; ITEM_END is queued only once nothing is
 * in flight, a failed sample's ITEM_ERROR only after cancelling what is; after either
 * the next epoch is begun at once, so the consumer's next call needs no set_epoch.
 * Not done here: filling samples (workers.c, fill.c), delivering good plans in the
 * steady state (the worker that completes the head does it, handoff.c), waiting for
 * a batch's events (lib/pool.c), and deciding the sample order (sampler.c).
 */
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/thread.h"
#include "image/gpu/jpeg_stage.h"
#include "loaders/coordinator.h"
#include "loaders/gpu_fill.h"
#include "loaders/loader_internal.h"
#include "loaders/handoff.h"
#include "loaders/workers.h"
#include "ferry/advanced.h"

/* Per-epoch bookkeeping that only the coordinator touches. */
typedef struct epoch_run {
  uint64_t generation;
  int64_t epoch;
  uint64_t next_start;   /* where the next plan begins */
  int exhausted;         /* no sample left after next_start */
  int retry_when_drained; /* the plan at next_start failed to lay out while others were in
                           * flight: tried again once they are delivered, so that an error
                           * that persists reaches the consumer after them, in order */
  uint8_t *failed;       /* [per_rank]: positions known to fail (skip policy) */
  uint64_t next_batch;   /* the batch index in the epoch of the plan at next_start */
  /* a recipe's survivors of a crop, counted at layout: the image's boxes, room for
   * `instances` (grown on the coordinator's thread only) */
  float *boxes;
  uint8_t *keep;
  size_t instances;
} epoch_run;

/* Room for n instances' boxes in the run's scratch. */
static ferry_status run_reserve(epoch_run *run, size_t n) {
  if (n <= run->instances) return FERRY_OK;
  ferry__free(run->boxes);
  ferry__free(run->keep);
  run->boxes = ferry__malloc(n * 4 * sizeof *run->boxes);
  run->keep = ferry__malloc(n);
  run->instances = run->boxes && run->keep ? n : 0;
  return run->instances ? FERRY_OK : ferry__fail(FERRY_ENOMEM, "loader: out of memory for %zu boxes", n);
}

/* A recipe's sample: its record, drawn from (seed, epoch, dataset index) and the
 * batch's scale; its size; its instance count, which a crop may cut (the survivors
 * counted as the worker will, ferry__augment_targets on the same boxes). A sample
 * past the pixel limit is laid out as 1 x 1 without instances: its fill fails. */
static ferry_status plan_sample(ferry_loader *l, epoch_run *run, ferry__plan *p, size_t i, int batch_scale,
                                int64_t *count) {
  size_t index = p->dataset_index[i];
  int32_t *rec = p->augment[i];
  ferry_coco_image img;
  ferry_status st = ferry_coco_image_at(l->coco, index, &img);
  if (st != FERRY_OK) return st;
  int w, h; /* drawn on the decoded size: a reduced decode's, under draft_size */
  ferry__loader_source_size(&l->fill, &img, &w, &h);
  ferry__augment_draw(&l->fill.recipe, l->fill.seed, run->epoch, index, batch_scale, h, w, rec);
  *count = l->instances[index];
  p->sample_hw[2 * i] = rec[FERRY_AUGMENT_OUT_H];
  p->sample_hw[2 * i + 1] = rec[FERRY_AUGMENT_OUT_W];
  if (ferry__augment_over_limit(&l->fill, rec)) {
    p->sample_hw[2 * i] = p->sample_hw[2 * i + 1] = 1;
    *count = 0;
    return FERRY_OK;
  }
  if (!rec[FERRY_AUGMENT_BRANCH] || *count == 0) return FERRY_OK;
  ferry_coco_target t = {0};
  if ((st = run_reserve(run, (size_t)*count)) != FERRY_OK) return st;
  t.boxes = run->boxes;
  if ((st = ferry__loader_targets(&l->fill, index, &l->fill.target, &t)) != FERRY_OK) return st;
  *count = (int64_t)ferry__augment_targets(rec, h, w, run->boxes, NULL, (size_t)*count, run->keep);
  return FERRY_OK;
}

/* The rows of every field: each sample's instance count (a per-sample field ignores
 * it, lib/batch.c); with a recipe, its records and sizes too. */
static ferry_status plan_rows(ferry_loader *l, epoch_run *run, ferry__plan *p) {
  int batch_scale = l->fill.recipe.options.multi_scale == FERRY_MULTI_SCALE_PER_BATCH
                        ? ferry__augment_batch_scale(&l->fill.recipe, l->fill.seed, run->epoch, p->batch_index)
                        : 0;
  for (size_t i = 0; i < p->count; i++) {
    int64_t n = l->instances[p->dataset_index[i]];
    if (ferry__loader_over_instance_cap(&l->fill, n)) {
      /* no rows and, with a recipe, 1 x 1: the worker refuses the sample (fill.c) */
      n = 0;
      if (l->fill.varies) p->sample_hw[2 * i] = p->sample_hw[2 * i + 1] = 1;
    } else if (l->fill.varies) {
      ferry_status st = plan_sample(l, run, p, i, batch_scale, &n);
      if (st != FERRY_OK) return ferry__error_prefix(st, "dataset index %zu: ", p->dataset_index[i]);
    }
    for (size_t f = 0; f < l->nfields; f++) p->rows[f * p->count + i] = n;
  }
  return FERRY_OK;
}

/* Choose the samples of the batch starting at run->next_start, lay it out in `p`
 * and take its memory. FERRY_EEND when no (complete enough) batch is left. Called
 * without the lock: it may block in the pool. */
static ferry_status plan_create(ferry_loader *l, epoch_run *run, ferry__plan *p) {
  const ferry__sampler *s = &l->sampler;
  size_t B = l->config.batch_size;
  uint64_t pos = run->next_start;
  p->count = 0;
  /* Positions that failed earlier in this epoch (skip policy) are passed over, so the
   * plan may span more than B positions: [start, end) is what it consumed. */
  while (p->count < B && pos < s->per_rank) {
    if (!run->failed[pos]) {
      p->position[p->count] = pos;
      p->dataset_index[p->count++] = s->order[pos];
    }
    pos++;
  }
  p->start = run->next_start;
  p->end = pos;
  p->epoch = run->epoch;
  p->generation = run->generation;
  p->canceled = 0;
  p->batch = NULL;
  p->batch_index = run->next_batch;
  if (p->count == 0 || (p->count < B && l->config.drop_last)) return FERRY_EEND;
  /* The layout from the instance counts (and a recipe's draws) alone, before any pixel
   * is decoded; the GPU decoder's jpeg and cpu_images rows are then set from its
   * per-image facts. */
  ferry_status st = plan_rows(l, run, p);
  if (st != FERRY_OK) return st;
  if (l->fill.gpu.api) ferry__gpu_plan_rows(&l->fill, p->dataset_index, p->count, p->rows);
  st = ferry__batch_create_checked(l->pool, l->device, p->count, &l->checked_fields, p->rows,
                                   l->fill.varies ? p->sample_hw : NULL, &p->batch);
  if (st != FERRY_OK)
    return ferry__error_prefix(st, "loader: the batch from dataset index %zu (%zu samples): ",
                               p->dataset_index[0], p->count);
  /* The hook takes the batch off `outstanding` when the consumer releases it
   * (handoff.c). */
  ferry_batch_set_release_hook(p->batch, ferry__loader_release_hook, l);
  if (l->fill.gpu.stage) ferry__batch_set_producer(p->batch, ferry__jpeg_stage_producer(l->fill.gpu.stage));
  return FERRY_OK;
}

/* The coordinator cannot go on (out of memory for its own bookkeeping): every later
 * ferry_loader_next returns this status and message instead of waiting forever. */
/* Broadcast: every thread waiting in ferry_loader_next must see it. The main loop
 * stops on coordinator_failed. */
static void fail_fatally(ferry_loader *l, ferry_status status, const char *message) {
  l->coord.failed = 1;
  l->coord.fatal_status = status;
  snprintf(l->coord.fatal_message, sizeof l->coord.fatal_message, "%s", message);
  ferry__cond_wake(&l->ready_cv);
}

/* An end-of-epoch or error item. Without memory for it the consumer would wait
 * forever, so the spare list keeps one in reserve (see begin_epoch). */
static void push_marker(ferry_loader *l, epoch_run *run, ferry__item_kind kind, ferry_status status,
                        const char *message) {
  ferry__ready_item *item = ferry__handoff_marker_item(l);
  if (!item) {
    fail_fatally(l, FERRY_ENOMEM, "loader: out of memory ending an epoch");
    return;
  }
  item->kind = kind;
  item->generation = run->generation;
  item->epoch = run->epoch;
  item->status = status;
  item->skipped = l->coord.epoch_skipped;
  item->message = message ? ferry__strdup(message) : NULL;
  ferry__handoff_push_item(l, item);
}

/* Cancel every plan in flight, wait for the slots workers already hold, give the
 * memory back. */
static void cancel_inflight(ferry_loader *l) {
  /* Every plan is withdrawn before the first wait: the wait lets go of the lock, and
   * a plan still queued would have more of its slots claimed meanwhile. A worker
   * that finishes a cancelled plan's last slot signals coord_cv (workers.c finish)
   * and never delivers it (handoff.c checks `canceled`). */
  for (ferry__plan *p = l->hand.inflight_head; p; p = p->next) {
    p->canceled = 1;
    ferry__loader_withdraw(l, p);
  }
  for (ferry__plan *p = l->hand.inflight_head; p; p = p->next)
    while (p->pending) ferry__loader_wait(l, &l->coord_cv, &l->stats.coordinator_idle_cpu_ns);
  ferry__handoff_release_inflight(l);
}

/* Start laying out `epoch` at `cursor`: after a restart (restart_epoch/_cursor),
 * after an end or an error (epoch + 1, 0), and at start-up. Each start restocks the
 * reserve item (push_marker's fallback). A failed draw of the order leaves the
 * previous one (sampler.h), so it is fatal rather than a wrong epoch. */
static void begin_epoch(ferry_loader *l, epoch_run *run, int64_t epoch, uint64_t cursor, uint64_t batch) {
  run->generation = l->generation;
  run->epoch = epoch;
  run->next_start = cursor;
  run->next_batch = batch;
  run->exhausted = 0;
  run->retry_when_drained = 0;
  l->coord.epoch_skipped = 0;
  memset(run->failed, 0, l->sampler.per_rank);
  ferry__handoff_restock_reserve(l);
  if (ferry__sampler_set_epoch(&l->sampler, epoch) != FERRY_OK)
    fail_fatally(l, FERRY_ENOMEM, ferry_last_error());
  else if (l->source && l->source->plan_epoch && cursor < l->sampler.per_rank)
    l->source->plan_epoch(l->source, l->sampler.order + cursor, l->sampler.per_rank - (size_t)cursor);
}


/* Appended to the failure that ends an epoch: a user who would rather lose the sample
 * than the epoch learns that the loader can. */
#define SKIP_HINT " (config.on_error = FERRY_ON_ERROR_SKIP skips failed samples instead)"

/* A slot that failed only because the GPU decoder's layout was wrong for it (the
 * sample goes to the CPU; gpu_fill.c recorded it): laid out again, never skipped. */
static int rerouted(const ferry_loader *l, ferry_status st) {
  return st == FERRY_EAGAIN && l->fill.gpu.api;
}

/* The head plan has failed samples: under the skip policy, forget them and lay the
 * rest out again; else end the epoch with the first failure. Samples to be laid out
 * again for the CPU decoder are neither: a plan with only those is laid out again
 * under either policy. */
static void learn_from_failures(ferry_loader *l, epoch_run *run) {
  ferry__plan *head = l->hand.inflight_head;
  /* Skip (or only reroutes, under either policy): the failed positions are marked for
   * the rest of the epoch, and the head and everything behind it (laid out on the
   * assumption that they would succeed) are laid out again from the head's start. The
   * batches before it were delivered already and stay as they were, so batch k
   * depends on which samples fail, never on when. */
  size_t reroutes = 0;
  for (size_t i = 0; i < head->count; i++) reroutes += rerouted(l, head->status[i]);
  if (l->config.on_error == FERRY_ON_ERROR_SKIP || reroutes == head->failures) {
    for (size_t i = 0; i < head->count; i++)
      if (head->status[i] != FERRY_OK && !rerouted(l, head->status[i])) {
        run->failed[head->position[i]] = 1;
        l->coord.epoch_skipped++;
        l->stats.samples_skipped++;
      }
    run->next_start = head->start;
    run->next_batch = head->batch_index;
    run->exhausted = 0;
    l->stats.replans++;
    cancel_inflight(l);
    return;
  }
  /* Fail: the first real failure in slot order, not the first to happen, so the
   * message does not depend on timing. The message is cut so that the hint always
   * fits. */
  size_t bad = 0;
  while (head->status[bad] == FERRY_OK || rerouted(l, head->status[bad])) bad++;
  char message[FERRY_ERROR_MAX];
  snprintf(message, sizeof message, "%.*s%s", (int)(sizeof message - sizeof SKIP_HINT),
           head->message[bad], SKIP_HINT);
  ferry_status status = head->status[bad];
  cancel_inflight(l);
  push_marker(l, run, ITEM_ERROR, status, message);
  begin_epoch(l, run, run->epoch + 1, 0, 0);
}

/* The head plan is complete: hand it out, or learn from its failures. */
static void commit_head(ferry_loader *l, epoch_run *run) {
  if (l->hand.inflight_head->failures) learn_from_failures(l, run);
  else ferry__handoff_deliver_head(l);
}


/* A plan to lay out, with the item it will be delivered in: a spare one, or a new
 * one made without the lock. NULL when out of memory. Called and returns with the
 * lock held; a new plan's allocations (batch_size entries each) are made without
 * it, so workers recording results do not wait on them. */
static ferry__plan *plan_get(ferry_loader *l) {
  ferry__plan *p = ferry__handoff_plan_spare(l);
  if (!p) {
    ferry__loader_unlock(l);
    p = ferry__handoff_plan_new(l->config.batch_size, l->nfields);
    pthread_mutex_lock(&l->lock);
    if (!p) return NULL;
  }
  if (!p->item) p->item = ferry__handoff_item_get(l);
  if (!p->item) {
    ferry__handoff_plan_put(l, p);
    return NULL;
  }
  return p;
}

/* Queue a laid-out plan behind the others and hand its slots to the workers. */
static void append_plan(ferry_loader *l, epoch_run *run, ferry__plan *p) {
  ferry__handoff_append(l, p);
  run->next_start = p->end;
  run->next_batch = p->batch_index + 1;
  ferry__loader_dispatch(l, p);
}

/* Lay out one more plan if the pipeline has room. 1 if it did something. The depth
 * (prefetch) bounds plans in flight plus batches ready; `arenas` bounds every batch
 * that exists, the consumer's included, which is what makes a slow consumer stop
 * the planning rather than have more batches made. */
static int plan_ahead(ferry_loader *l, epoch_run *run) {
  const ferry__handoff *h = &l->hand;
  if (run->exhausted || h->inflight + h->ready >= l->prefetch || h->outstanding >= l->arenas ||
      (run->retry_when_drained && h->inflight_head))
    return 0;
  run->retry_when_drained = 0;
  ferry__handoff_layout_begin(l);
  ferry__plan *p = plan_get(l);
  ferry_status st = FERRY_ENOMEM;
  char message[FERRY_ERROR_MAX] = "loader: out of memory laying out a batch";
  if (p) {
    /* Unlocked: plan_create may wait for an arena. It reads only what the coordinator
     * alone writes (run, the sampler), what is fixed at open, and the GPU decoder's
     * route bytes (atomics). The message is copied on this thread, where
     * ferry_last_error holds it. */
    ferry__loader_unlock(l);
    st = plan_create(l, run, p);
    if (st != FERRY_OK && st != FERRY_EEND) memcpy(message, ferry_last_error(), sizeof message);
    pthread_mutex_lock(&l->lock);
  }
  ferry__handoff_layout_end(l, st == FERRY_OK);
  if (st != FERRY_OK) {
    if (p) ferry__handoff_plan_put(l, p);
    /* EEND: nothing more to lay out this epoch; the end is queued once the plans in
     * flight are committed (the main loop). An error of a dropped generation, or of
     * a close (the pool was cancelled), is nobody's to report. Any other error
     * belongs after the batches laid out before this one: while some are in flight
     * the layout is tried again once they are delivered (memory may have come back
     * meanwhile); only with none left does the error end the epoch, in order. */
    if (st == FERRY_EEND) run->exhausted = 1;
    else if (!l->stopping && run->generation == l->generation && h->inflight_head) {
      run->retry_when_drained = 1;
    } else if (!l->stopping && run->generation == l->generation) {
      push_marker(l, run, ITEM_ERROR, st, message);
      begin_epoch(l, run, run->epoch + 1, 0, 0);
    }
    return 1;
  }
  /* A restart or a close came while the lock was let go: the plan is of a dropped
   * generation, and the main loop will begin the new one. */
  if (l->stopping || run->generation != l->generation) {
    ferry__handoff_discard(l, p->batch);
    ferry__handoff_plan_put(l, p);
    return 1;
  }
  append_plan(l, run, p);
  return 1;
}


static void *coordinate(void *arg) {
  ferry_loader *l = arg;
  epoch_run run = {0};
  run.failed = ferry__calloc(l->sampler.per_rank, 1);
  pthread_mutex_lock(&l->lock);
  /* restart_epoch and restart_cursor are 0 at open, unless set_epoch or state_set
   * came before this thread took the lock. */
  if (run.failed) begin_epoch(l, &run, l->coord.restart_epoch, l->coord.restart_cursor, l->coord.restart_batch);
  else fail_fatally(l, FERRY_ENOMEM, "loader: out of memory for the epoch's bookkeeping");
  /* One step per turn, most urgent first: a restart voids everything in flight; a
   * complete head is settled before planning further, since under the skip policy its
   * failures cancel every plan behind it; then planning ahead; then the end of the
   * epoch, once nothing is left in flight. Each step may have let go of the lock, so
   * the loop looks again from the top after it. */
  while (!l->stopping && !l->coord.failed) {
    if (run.generation != l->generation) {
      l->stats.batches_dropped += l->hand.inflight; /* a restart: what was laid out ahead goes */
      cancel_inflight(l);
      l->stats.batches_dropped += ferry__handoff_drop_stale(l, l->generation);
      begin_epoch(l, &run, l->coord.restart_epoch, l->coord.restart_cursor, l->coord.restart_batch);
      continue;
    }
    if (l->hand.inflight_head && l->hand.inflight_head->pending == 0) {
      commit_head(l, &run);
      continue;
    }
    if (plan_ahead(l, &run)) continue;
    if (!l->hand.inflight_head && run.exhausted) {
      push_marker(l, &run, ITEM_END, FERRY_EEND, NULL);
      begin_epoch(l, &run, run.epoch + 1, 0, 0);
      continue;
    }
    /* Idle: woken by a worker (a head needing it, a cancelled plan done), by a
     * restart or by close, and by what it waits for: with the epoch's samples all
     * laid out (or a layout to retry), the last plan in flight delivered
     * (handoff.c deliver_head); else a quarter of the depth free (by a worker
     * finishing a slot, or by the consumer when none is in flight: room_freed).
     * A layout to retry finds room once drained: it had room when it failed, and
     * meanwhile only the consumer changes `ready` and `outstanding`, downward. */
    ferry__handoff_coordinator_idle(l, run.exhausted || run.retry_when_drained);
    ferry__loader_wait(l, &l->coord_cv, &l->stats.coordinator_idle_cpu_ns);
    ferry__handoff_coordinator_busy(l);
  }
  /* Stopping: nothing in flight or ready survives the thread. The batches the
   * consumer still holds are released by close (ferry__handoff_close); the workers, still running,
   * find no plan left to claim. */
  cancel_inflight(l);
  ferry__handoff_drop_stale(l, UINT64_MAX);
  ferry__handoff_free_spare_plans(l);
  ferry__loader_unlock(l);
  ferry__free(run.failed);
  ferry__free(run.boxes);
  ferry__free(run.keep);
  return NULL;
}

ferry_status ferry__coordinator_start(ferry_loader *l) {
  if (ferry__thread_start(&l->coord.thread, coordinate, l, "ferry-coord", SIZE_MAX) != 0)
    return ferry__fail(FERRY_ENOMEM, "loader: could not start the coordinator thread (out of threads or memory)");
  l->coord.started = 1;
  return FERRY_OK;
}

void ferry__coordinator_join(ferry_loader *l) {
  if (l->coord.started) pthread_join(l->coord.thread, NULL);
  l->coord.started = 0;
}

/* The new generation voids every plan and ready item at once (the coordinator cancels
 * and drops them when it wakes). The wake-up is owed like any other. */
void ferry__coordinator_restart(ferry_loader *l, int64_t epoch, uint64_t cursor, uint64_t batch) {
  l->generation++;
  l->coord.restart_epoch = epoch;
  l->coord.restart_cursor = cursor;
  l->coord.restart_batch = batch;
  ferry__loader_owe_coord(l);
}

/* stopping and a new generation make the consumer and the coordinator give up. */
void ferry__coordinator_stop(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  l->stopping = 1;
  l->generation++;
  ferry__cond_wake(&l->coord_cv);
  ferry__cond_wake(&l->ready_cv);
  ferry__loader_unlock(l);
}
