/* loaders/coordinator.c - lays batches out ahead of the consumer and commits them
 * in order (see loader_internal.h for the plan protocol).
 *
 * Invariants: plans in flight are in cursor order and contiguous (each starts where
 * the previous one ended); only the head plan is ever committed; at most
 * `prefetch` plans are in flight or ready, and at most `arenas` batches exist; a
 * plan's memory goes back to the spare list only once no worker can touch it
 * (pending == 0). Everything here runs on the coordinator thread with the lock held,
 * except plan_create, which may block in the pool and runs without it.
 */
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/thread.h"
#include "loaders/loader_internal.h"
#include "ferry/advanced.h"

/* Per-epoch bookkeeping that only the coordinator touches. */
typedef struct epoch_run {
  uint64_t generation;
  int64_t epoch;
  uint64_t next_start;   /* where the next plan begins */
  int exhausted;         /* no sample left after next_start */
  uint8_t *failed;       /* [per_rank]: positions known to fail (skip policy) */
} epoch_run;

static void plan_free(plan *p) {
  if (!p) return;
  ferry__free(p->item);
  ferry__free(p->dataset_index);
  ferry__free(p->position);
  ferry__free(p->status);
  ferry__free(p->message);
  ferry__free(p->rows);
  ferry__free(p);
}

/* A plan with arrays for a full batch, NULL when out of memory. */
static plan *plan_new(size_t batch_size, size_t nfields) {
  plan *p = ferry__calloc(1, sizeof *p);
  if (!p) return NULL;
  p->dataset_index = ferry__calloc(batch_size, sizeof *p->dataset_index);
  p->position = ferry__calloc(batch_size, sizeof *p->position);
  p->status = ferry__calloc(batch_size, sizeof *p->status);
  p->message = ferry__calloc(batch_size, sizeof *p->message);
  p->rows = ferry__calloc(nfields * batch_size + 1, sizeof *p->rows);
  if (!p->dataset_index || !p->position || !p->status || !p->message || !p->rows) {
    plan_free(p);
    return NULL;
  }
  return p;
}


/* Give a batch back on the coordinator's side, without the consumer's hook. */
static void discard_batch(ferry_loader *l, ferry_batch *b) {
  ferry_batch_set_release_hook(b, NULL, NULL);
  ferry_batch_release(b);
  l->outstanding--;
}

/* Choose the samples of the batch starting at run->next_start, lay it out in `p`
 * and take its memory. FERRY_EEND when no (complete enough) batch is left. Called
 * without the lock: it may block in the pool. */
static ferry_status plan_create(ferry_loader *l, const epoch_run *run, plan *p) {
  const ferry_sampler *s = &l->sampler;
  size_t B = l->config.batch_size;
  uint64_t pos = run->next_start;
  p->count = 0;
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
  if (p->count == 0 || (p->count < B && l->config.drop_last)) return FERRY_EEND;
  for (size_t f = 0; f < l->nfields; f++)
    for (size_t i = 0; i < p->count; i++) p->rows[f * p->count + i] = l->instances[p->dataset_index[i]];
  ferry_status st = l->pool ? ferry_batch_create(l->pool, p->count, l->nfields, l->fields, p->rows, &p->batch)
                            : ferry_batch_create_unpacked(l->device, p->count, l->nfields, l->fields, p->rows, &p->batch);
  if (st != FERRY_OK) return st;
  ferry_batch_set_release_hook(p->batch, ferry__loader_release_hook, l);
  return FERRY_OK;
}


/* The coordinator cannot go on (out of memory for its own bookkeeping): every later
 * ferry_loader_next returns this status and message instead of waiting forever. */
static void fail_fatally(ferry_loader *l, ferry_status status, const char *message) {
  l->coordinator_failed = 1;
  l->fatal_status = status;
  snprintf(l->fatal_message, sizeof l->fatal_message, "%s", message);
  pthread_cond_broadcast(&l->ready_cv);
}

/* An end-of-epoch or error item. Without memory for it the consumer would wait
 * forever, so the spare list keeps one in reserve (see begin_epoch). */
