/* lib/cond.h - a condition variable on a Linux futex (internal).
 *
 * Why not pthread_cond_t: glibc's pthread_cond_wait takes its mutex back marked
 * contended, whether or not anyone else wants it, so the unlock after every wait
 * makes a FUTEX_WAKE system call that wakes nobody. The loader's serial threads
 * (consumer, coordinator) wait about once per batch, and that call was a fifth of
 * the consumer's system calls (issue #14). ferry__cond_wait takes the mutex back
 * the ordinary way.
 *
 * Contract, as for pthread_cond_t: the waiter holds `mutex` and waits in a loop
 * that looks at its condition again; whoever changes the condition does it under
 * `mutex`, and may wake before or after letting it go. A wake-up reaches every
 * thread waiting at that moment (there is no "signal one"): ferry's waits have one
 * waiter each, and waking all can never lose one. Wake-ups may be spurious.
 * Zero-initialised is ready; nothing to destroy.
 */
#ifndef FERRY_LIB_COND_H
#define FERRY_LIB_COND_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

typedef struct ferry__cond {
  atomic_uint seq;     /* bumped by every wake-up; a waiter sleeps only while it is unchanged */
  atomic_uint waiters; /* threads between taking seq and having the mutex back */
} ferry__cond;

/* Let `mutex` go, sleep until a wake-up (or spuriously), take `mutex` back. */
void ferry__cond_wait(ferry__cond *cond, pthread_mutex_t *mutex);
/* The same, sleeping no later than `deadline` (CLOCK_MONOTONIC; NULL: no bound).
 * 0 after a wake-up (or spuriously), ETIMEDOUT once the deadline has passed, EINTR
 * when a signal handler ran on this thread meanwhile: a caller that must answer
 * signals (a Python binding) returns instead of sleeping again. */
int ferry__cond_wait_until(ferry__cond *cond, pthread_mutex_t *mutex, const struct timespec *deadline);
/* Wake every thread waiting on `cond`: no system call when none is. */
void ferry__cond_wake(ferry__cond *cond);

#endif
