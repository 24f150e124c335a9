/* lib/device_cuda.c - the CUDA backend: streams, stream-ordered pool allocations,
 * pinned host memory, events, and the pool's own high watermark.
 *
 * Always compiled when the toolkit is found, so CI (which has no GPU) proves it
 * builds and that opening it without a device fails cleanly with FERRY_ENODEV.
 *
 * Owns: per device, a cuda_device (the handle of the device's default memory pool),
 * set by init and freed by shutdown; a stream's impl is its cudaStream_t, an event's
 * its cudaEvent_t. No lock here: the CUDA runtime is thread-safe, and what ferry
 * shares between threads (init, the stream list, accounting) is locked in device.c.
 * Callers: device.c, from any thread; a host function runs on a thread of the driver.
 *
 * Invariants:
 *   - device->impl is set exactly while the device is initialised;
 *   - the runtime's current device is per thread, so every call that creates or uses
 *     state of a device selects it first (use_device), except those that only take a
 *     stream or event handle (synchronise, query, destroy, launch a host function),
 *     which carry their device with them;
 *   - device memory comes from the device's default pool and nowhere else, so the
 *     pool's UsedMemHigh is a second, independent reading of ferry's device
 *     allocations (plus whatever other code allocates from that same pool);
 *   - after a failed allocation the runtime's last error is cleared, so that the
 *     next, unrelated call does not report it.
 * Not done here: no pageable-memory check (device.c refuses unpinned asynchronous
 * copies before they get here), no peer access between GPUs.
 */
#include "ferry_config.h"
#include "lib/device_internal.h"
#include "lib/status.h"

#if FERRY_HAVE_CUDA
#include <cuda_runtime.h>

#include "lib/alloc.h"

typedef struct cuda_device {
  cudaMemPool_t pool;
} cuda_device;

static ferry_status cuda_error(ferry_device *device, const char *what, cudaError_t err) {
  return ferry__fail(FERRY_EDEVICE, "%s: %s failed: %s", device ? device->name : "cuda", what,
                    cudaGetErrorString(err));
}

/* The runtime's current device is per thread: set it before every call that
 * creates or uses device state, since callers come from any thread. */
static ferry_status use_device(ferry_device *device) {
  cudaError_t err = cudaSetDevice(device->index);
  return err == cudaSuccess ? FERRY_OK : cuda_error(device, "cudaSetDevice", err);
}

/* Every "no GPU" message ends with the way out: the runtime's own words ("CUDA driver
 * version is insufficient for CUDA runtime version" on a machine with no driver at
 * all) do not tell a user that the CPU backend exists. */
#define RUN_ON_HOST "; the \"host\" device runs on the CPU instead (--device host in the examples)"

static ferry_status cuda_probe(int index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError(); /* clear the sticky-free error so later calls start clean */
    return ferry__fail(FERRY_ENODEV,
                      "no CUDA device: no usable NVIDIA GPU and driver were found (the CUDA "
                      "runtime reports \"%s\", %s)" RUN_ON_HOST,
                      cudaGetErrorString(err), cudaGetErrorName(err));
  }
  if (count == 0)
    return ferry__fail(FERRY_ENODEV, "no CUDA device: the driver sees 0 GPUs" RUN_ON_HOST);
  if (index >= count)
    return ferry__fail(FERRY_ENODEV, "no CUDA device cuda:%d: the driver sees %d GPU%s" RUN_ON_HOST,
                      index, count, count == 1 ? "" : "s");
  return FERRY_OK;
}

static ferry_status cuda_init(ferry_device *device) {
  ferry_status st = use_device(device);
  if (st != FERRY_OK) return st;
  cudaError_t err = cudaFree(0); /* creates the primary context now, not mid-transfer */
  if (err != cudaSuccess) return cuda_error(device, "creating the context", err);
  cuda_device *cd = ferry__calloc(1, sizeof *cd);
  if (!cd) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", device->name);
  err = cudaDeviceGetDefaultMemPool(&cd->pool, device->index);
  if (err != cudaSuccess) {
    ferry__free(cd);
    return cuda_error(device, "cudaDeviceGetDefaultMemPool", err);
  }
  /* Keep freed pool memory cached: returning it to the OS between batches would
   * make every batch pay for cudaMalloc again. A failure here costs only that, so it
   * is not checked. */
  uint64_t threshold = UINT64_MAX;
  cudaMemPoolSetAttribute(cd->pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  device->impl = cd;
  return FERRY_OK;
}

static void cuda_shutdown(ferry_device *device) {
  ferry__free(device->impl);
  device->impl = NULL;
}

static ferry_status cuda_stream_open(ferry_stream *stream) {
  ferry_status st = use_device(stream->device);
  if (st != FERRY_OK) return st;
  /* Non-blocking: ferry's streams do not wait for, nor hold up, work that other code
   * queues on the legacy default stream (stream 0). */
  cudaStream_t s;
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) return cuda_error(stream->device, "cudaStreamCreate", err);
  stream->impl = s;
  return FERRY_OK;
}

