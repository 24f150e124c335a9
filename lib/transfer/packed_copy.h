/* lib/transfer/packed_copy.h - the whole-batch device copy, kept as a baseline
 * (internal: not part of the public API).
 *
 * Before the direct path (ferry_transfer), a batch went to the device as one packed
 * copy and each sample's slice was cloned from it, so for a moment the device held
 * every field twice. repro/cuda_peak_memory measures that extra peak against the
 * direct path's 0 bytes, and the transfer tests hold both paths to the same outputs;
 * nothing else uses these. Static links (repro, tests) reach them; libferry.so does
 * not export them.
 */
#ifndef FERRY_LIB_TRANSFER_PACKED_COPY_H
#define FERRY_LIB_TRANSFER_PACKED_COPY_H

#include "ferry/batch.h"
#include "ferry/device.h"
#include "ferry/transfer.h"

/* Move a PACKED batch to `device`, keeping it packed (one device allocation holding
 * the whole layout, same fields and offsets). Consumes `batch`: on success the caller
 * owns only *out. A batch already in `device`'s memory comes back as itself
 * (*out == batch); a batch in an arena (host memory, even one bound for `device`) or
 * on another device gives a new batch, and `batch` is released once the copy has read
 * it. The copy is queued on `stream`, a stream of `device` -- or, when moving from a
 * GPU to the host, of the GPU, since only it can read its memory (NULL: that device's
 * default stream). On failure the caller still owns `batch`. FERRY_EUNSUPPORTED for
 * an unpacked batch. */
ferry_status ferry__packed_to(ferry_batch *batch, ferry_device *device, ferry_stream *stream, ferry_batch **out);

/* ferry_transfer by the previous path: ferry__packed_to, then every sample's slice
 * cloned device to device from the packed copy, then the copy freed in stream order.
 * The same outputs as ferry_transfer; the device's extra peak is the packed batch.
 * Needs a packed batch without a producer (FERRY_EUNSUPPORTED). */
ferry_status ferry__transfer_packed_then_clone(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                                              const ferry_transfer_options *options, ferry_device_batch **out);

/* How a test or a benchmark names the path it takes. */
typedef enum ferry__transfer_path {
  FERRY__DIRECT = 0,           /* ferry_transfer */
  FERRY__PACKED_THEN_CLONE = 1 /* ferry__transfer_packed_then_clone */
} ferry__transfer_path;

/* ferry_transfer or ferry__transfer_packed_then_clone, by `path`; FERRY_EINVAL for
 * another value. */
ferry_status ferry__transfer_by(ferry__transfer_path path, ferry_device *device, ferry_stream *stream,
                               ferry_batch *batch, const ferry_transfer_options *options, ferry_device_batch **out);

#endif
