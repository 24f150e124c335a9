/* loaders/coordinator.c - lays batches out ahead of the consumer and commits them
 * in order (see loader_internal.h for the plan protocol). */
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "loaders/loader_internal.h"

/* Per-epoch bookkeeping that only the coordinator touches. */
typedef struct epoch_run {
  uint64_t generation;
  int64_t epoch;
  uint64_t next_start;   /* where the next plan begins */
  int exhausted;         /* no sample left after next_start */
  uint8_t *failed;       /* [per_rank]: positions known to fail (skip policy) */
  uint64_t skipped;
} epoch_run;

static void plan_free(plan *p) {
  if (!p) return;
  ferry_free(p->dataset_index);
  ferry_free(p->position);
  ferry_free(p->status);
  ferry_free(p->message);
  ferry_free(p->tasks);
  ferry_free(p->item);
  ferry_free(p);
}

/* Give a batch back on the coordinator's side, without the consumer's hook. */
static void discard_batch(ferry_loader *l, ferry_batch *b) {
  ferry_batch_set_release_hook(b, NULL, NULL);
  ferry_batch_release(b);
  l->outstanding--;
  pthread_cond_broadcast(&l->changed);
}

static ferry_status plan_alloc(plan *p, size_t n) {
  p->dataset_index = ferry_calloc(n, sizeof *p->dataset_index);
  p->position = ferry_calloc(n, sizeof *p->position);
  p->status = ferry_calloc(n, sizeof *p->status);
  p->message = ferry_calloc(n, sizeof *p->message);
  p->tasks = ferry_calloc(n, sizeof *p->tasks);
  p->item = ferry_calloc(1, sizeof *p->item);
  if (!p->dataset_index || !p->position || !p->status || !p->message || !p->tasks || !p->item)
    return ferry_fail(FERRY_ENOMEM, "loader: out of memory laying out a batch");
  return FERRY_OK;
}

/* Choose the samples of the batch starting at run->next_start, lay it out and
 * take its memory. FERRY_EEND when no (complete enough) batch is left. Called
 * without the lock: it may block in the pool. */
static ferry_status plan_create(ferry_loader *l, const epoch_run *run, plan **out) {
  const ferry_sampler *s = &l->sampler;
  size_t B = l->config.batch_size;
  plan *p = ferry_calloc(1, sizeof *p);
  if (!p || plan_alloc(p, B) != FERRY_OK) {
    plan_free(p);
    return ferry_fail(FERRY_ENOMEM, "loader: out of memory laying out a batch");
  }
  uint64_t pos = run->next_start;
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
  if (p->count == 0 || (p->count < B && l->config.drop_last)) {
    plan_free(p);
    return FERRY_EEND;
  }
  int64_t *rows = ferry_calloc(l->nfields * p->count, sizeof *rows);
  if (!rows) {
    plan_free(p);
    return ferry_fail(FERRY_ENOMEM, "loader: out of memory for row counts");
  }
  for (size_t f = 0; f < l->nfields; f++)
    for (size_t i = 0; i < p->count; i++) rows[f * p->count + i] = l->instances[p->dataset_index[i]];
  ferry_status st = l->pool ? ferry_batch_create(l->pool, p->count, l->nfields, l->fields, rows, &p->batch)
                            : ferry_batch_create_unpacked(l->device, p->count, l->nfields, l->fields, rows, &p->batch);
  ferry_free(rows);
  if (st != FERRY_OK) {
    plan_free(p);
    return st;
  }
  ferry_batch_set_release_hook(p->batch, ferry_loader_release_hook, l);
  *out = p;
  return FERRY_OK;
}

static void push_item(ferry_loader *l, ready_item *item) {
  item->next = NULL;
  if (l->ready_tail) l->ready_tail->next = item;
  else l->ready_head = item;
  l->ready_tail = item;
  l->ready++;
  pthread_cond_broadcast(&l->changed);
}

/* The coordinator cannot go on (out of memory for its own bookkeeping): every later
 * ferry_loader_next returns this status and message instead of waiting forever. */
static void fail_fatally(ferry_loader *l, ferry_status status, const char *message) {
  l->coordinator_failed = 1;
  l->fatal_status = status;
  snprintf(l->fatal_message, sizeof l->fatal_message, "%s", message);
  pthread_cond_broadcast(&l->changed);
}

/* An end-of-epoch or error item. Without memory for it the consumer would wait
 * forever, so the coordinator keeps one in reserve (see begin_epoch). */
static void push_marker(ferry_loader *l, epoch_run *run, item_kind kind, ferry_status status,
                        const char *message) {
  ready_item *item = ferry_calloc(1, sizeof *item);
  if (!item) {
    item = l->spare_item;
    l->spare_item = NULL;
  }
  if (!item) {
    fail_fatally(l, FERRY_ENOMEM, "loader: out of memory ending an epoch");
    return;
  }
  memset(item, 0, sizeof *item);
  item->kind = kind;
  item->generation = run->generation;
  item->epoch = run->epoch;
  item->status = status;
  item->skipped = run->skipped;
  item->message = message ? ferry_strdup(message) : NULL;
  push_item(l, item);
}

