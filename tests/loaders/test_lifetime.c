/* tests/loaders/test_lifetime.c - what users do to a loader's lifetime (issue 25):
 * close from another thread while a call is in progress, a bounded wait that a
 * signal ends, fork, and set_epoch to the epoch the loader stands at.
 *
 * A stalled pipeline is made for real, not faked: every arena is released behind an
 * event recorded after a host function that blocks on a semaphore (a device that
 * does not finish its copies), so the coordinator waits in the pool and next waits
 * for a batch that cannot come until the test posts the semaphore. Run under TSan
 * in the tsan build (suite concurrency).
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferry/advanced.h"
#include "loader_fixture.h"

/* ---- a stalled pipeline ----------------------------------------------------------- */

typedef struct stall {
  ferry_device *device;
  ferry_stream *stream; /* blocked on `gate` until stall_release */
  sem_t gate;
  ferry_loader *loader;
  size_t taken;       /* batches taken before the stall */
} stall;

static void wait_at_gate(void *arg) {
  while (sem_wait(arg) != 0 && errno == EINTR) {
  }
}

/* A loader of 3 arenas (prefetch 2, max_outstanding 1) on a device of the test's, its
 * first 3 batches released behind events of the blocked stream (each batch owns its
 * own): no arena comes back until stall_release, so the next batch does not come.
 * The loader's close waits for those events: release the stall first. */
static void stall_begin(stall *s) {
  memset(s, 0, sizeof *s);
  cr_assert_eq(sem_init(&s->gate, 0, 0), 0);
  cr_assert_eq(ferry_device_open("host", &s->device), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_stream_open(s->device, &s->stream), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_stream_call(s->stream, wait_at_gate, &s->gate), FERRY_OK, "%s", ferry_last_error());
  ferry_loader_config c;
  test_config(&c);
  c.prefetch = 2;
  c.max_outstanding = 1;
  c.device = s->device;
  s->loader = open_loader(&c);
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  cr_assert_eq(ferry_loader_stats_get(s->loader, &stats), FERRY_OK);
  cr_assert_eq(stats.arenas, 3);
  for (; s->taken < stats.arenas; s->taken++) {
    ferry_batch *b;
    ferry_event *event;
    cr_assert_eq(ferry_loader_next(s->loader, &b), FERRY_OK, "%s", ferry_last_error());
    cr_assert_eq(ferry_event_record(s->stream, &event), FERRY_OK, "%s", ferry_last_error());
    cr_assert_eq(ferry_batch_hold_until(b, event), FERRY_OK, "%s", ferry_last_error());
    ferry_batch_release(b);
  }
}

/* The device finishes: the arenas come back. */
static void stall_release(stall *s) { sem_post(&s->gate); }

/* After stall_release; the loader is closed by the test. */
static void stall_end(stall *s) {
  ferry_stream_close(s->stream);
  ferry_device_close(s->device);
  sem_destroy(&s->gate);
}

/* ---- close while a call is in progress ------------------------------------------ */

typedef struct waiter {
  ferry_loader *loader;
  int timeout_ms;
  ferry_status status;
  ferry_batch *batch;
  atomic_int done;
} waiter;

static void *wait_for_batch(void *arg) {
  waiter *w = arg;
  w->status = ferry_loader_next_timed(w->loader, &w->batch, w->timeout_ms);
  atomic_store(&w->done, 1);
  return NULL;
}

static void *close_loader(void *arg) {
  ferry_loader_close(arg);
  return NULL;
}

static void pause_briefly(void) {
  struct timespec t = {0, 2 * 1000 * 1000};
  nanosleep(&t, NULL);
}

/* The contract of loader.h: a next waiting for a batch is ended by close on another
 * thread with FERRY_ECANCELED, and close returns once it has. */
Test(lifetime, close_on_another_thread_ends_a_waiting_next, .timeout = 120) {
  stall s;
  stall_begin(&s);
  waiter w = {s.loader, -1, FERRY_OK, NULL, 0};
  pthread_t t, closer;
  cr_assert_eq(pthread_create(&t, NULL, wait_for_batch, &w), 0);
  /* waiting or not yet, close must end the call */
  for (int i = 0; i < 5; i++) pause_briefly();
  cr_assert_eq(pthread_create(&closer, NULL, close_loader, s.loader), 0);
  pthread_join(t, NULL);
  cr_assert_eq(w.status, FERRY_ECANCELED, "next returned %d: %s", (int)w.status, ferry_strerror(w.status));
  cr_assert_null(w.batch);
  stall_release(&s); /* close's pool waits for the device */
  pthread_join(closer, NULL);
  stall_end(&s);
}

