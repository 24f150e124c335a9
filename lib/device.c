/* lib/device.c - opening devices, lazy initialisation, streams, events, accounting.
 *
 * The backends (device_host.c, device_cuda.c) only move bytes and order work; what
 * both share lives here so that they cannot drift apart: the accounting is the same
 * code for both, which is what lets CI's host runs vouch for the CUDA numbers.
 *
 * Owns: the ferry_device (its three locks, the list of open streams, the default
 * stream, the accounting), every ferry_stream and ferry_event shell (the backend owns
 * what `impl` points at).
 * Callers: any number of threads at once, on any device call, except
 * ferry_device_close, which must be the last call on the device.
 *
 * Locks, and what each guards:
 *   init_lock        running the backend's init and creating the default stream, and
 *                    `initializations`; `initialized` is the published flag (atomic);
 *   streams_lock     the `streams` list;
 *   accounting_lock  device_sizes, pinned and the byte and allocation counters.
 * Order: init_lock may be held while taking streams_lock (init creates the default
 * stream); accounting_lock is a leaf, held only around map and counter updates.
 * streams_lock is held across every stream's synchronisation in
 * ferry_device_synchronize, so a host function queued on a stream must not open or
 * close any stream of the same device either (device.h names only its own stream):
 * it would wait for the lock held by a thread that waits for it.
 *
 * Invariants between calls:
 *   - `initialized` goes from 0 to 1 once, after the backend's init and the default
 *     stream have both succeeded; from then on default_stream is set and is in
 *     `streams`. A failed init leaves it 0 and the next call retries.
 *   - `streams` holds exactly the streams opened and not yet closed, each fully
 *     opened by its backend before it is linked in.
 *   - live_bytes is the sum of the sizes in device_sizes, live_allocations their
 *     number, peak_bytes >= live_bytes; pinned_live_bytes is the sum of the sizes in
 *     `pinned`. Sizes are what callers asked for, not what a backend rounded up to,
 *     so the figures are exact to the byte on both backends.
 *   - a pointer reaches the backend's free only if accounting knew it as live: a
 *     double free, or a free of another device's pointer, is an error, not a crash.
 * Not done here: no check that a stream passed to malloc/free belongs to the device
 * (the transfer stage checks its own); D2D and H2H copies are not checked; close does
 * not free allocations still live (a leak shows in live_allocations before close).
 *
 * The pinned-memory rule lives here too, for the same reason: ferry_memcpy_async takes
 * a host buffer only inside a live ferry_device_host_alloc allocation of the stream's
 * device, on both backends. CUDA copies to or from pageable memory block the caller
 * until the copy has run, so a copy queued behind a blocked host function would hang
 * there and only there; refusing it everywhere lets CI's host runs catch it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/device_internal.h"
#include "lib/status.h"
#include "lib/struct_size.h"

/* "host", "cuda" or "cuda:N" -> backend and index. N <= 1023 keeps "cuda:N" inside
 * the device's 16-byte name. */
static ferry_status parse_name(const char *name, const ferry__backend **ops, int *index) {
  if (strcmp(name, "host") == 0) {
    *ops = &ferry__host_backend;
    *index = 0;
    return FERRY_OK;
  }
  if (strncmp(name, "cuda", 4) == 0) {
    const char *rest = name + 4;
    long n = 0;
    if (*rest == ':') {
      char *end = NULL;
      n = strtol(rest + 1, &end, 10);
      if (end == rest + 1 || *end != '\0' || n < 0 || n > 1023)
        return ferry__fail(FERRY_EINVAL, "device '%s': expected cuda:N with N a device number", name);
    } else if (*rest != '\0') {
      return ferry__fail(FERRY_EINVAL, "unknown device '%s' (expected host, cuda or cuda:N)", name);
    }
    *ops = &ferry__cuda_backend;
    *index = (int)n;
    return FERRY_OK;
  }
  return ferry__fail(FERRY_EINVAL, "unknown device '%s' (expected host, cuda or cuda:N)", name);
}