/* cudaStreamDestroy returns before the stream's work has run; ferry's contract is
 * that closing waits for it, hence the synchronisation first. */
static void cuda_stream_close(ferry_stream *stream) {
  use_device(stream->device);
  cudaStreamSynchronize(stream->impl);
  cudaStreamDestroy(stream->impl);
}

static ferry_status cuda_stream_sync(ferry_stream *stream) {
  cudaError_t err = cudaStreamSynchronize(stream->impl);
  return err == cudaSuccess ? FERRY_OK : cuda_error(stream->device, "cudaStreamSynchronize", err);
}

static ferry_status cuda_malloc(ferry_stream *stream, size_t size, void **out) {
  ferry_status st = use_device(stream->device);
  if (st != FERRY_OK) return st;
  /* From the pool by name: plain cudaMallocAsync takes the device's *current* pool,
   * which other code may change (cudaDeviceSetMemPool), and the watermark read by
   * cuda_pool_high is this pool's. */
  cuda_device *cd = stream->device->impl;
  cudaError_t err = cudaMallocFromPoolAsync(out, size, cd->pool, stream->impl);
  if (err != cudaSuccess) {
    cudaGetLastError();
    /* Exhausted memory is the caller's to handle (free, then retry): FERRY_ENOMEM, as
     * the host backend and the device's byte cap say it; anything else is the runtime's. */
    if (err == cudaErrorMemoryAllocation)
      return ferry__fail(FERRY_ENOMEM, "%s: out of device memory allocating %zu bytes (cudaMallocAsync: %s)",
                         stream->device->name, size, cudaGetErrorString(err));
    return ferry__fail(FERRY_EDEVICE, "%s: cudaMallocAsync of %zu bytes failed: %s",
                      stream->device->name, size, cudaGetErrorString(err));
  }
  return FERRY_OK;
}

/* The memory goes back to the pool when the stream reaches the free, so work queued
 * before it on the stream may still use it. */
static ferry_status cuda_free(ferry_stream *stream, void *ptr) {
  use_device(stream->device);
  cudaError_t err = cudaFreeAsync(ptr, stream->impl);
  return err == cudaSuccess ? FERRY_OK : cuda_error(stream->device, "cudaFreeAsync", err);
}

static ferry_status cuda_host_alloc(ferry_device *device, size_t size, void **out) {
  ferry_status st = use_device(device);
  if (st != FERRY_OK) return st;
  /* Portable: pinned for every context, not only the current device's, so an arena
   * can feed any GPU of the process. */
  cudaError_t err = cudaHostAlloc(out, size, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ferry__fail(FERRY_ENOMEM, "%s: cudaHostAlloc of %zu pinned bytes failed: %s",
                      device->name, size, cudaGetErrorString(err));
  }
  return FERRY_OK;
}

static void cuda_host_free(ferry_device *device, void *ptr) { cudaFreeHost(ptr); }

