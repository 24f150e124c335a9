/* lib/cond.h: the futex condition variable the loader's threads sleep on. What it
 * must do: wake a waiter whether the wake comes before or after the waker lets the
 * mutex go, reach every waiter, and cost nothing when nobody waits. */
#include <pthread.h>
#include <stdatomic.h>

#include "backends.h"
#include "lib/cond.h"

/* Two threads hand a token back and forth many times, each waking the other after
 * letting the mutex go (as the loader does): a lost wake-up would hang here, and the
 * test's timeout would fail it. */
typedef struct ping {
  pthread_mutex_t lock;
  ferry__cond cv[2];
  int turn;       /* whose move: 0 or 1 */
  int rounds;
} ping;

enum { ROUNDS = 20000 };

static void play(ping *g, int me) {
  for (int r = 0; r < ROUNDS; r++) {
    pthread_mutex_lock(&g->lock);
    while (g->turn != me) ferry__cond_wait(&g->cv[me], &g->lock);
    g->turn = !me;
    g->rounds++;
    pthread_mutex_unlock(&g->lock);
    ferry__cond_wake(&g->cv[!me]);
  }
}

static void *player_one(void *arg) {
  play(arg, 1);
  return NULL;
}

Test(cond, a_wake_after_unlock_is_never_lost) {
  ping g = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, player_one, &g), 0);
  play(&g, 0);
  pthread_join(t, NULL);
  cr_assert_eq(g.rounds, 2 * ROUNDS);
  cr_assert_eq(atomic_load(&g.cv[0].waiters), 0, "every waiter counted itself out");
  cr_assert_eq(atomic_load(&g.cv[1].waiters), 0);
}

/* Several threads wait on one variable; one wake, under the mutex this time, must
 * release them all. */
typedef struct gate {
  pthread_mutex_t lock;
  ferry__cond cv;
  int open;
  int waiting, passed;
} gate;

static void *wait_at_gate(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->lock);
  g->waiting++;
  while (!g->open) ferry__cond_wait(&g->cv, &g->lock);
  g->passed++;
  pthread_mutex_unlock(&g->lock);
  return NULL;
}

Test(cond, one_wake_reaches_every_waiter) {
  enum { N = 6 };
  gate g = {.lock = PTHREAD_MUTEX_INITIALIZER};
  pthread_t t[N];
  for (int i = 0; i < N; i++) cr_assert_eq(pthread_create(&t[i], NULL, wait_at_gate, &g), 0);
  for (;;) { /* every thread inside its wait (counted, the mutex let go) */
    pthread_mutex_lock(&g.lock);
    int ready = g.waiting == N && atomic_load(&g.cv.waiters) == N;
    if (ready) {
      g.open = 1;
      ferry__cond_wake(&g.cv);
    }
    pthread_mutex_unlock(&g.lock);
    if (ready) break;
    sched_yield();
  }
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  cr_assert_eq(g.passed, N);
}

Test(cond, a_wake_with_nobody_waiting_changes_only_the_sequence) {
  ferry__cond cv = {0};
  ferry__cond_wake(&cv);
  ferry__cond_wake(&cv);
  cr_assert_eq(atomic_load(&cv.seq), 2);
  cr_assert_eq(atomic_load(&cv.waiters), 0);
}
