/* loaders/workers.c - the threads that fill samples, one decoder each. */
#include <stdio.h>
#include "lib/alloc.h"
#include "loaders/loader_internal.h"

void ferry_loader_dispatch(ferry_loader *l, plan *p) {
  for (size_t i = 0; i < p->count; i++) {
    task *t = &p->tasks[i];
    t->owner = p;
    t->slot = i;
    t->next = NULL;
    if (l->queue_tail) l->queue_tail->next = t;
    else l->queue_head = t;
    l->queue_tail = t;
  }
  p->pending = p->count;
  pthread_cond_broadcast(&l->changed);
}

/* Take the next task, or NULL once the workers are told to stop. */
static task *take_task(ferry_loader *l) {
  while (!l->queue_head && !l->workers_stop) pthread_cond_wait(&l->changed, &l->lock);
  task *t = l->queue_head;
  if (t) {
    l->queue_head = t->next;
    if (!l->queue_head) l->queue_tail = NULL;
  }
  return t;
}

static void run_task(ferry_loader *l, ferry_decoder *decoder, task *t) {
  plan *p = t->owner;
  size_t slot = t->slot;
  ferry_status st = FERRY_ECANCELED;
  if (!p->canceled) { /* read under the lock by the caller's protocol: see worker_main */
    pthread_mutex_unlock(&l->lock);
    st = ferry_loader_fill_sample(&l->fill, decoder, p->batch, slot, p->dataset_index[slot]);
    if (st != FERRY_OK) snprintf(p->message[slot], FERRY_ERROR_MAX, "%s", ferry_last_error());
    pthread_mutex_lock(&l->lock);
    l->stats.samples_decoded++;
  }
  p->status[slot] = st;
  if (--p->pending == 0) pthread_cond_broadcast(&l->changed);
}

static void *worker_main(void *arg) {
  ferry_loader *l = arg;
  ferry_decoder *decoder = NULL;
  ferry_status open_status = ferry_decoder_open(&decoder);
  pthread_mutex_lock(&l->lock);
  for (task *t; (t = take_task(l));) {
    if (open_status != FERRY_OK) {
      /* Without a decoder every sample fails, with the reason. */
      plan *p = t->owner;
      p->status[t->slot] = open_status;
      snprintf(p->message[t->slot], FERRY_ERROR_MAX, "worker: %s", ferry_last_error());
      if (--p->pending == 0) pthread_cond_broadcast(&l->changed);
      continue;
    }
    run_task(l, decoder, t);
  }
  pthread_mutex_unlock(&l->lock);
  ferry_decoder_close(decoder);
  return NULL;
}

ferry_status ferry_loader_start_workers(ferry_loader *l, size_t count) {
  l->worker_threads = ferry_calloc(count, sizeof *l->worker_threads);
  if (!l->worker_threads) return ferry_fail(FERRY_ENOMEM, "loader: out of memory for %zu workers", count);
  l->nworkers = count;
  for (size_t i = 0; i < count; i++) {
    if (pthread_create(&l->worker_threads[i], NULL, worker_main, l) != 0)
      return ferry_fail(FERRY_ENOMEM, "loader: could not start worker %zu of %zu (out of threads or memory)",
                        i + 1, count);
    l->workers_started++;
  }
  return FERRY_OK;
}

void ferry_loader_stop_workers(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  l->workers_stop = 1;
  pthread_cond_broadcast(&l->changed);
  pthread_mutex_unlock(&l->lock);
  for (size_t i = 0; i < l->workers_started; i++) pthread_join(l->worker_threads[i], NULL);
  l->workers_started = 0;
  ferry_free(l->worker_threads);
  l->worker_threads = NULL;
}
