/* lib/device_native.h - what code that queues its own device work needs beyond
 * ferry/device.h (internal; one of lib/'s floor headers, docs/architecture.md).
 *
 * A producer (lib/transfer/producer.h: the GPU decoder's, image/gpu/) launches its own
 * kernels and nvJPEG calls on a ferry stream and copies host bytes the way the
 * transfer does. It needs the backend's stream handle and the library's copy rules,
 * not the device's insides (lib/device_internal.h, which includes this header and is
 * lib/'s alone): the accounting, the locks and the backends stay out of its reach.
 */
#ifndef FERRY_LIB_DEVICE_NATIVE_H
#define FERRY_LIB_DEVICE_NATIVE_H

#include <stddef.h>

#include "ferry/device.h"

/* The backend's handle of `stream`: its cudaStream_t under the CUDA backend (what a
 * kernel launch or an nvJPEG call takes); under the host backend, the backend's own
 * object, of no use outside lib/. */
void *ferry__stream_native(const ferry_stream *stream);

/* For the library's own copies whose host side is pageable by design (an unpacked
 * batch's per-sample buffers, a GPU batch packed onto the host device, a module's
 * host tensors): queued as ferry_memcpy_async when it would take the copy, otherwise
 * done synchronously as ferry_memcpy, since pageable memory cannot be copied
 * asynchronously by CUDA. */
ferry_status ferry__memcpy_or_wait(ferry_stream *stream, void *dst, const void *src, size_t n, ferry_copy_kind kind);

/* The copy kind between memory of these kinds. */
ferry_copy_kind ferry__copy_kind_between(int from_host, int to_host);

#endif