static void push_marker(ferry_loader *l, epoch_run *run, item_kind kind, ferry_status status,
                        const char *message) {
  ready_item *item = ferry__loader_item_get(l);
  if (!item) {
    item = l->reserve_item;
    l->reserve_item = NULL;
  }
  if (!item) {
    fail_fatally(l, FERRY_ENOMEM, "loader: out of memory ending an epoch");
    return;
  }
  item->kind = kind;
  item->generation = run->generation;
  item->epoch = run->epoch;
  item->status = status;
  item->skipped = l->epoch_skipped;
  item->message = message ? ferry__strdup(message) : NULL;
  ferry__loader_push_item(l, item);
}

/* Cancel every plan in flight, wait for the slots workers already hold, give the
 * memory back. */
static void cancel_inflight(ferry_loader *l) {
  for (plan *p = l->inflight_head; p; p = p->next) {
    p->canceled = 1;
    ferry__loader_withdraw(l, p);
  }
  for (plan *p = l->inflight_head; p; p = p->next)
    while (p->pending) ferry__loader_wait(&l->coord_cv, &l->lock, &l->stats.coordinator_idle_cpu_ns);
  while (l->inflight_head) {
    plan *p = l->inflight_head;
    l->inflight_head = p->next;
    discard_batch(l, p->batch);
    ferry__loader_plan_put(l, p);
  }
  l->inflight_tail = NULL;
  l->inflight = 0;
}

/* Drop ready items from an older generation (after set_epoch, state_set, close). */
static void drop_stale_items(ferry_loader *l, uint64_t generation) {
  ready_item **link = &l->ready_head;
  l->ready_tail = NULL;
  while (*link) {
    ready_item *item = *link;
    if (item->generation == generation) {
      l->ready_tail = item;
      link = &item->next;
      continue;
    }
    *link = item->next;
    if (item->batch) discard_batch(l, item->batch);
    ferry__loader_item_put(l, item);
    l->ready--;
  }
}

static void begin_epoch(ferry_loader *l, epoch_run *run, int64_t epoch, uint64_t cursor) {
  run->generation = l->generation;
  run->epoch = epoch;
  run->next_start = cursor;
  run->exhausted = 0;
  l->epoch_skipped = 0;
  memset(run->failed, 0, l->sampler.per_rank);
  if (!l->reserve_item) l->reserve_item = ferry__calloc(1, sizeof *l->reserve_item);
  if (ferry__sampler_set_epoch(&l->sampler, epoch) != FERRY_OK)
    fail_fatally(l, FERRY_ENOMEM, ferry_last_error());
}


/* Appended to the failure that ends an epoch: a user who would rather lose the sample
 * than the epoch learns that the loader can. */
#define SKIP_HINT " (config.on_error = FERRY_ON_ERROR_SKIP skips failed samples instead)"

/* The head plan has failed samples: under the skip policy, forget them and lay the
 * rest out again; else end the epoch with the first failure. */
static void learn_from_failures(ferry_loader *l, epoch_run *run) {
  plan *head = l->inflight_head;
  if (l->config.on_error == FERRY_ON_ERROR_SKIP) {
    for (size_t i = 0; i < head->count; i++)
      if (head->status[i] != FERRY_OK) {
        run->failed[head->position[i]] = 1;
        l->epoch_skipped++;
        l->stats.samples_skipped++;
      }
    run->next_start = head->start;
    run->exhausted = 0;
    l->stats.replans++;
    cancel_inflight(l);
    return;
  }
  size_t bad = 0;
  while (head->status[bad] == FERRY_OK) bad++;
  char message[FERRY_ERROR_MAX];
  snprintf(message, sizeof message, "%.*s%s", (int)(sizeof message - sizeof SKIP_HINT),
           head->message[bad], SKIP_HINT);
  ferry_status status = head->status[bad];
  cancel_inflight(l);
  push_marker(l, run, ITEM_ERROR, status, message);
  begin_epoch(l, run, run->epoch + 1, 0);
}

/* The head plan is complete: hand it out, or learn from its failures. */
static void commit_head(ferry_loader *l, epoch_run *run) {
  if (l->inflight_head->failures) learn_from_failures(l, run);
  else ferry__loader_deliver_head(l);
}


