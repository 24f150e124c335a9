/* ferry_module: deferred device moves under a per-module lock, all or nothing. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "ferry/module.h"
#include "fixtures.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

enum { NTENSORS = 4 };
static const char *tensor_names[NTENSORS] = {"conv1.weight", "conv1.bias", "fc.weight", "empty"};

/* A module of four host tensors (one empty) with random contents; their checksums. */
static ferry_module *make_module(const char *name, ferry_device *host, uint64_t seed,
                                 uint64_t *sums) {
  ferry_module *m = NULL;
  cr_assert_eq(ferry_module_create(name, host, &m), FERRY_OK);
  int64_t shapes[NTENSORS][2] = {{64, 27}, {64, 1}, {1000, 64}, {0, 8}};
  uint64_t rng = seed;
  for (int i = 0; i < NTENSORS; i++) {
    ferry_tensor t;
    cr_assert_eq(ferry_tensor_alloc(&t, host, NULL, FERRY_F32, 2, shapes[i]), FERRY_OK);
    for (size_t k = 0; k < t.nbytes; k++) ((uint8_t *)t.data)[k] = (uint8_t)next_random(&rng);
    sums[i] = fnv1a(t.data, t.nbytes);
    cr_assert_eq(ferry_module_add(m, tensor_names[i], &t), FERRY_OK, "%s", ferry_last_error());
    cr_assert_null(t.data, "the module owns it now");
  }
  return m;
}

/* Every tensor on `device` with its original contents. */
static void expect_module_on(ferry_module *m, ferry_device *device, const uint64_t *sums) {
  cr_assert_eq(ferry_module_device(m), device);
  ferry_stream *s = NULL;
  cr_assert_eq(ferry_stream_open(device, &s), FERRY_OK);
  for (int i = 0; i < NTENSORS; i++) {
    ferry_tensor t;
    cr_assert_eq(ferry_module_get(m, tensor_names[i], &t), FERRY_OK);
    cr_assert_eq(t.device, device, "tensor %s is not on %s", tensor_names[i], ferry_device_name(device));
    uint8_t *bytes = read_back(s, &t);
    cr_assert_eq(fnv1a(bytes, t.nbytes), sums[i], "tensor %s changed", tensor_names[i]);
    free(bytes);
  }
  ferry_stream_close(s);
}

typedef struct observer {
  atomic_int moves_started;  /* calls with index 0 */
  atomic_int calls;
  double delay_s;            /* sleep at index 0 */
  atomic_int fail_next_at;   /* index to fail at once (-1: none) */
  atomic_int *rendezvous;    /* when set: announce, then wait for the partner */
  atomic_int *partner;
} observer;

static ferry_status observe(ferry_module *m, size_t index, const char *name,
                            ferry_device *device, void *user) {
  observer *o = user;
  atomic_fetch_add(&o->calls, 1);
  if (index == 0) {
    atomic_fetch_add(&o->moves_started, 1);
    if (o->rendezvous) {
      atomic_store(o->rendezvous, 1);
      double until = now_s() + 5.0;
      while (!atomic_load(o->partner) && now_s() < until) usleep(1000);
    }
    if (o->delay_s > 0) usleep((useconds_t)(o->delay_s * 1e6));
  }
  int fail_at = atomic_load(&o->fail_next_at);
  if ((int)index == fail_at && atomic_compare_exchange_strong(&o->fail_next_at, &fail_at, -1))
    return FERRY_EDEVICE;
  return FERRY_OK;
}

typedef struct racer {
  ferry_module *module;
  ferry_device *device;
  pthread_barrier_t *start;
  ferry_status status;
  double returned_at;
  uint64_t moves_seen; /* completed moves when ensure_on returned */
  int all_there;       /* every tensor on the device when ensure_on returned */
} racer;

static void *race(void *arg) {
  racer *r = arg;
  if (r->start) pthread_barrier_wait(r->start);
  r->status = ferry_module_ensure_on(r->module, r->device);
  r->returned_at = now_s();
  ferry_module_stats s;
  ferry_module_stats_get(r->module, &s);
  r->moves_seen = s.moves;
  r->all_there = 1;
  for (int i = 0; i < NTENSORS; i++) {
    ferry_tensor t;
    if (ferry_module_get(r->module, tensor_names[i], &t) != FERRY_OK || t.device != r->device)
      r->all_there = 0;
  }
  return NULL;
}

