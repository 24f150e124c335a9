/* tests/common/gate.h - a host function that holds a stream until the test lets it
 * go: queue wait_at_gate with ferry_stream_call, and work queued after it cannot run
 * before open_gate. How the tests show that copies really are asynchronous. */
#ifndef FERRY_TESTS_GATE_H
#define FERRY_TESTS_GATE_H

#include <pthread.h>

typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int open;
} gate;

#define GATE_CLOSED {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}

static inline void wait_at_gate(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->lock);
  while (!g->open) pthread_cond_wait(&g->cv, &g->lock);
  pthread_mutex_unlock(&g->lock);
}

static inline void open_gate(gate *g) {
  pthread_mutex_lock(&g->lock);
  g->open = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->lock);
}

#endif