/* Cancel every plan in flight, wait for their workers, give their memory back. */
static void cancel_inflight(ferry_loader *l) {
  for (plan *p = l->inflight_head; p; p = p->next) p->canceled = 1;
  for (plan *p = l->inflight_head; p; p = p->next)
    while (p->pending) pthread_cond_wait(&l->changed, &l->lock);
  while (l->inflight_head) {
    plan *p = l->inflight_head;
    l->inflight_head = p->next;
    discard_batch(l, p->batch);
    plan_free(p);
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
    ferry_free(item->message);
    ferry_free(item);
    l->ready--;
  }
}

static void begin_epoch(ferry_loader *l, epoch_run *run, int64_t epoch, uint64_t cursor) {
  run->generation = l->generation;
  run->epoch = epoch;
  run->next_start = cursor;
  run->exhausted = 0;
  run->skipped = 0;
  memset(run->failed, 0, l->sampler.per_rank);
  if (!l->spare_item) l->spare_item = ferry_calloc(1, sizeof *l->spare_item);
  if (ferry_sampler_set_epoch(&l->sampler, epoch) != FERRY_OK)
    fail_fatally(l, FERRY_ENOMEM, ferry_last_error());
}

/* The head plan is complete: hand it out, or learn from its failures. */
static void commit_head(ferry_loader *l, epoch_run *run) {
  plan *head = l->inflight_head;
  size_t bad = head->count;
  for (size_t i = 0; i < head->count && bad == head->count; i++)
    if (head->status[i] != FERRY_OK) bad = i;
  if (bad == head->count) {
    l->inflight_head = head->next;
    if (!l->inflight_head) l->inflight_tail = NULL;
    l->inflight--;
    ready_item *item = head->item;
    head->item = NULL;
    item->kind = ITEM_BATCH;
    item->generation = head->generation;
    item->epoch = head->epoch;
    item->cursor_after = head->end;
    item->count = head->count;
    item->skipped = run->skipped;
    item->batch = head->batch;
    plan_free(head);
    push_item(l, item);
    return;
  }
  if (l->config.on_error == FERRY_ON_ERROR_SKIP) {
    for (size_t i = 0; i < head->count; i++)
      if (head->status[i] != FERRY_OK) {
        run->failed[head->position[i]] = 1;
        run->skipped++;
        l->stats.samples_skipped++;
      }
    run->next_start = head->start;
    run->exhausted = 0;
    l->stats.replans++;
    cancel_inflight(l);
    return;
  }
  char message[FERRY_ERROR_MAX];
  memcpy(message, head->message[bad], sizeof message);
  ferry_status status = head->status[bad];
  cancel_inflight(l);
  push_marker(l, run, ITEM_ERROR, status, message);
  begin_epoch(l, run, run->epoch + 1, 0);
}

/* Lay out one more plan if the pipeline has room. 1 if it did something. */
static int plan_ahead(ferry_loader *l, epoch_run *run) {
  if (run->exhausted || l->inflight + l->ready >= l->config.prefetch || l->outstanding >= l->arenas)
    return 0;
  l->outstanding++; /* reserved before blocking, so the count never overshoots */
  pthread_mutex_unlock(&l->lock);
  plan *p = NULL;
  ferry_status st = plan_create(l, run, &p);
  char message[FERRY_ERROR_MAX];
  if (st != FERRY_OK && st != FERRY_EEND) memcpy(message, ferry_last_error(), sizeof message);
  pthread_mutex_lock(&l->lock);
  if (st != FERRY_OK) {
    l->outstanding--;
    pthread_cond_broadcast(&l->changed);
    if (st == FERRY_EEND) run->exhausted = 1;
    else if (!l->stopping && run->generation == l->generation) {
      push_marker(l, run, ITEM_ERROR, st, message);
      begin_epoch(l, run, run->epoch + 1, 0);
    }
    return 1;
  }
  if (l->stopping || run->generation != l->generation) {
    discard_batch(l, p->batch);
    plan_free(p);
    return 1;
  }
  if (l->inflight_tail) l->inflight_tail->next = p;
  else l->inflight_head = p;
  l->inflight_tail = p;
  l->inflight++;
  run->next_start = p->end;
  ferry_loader_dispatch(l, p);
  return 1;
}

void *ferry_loader_coordinate(void *arg) {
  ferry_loader *l = arg;
  epoch_run run = {0};
  run.failed = ferry_calloc(l->sampler.per_rank, 1);
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
    pthread_cond_wait(&l->changed, &l->lock);
  }
  cancel_inflight(l);
  drop_stale_items(l, UINT64_MAX);
  pthread_mutex_unlock(&l->lock);
  ferry_free(run.failed);
  return NULL;
}
