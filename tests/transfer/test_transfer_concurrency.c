/* Several threads transferring on one device, each on its own stream; the device's
 * lazy initialisation runs once however many threads race on it. Run under TSan.
 * The workers check their results with the fixtures' assertions: a failure there
 * ends the test process from a worker thread, which both Criterion and the TSan
 * harness report as a failure. */
#include <pthread.h>
#include <stdatomic.h>

#include "fixtures.h"
#include "ferry/advanced.h"

typedef struct worker {
  ferry_device *device;
  ferry_pool *pool;
  pthread_barrier_t *start;
  int id;
  int ok_batches;
} worker;

enum { ROUNDS = 12 };

static void *transfer_rounds(void *arg) {
  worker *w = arg;
  ferry_stream *stream = NULL;
  pthread_barrier_wait(w->start);
  if (ferry_stream_open(w->device, &stream) != FERRY_OK) return NULL;
  for (int round = 0; round < ROUNDS; round++) {
    int64_t counts[5];
    for (int i = 0; i < 5; i++) counts[i] = (w->id * 7 + round * 3 + i * 5) % 9;
    ferry_batch *b = make_packed(w->pool, 5, counts, (uint64_t)(w->id * 1000 + round));
    snapshot s;
    snapshot_take(&s, b, stream);
    ferry__transfer_path path = round % 3 == 2 ? FERRY__PACKED_THEN_CLONE : FERRY__DIRECT;
    ferry_device_batch *db = NULL;
    ferry_status st = ferry__transfer_by(path, w->device, stream, b, NULL, &db);
    ferry_batch_release(b); /* at once: another thread may get the arena next */
    if (st == FERRY_OK && ferry_device_batch_wait(db) == FERRY_OK) {
      expect_equal_to_snapshot(db, &s, stream);
      w->ok_batches++;
    }
    snapshot_free(&s);
    ferry_device_batch_free(db);
  }
  ferry_stream_close(stream);
  return NULL;
}

static void four_threads_transfer_on_one_device(const char *name) {
  ferry_device *d = open_device(name);
  ferry_pool *pool = NULL;
  cr_assert_eq(ferry_pool_open(d, 3, 0, &pool), FERRY_OK); /* fewer arenas than threads */
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 4);
  worker workers[4];
  pthread_t threads[4];
  for (int i = 0; i < 4; i++) {
    workers[i] = (worker){.device = d, .pool = pool, .start = &start, .id = i};
    pthread_create(&threads[i], NULL, transfer_rounds, &workers[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < 4; i++) cr_assert_eq(workers[i].ok_batches, ROUNDS, "thread %d", i);
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  cr_assert_eq(s.initializations, 1);
  cr_assert_eq(s.live_bytes, 0);
  ferry_pool_close(pool);
  ferry_device_close(d);
}
ON_EVERY_BACKEND(concurrency, four_threads_transfer_on_one_device,
                 four_threads_transfer_on_one_device)

typedef struct initer {
  ferry_device *device;
  pthread_barrier_t *start;
  ferry_status status;
  uint64_t initializations_seen;
} initer;

static void *init_device(void *arg) {
  initer *t = arg;
  pthread_barrier_wait(t->start);
  t->status = ferry_device_init(t->device);
  /* Whoever returns must find the device initialised. */
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  ferry_device_memory_stats(t->device, &s);
  t->initializations_seen = s.initializations;
  return NULL;
}

static void eight_threads_race_on_lazy_init(const char *name) {
  ferry_device *d = open_device(name);
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  cr_assert_eq(s.initializations, 0, "open does not initialise");
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 8);
  initer initers[8];
  pthread_t threads[8];
  for (int i = 0; i < 8; i++) {
    initers[i] = (initer){.device = d, .start = &start};
    pthread_create(&threads[i], NULL, init_device, &initers[i]);
  }
  for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < 8; i++) {
    cr_assert_eq(initers[i].status, FERRY_OK);
    cr_assert_eq(initers[i].initializations_seen, 1, "thread %d returned before init completed", i);
  }
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  cr_assert_eq(s.initializations, 1);
  ferry_device_close(d);
}
ON_EVERY_BACKEND(concurrency, eight_threads_race_on_lazy_init, eight_threads_race_on_lazy_init)
