/* The loader's pipeline at scale (issue 14): the prefetch depth it sizes for the
 * worker count and the pinned budget, batches identical with many more workers than
 * samples in flight, named threads, and the serial CPU time it reports. */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "loader_fixture.h"

enum { MAXB = 64 };

static ferry_loader_stats stats_after_open(ferry_loader_config *c) {
  ferry_loader *l = open_loader(c);
  ferry_loader_stats s;
  ferry_loader_stats_init(&s);
  cr_assert_eq(ferry_loader_stats_get(l, &s), FERRY_OK);
  ferry_loader_close(l);
  return s;
}

/* The documented default (include/ferry/loader.h): 4 samples per worker, in
 * batches, at least 2. */
static size_t documented_depth(size_t workers, size_t batch) {
  size_t depth = (4 * workers + batch - 1) / batch;
  return depth < 2 ? 2 : depth;
}

Test(pipeline, default_depth_keeps_four_samples_per_worker_in_flight) {
  ferry_loader_config c;
  test_config(&c); /* batches of 4 */
  c.max_pinned_bytes = 0;
  const size_t workers[] = {1, 2, 3, 4, 8, 16, 64};
  for (size_t i = 0; i < sizeof workers / sizeof *workers; i++) {
    c.workers = workers[i];
    c.prefetch = 0;
    ferry_loader_stats s = stats_after_open(&c);
    cr_assert_eq(s.prefetch, documented_depth(workers[i], 4), "%zu workers: depth %zu", workers[i],
                 s.prefetch);
    cr_assert_geq(s.prefetch * 4, 4 * workers[i], "at least 4 samples per worker");
    cr_assert_eq(s.arenas, s.prefetch + c.max_outstanding);
    cr_assert_eq(s.pool.arenas, s.arenas, "the pool has one arena per batch in flight or held");
  }
}

Test(pipeline, an_explicit_prefetch_is_kept) {
  ferry_loader_config c;
  test_config(&c);
  c.workers = 16;
  c.prefetch = 3;
  c.max_pinned_bytes = 1; /* the budget shapes only the default depth */
  cr_assert_eq(stats_after_open(&c).prefetch, 3);
  c.prefetch = FERRY_LOADER_MAX_PREFETCH + 1;
  ferry_loader *l;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "prefetch"), "%s", ferry_last_error());
}

Test(pipeline, the_pinned_budget_cuts_the_default_depth) {
  ferry_loader_config c;
  test_config(&c);
  c.workers = 64;
  c.max_pinned_bytes = 0;
  size_t unbounded = stats_after_open(&c).prefetch;
  cr_assert_eq(unbounded, documented_depth(64, 4));
  c.max_pinned_bytes = 1;
  cr_assert_eq(stats_after_open(&c).prefetch, 1, "a budget too small still lets one batch be filled");
  size_t last = 1;
  for (size_t budget = 64 << 10; budget <= (size_t)1 << 30; budget *= 4) {
    c.max_pinned_bytes = budget;
    ferry_loader_stats s = stats_after_open(&c);
    cr_assert_geq(s.prefetch, last, "a larger budget never makes the depth smaller");
    cr_assert_leq(s.prefetch, unbounded);
    last = s.prefetch;
  }
  cr_assert_eq(last, unbounded, "1 GiB holds every arena of these small batches");
}

Test(pipeline, a_budgeted_pool_stays_near_its_budget, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  c.workers = 64;
  c.max_pinned_bytes = 256 << 10;
  ferry_loader *l = open_loader(&c);
  uint64_t d[MAXB];
  epoch_digests(l, d, MAXB);
  ferry_loader_stats s;
  ferry_loader_stats_init(&s);
  cr_assert_eq(ferry_loader_stats_get(l, &s), FERRY_OK);
  cr_assert_lt(s.prefetch, documented_depth(64, 4));
  /* The depth is sized for batches of mean instance counts; an arena grows to the
   * largest batch it held, so the pool may pass the budget by that spread only. */
  cr_assert_leq(s.pool.peak_reserved_bytes, 2 * c.max_pinned_bytes, "%llu reserved",
                (unsigned long long)s.pool.peak_reserved_bytes);
  ferry_loader_close(l);
}

/* Epoch digests with `workers` threads at the default depth; skip policy when asked. */
static size_t digests_with(size_t workers, size_t batch, uint64_t *out) {
  ferry_loader_config c;
  test_config(&c);
  c.workers = workers;
  c.batch_size = batch;
  c.prefetch = 0;
  ferry_loader *l = open_loader(&c);
  size_t n = epoch_digests(l, out, MAXB);
  ferry_loader_close(l);
  return n;
}

Test(pipeline, many_workers_give_the_same_batches, .timeout = 300) {
  uint64_t ref[MAXB], got[MAXB];
  const size_t batch[] = {4, 1};
  for (size_t b = 0; b < 2; b++) {
    size_t n = digests_with(1, batch[b], ref);
    const size_t workers[] = {2, 16, 64};
    for (size_t w = 0; w < 3; w++) {
      cr_assert_eq(digests_with(workers[w], batch[b], got), n);
      for (size_t k = 0; k < n; k++)
        cr_assert_eq(got[k], ref[k], "batch %zu of %zu differs with %zu workers", k, batch[b], workers[w]);
    }
  }
}

/* How many of this process's threads carry `name`. */
static int threads_named(const char *name) {
  DIR *dir = opendir("/proc/self/task");
  cr_assert_not_null(dir);
  int count = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
    count += strcmp(comm, name) == 0;
  }
  closedir(dir);
  return count;
}