/* A progress callback runs inside ferry_loader_next. While it runs, a close on another
 * thread must not return (it would have freed the loader under the call); it returns
 * once the call has. The callback waits a while for close to return: with a close
 * that does not wait, it sees it return. */
typedef struct inside_call {
  atomic_int entered, close_returned, saw_close_return;
  ferry_loader *loader;
} inside_call;

static void linger_in_next(const ferry_loader_progress *p, void *user) {
  inside_call *in = user;
  (void)p;
  if (atomic_exchange(&in->entered, 1)) return; /* the first batch only */
  for (int i = 0; i < 100 && !atomic_load(&in->close_returned); i++) pause_briefly();
  atomic_store(&in->saw_close_return, atomic_load(&in->close_returned));
}

/* The batch is left to close, which releases what the consumer holds. */
static void *next_with_callback(void *arg) {
  inside_call *in = arg;
  ferry_batch *b = NULL;
  ferry_loader_next(in->loader, &b);
  return NULL;
}

/* A loader whose progress callback is `fn`, and a consumer thread inside its first
 * ferry_loader_next's callback when this returns. */
static void start_inside_call(inside_call *in, ferry_progress_fn fn, pthread_t *consumer) {
  memset(in, 0, sizeof *in);
  ferry_loader_config c;
  test_config(&c);
  c.progress = fn;
  c.progress_user = in;
  in->loader = open_loader(&c);
  cr_assert_eq(pthread_create(consumer, NULL, next_with_callback, in), 0);
  while (!atomic_load(&in->entered)) pause_briefly();
}

Test(lifetime, close_waits_for_a_call_in_progress, .timeout = 120) {
  static inside_call in; /* read by the callback after the test's frame would be gone */
  pthread_t t;
  start_inside_call(&in, linger_in_next, &t);
  ferry_loader_close(in.loader);
  atomic_store(&in.close_returned, 1);
  pthread_join(t, NULL);
  cr_assert_not(atomic_load(&in.saw_close_return), "close returned while ferry_loader_next was still running");
}

/* Calls made once close has begun are refused, not served from freed memory: a call
 * from the progress callback while close waits for it, made until refused (bounded by
 * the test's timeout). */
static void call_during_close(const ferry_loader_progress *p, void *user) {
  inside_call *in = user;
  ferry_loader_state state;
  (void)p;
  ferry_status st;
  if (atomic_exchange(&in->entered, 1)) return;
  while ((st = ferry_loader_state_get(in->loader, &state)) == FERRY_OK) pause_briefly();
  atomic_store(&in->saw_close_return, st == FERRY_ECANCELED);
}

Test(lifetime, calls_after_close_began_are_refused, .timeout = 120) {
  static inside_call in;
  pthread_t consumer, closer;
  start_inside_call(&in, call_during_close, &consumer);
  cr_assert_eq(pthread_create(&closer, NULL, close_loader, in.loader), 0);
  pthread_join(consumer, NULL);
  pthread_join(closer, NULL);
  cr_assert(atomic_load(&in.saw_close_return), "state_get during close was not refused with FERRY_ECANCELED");
}

/* ---- bounded waits and signals ---------------------------------------------------- */

Test(lifetime, a_bounded_wait_returns_eagain_and_takes_nothing, .timeout = 120) {
  stall s;
  stall_begin(&s);
  ferry_batch *b = (ferry_batch *)&s; /* overwritten with NULL */
  cr_assert_eq(ferry_loader_next_timed(s.loader, &b, 0), FERRY_EAGAIN, "%s", ferry_last_error());
  cr_assert_null(b);
  cr_assert_eq(ferry_loader_next_timed(s.loader, &b, 20), FERRY_EAGAIN, "%s", ferry_last_error());
  cr_assert_null(b);
  stall_release(&s);
  /* nothing was lost: the batch after the stall is batch `taken` of the epoch */
  cr_assert_eq(ferry_loader_next_timed(s.loader, &b, -1), FERRY_OK, "%s", ferry_last_error());
  ferry_loader_state state;
  cr_assert_eq(ferry_loader_state_get(s.loader, &state), FERRY_OK);
  cr_assert_eq(state.batches_delivered, s.taken + 1);
  ferry_batch_release(b);
  ferry_loader_close(s.loader);
  stall_end(&s);
}

static void on_signal(int sig) { (void)sig; }

/* A signal handler that runs on the waiting thread ends a bounded wait, however long
 * its bound: Python's handlers (Ctrl-C) run only once the call returns. The signal is
 * sent until the waiter has returned, so it need not be waiting yet for the first. */
