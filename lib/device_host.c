/* lib/device_host.c - the host backend: plain memory, one worker thread per stream.
 *
 * Not a mock. Each stream is a thread draining a FIFO of operations, so a copy
 * really is asynchronous: it has happened only once an event recorded after it
 * completes. That is what lets CI catch a caller that reuses a buffer too early.
 *
 * Owns: per stream, a host_stream (its thread, FIFO and counters); per event, a
 * host_event. Device memory is 64-byte-aligned heap memory; "pinned" memory is page
 * (or huge-page) aligned heap memory, not locked: the host backend has no DMA engine
 * to pin it for. init and shutdown have nothing to do.
 * Callers: device.c, from any thread; ops run on the stream's own thread.
 *
 * Invariants:
 *   - an op is in exactly one place: its stream's FIFO, or being run by the stream
 *     thread, which frees it afterwards; ops of one stream run one at a time, in the
 *     order queued;
 *   - s->lock guards head, tail, queued, completed and stop, and is never held while
 *     an op runs: a host function may queue more work, and a caller may queue while
 *     a long copy runs;
 *   - completed <= queued, and completed counts an op only after it has run, so a
 *     thread that sees completed >= n knows the first n ops have taken effect;
 *   - a host_event is freed when its last reference goes: the caller's handle and,
 *     until it has run, its queued op; either may go first.
 * Not done here: no pointer checks (device.c does them), no concurrency inside a
 * stream, no error from a copy (memmove cannot fail).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "lib/alloc.h"
#include "lib/device_internal.h"
#include "lib/status.h"
#include "lib/thread.h"

enum { HOST_ALIGN = 64, PAGE = 4096, HUGE_PAGE = 2 << 20 };

typedef enum { OP_COPY, OP_PLANE, OP_CALL, OP_EVENT, OP_FREE } op_kind;

typedef struct host_event {
  pthread_mutex_t lock;
  pthread_cond_t done_cv;
  int done;
  atomic_int refs; /* the caller's handle and, until it runs, the queued op */
} host_event;

typedef struct host_op {
  op_kind kind;
  void *dst;
  const void *src;
  size_t n;
  ferry_host_fn fn;
  void *arg;
  host_event *event;
  ferry__plane_copy plane; /* OP_PLANE */
  struct host_op *next;
} host_op;

typedef struct host_stream {
  pthread_t thread;
  pthread_mutex_t lock;
  /* work_cv has one waiter, the stream thread, so it is signalled; idle_cv may have
   * many (every synchroniser), so it is broadcast. */
  pthread_cond_t work_cv; /* work queued, or stop */
  pthread_cond_t idle_cv; /* completed advanced */
  host_op *head, *tail;
  uint64_t queued, completed;
  int stop;
} host_stream;

static void event_unref(host_event *e) {
  if (atomic_fetch_sub(&e->refs, 1) == 1) {
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->done_cv);
    ferry__free(e);
  }
}

static void copy_plane(const ferry__plane_copy *p) {
  uint8_t *dst = p->dst;
  const uint8_t *src = p->src;
  for (size_t r = 0; r < p->rows; r++, dst += p->dst_pitch, src += p->src_pitch) {
    memmove(dst, src, p->row_bytes);
    memset(dst + p->row_bytes, 0, p->dst_pitch - p->row_bytes);
  }
  memset(dst, 0, (p->dst_rows - p->rows) * p->dst_pitch);
}

static void run_op(host_op *op) {
  switch (op->kind) {
    case OP_COPY: memmove(op->dst, op->src, op->n); break;
    case OP_PLANE: copy_plane(&op->plane); break;
    case OP_CALL: op->fn(op->arg); break;
    case OP_FREE: ferry__free(op->dst); break;
    /* The waiters hold the caller's reference, so the event outlives the broadcast;
     * the op's reference is dropped last. */
    case OP_EVENT:
      pthread_mutex_lock(&op->event->lock);
      op->event->done = 1;
      pthread_cond_broadcast(&op->event->done_cv);
      pthread_mutex_unlock(&op->event->lock);
      event_unref(op->event);
      break;
  }
}

static void *stream_main(void *arg) {
  host_stream *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->work_cv, &s->lock);
    /* Stop is honoured only once the FIFO is empty: closing a stream runs everything
     * queued on it first, frees included. */
    if (!s->head) break; /* stop requested and nothing left */
    host_op *op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    run_op(op);
    ferry__free(op);
    pthread_mutex_lock(&s->lock);
    s->completed++;
    pthread_cond_broadcast(&s->idle_cv);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static ferry_status enqueue(ferry_stream *stream, host_op *op) {
  host_stream *s = stream->impl;
  op->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  s->queued++;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->lock);
  return FERRY_OK;
}

static host_op *new_op(ferry_stream *stream, op_kind kind) {
  host_op *op = ferry__calloc(1, sizeof *op);
  if (!op) ferry__fail(FERRY_ENOMEM, "%s: out of memory queueing work on a stream", stream->device->name);
  else op->kind = kind;
  return op;
}

static ferry_status host_probe(int index) {
  if (index != 0) return ferry__fail(FERRY_ENODEV, "host: there is one host device, not %d", index);
  return FERRY_OK;
}

static ferry_status host_init(ferry_device *device) { return FERRY_OK; }
static void host_shutdown(ferry_device *device) {}

static ferry_status host_stream_open(ferry_stream *stream) {
  host_stream *s = ferry__calloc(1, sizeof *s);
  if (!s) return ferry__fail(FERRY_ENOMEM, "host: out of memory for a stream");
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->idle_cv, NULL);
  if (ferry__thread_start(&s->thread, stream_main, s, "ferry-stream", SIZE_MAX) != 0) {
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->idle_cv);
    ferry__free(s);
    return ferry__fail(FERRY_EDEVICE, "host: could not start a stream thread");
  }
  stream->impl = s;
  return FERRY_OK;
}

