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

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

static void futex(atomic_uint *word, int op, unsigned value) {
  /* EAGAIN (seq moved on) and EINTR are wake-ups like any other: the caller looks again. */
  syscall(SYS_futex, word, op, value, NULL, NULL, 0);
}

void ferry__cond_wait(ferry__cond *c, pthread_mutex_t *mutex) {
  unsigned seq = atomic_load_explicit(&c->seq, memory_order_relaxed);
  atomic_fetch_add(&c->waiters, 1);
  pthread_mutex_unlock(mutex);
  futex(&c->seq, FUTEX_WAIT_PRIVATE, seq);
  pthread_mutex_lock(mutex);
  atomic_fetch_sub(&c->waiters, 1);
}

void ferry__cond_wake(ferry__cond *c) {
  atomic_fetch_add(&c->seq, 1);
  if (atomic_load(&c->waiters)) futex(&c->seq, FUTEX_WAKE_PRIVATE, INT_MAX);
}