ferry_status ferry_device_open(const char *name, ferry_device **out) {
  const ferry__backend *ops = NULL;
  int index = 0;
  if (!name || !out) return ferry__fail(FERRY_EINVAL, "ferry_device_open: name and out are required");
  *out = NULL;
  ferry_status st = parse_name(name, &ops, &index);
  if (st != FERRY_OK) return st;
  /* A probe creates no context (ferry_device_open never does); it is also the only
   * backend entry point called before the device exists, so a backend that can never
   * work (CUDA without the toolkit) provides nothing else. */
  st = ops->probe(index);
  if (st != FERRY_OK) return st;
  ferry_device *d = ferry__calloc(1, sizeof *d);
  if (!d) return ferry__fail(FERRY_ENOMEM, "device '%s': out of memory", name);
  d->ops = ops;
  d->kind = ops == &ferry__host_backend ? FERRY_DEVICE_HOST : FERRY_DEVICE_CUDA;
  d->index = index;
  if (d->kind == FERRY_DEVICE_HOST) snprintf(d->name, sizeof d->name, "host");
  else snprintf(d->name, sizeof d->name, "cuda:%d", index);
  pthread_mutex_init(&d->init_lock, NULL);
  pthread_mutex_init(&d->streams_lock, NULL);
  pthread_mutex_init(&d->accounting_lock, NULL);
  ferry__ptrmap_init(&d->device_sizes);
  ferry__rangeset_init(&d->pinned);
  *out = d;
  return FERRY_OK;
}

ferry_device_kind ferry_device_get_kind(const ferry_device *device) { return device->kind; }
const char *ferry_device_name(const ferry_device *device) { return device->name; }

static ferry_status stream_create(ferry_device *device, ferry_stream **out) {
  ferry_stream *s = ferry__calloc(1, sizeof *s);
  if (!s) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for a stream", device->name);
  s->device = device;
  ferry_status st = device->ops->stream_open(s);
  if (st != FERRY_OK) {
    ferry__free(s);
    return st;
  }
  /* Linked only once open: ferry_device_synchronize never meets a half-made stream. */
  pthread_mutex_lock(&device->streams_lock);
  s->next = device->streams;
  device->streams = s;
  pthread_mutex_unlock(&device->streams_lock);
  *out = s;
  return FERRY_OK;
}

/* Double-checked: the flag is only set after init has fully completed, under the
 * lock, so a thread that sees it set also sees everything init wrote. */
