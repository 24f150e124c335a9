/* ferry/device.h - devices, streams, events and device memory accounting.
 *
 * A device is opened by name: "host" (plain memory, the CPU training loop's device
 * and the one CI tests on), "cuda" (= "cuda:0") or "cuda:N". Both backends keep
 * the same contract:
 *   - work queued on a stream runs in order; copies are asynchronous and complete
 *     no later than an event recorded after them;
 *   - device allocations are stream-ordered (CUDA: cudaMallocAsync/cudaFreeAsync
 *     from the device's memory pool; host: separate heap buffers);
 *   - every allocation made through ferry is counted: live bytes, peak bytes,
 *     number of allocations, exact to the byte.
 * The host backend runs each stream on its own thread, so asynchrony is real there
 * too: a copy has not necessarily happened when ferry_memcpy_async returns.
 *   - asynchronous copies take host memory only when it is pinned by the stream's
 *     device (ferry_memcpy_async below); ferry_memcpy copies any memory, synchronously.
 *
 * Opening "cuda" without a driver or a device fails with FERRY_ENODEV and says why.
 * Initialisation (CUDA context, default stream, memory pool) is deferred to the
 * first call that needs it and runs exactly once, under a lock.
 */
#ifndef FERRY_DEVICE_H
#define FERRY_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"
#include "ferry/tensor.h"
#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_event ferry_event;

typedef enum ferry_device_kind { FERRY_DEVICE_HOST = 0, FERRY_DEVICE_CUDA = 1 } ferry_device_kind;

typedef enum ferry_copy_kind {
  FERRY_COPY_H2D = 0, /* host to device (pinned, for ferry_memcpy_async) */
  FERRY_COPY_D2H = 1,
  FERRY_COPY_D2D = 2,
  FERRY_COPY_H2H = 3
} ferry_copy_kind;

/* Statistics structs grow: a counter added later is appended at the end. Each of them
 * (ferry_memory_stats, ferry_pool_stats, ferry_loader_stats) starts with struct_size,
 * which the caller sets to the size of its struct with the struct's init macro
 * (ferry_memory_stats_init and the others) before calling the getter:
 *     ferry_memory_stats m;
 *     ferry_memory_stats_init(&m);
 *     ferry_device_memory_stats(device, &m);
 * The getter writes at most struct_size bytes: the counters the caller's struct and
 * this library share, then zeros over any part of it past this library's own struct
 * (counters this library lacks), and sets struct_size to the bytes of counters it
 * wrote, the smaller of the two sizes. So a program built against an older header
 * (a smaller struct) is never written past its struct, and one built against a newer
 * header finds the counters this library lacks at zero, and struct_size says where
 * they begin. The struct that comes back may be passed again as it is. A struct_size
 * that does not cover the first counter (0: a struct never initialised) is
 * FERRY_EINVAL, naming the call and the macro, and nothing is written.
 * A stats struct embedded in another (ferry_loader_stats.pool) gets as its own
 * struct_size the number of its bytes written: its full size when the outer
 * struct_size covers it entirely, the covered part when that ends inside it. Its size
 * is part of the outer layout, so ferry_pool_stats keeps its size while
 * ferry_loader_stats embeds it: a counter added to it would move every later field. */
typedef struct ferry_memory_stats {
  size_t struct_size;         /* sizeof(ferry_memory_stats), set by ferry_memory_stats_init */
  uint64_t live_bytes;        /* device bytes allocated through ferry and not yet freed */
  uint64_t peak_bytes;        /* max of live_bytes since open or the last reset_peak */
  uint64_t allocations;       /* allocations made since open */
  uint64_t live_allocations;  /* allocations not yet freed */
  uint64_t pinned_live_bytes; /* pinned host bytes (ferry_device_host_alloc) live */
  uint64_t pinned_peak_bytes;
  int pool_witness;           /* 1 when pool_used_high is the backend's own reading */
  uint64_t pool_used_high;    /* CUDA: cudaMemPoolAttrUsedMemHigh of the device's pool */
  uint64_t initializations;   /* times lazy initialisation ran: 0 before first use, then 1 */
} ferry_memory_stats;
/* Set stats->struct_size to the size this header gives, before ferry_device_memory_stats. */
#define ferry_memory_stats_init(stats) ((void)((stats)->struct_size = sizeof *(stats)))

/* A pinned pool's counts and byte totals (ferry_pool_stats_get, ferry/pool.h, in the
 * advanced API; a loader reports its own pool's in ferry_loader_stats.pool). */
typedef struct ferry_pool_stats {
  size_t struct_size;       /* sizeof(ferry_pool_stats), set by ferry_pool_stats_init */
  size_t arenas;            /* fixed number of arenas */
  size_t in_use;            /* acquired and not released */
  size_t pending;           /* released, waiting for their events */
  uint64_t acquisitions;    /* successful acquires since open */
  uint64_t growths;         /* times an arena had to be reallocated larger */
  uint64_t reserved_bytes;  /* sum of arena capacities now */
  uint64_t peak_reserved_bytes;
  uint64_t in_use_bytes;    /* capacities of arenas acquired or pending */
  uint64_t peak_in_use_bytes;
} ferry_pool_stats;
/* Set stats->struct_size to the size this header gives, before ferry_pool_stats_get. */
#define ferry_pool_stats_init(stats) ((void)((stats)->struct_size = sizeof *(stats)))

