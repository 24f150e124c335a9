/* lib/device_internal.h - what a device backend provides (internal).
 *
 * device.c owns everything the backends share: name parsing, lazy initialisation
 * under a lock, the stream list, and byte-exact accounting. A backend only moves
 * bytes and orders work. lib/'s alone: what a layer above may use of a device beyond
 * ferry/device.h is lib/device_native.h.
 */
#ifndef FERRY_LIB_DEVICE_INTERNAL_H
#define FERRY_LIB_DEVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "ferry/device.h"
#include "lib/device_native.h"
#include "lib/ptrmap.h"
#include "lib/rangeset.h"

/* One plane of a padded copy: `rows` rows of `row_bytes` bytes from src (rows
 * src_pitch apart) into dst (rows dst_pitch apart), and zeros in the rest of dst:
 * bytes row_bytes..dst_pitch of its first `rows` rows, and rows rows..dst_rows whole.
 * row_bytes <= src_pitch, row_bytes <= dst_pitch, rows <= dst_rows (ferry__copy_plane
 * checks). What the transfer pads a batch's images with (transfer.h, pad_multiple). */
typedef struct ferry__plane_copy {
  void *dst;
  size_t dst_pitch, dst_rows;
  const void *src;
  size_t src_pitch, row_bytes, rows;
} ferry__plane_copy;

/* Every entry but probe is called only on a device whose probe succeeded; pool_high
 * and pool_reset may be NULL (the host backend has no pool of its own). What `impl`
 * points at, in a device, stream or event, belongs to the backend. */
typedef struct ferry__backend {
  const char *name;
  /* At open: is device `index` there? Must not create a context. */
  ferry_status (*probe)(int index);
  /* Lazy, exactly once: context, default stream, memory pool. */
  ferry_status (*init)(ferry_device *device);
  void (*shutdown)(ferry_device *device);
  ferry_status (*stream_open)(ferry_stream *stream);
  void (*stream_close)(ferry_stream *stream);
  ferry_status (*stream_sync)(ferry_stream *stream);
  ferry_status (*malloc)(ferry_stream *stream, size_t size, void **out);
  ferry_status (*free)(ferry_stream *stream, void *ptr);
  ferry_status (*host_alloc)(ferry_device *device, size_t size, void **out);
  void (*host_free)(ferry_device *device, void *ptr);
  ferry_status (*memcpy)(ferry_stream *stream, void *dst, const void *src, size_t n,
                         ferry_copy_kind kind);
  ferry_status (*call)(ferry_stream *stream, ferry_host_fn fn, void *arg);
  /* Queue one padded plane (ferry__plane_copy); the host side is pinned, as for memcpy. */
  ferry_status (*copy_plane)(ferry_stream *stream, const ferry__plane_copy *plane, ferry_copy_kind kind);
  ferry_status (*event_record)(ferry_stream *stream, ferry_event *event);
  int (*event_query)(ferry_event *event);
  ferry_status (*event_sync)(ferry_event *event);
  void (*event_destroy)(ferry_event *event);
  /* The backend's own high watermark of device memory, if it has one. */
  ferry_status (*pool_high)(ferry_device *device, uint64_t *out);
  ferry_status (*pool_reset)(ferry_device *device);
} ferry__backend;

struct ferry_stream {
  ferry_device *device;
  void *impl;
  ferry_stream *next; /* in the device's list of open streams */
};

struct ferry_event {
  ferry_device *device;
  void *impl;
};

/* Locks, what each guards and their order: device.c's opening comment. */
struct ferry_device {
  /* ops, kind, index and name are set at open and never change; impl is the
   * backend's, set by its init. */
  const ferry__backend *ops;
  ferry_device_kind kind;
  int index;
  char name[16];
  void *impl;

  /* initialized is written once, under init_lock, with release order: a thread that
   * reads it as 1 (acquire) also sees impl and default_stream. */
  pthread_mutex_t init_lock;
  atomic_int initialized;
  uint64_t initializations;
  ferry_stream *default_stream;

  pthread_mutex_t streams_lock;
  ferry_stream *streams;

  pthread_mutex_t accounting_lock;
  ferry__ptrmap device_sizes;
  ferry__rangeset pinned; /* live ferry_device_host_alloc allocations */
  uint64_t live_bytes, peak_bytes, allocations, live_allocations;
  uint64_t pinned_live_bytes, pinned_peak_bytes;
  uint64_t byte_cap; /* 0: none; else live_bytes never passes it (ferry__device_cap_bytes) */
};

/* Cap the device memory live at once on `device` (0 lifts the cap): an allocation
 * that would take live_bytes past it fails with FERRY_ENOMEM, as exhausted memory
 * does, before the backend is asked. The same code for both backends: a test hook
 * that runs a GPU out of memory on the host backend (tests/transfer), and under CUDA
 * a pool smaller than the device. */
void ferry__device_cap_bytes(ferry_device *device, uint64_t cap);

/* A padded plane (ferry__plane_copy) in stream order: queued when the host side is
 * pinned, otherwise done and waited for, as ferry__memcpy_or_wait. */
ferry_status ferry__copy_plane_or_wait(ferry_stream *stream, const ferry__plane_copy *plane, ferry_copy_kind kind);

extern const ferry__backend ferry__host_backend;
extern const ferry__backend ferry__cuda_backend;

#endif