Test(pipeline, threads_say_what_they_are) {
  ferry_loader_config c;
  test_config(&c);
  c.workers = 3;
  ferry_loader *l = open_loader(&c);
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
  ferry_batch_release(b);
  cr_assert_eq(threads_named("ferry-coord"), 1);
  cr_assert_eq(threads_named("ferry-worker-0"), 1);
  cr_assert_eq(threads_named("ferry-worker-2"), 1);
  cr_assert_eq(threads_named("ferry-worker-3"), 0);
  /* started by the coordinator for the first arena (lib/device.c), under its own name */
  cr_assert_eq(threads_named("ferry-stream"), 1);
  ferry_loader_close(l);
  cr_assert_eq(threads_named("ferry-coord"), 0, "close joins every thread");
}

Test(pipeline, no_more_workers_fill_at_once_than_there_are_cores, .timeout = 120) {
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
  size_t cores = (size_t)CPU_COUNT(&set);
  ferry_loader_config c;
  test_config(&c);
  c.workers = 4 * cores;
  ferry_loader *l = open_loader(&c);
  uint64_t d[MAXB];
  epoch_digests(l, d, MAXB);
  ferry_loader_stats s;
  ferry_loader_stats_init(&s);
  cr_assert_eq(ferry_loader_stats_get(l, &s), FERRY_OK);
  cr_assert_eq(s.workers, 4 * cores);
  cr_assert_geq(s.peak_busy_workers, 1);
  cr_assert_leq(s.peak_busy_workers, cores, "%zu workers filled at once on %zu cores", s.peak_busy_workers, cores);
  ferry_loader_close(l);
}

Test(pipeline, the_coordinators_cpu_time_is_reported) {
  ferry_loader_config c;
  test_config(&c);
  c.workers = 2;
  ferry_loader *l = open_loader(&c);
  ferry_loader_stats before, after;
  ferry_loader_stats_init(&before);
  ferry_loader_stats_init(&after);
  cr_assert_eq(ferry_loader_stats_get(l, &before), FERRY_OK);
  uint64_t d[MAXB];
  size_t n = epoch_digests(l, d, MAXB);
  cr_assert_gt(n, 0);
  cr_assert_eq(ferry_loader_stats_get(l, &after), FERRY_OK);
  cr_assert_gt(after.coordinator_cpu_ns, 0, "it laid out and committed %zu batches", n);
  cr_assert_geq(after.coordinator_cpu_ns, before.coordinator_cpu_ns);
  ferry_loader_close(l);
}

/* Batches released by another thread, a burst at a time, with the consumer holding
 * up to max_outstanding of them: the room each release makes reaches the coordinator
 * (through the workers while plans are in flight, through the release itself when
 * none is, handoff.c room_freed), so the loader never stalls, and batch k is still
 * batch k. Two epochs, against one worker's digests. */
typedef struct releaser {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  ferry_batch *queue[8];
  size_t queued;
  int done;
  size_t released;
} releaser;

static void *release_in_bursts(void *arg) {
  releaser *r = arg;
  pthread_mutex_lock(&r->lock);
  for (;;) {
    while (r->queued == 0 && !r->done) pthread_cond_wait(&r->changed, &r->lock);
    if (r->queued == 0) break;
    for (size_t i = 0; i < r->queued; i++) ferry_batch_release(r->queue[i]);
    r->released += r->queued;
    r->queued = 0;
    pthread_cond_broadcast(&r->changed);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

Test(pipeline, batches_released_on_another_thread_in_bursts, .timeout = 120) {
  uint64_t ref[MAXB], got[MAXB];
  size_t n = digests_with(1, 4, ref);
  cr_assert_gt(n, 4);
  ferry_loader_config c;
  test_config(&c);
  c.workers = 3;
  c.prefetch = 2;
  c.max_outstanding = 3;
  ferry_loader *l = open_loader(&c);
  releaser r = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, release_in_bursts, &r), 0);
  for (int epoch = 0; epoch < 2; epoch++) {
    size_t k = 0;
    ferry_batch *b;
    ferry_status st;
    while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
      cr_assert_lt(k, n);
      got[k++] = batch_digest(b);
      pthread_mutex_lock(&r.lock);
      r.queue[r.queued++] = b;
      /* a burst: hand over once the consumer holds all it may, and wait for it */
      if (r.queued == c.max_outstanding) {
        pthread_cond_broadcast(&r.changed);
        while (r.queued) pthread_cond_wait(&r.changed, &r.lock);
      }
      pthread_mutex_unlock(&r.lock);
    }
    cr_assert_eq(st, FERRY_EEND, "%s", ferry_last_error());
    cr_assert_eq(k, n, "epoch %d", epoch);
    for (size_t i = 0; i < n; i++) cr_assert_eq(got[i], ref[i], "epoch %d, batch %zu", epoch, i);
    if (epoch == 0) {
      /* the reference is epoch 0's: epoch 1 is checked against one worker's epoch 1 */
      ferry_loader_config one = c;
      one.workers = 1;
      one.max_outstanding = 2;
      one.prefetch = 0;
      ferry_loader *ol = open_loader(&one);
      cr_assert_eq(ferry_loader_set_epoch(ol, 1), FERRY_OK);
      cr_assert_eq(epoch_digests(ol, ref, MAXB), n);
      ferry_loader_close(ol);
    }
  }
  pthread_mutex_lock(&r.lock);
  r.done = 1;
  pthread_cond_broadcast(&r.changed);
  pthread_mutex_unlock(&r.lock);
  pthread_join(t, NULL);
  cr_assert_eq(r.released, 2 * n);
  ferry_loader_close(l);
}