static void host_stream_close(ferry_stream *stream) {
  host_stream *s = stream->impl;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->work_cv);
  pthread_cond_destroy(&s->idle_cv);
  ferry__free(s);
}

/* Waits for what was queued before the call, not for work queued meanwhile, so a
 * busy stream cannot keep a synchroniser waiting forever. A host function that
 * synchronises its own stream would wait for itself. */
static ferry_status host_stream_sync(ferry_stream *stream) {
  host_stream *s = stream->impl;
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->queued;
  while (s->completed < target) pthread_cond_wait(&s->idle_cv, &s->lock);
  pthread_mutex_unlock(&s->lock);
  return FERRY_OK;
}

static ferry_status host_malloc(ferry_stream *stream, size_t size, void **out) {
  *out = ferry__aligned_alloc(HOST_ALIGN, size);
  if (!*out) return ferry__fail(FERRY_ENOMEM, "host: out of device memory allocating %zu bytes", size);
  return FERRY_OK;
}

/* Freed in stream order, as cudaFreeAsync does: work queued before still reads it. */
static ferry_status host_free_async(ferry_stream *stream, void *ptr) {
  host_op *op = new_op(stream, OP_FREE);
  if (!op) {
    /* Cannot queue: wait for the stream so nothing still reads ptr, then free. */
    host_stream_sync(stream);
    ferry__free(ptr);
    return FERRY_OK;
  }
  op->dst = ptr;
  return enqueue(stream, op);
}

/* Pinned memory holds the pool's arenas, which workers write once per batch after
 * they have left the cache. With 4 KB pages each first write to a page is also a
 * TLB miss, and under virtualisation a page walk costs about as much as the
 * write: transparent huge pages halved the time to fill a cold arena here. So an
 * allocation of a huge page or more is huge-page aligned and asks for them; the
 * kernel may say no (THP off), which costs only the speed. */
static ferry_status host_host_alloc(ferry_device *device, size_t size, void **out) {
  /* Rounded up to whole pages (or huge pages); the check first keeps the rounding
   * from wrapping. */
  size_t align = size >= HUGE_PAGE ? HUGE_PAGE : PAGE;
  *out = size <= SIZE_MAX - align ? ferry__aligned_alloc(align, (size + align - 1) / align * align)
                                  : NULL;
  if (!*out) return ferry__fail(FERRY_ENOMEM, "host: out of memory allocating %zu pinned bytes", size);
#ifdef MADV_HUGEPAGE
  if (align == HUGE_PAGE) (void)madvise(*out, size, MADV_HUGEPAGE);
#endif
  return FERRY_OK;
}

static void host_host_free(ferry_device *device, void *ptr) { ferry__free(ptr); }

/* Every kind is a memmove: all of this backend's memory is host memory. On failure
 * new_op has already left the message. */
static ferry_status host_memcpy(ferry_stream *stream, void *dst, const void *src, size_t n,
                                ferry_copy_kind kind) {
  host_op *op = new_op(stream, OP_COPY);
  if (!op) return FERRY_ENOMEM;
  op->dst = dst;
  op->src = src;
  op->n = n;
  return enqueue(stream, op);
}

static ferry_status host_copy_plane(ferry_stream *stream, const ferry__plane_copy *plane, ferry_copy_kind kind) {
  host_op *op = new_op(stream, OP_PLANE);
  if (!op) return FERRY_ENOMEM;
  op->plane = *plane;
  return enqueue(stream, op);
}

static ferry_status host_call(ferry_stream *stream, ferry_host_fn fn, void *arg) {
  host_op *op = new_op(stream, OP_CALL);
  if (!op) return FERRY_ENOMEM;
  op->fn = fn;
  op->arg = arg;
  return enqueue(stream, op);
}

static ferry_status host_event_record(ferry_stream *stream, ferry_event *event) {
  host_event *e = ferry__calloc(1, sizeof *e);
  host_op *op = e ? new_op(stream, OP_EVENT) : NULL;
  if (!op) {
    ferry__free(e);
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory recording an event", stream->device->name);
  }
  /* Both references are counted before the op is queued: the stream thread may run it,
   * and drop its reference, before enqueue returns. */
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->done_cv, NULL);
  atomic_init(&e->refs, 2);
  op->event = e;
  event->impl = e;
  return enqueue(stream, op);
}

static int host_event_query(ferry_event *event) {
  host_event *e = event->impl;
  pthread_mutex_lock(&e->lock);
  int done = e->done;
  pthread_mutex_unlock(&e->lock);
  return done;
}

static ferry_status host_event_sync(ferry_event *event) {
  host_event *e = event->impl;
  pthread_mutex_lock(&e->lock);
  while (!e->done) pthread_cond_wait(&e->done_cv, &e->lock);
  pthread_mutex_unlock(&e->lock);
  return FERRY_OK;
}

static void host_event_destroy(ferry_event *event) { event_unref(event->impl); }

const ferry__backend ferry__host_backend = {
    .name = "host",
    .probe = host_probe,
    .init = host_init,
    .shutdown = host_shutdown,
    .stream_open = host_stream_open,
    .stream_close = host_stream_close,
    .stream_sync = host_stream_sync,
    .malloc = host_malloc,
    .free = host_free_async,
    .host_alloc = host_host_alloc,
    .host_free = host_host_free,
    .memcpy = host_memcpy,
    .call = host_call,
    .copy_plane = host_copy_plane,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_sync = host_event_sync,
    .event_destroy = host_event_destroy,
    .pool_high = NULL,
    .pool_reset = NULL,
};