static enum cudaMemcpyKind copy_kind(ferry_copy_kind kind) {
  switch (kind) {
    case FERRY_COPY_H2D: return cudaMemcpyHostToDevice;
    case FERRY_COPY_D2H: return cudaMemcpyDeviceToHost;
    case FERRY_COPY_D2D: return cudaMemcpyDeviceToDevice;
    case FERRY_COPY_H2H: return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

static ferry_status cuda_memcpy(ferry_stream *stream, void *dst, const void *src, size_t n,
                                ferry_copy_kind kind) {
  use_device(stream->device);
  cudaError_t err = cudaMemcpyAsync(dst, src, n, copy_kind(kind), stream->impl);
  return err == cudaSuccess ? FERRY_OK : cuda_error(stream->device, "cudaMemcpyAsync", err);
}

/* The content as one 2D copy, the padding as two memsets: the right of each row, and
 * the rows below (contiguous). All in stream order. */
static ferry_status cuda_copy_plane(ferry_stream *stream, const ferry__plane_copy *p, ferry_copy_kind kind) {
  use_device(stream->device);
  cudaError_t err = cudaSuccess;
  if (p->rows && p->row_bytes)
    err = cudaMemcpy2DAsync(p->dst, p->dst_pitch, p->src, p->src_pitch, p->row_bytes, p->rows, copy_kind(kind),
                            stream->impl);
  if (err != cudaSuccess) return cuda_error(stream->device, "cudaMemcpy2DAsync", err);
  if (p->rows && p->dst_pitch > p->row_bytes)
    err = cudaMemset2DAsync((char *)p->dst + p->row_bytes, p->dst_pitch, 0, p->dst_pitch - p->row_bytes, p->rows,
                            stream->impl);
  if (err == cudaSuccess && p->dst_rows > p->rows)
    err = cudaMemsetAsync((char *)p->dst + p->rows * p->dst_pitch, 0, (p->dst_rows - p->rows) * p->dst_pitch,
                          stream->impl);
  return err == cudaSuccess ? FERRY_OK : cuda_error(stream->device, "cudaMemsetAsync", err);
}

/* fn runs on a driver thread once the stream reaches it, and holds the stream up until
 * it returns; it may make no CUDA call (transfer.h says so to hook writers). */
static ferry_status cuda_call(ferry_stream *stream, ferry_host_fn fn, void *arg) {
  cudaError_t err = cudaLaunchHostFunc(stream->impl, fn, arg);
  return err == cudaSuccess ? FERRY_OK : cuda_error(stream->device, "cudaLaunchHostFunc", err);
}

static ferry_status cuda_event_record(ferry_stream *stream, ferry_event *event) {
  use_device(stream->device);
  /* A new event per record, without timing: ferry only asks "done yet?", and events
   * without timestamps are the cheaper kind to record and query. */
  cudaEvent_t e;
  cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (err != cudaSuccess) return cuda_error(stream->device, "cudaEventCreate", err);
  err = cudaEventRecord(e, stream->impl);
  if (err != cudaSuccess) {
    cudaEventDestroy(e);
    return cuda_error(stream->device, "cudaEventRecord", err);
  }
  event->impl = e;
  return FERRY_OK;
}

static int cuda_event_query(ferry_event *event) {
  cudaError_t err = cudaEventQuery(event->impl);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) return 0;
  return cuda_error(event->device, "cudaEventQuery", err);
}

static ferry_status cuda_event_sync(ferry_event *event) {
  cudaError_t err = cudaEventSynchronize(event->impl);
  return err == cudaSuccess ? FERRY_OK : cuda_error(event->device, "cudaEventSynchronize", err);
}

static void cuda_event_destroy(ferry_event *event) { cudaEventDestroy(event->impl); }

static ferry_status cuda_pool_high(ferry_device *device, uint64_t *out) {
  cuda_device *cd = device->impl;
  cudaError_t err = cudaMemPoolGetAttribute(cd->pool, cudaMemPoolAttrUsedMemHigh, out);
  return err == cudaSuccess ? FERRY_OK : cuda_error(device, "reading the pool watermark", err);
}

/* CUDA accepts only 0 as the new value of UsedMemHigh. */
static ferry_status cuda_pool_reset(ferry_device *device) {
  cuda_device *cd = device->impl;
  uint64_t zero = 0;
  cudaError_t err = cudaMemPoolSetAttribute(cd->pool, cudaMemPoolAttrUsedMemHigh, &zero);
  return err == cudaSuccess ? FERRY_OK : cuda_error(device, "resetting the pool watermark", err);
}

const ferry__backend ferry__cuda_backend = {
    .name = "cuda",
    .probe = cuda_probe,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .stream_open = cuda_stream_open,
    .stream_close = cuda_stream_close,
    .stream_sync = cuda_stream_sync,
    .malloc = cuda_malloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .memcpy = cuda_memcpy,
    .call = cuda_call,
    .copy_plane = cuda_copy_plane,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_destroy = cuda_event_destroy,
    .pool_high = cuda_pool_high,
    .pool_reset = cuda_pool_reset,
};

#else /* built without the CUDA toolkit */

/* Only probe is set: it always fails, and device.c calls nothing else of a backend
 * whose probe failed, since the device is never created. */

static ferry_status cuda_unavailable(int index) {
  return ferry__fail(FERRY_ENODEV,
                    "no CUDA device: ferry was built without the CUDA toolkit (meson -Dcuda=enabled); "
                    "the \"host\" device runs on the CPU instead (--device host in the examples)");
}

const ferry__backend ferry__cuda_backend = {.name = "cuda", .probe = cuda_unavailable};

#endif