/* Open a device by name. Never initialises a CUDA context: that waits for first use. */
FERRY_API ferry_status ferry_device_open(const char *name, ferry_device **out);
/* Synchronise and release everything the device holds. Streams must be closed first. */
FERRY_API void ferry_device_close(ferry_device *device);

/* Which backend the device runs on: FERRY_DEVICE_HOST or FERRY_DEVICE_CUDA. */
FERRY_API ferry_device_kind ferry_device_get_kind(const ferry_device *device);
/* The canonical name: "host" or "cuda:N". */
FERRY_API const char *ferry_device_name(const ferry_device *device);
/* Run the device's lazy initialisation now (normally the first allocation or stream
 * does it). Exactly once per device, whatever the number of threads calling. */
FERRY_API ferry_status ferry_device_init(ferry_device *device);
/* Wait for all work on every stream of the device. */
FERRY_API ferry_status ferry_device_synchronize(ferry_device *device);

/* Streams: ordered queues of work. NULL where a stream is asked for means the
 * device's default stream. */
FERRY_API ferry_status ferry_stream_open(ferry_device *device, ferry_stream **out);
FERRY_API void ferry_stream_close(ferry_stream *stream); /* waits for its work first */
FERRY_API ferry_status ferry_stream_synchronize(ferry_stream *stream);
FERRY_API ferry_device *ferry_stream_device(const ferry_stream *stream);

/* Stream-ordered device memory. size 0 gives NULL and counts nothing. Exhausted
 * device memory is FERRY_ENOMEM (nothing counted: free some and retry); another
 * runtime error, FERRY_EDEVICE. */
FERRY_API ferry_status ferry_device_malloc(ferry_device *device, ferry_stream *stream, size_t size,
                                           void **out);
FERRY_API ferry_status ferry_device_free(ferry_device *device, ferry_stream *stream, void *ptr);

/* Pinned (page-locked under CUDA, page-aligned under host) host memory, for arenas. */
FERRY_API ferry_status ferry_device_host_alloc(ferry_device *device, size_t size, void **out);
FERRY_API void ferry_device_host_free(ferry_device *device, void *ptr);

/* Queue a copy of n bytes on the stream. The source must stay unchanged, and both
 * buffers alive, until an event recorded after it has completed.
 *
 * PINNED MEMORY RULE, the same on every backend: the host side of the copy (the
 * source of an H2D copy, the destination of a D2H one) must lie inside one live
 * ferry_device_host_alloc allocation of the stream's device: a pool arena, or any
 * slice of one (interior pointers are fine). Anything else (malloc, the stack, static
 * arrays, another device's pinned memory) is refused with FERRY_EINVAL and a message
 * saying so. Why: CUDA cannot copy pageable memory asynchronously; cudaMemcpyAsync
 * then blocks the calling thread until the copy has run, which deadlocks behind a
 * host function that waits for that thread. The check is a binary search over the
 * device's pinned allocations. D2D and H2H copies are not checked. */
FERRY_API ferry_status ferry_memcpy_async(ferry_stream *stream, void *dst, const void *src, size_t n,
                                          ferry_copy_kind kind);
/* Copy n bytes in the stream's order and wait: returns once the copy, and all work
 * queued before it on the stream, has completed. Any host memory, pinned or not;
 * the way to copy pageable buffers. */
FERRY_API ferry_status ferry_memcpy(ferry_stream *stream, void *dst, const void *src, size_t n,
                                    ferry_copy_kind kind);

/* Queue a host function: it runs after all earlier work on the stream and before
 * any later work. It must not call ferry stream functions on the same stream. */
typedef void (*ferry_host_fn)(void *arg);
FERRY_API ferry_status ferry_stream_call(ferry_stream *stream, ferry_host_fn fn, void *arg);

/* Events: a point in a stream. */
FERRY_API ferry_status ferry_event_record(ferry_stream *stream, ferry_event **out);
/* 1 when complete, 0 when pending, a negative ferry_status on error. */
FERRY_API int ferry_event_query(ferry_event *event);
FERRY_API ferry_status ferry_event_synchronize(ferry_event *event);
FERRY_API void ferry_event_destroy(ferry_event *event);

/* The device's accounting now: live and peak device bytes, allocation counts, pinned
 * host bytes, and under CUDA the memory pool's own high watermark (ferry_memory_stats).
 * out->struct_size must be set first (ferry_memory_stats_init; the rule above it). */
FERRY_API ferry_status ferry_device_memory_stats(ferry_device *device, ferry_memory_stats *out);
/* Set the peak to the live bytes now (and reset the CUDA pool's own watermark). */
FERRY_API ferry_status ferry_device_reset_peak(ferry_device *device);

#ifdef __cplusplus
}
#endif
#endif