/* Host modules move between two host device objects; on CUDA, to the GPU. */
static void four_threads_race_on_a_cold_module(const char *target_name) {
  ferry_device *host = open_device("host"), *target = open_device(target_name);
  if (ferry_device_get_kind(target) == FERRY_DEVICE_HOST) {
    ferry_device_close(target);
    cr_assert_eq(ferry_device_open("host", &target), FERRY_OK);
  }
  uint64_t sums[NTENSORS];
  ferry_module *m = make_module("resnet", host, 7, sums);
  observer o = {.delay_s = 0.2};
  atomic_init(&o.fail_next_at, -1);
  ferry_module_set_move_observer(m, observe, &o);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 4);
  racer racers[5];
  pthread_t threads[4];
  double t0 = now_s();
  for (int i = 0; i < 4; i++) {
    racers[i] = (racer){.module = m, .device = target, .start = &start};
    pthread_create(&threads[i], NULL, race, &racers[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
  cr_assert_eq(atomic_load(&o.moves_started), 1, "exactly one move");
  cr_assert_eq(atomic_load(&o.calls), NTENSORS);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(racers[i].status, FERRY_OK);
    cr_assert_eq(racers[i].moves_seen, 1, "thread %d returned before the move completed", i);
    cr_assert(racers[i].all_there, "thread %d saw a half-moved module", i);
    cr_assert_geq(racers[i].returned_at - t0, 0.19, "thread %d did not wait for the move", i);
  }
  /* A fifth, later caller finds the module there and returns at once. */
  racers[4] = (racer){.module = m, .device = target};
  double t1 = now_s();
  race(&racers[4]);
  cr_assert_eq(racers[4].status, FERRY_OK);
  cr_assert_lt(racers[4].returned_at - t1, 0.1, "an already-moved module costs no wait");
  cr_assert_eq(atomic_load(&o.moves_started), 1);
  expect_module_on(m, target, sums);
  ferry_module_stats s;
  cr_assert_eq(ferry_module_stats_get(m, &s), FERRY_OK);
  cr_assert_eq(s.moves, 1);
  cr_assert_eq(s.ensure_calls, 5);
  ferry_memory_stats hs;
  ferry_device_memory_stats(host, &hs);
  cr_assert_eq(hs.live_bytes, 0, "the host copies were freed after the move");
  ferry_module_unref(m);
  ferry_device_synchronize(target);
  ferry_memory_stats ts;
  ferry_device_memory_stats(target, &ts);
  cr_assert_eq(ts.live_bytes, 0);
  ferry_device_close(target);
  ferry_device_close(host);
}
ON_EVERY_BACKEND(module, four_threads_race_on_a_cold_module, four_threads_race_on_a_cold_module)

static void a_failed_move_is_rolled_back_and_retried(const char *target_name) {
  ferry_device *host = open_device("host"), *target = open_device(target_name);
  if (ferry_device_get_kind(target) == FERRY_DEVICE_HOST) {
    ferry_device_close(target);
    cr_assert_eq(ferry_device_open("host", &target), FERRY_OK);
  }
  uint64_t sums[NTENSORS];
  ferry_module *m = make_module("detector", host, 9, sums);
  observer o = {0};
  atomic_init(&o.fail_next_at, 2); /* part-way: two tensors already copied */
  ferry_module_set_move_observer(m, observe, &o);
  cr_assert_eq(ferry_module_ensure_on(m, target), FERRY_EDEVICE);
  cr_assert_neq(strstr(ferry_last_error(), "detector"), NULL, "%s", ferry_last_error());
  cr_assert_neq(strstr(ferry_last_error(), "fc.weight"), NULL, "%s", ferry_last_error());
  expect_module_on(m, host, sums); /* usable where it was */
  ferry_device_synchronize(target);
  ferry_memory_stats ts;
  ferry_device_memory_stats(target, &ts);
  cr_assert_eq(ts.live_bytes, 0, "the partial copies were freed");
  /* Four threads now: the first to get the lock retries and succeeds. */
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 4);
  racer racers[4];
  pthread_t threads[4];
  for (int i = 0; i < 4; i++) {
    racers[i] = (racer){.module = m, .device = target, .start = &start};
    pthread_create(&threads[i], NULL, race, &racers[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&start);
  for (int i = 0; i < 4; i++) cr_assert_eq(racers[i].status, FERRY_OK);
  ferry_module_stats s;
  ferry_module_stats_get(m, &s);
  cr_assert_eq(s.moves, 1);
  cr_assert_eq(s.failed_moves, 1);
  cr_assert_eq(atomic_load(&o.moves_started), 2, "one failed attempt, one retry");
  expect_module_on(m, target, sums);
  ferry_module_unref(m);
  ferry_device_close(target);
  ferry_device_close(host);
}
ON_EVERY_BACKEND(module, a_failed_move_is_rolled_back_and_retried,
                 a_failed_move_is_rolled_back_and_retried)

/* Each module's move waits inside its observer until the other's has started: if one
 * module's lock held up the other, the rendezvous would time out after 5 s. */
Test(module, two_modules_move_without_waiting_for_each_other) {
  ferry_device *host = open_device("host"), *target = NULL;
  cr_assert_eq(ferry_device_open("host", &target), FERRY_OK);
  uint64_t sums_a[NTENSORS], sums_b[NTENSORS];
  ferry_module *a = make_module("a", host, 1, sums_a), *b = make_module("b", host, 2, sums_b);
  atomic_int a_in = 0, b_in = 0;
  observer oa = {.delay_s = 0.2, .rendezvous = &a_in, .partner = &b_in};
  observer ob = {.delay_s = 0.2, .rendezvous = &b_in, .partner = &a_in};
  atomic_init(&oa.fail_next_at, -1);
  atomic_init(&ob.fail_next_at, -1);
  ferry_module_set_move_observer(a, observe, &oa);
  ferry_module_set_move_observer(b, observe, &ob);
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, 2);
  racer ra = {.module = a, .device = target, .start = &start};
  racer rb = {.module = b, .device = target, .start = &start};
  pthread_t ta, tb;
  double t0 = now_s();
  pthread_create(&ta, NULL, race, &ra);
  pthread_create(&tb, NULL, race, &rb);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  double elapsed = now_s() - t0;
  pthread_barrier_destroy(&start);
  cr_assert_eq(ra.status, FERRY_OK);
  cr_assert_eq(rb.status, FERRY_OK);
  cr_assert_lt(elapsed, 2.0, "the moves overlapped (%.3f s; serial would be >= 0.4 s, a "
               "blocked rendezvous 5 s)", elapsed);
  cr_assert(atomic_load(&a_in) && atomic_load(&b_in));
  expect_module_on(a, target, sums_a);
  expect_module_on(b, target, sums_b);
  ferry_module_unref(a);
  ferry_module_unref(b);
  ferry_device_close(target);
  ferry_device_close(host);
}

static void two_handles_move_once(const char *target_name) {
  ferry_device *host = open_device("host"), *target = open_device(target_name);
  if (ferry_device_get_kind(target) == FERRY_DEVICE_HOST) {
    ferry_device_close(target);
    cr_assert_eq(ferry_device_open("host", &target), FERRY_OK);
  }
  uint64_t sums[NTENSORS];
  ferry_module *first = make_module("shared", host, 3, sums);
  ferry_module *second = ferry_module_ref(first);
  cr_assert_eq(ferry_module_ensure_on(first, target), FERRY_OK);
  cr_assert_eq(ferry_module_ensure_on(second, target), FERRY_OK);
  ferry_module_stats s;
  ferry_module_stats_get(second, &s);
  cr_assert_eq(s.moves, 1);
  ferry_module_unref(first); /* the other handle keeps it alive */
  expect_module_on(second, target, sums);
  cr_assert_str_eq(ferry_module_name(second), "shared");
  cr_assert_eq(ferry_module_num_tensors(second), NTENSORS);
  /* And back home. */
  cr_assert_eq(ferry_module_ensure_on(second, host), FERRY_OK);
  expect_module_on(second, host, sums);
  ferry_module_unref(second);
  ferry_memory_stats hs, ts;
  ferry_device_synchronize(target);
  ferry_device_memory_stats(host, &hs);
  ferry_device_memory_stats(target, &ts);
  cr_assert_eq(hs.live_bytes + ts.live_bytes, 0, "the last handle frees everything");
  ferry_device_close(target);
  ferry_device_close(host);
}
ON_EVERY_BACKEND(module, two_handles_move_once, two_handles_move_once)

Test(module, bad_adds_are_refused) {
  ferry_device *host = open_device("host"), *other = NULL;
  cr_assert_eq(ferry_device_open("host", &other), FERRY_OK);
  ferry_module *m = NULL;
  cr_assert_eq(ferry_module_create("m", host, &m), FERRY_OK);
  int64_t shape[1] = {4};
  ferry_tensor t, u;
  cr_assert_eq(ferry_tensor_alloc(&t, host, NULL, FERRY_I32, 1, shape), FERRY_OK);
  cr_assert_eq(ferry_tensor_alloc(&u, other, NULL, FERRY_I32, 1, shape), FERRY_OK);
  cr_assert_eq(ferry_module_add(m, "t", &t), FERRY_OK);
  cr_assert_eq(ferry_tensor_alloc(&t, host, NULL, FERRY_I32, 1, shape), FERRY_OK);
  cr_assert_eq(ferry_module_add(m, "t", &t), FERRY_EINVAL, "duplicate name");
  cr_assert_not_null(t.data, "a refused tensor stays the caller's");
  cr_assert_eq(ferry_module_add(m, "u", &u), FERRY_EINVAL, "another device");
  ferry_tensor missing;
  cr_assert_eq(ferry_module_get(m, "nope", &missing), FERRY_ENOTFOUND);
  int32_t values[4] = {1, 2, 3, 4};
  ferry_tensor view;
  cr_assert_eq(ferry_tensor_view(&view, host, values, FERRY_I32, 1, shape), FERRY_OK);
  cr_assert_eq(ferry_module_add(m, "view", &view), FERRY_OK);
  cr_assert_eq(ferry_module_ensure_on(m, other), FERRY_OK);
  ferry_tensor moved;
  cr_assert_eq(ferry_module_get(m, "view", &moved), FERRY_OK);
  cr_assert_neq(moved.data, (void *)values, "a view is copied, not referenced, after a move");
  cr_assert_eq(memcmp(moved.data, values, sizeof values), 0);
  ferry_tensor_free(&t);
  ferry_tensor_free(&u);
  ferry_module_unref(m);
  ferry_memory_stats s;
  ferry_device_memory_stats(other, &s);
  cr_assert_eq(s.live_bytes, 0);
  ferry_device_close(other);
  ferry_device_close(host);
}