Test(lifetime, a_signal_ends_a_bounded_wait, .timeout = 120) {
  struct sigaction sa = {0}, old;
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  cr_assert_eq(sigaction(SIGUSR1, &sa, &old), 0);
  stall s;
  stall_begin(&s);
  waiter w = {s.loader, 3600 * 1000, FERRY_OK, NULL, 0};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, wait_for_batch, &w), 0);
  while (!atomic_load(&w.done)) {
    pthread_kill(t, SIGUSR1);
    pause_briefly();
  }
  pthread_join(t, NULL);
  cr_assert_eq(w.status, FERRY_EAGAIN, "next_timed returned %d", (int)w.status);
  cr_assert_null(w.batch);
  stall_release(&s);
  ferry_loader_close(s.loader);
  stall_end(&s);
  sigaction(SIGUSR1, &old, NULL);
}

/* ---- fork ------------------------------------------------------------------------- */

/* In the child: every call on the inherited loader is refused naming fork, and close
 * returns. Exit code 0 when so; a hang is caught by the parent. */
static int child_touches_loader(ferry_loader *l) {
  ferry_batch *b = NULL;
  ferry_loader_state state;
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  if (ferry_loader_next(l, &b) != FERRY_EUNSUPPORTED || b) return 1;
  if (!strstr(ferry_last_error(), "fork")) return 2;
  if (ferry_loader_set_epoch(l, 3) != FERRY_EUNSUPPORTED) return 3;
  if (ferry_loader_state_get(l, &state) != FERRY_EUNSUPPORTED) return 4;
  if (ferry_loader_stats_get(l, &stats) != FERRY_EUNSUPPORTED) return 5;
  ferry_loader_close(l);
  return 0;
}

Test(lifetime, a_fork_child_gets_an_error_not_a_hang, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  ferry_loader *l = open_loader(&c);
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK); /* threads busy, a batch held */
  fflush(NULL);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) _exit(child_touches_loader(l));
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 3000 && (got = waitpid(child, &status, WNOHANG)) == 0; i++) pause_briefly();
  if (got == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    cr_assert_fail("the fork child hung on the inherited loader");
  }
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's check %d failed", WEXITSTATUS(status));
  /* the parent's loader is untouched */
  ferry_batch_release(b);
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
  ferry_batch_release(b);
  ferry_loader_close(l);
}

/* ---- set_epoch to where the loader stands ------------------------------------------ */

static uint64_t wait_decoded(ferry_loader *l, uint64_t at_least) {
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  do {
    pause_briefly();
    cr_assert_eq(ferry_loader_stats_get(l, &stats), FERRY_OK);
  } while (stats.samples_decoded < at_least);
  return stats.batches_dropped;
}

/* The recommended loop (set_epoch(e) before epoch e) drops nothing: not at open, not
 * after an epoch's end; the batches are those of a loader left alone. A set_epoch
 * elsewhere drops what was prefetched. */
Test(lifetime, set_epoch_where_the_loader_stands_keeps_the_prefetch, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  c.prefetch = 2;
  uint64_t want[2][16], got[16];
  ferry_loader *ref = open_loader(&c);
  size_t n0 = epoch_digests(ref, want[0], 16), n1 = epoch_digests(ref, want[1], 16);
  ferry_loader_close(ref);

  ferry_loader *l = open_loader(&c);
  cr_assert_eq(wait_decoded(l, c.batch_size), 0); /* a batch of epoch 0 is prefetched */
  cr_assert_eq(ferry_loader_set_epoch(l, 0), FERRY_OK);
  cr_assert_eq(epoch_digests(l, got, 16), n0);
  cr_assert_arr_eq(got, want[0], n0 * sizeof *got);
  cr_assert_eq(ferry_loader_set_epoch(l, 1), FERRY_OK); /* the end taken: stands at epoch 1 */
  cr_assert_eq(epoch_digests(l, got, 16), n1);
  cr_assert_arr_eq(got, want[1], n1 * sizeof *got);
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  cr_assert_eq(ferry_loader_stats_get(l, &stats), FERRY_OK);
  cr_assert_eq(stats.batches_dropped, 0, "set_epoch to the current epoch dropped %llu batches",
               (unsigned long long)stats.batches_dropped);
  /* elsewhere: epoch 2's prefetch goes */
  wait_decoded(l, stats.samples_decoded + c.batch_size);
  cr_assert_eq(ferry_loader_set_epoch(l, 5), FERRY_OK);
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK);
  ferry_batch_release(b);
  cr_assert_eq(ferry_loader_stats_get(l, &stats), FERRY_OK);
  cr_assert_geq(stats.batches_dropped, 1);
  ferry_loader_close(l);
}