/* A plan to lay out, with the item it will be delivered in: a spare one, or a new
 * one made without the lock. NULL when out of memory. */
static plan *plan_get(ferry_loader *l) {
  plan *p = l->spare_plans;
  if (p) {
    l->spare_plans = p->next;
    p->next = NULL;
  } else {
    pthread_mutex_unlock(&l->lock);
    p = plan_new(l->config.batch_size, l->nfields);
    pthread_mutex_lock(&l->lock);
    if (!p) return NULL;
  }
  if (!p->item) p->item = ferry__loader_item_get(l);
  if (!p->item) {
    ferry__loader_plan_put(l, p);
    return NULL;
  }
  return p;
}

/* Queue a laid-out plan behind the others and hand its slots to the workers. */
static void append_plan(ferry_loader *l, epoch_run *run, plan *p) {
  p->next = NULL;
  if (l->inflight_tail) l->inflight_tail->next = p;
  else l->inflight_head = p;
  l->inflight_tail = p;
  l->inflight++;
  run->next_start = p->end;
  ferry__loader_dispatch(l, p);
}

/* Lay out one more plan if the pipeline has room. 1 if it did something. */
static int plan_ahead(ferry_loader *l, epoch_run *run) {
  if (run->exhausted || l->inflight + l->ready >= l->prefetch || l->outstanding >= l->arenas)
    return 0;
  l->outstanding++; /* reserved before blocking, so the count never overshoots */
  plan *p = plan_get(l);
  ferry_status st = FERRY_ENOMEM;
  char message[FERRY_ERROR_MAX] = "loader: out of memory laying out a batch";
  if (p) {
    pthread_mutex_unlock(&l->lock);
    st = plan_create(l, run, p);
    if (st != FERRY_OK && st != FERRY_EEND) memcpy(message, ferry_last_error(), sizeof message);
    pthread_mutex_lock(&l->lock);
  }
  if (st != FERRY_OK) {
    if (p) ferry__loader_plan_put(l, p);
    l->outstanding--;
    if (st == FERRY_EEND) run->exhausted = 1;
    else if (!l->stopping && run->generation == l->generation) {
      push_marker(l, run, ITEM_ERROR, st, message);
      begin_epoch(l, run, run->epoch + 1, 0);
    }
    return 1;
  }
  if (l->stopping || run->generation != l->generation) {
    discard_batch(l, p->batch);
    ferry__loader_plan_put(l, p);
    return 1;
  }
  append_plan(l, run, p);
  return 1;
}


void *ferry__loader_coordinate(void *arg) {
  ferry_loader *l = arg;
  ferry__thread_name("ferry-coord", SIZE_MAX);
  epoch_run run = {0};
  run.failed = ferry__calloc(l->sampler.per_rank, 1);
  pthread_mutex_lock(&l->lock);
  if (run.failed) begin_epoch(l, &run, l->restart_epoch, l->restart_cursor);
  else fail_fatally(l, FERRY_ENOMEM, "loader: out of memory for the epoch's bookkeeping");
  while (!l->stopping && !l->coordinator_failed) {
    if (run.generation != l->generation) {
      cancel_inflight(l);
      drop_stale_items(l, l->generation);
      begin_epoch(l, &run, l->restart_epoch, l->restart_cursor);
      continue;
    }
    if (l->inflight_head && l->inflight_head->pending == 0) {
      commit_head(l, &run);
      continue;
    }
    if (plan_ahead(l, &run)) continue;
    if (!l->inflight_head && run.exhausted) {
      push_marker(l, &run, ITEM_END, FERRY_EEND, NULL);
      begin_epoch(l, &run, run.epoch + 1, 0);
      continue;
    }
    l->coordinator_idle = 1;
    ferry__loader_wait(&l->coord_cv, &l->lock, &l->stats.coordinator_idle_cpu_ns);
    l->coordinator_idle = 0;
  }
  cancel_inflight(l);
  drop_stale_items(l, UINT64_MAX);
  while (l->spare_plans) {
    plan *p = l->spare_plans;
    l->spare_plans = p->next;
    plan_free(p);
  }
  pthread_mutex_unlock(&l->lock);
  ferry__free(run.failed);
  return NULL;
}