ferry_status ferry_device_init(ferry_device *device) {
  if (atomic_load_explicit(&device->initialized, memory_order_acquire)) return FERRY_OK;
  pthread_mutex_lock(&device->init_lock);
  ferry_status st = FERRY_OK;
  if (!atomic_load_explicit(&device->initialized, memory_order_relaxed)) {
    st = device->ops->init(device);
    /* Undo init when the default stream fails, so that the retry starts clean. */
    if (st == FERRY_OK) {
      st = stream_create(device, &device->default_stream);
      if (st != FERRY_OK) device->ops->shutdown(device);
    }
    if (st == FERRY_OK) {
      device->initializations++;
      atomic_store_explicit(&device->initialized, 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&device->init_lock);
  return st;
}

static ferry_status resolve_stream(ferry_device *device, ferry_stream **stream) {
  if (*stream) return FERRY_OK;
  ferry_status st = ferry_device_init(device);
  if (st == FERRY_OK) *stream = device->default_stream;
  return st;
}

ferry_status ferry_stream_open(ferry_device *device, ferry_stream **out) {
  if (!device || !out) return ferry__fail(FERRY_EINVAL, "ferry_stream_open: device and out are required");
  ferry_status st = ferry_device_init(device);
  if (st != FERRY_OK) return st;
  return stream_create(device, out);
}

/* Unlinked before it is closed: once out of the list, ferry_device_synchronize (which
 * holds streams_lock while it waits) no longer waits on it. The backend's close waits
 * for the stream's queued work before tearing it down. */
static void stream_destroy(ferry_stream *stream) {
  ferry_device *d = stream->device;
  pthread_mutex_lock(&d->streams_lock);
  for (ferry_stream **p = &d->streams; *p; p = &(*p)->next)
    if (*p == stream) {
      *p = stream->next;
      break;
    }
  pthread_mutex_unlock(&d->streams_lock);
  d->ops->stream_close(stream);
  ferry__free(stream);
}

/* The default stream is the device's: only ferry_device_close destroys it. */
void ferry_stream_close(ferry_stream *stream) {
  if (!stream || stream == stream->device->default_stream) return;
  stream_destroy(stream);
}

ferry_status ferry_stream_synchronize(ferry_stream *stream) {
  if (!stream) return ferry__fail(FERRY_EINVAL, "ferry_stream_synchronize: stream is NULL");
  return stream->device->ops->stream_sync(stream);
}

ferry_device *ferry_stream_device(const ferry_stream *stream) { return stream->device; }

ferry_status ferry_device_synchronize(ferry_device *device) {
  /* Before init there is no stream, hence no work. */
  if (!atomic_load_explicit(&device->initialized, memory_order_acquire)) return FERRY_OK;
  ferry_status result = FERRY_OK;
  pthread_mutex_lock(&device->streams_lock);
  for (ferry_stream *s = device->streams; s; s = s->next) {
    ferry_status st = device->ops->stream_sync(s);
    if (st != FERRY_OK && result == FERRY_OK) result = st;
  }
  pthread_mutex_unlock(&device->streams_lock);
  return result;
}

void ferry_device_close(ferry_device *device) {
  if (!device) return;
  /* Drain first, so the stream-ordered frees have run; then the streams; the backend's
   * own state (the CUDA pool handle) goes last, after everything that used it. */
  if (atomic_load(&device->initialized)) {
    ferry_device_synchronize(device);
    while (device->streams) stream_destroy(device->streams);
    device->ops->shutdown(device);
  }
  ferry__ptrmap_destroy(&device->device_sizes);
  ferry__rangeset_destroy(&device->pinned);
  pthread_mutex_destroy(&device->init_lock);
  pthread_mutex_destroy(&device->streams_lock);
  pthread_mutex_destroy(&device->accounting_lock);
  ferry__free(device);
}

/* ---- accounting ---------------------------------------------------------- */

void ferry__device_cap_bytes(ferry_device *device, uint64_t cap) {
  pthread_mutex_lock(&device->accounting_lock);
  device->byte_cap = cap;
  pthread_mutex_unlock(&device->accounting_lock);
}

/* Under accounting_lock: 1 when `size` more device bytes would pass the cap. */
static int over_cap(const ferry_device *d, size_t size) {
  return d->byte_cap && (size > d->byte_cap || d->live_bytes > d->byte_cap - size);
}

/* FERRY_ENOMEM for `size` bytes refused by the cap, with the figures as they are now. */
static ferry_status cap_failure(ferry_device *d, size_t size) {
  pthread_mutex_lock(&d->accounting_lock);
  uint64_t live = d->live_bytes, cap = d->byte_cap;
  pthread_mutex_unlock(&d->accounting_lock);
  return ferry__fail(FERRY_ENOMEM, "%s: out of device memory allocating %zu bytes (%llu of the %llu "
                     "bytes allowed are in use)", d->name, size, (unsigned long long)live,
                     (unsigned long long)cap);
}

/* The cap's verdict before the backend is asked (a request far past it allocates
 * nothing); account_alloc checks again, under the same lock as the count. */
static ferry_status cap_check(ferry_device *d, size_t size) {
  pthread_mutex_lock(&d->accounting_lock);
  int over = over_cap(d, size);
  pthread_mutex_unlock(&d->accounting_lock);
  return over ? cap_failure(d, size) : FERRY_OK;
}

enum { ACCOUNT_OK = 0, ACCOUNT_NO_MEMORY = -1, ACCOUNT_OVER_CAP = -2 };

/* The counters move only when the map or set has recorded the pointer, so they always
 * equal what the map and set hold. Pinned memory has its own counters: it is host
 * memory, and never part of live_bytes or peak_bytes, nor held to the cap. */
static int account_alloc(ferry_device *d, const void *ptr, size_t size, int pinned) {
  pthread_mutex_lock(&d->accounting_lock);
  if (!pinned && over_cap(d, size)) {
    pthread_mutex_unlock(&d->accounting_lock);
    return ACCOUNT_OVER_CAP;
  }
  int rc = pinned ? ferry__rangeset_put(&d->pinned, ptr, size)
                  : ferry__ptrmap_put(&d->device_sizes, ptr, size);
  if (rc == 0 && pinned) {
    d->pinned_live_bytes += size;
    if (d->pinned_live_bytes > d->pinned_peak_bytes) d->pinned_peak_bytes = d->pinned_live_bytes;
  } else if (rc == 0) {
    d->live_bytes += size;
    d->allocations++;
    d->live_allocations++;
    if (d->live_bytes > d->peak_bytes) d->peak_bytes = d->live_bytes;
  }
  pthread_mutex_unlock(&d->accounting_lock);
  return rc;
}

/* 1 if ptr was a live allocation of this device (and is now forgotten). */
static int account_free(ferry_device *d, const void *ptr, int pinned) {
  size_t size = 0;
  pthread_mutex_lock(&d->accounting_lock);
  int found = pinned ? ferry__rangeset_take(&d->pinned, ptr, &size)
                     : ferry__ptrmap_take(&d->device_sizes, ptr, &size);
  if (found && pinned) {
    d->pinned_live_bytes -= size;
  } else if (found) {
    d->live_bytes -= size;
    d->live_allocations--;
  }
  pthread_mutex_unlock(&d->accounting_lock);
  return found;
}

/* 1 when [ptr, ptr+n) lies inside one live pinned allocation of the device: interior
 * pointers count, since callers copy slices of pool arenas. */
static int is_pinned(ferry_device *d, const void *ptr, size_t n) {
  pthread_mutex_lock(&d->accounting_lock);
  int covered = ferry__rangeset_covers(&d->pinned, ptr, n);
  pthread_mutex_unlock(&d->accounting_lock);
  return covered;
}

ferry_status ferry_device_malloc(ferry_device *device, ferry_stream *stream, size_t size,
                                 void **out) {
  if (!device || !out) return ferry__fail(FERRY_EINVAL, "ferry_device_malloc: device and out are required");
  *out = NULL;
  if (size == 0) return FERRY_OK;
  ferry_status st = resolve_stream(device, &stream);
  if (st != FERRY_OK) return st;
  if ((st = cap_check(device, size)) != FERRY_OK) return st;
  void *ptr = NULL;
  st = device->ops->malloc(stream, size, &ptr);
  if (st != FERRY_OK) return st;
  /* Memory that cannot be accounted (or that another thread's allocation put past the
   * cap meanwhile) is given back, on the same stream, uncounted: the caller sees
   * ENOMEM and nothing stays live. */
  int rc = account_alloc(device, ptr, size, 0);
  if (rc != ACCOUNT_OK) {
    device->ops->free(stream, ptr);
    return rc == ACCOUNT_OVER_CAP ? cap_failure(device, size)
                                  : ferry__fail(FERRY_ENOMEM, "%s: out of host memory for accounting", device->name);
  }
  *out = ptr;
  return FERRY_OK;
}

ferry_status ferry_device_free(ferry_device *device, ferry_stream *stream, void *ptr) {
  if (!device) return ferry__fail(FERRY_EINVAL, "ferry_device_free: device is NULL");
  if (!ptr) return FERRY_OK;
  ferry_status st = resolve_stream(device, &stream);
  if (st != FERRY_OK) return st;
  /* Forgotten before the backend's free is even queued: live_bytes drops when the free
   * is queued, while the CUDA pool's own figure drops when the stream reaches it. */
  if (!account_free(device, ptr, 0))
    return ferry__fail(FERRY_EINVAL, "%s: free of %p, which is not a live allocation of this device",
                      device->name, ptr);
  return device->ops->free(stream, ptr);
}

ferry_status ferry_device_host_alloc(ferry_device *device, size_t size, void **out) {
  if (!device || !out) return ferry__fail(FERRY_EINVAL, "ferry_device_host_alloc: device and out are required");
  *out = NULL;
  if (size == 0) return FERRY_OK;
  /* Pinned memory under CUDA belongs to the device's context: create that here, on the
   * one locked path, rather than implicitly inside cudaHostAlloc. */
  ferry_status st = ferry_device_init(device);
  if (st != FERRY_OK) return st;
  void *ptr = NULL;
  st = device->ops->host_alloc(device, size, &ptr);
  if (st != FERRY_OK) return st;
  if (account_alloc(device, ptr, size, 1) != 0) {
    device->ops->host_free(device, ptr);
    return ferry__fail(FERRY_ENOMEM, "%s: out of host memory for accounting", device->name);
  }
  *out = ptr;
  return FERRY_OK;
}

/* A pointer this device did not pin never reaches the backend; the call has no status
 * to report it with, so it is ignored. */
void ferry_device_host_free(ferry_device *device, void *ptr) {
  if (!device || !ptr) return;
  if (account_free(device, ptr, 1)) device->ops->host_free(device, ptr);
}

/* The figures are gathered in this library's own layout, then copied out as far as the
 * caller's struct_size reaches (device.h, above ferry_memory_stats). */
ferry_status ferry_device_memory_stats(ferry_device *device, ferry_memory_stats *out) {
  if (!device || !out) return ferry__fail(FERRY_EINVAL, "ferry_device_memory_stats: device and out are required");
  ferry_status st = ferry__struct_size_check(out, offsetof(ferry_memory_stats, live_bytes) + sizeof out->live_bytes,
                                             "ferry_device_memory_stats", "ferry_memory_stats_init");
  if (st != FERRY_OK) return st;
  ferry_memory_stats s;
  memset(&s, 0, sizeof s);
  pthread_mutex_lock(&device->accounting_lock);
  s.live_bytes = device->live_bytes;
  s.peak_bytes = device->peak_bytes;
  s.allocations = device->allocations;
  s.live_allocations = device->live_allocations;
  s.pinned_live_bytes = device->pinned_live_bytes;
  s.pinned_peak_bytes = device->pinned_peak_bytes;
  pthread_mutex_unlock(&device->accounting_lock);
  /* One lock after the other, never both: the figures are each exact, not one
   * snapshot. */
  pthread_mutex_lock(&device->init_lock);
  s.initializations = device->initializations;
  pthread_mutex_unlock(&device->init_lock);
  if (device->ops->pool_high && atomic_load(&device->initialized) &&
      device->ops->pool_high(device, &s.pool_used_high) == FERRY_OK)
    s.pool_witness = 1;
  ferry__struct_copy_out(out, &s, sizeof s);
  return FERRY_OK;
}

ferry_status ferry_device_reset_peak(ferry_device *device) {
  if (!device) return ferry__fail(FERRY_EINVAL, "ferry_device_reset_peak: device is NULL");
  pthread_mutex_lock(&device->accounting_lock);
  device->peak_bytes = device->live_bytes;
  device->pinned_peak_bytes = device->pinned_live_bytes;
  pthread_mutex_unlock(&device->accounting_lock);
  if (device->ops->pool_reset && atomic_load(&device->initialized))
    return device->ops->pool_reset(device);
  return FERRY_OK;
}

/* ---- copies, host functions, events --------------------------------------- */

static ferry_status check_copy(const char *fn, ferry_stream *stream, void *dst, const void *src,
                               size_t n) {
  if (!stream) return ferry__fail(FERRY_EINVAL, "%s: stream is NULL", fn);
  if (n && (!dst || !src)) return ferry__fail(FERRY_EINVAL, "%s: NULL buffer for %zu bytes", fn, n);
  return FERRY_OK;
}

/* The host side of the copy, if it has one that the rule covers: an H2D source or a
 * D2H destination. D2D has none; H2H is the host backend's own kind (its device
 * memory is host memory) and CUDA never queues it. */
static const void *host_side(void *dst, const void *src, ferry_copy_kind kind) {
  if (kind == FERRY_COPY_H2D) return src;
  if (kind == FERRY_COPY_D2H) return dst;
  return NULL;
}

static int copy_is_pinned(ferry_stream *stream, void *dst, const void *src, size_t n,
                          ferry_copy_kind kind) {
  const void *host = host_side(dst, src, kind);
  return !host || is_pinned(stream->device, host, n);
}

ferry_status ferry_memcpy_async(ferry_stream *stream, void *dst, const void *src, size_t n,
                                ferry_copy_kind kind) {
  ferry_status st = check_copy("ferry_memcpy_async", stream, dst, src, n);
  if (st != FERRY_OK || n == 0) return st;
  if (!copy_is_pinned(stream, dst, src, n, kind))
    return ferry__fail(FERRY_EINVAL,
                      "ferry_memcpy_async: the host %s (%p, %zu bytes) is not pinned memory of %s; "
                      "an asynchronous copy needs a host buffer from ferry_device_host_alloc (or a "
                      "pool arena) of the stream's device: use ferry_memcpy to copy pageable "
                      "memory synchronously, or stage it through pinned memory",
                      kind == FERRY_COPY_H2D ? "source" : "destination", host_side(dst, src, kind),
                      n, stream->device->name);
  return stream->device->ops->memcpy(stream, dst, src, n, kind);
}

/* No pinned check: the stream is synchronised before returning, so no host buffer is
 * read or written after the call, and CUDA copies pageable memory correctly (it only
 * stops being asynchronous). The whole stream is waited for, not just this copy. */
ferry_status ferry_memcpy(ferry_stream *stream, void *dst, const void *src, size_t n,
                          ferry_copy_kind kind) {
  ferry_status st = check_copy("ferry_memcpy", stream, dst, src, n);
  if (st == FERRY_OK && n) st = stream->device->ops->memcpy(stream, dst, src, n, kind);
  if (st == FERRY_OK && n) st = stream->device->ops->stream_sync(stream);
  return st;
}

ferry_status ferry__memcpy_or_wait(ferry_stream *stream, void *dst, const void *src, size_t n,
                                  ferry_copy_kind kind) {
  ferry_status st = check_copy("ferry__memcpy_or_wait", stream, dst, src, n);
  if (st != FERRY_OK || n == 0) return st;
  if (copy_is_pinned(stream, dst, src, n, kind))
    return stream->device->ops->memcpy(stream, dst, src, n, kind);
  return ferry_memcpy(stream, dst, src, n, kind);
}

ferry_status ferry__copy_plane_or_wait(ferry_stream *stream, const ferry__plane_copy *p, ferry_copy_kind kind) {
  if (!stream || !p || p->row_bytes > p->src_pitch || p->row_bytes > p->dst_pitch || p->rows > p->dst_rows)
    return ferry__fail(FERRY_EINVAL, "padded copy: rows of %zu bytes do not fit pitches %zu and %zu, or %zu rows "
                                    "do not fit %zu", p ? p->row_bytes : 0, p ? p->src_pitch : 0,
                      p ? p->dst_pitch : 0, p ? p->rows : 0, p ? p->dst_rows : 0);
  size_t dst_bytes = p->dst_pitch * p->dst_rows;
  size_t src_bytes = p->rows ? p->src_pitch * (p->rows - 1) + p->row_bytes : 0;
  if (dst_bytes == 0) return FERRY_OK;
  if (!p->dst || (src_bytes && !p->src))
    return ferry__fail(FERRY_EINVAL, "padded copy: no source or destination");
  /* the host side's whole extent is pinned, or the copy is waited for */
  int pinned = kind == FERRY_COPY_H2D   ? copy_is_pinned(stream, p->dst, p->src, src_bytes, kind)
               : kind == FERRY_COPY_D2H ? copy_is_pinned(stream, p->dst, p->src, dst_bytes, kind)
                                        : 1;
  ferry_status st = stream->device->ops->copy_plane(stream, p, kind);
  if (st == FERRY_OK && !pinned) st = stream->device->ops->stream_sync(stream);
  return st;
}

ferry_status ferry_stream_call(ferry_stream *stream, ferry_host_fn fn, void *arg) {
  if (!stream || !fn) return ferry__fail(FERRY_EINVAL, "ferry_stream_call: stream and fn are required");
  return stream->device->ops->call(stream, fn, arg);
}

ferry_status ferry_event_record(ferry_stream *stream, ferry_event **out) {
  if (!stream || !out) return ferry__fail(FERRY_EINVAL, "ferry_event_record: stream and out are required");
  ferry_event *e = ferry__calloc(1, sizeof *e);
  if (!e) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for an event", stream->device->name);
  e->device = stream->device;
  ferry_status st = stream->device->ops->event_record(stream, e);
  if (st != FERRY_OK) {
    ferry__free(e);
    return st;
  }
  *out = e;
  return FERRY_OK;
}

int ferry_event_query(ferry_event *event) {
  if (!event) return ferry__fail(FERRY_EINVAL, "ferry_event_query: event is NULL");
  return event->device->ops->event_query(event);
}

ferry_status ferry_event_synchronize(ferry_event *event) {
  if (!event) return ferry__fail(FERRY_EINVAL, "ferry_event_synchronize: event is NULL");
  return event->device->ops->event_sync(event);
}

void ferry_event_destroy(ferry_event *event) {
  if (!event) return;
  event->device->ops->event_destroy(event);
  ferry__free(event);
}

ferry_copy_kind ferry__copy_kind_between(int from_host, int to_host) {
  if (from_host) return to_host ? FERRY_COPY_H2H : FERRY_COPY_H2D;
  return to_host ? FERRY_COPY_D2H : FERRY_COPY_D2D;
}

void *ferry__stream_native(const ferry_stream *stream) { return stream->impl; }
