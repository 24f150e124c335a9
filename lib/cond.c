/* lib/cond.c - see cond.h.
 *
 * Owns no state beyond each ferry__cond's two counters. Why no wake-up is lost: a
 * waiter reads `seq` and counts itself in `waiters` while it still holds the mutex,
 * and the waker changed the condition under the same mutex after that, then bumps
 * `seq` and reads `waiters` (both sequentially consistent). So the waker sees the
 * waiter counted, and the waiter's FUTEX_WAIT either finds `seq` moved on (and
 * returns at once) or is asleep in the kernel's queue when FUTEX_WAKE comes.
 * `seq` wraps after 2^32 wake-ups; a waiter would have to sleep through exactly
 * that many for the wrap to matter.
 */
#include "lib/cond.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (NULL: none), so a
 * wait cut short by a signal and begun again never sleeps past it. Only ETIMEDOUT
 * and EINTR are told apart; EAGAIN (seq moved on) is a wake-up like any other. */
static int futex_wait(atomic_uint *word, unsigned value, const struct timespec *deadline) {
  if (syscall(SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, value, deadline, NULL, FUTEX_BITSET_MATCH_ANY) == 0)
    return 0;
  return errno == ETIMEDOUT || errno == EINTR ? errno : 0;
}

void ferry__cond_wait(ferry__cond *c, pthread_mutex_t *mutex) { ferry__cond_wait_until(c, mutex, NULL); }

int ferry__cond_wait_until(ferry__cond *c, pthread_mutex_t *mutex, const struct timespec *deadline) {
  unsigned seq = atomic_load_explicit(&c->seq, memory_order_relaxed);
  atomic_fetch_add(&c->waiters, 1);
  pthread_mutex_unlock(mutex);
  int rc = futex_wait(&c->seq, seq, deadline);
  pthread_mutex_lock(mutex);
  atomic_fetch_sub(&c->waiters, 1);
  return rc;
}

void ferry__cond_wake(ferry__cond *c) {
  atomic_fetch_add(&c->seq, 1);
  if (atomic_load(&c->waiters)) syscall(SYS_futex, &c->seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}
