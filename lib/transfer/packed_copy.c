/* lib/transfer/packed_copy.c - the whole-batch device copy and the packed-then-clone
 * path: the baseline the direct path is measured against (packed_copy.h).
 *
 * ferry__packed_to copies a packed batch to a device in one allocation holding its
 * whole layout; ferry__transfer_packed_then_clone does that and then runs the direct
 * path (transfer.c) on the copy, so every sample's slice is cloned device to device,
 * and frees the copy in stream order: its extra device peak is the packed batch.
 * Every copy goes through ferry__memcpy_or_wait, as the direct path's do.
 *
 * Owns nothing between calls: the packed copy lives until the clones that read it
 * have run (a stream-ordered free), or is handed to the caller (packed_to).
 * Callers: repro/cuda_peak_memory and the transfer tests, any thread, each on its own
 * stream. This file calls the direct path; the direct path never calls back here.
 */
#include <string.h>

#include "lib/alloc.h"
#include "lib/device_internal.h"
#include "lib/transfer/packed_copy.h"
#include "lib/transfer/transfer_internal.h"

/* Bytes already in `device`'s own memory (a device batch there), as opposed to the
 * host memory of an arena bound for it. */
static int batch_is_on(const ferry_batch *b, const ferry_device *device) {
  return b->storage == STORAGE_DEVICE && b->device == device;
}

/* A storage-less batch with b's fields, roles and row counts: the layout is a function of
 * those alone, so its offsets and bytes are b's, and one copy of total_bytes moves the
 * whole batch. */
static ferry_status shell_like(const ferry_batch *b, ferry_batch **out) {
  size_t n = b->nfields, bs = b->batch_size;
  ferry_field_spec specs[FERRY_MAX_FIELDS];
  int64_t *rows = ferry__malloc((n ? n : 1) * bs * sizeof *rows);
  if (!rows) return ferry__fail(FERRY_ENOMEM, "packed_to: out of memory for row counts");
  for (size_t f = 0; f < n; f++) {
    specs[f] = b->fields[f].spec;
    for (size_t i = 0; i < bs; i++)
      rows[f * bs + i] = b->fields[f].offsets[i + 1] - b->fields[f].offsets[i];
  }
  ferry_status st = ferry__batch_shell(bs, n, specs, rows, b->sample_hw, out);
  ferry__free(rows);
  if (st == FERRY_OK) memcpy((*out)->roles, b->roles, sizeof b->roles);
  return st;
}

/* The stream that queues a copy of `b` to `device`: one of the CUDA side, since only
 * CUDA can move bytes out of GPU memory; `stream` (or NULL: the default one) must
 * belong to that device. */
static ferry_status copying_stream(const ferry_batch *b, ferry_device *device,
                                   ferry_stream **stream) {
  int from_gpu = !ferry__batch_bytes_on_host(b);
  ferry_device *copier = device->kind == FERRY_DEVICE_HOST && from_gpu ? b->device : device;
  return ferry__resolve_stream(copier, stream);
}

/* A packed copy of `b` in one allocation of `device`, queued on `stream`. `b` is held
 * until the copy has read it; the copy is held until it has landed. */
static ferry_status pack_onto(ferry_batch *b, ferry_device *device, ferry_stream *stream,
                              ferry_batch **out) {
  ferry_batch *nb = NULL;
  ferry_status st = shell_like(b, &nb);
  if (st != FERRY_OK) return st;
  nb->storage = STORAGE_DEVICE;
  nb->device = device;
  /* Allocated in the order of the copy when the copy runs on `device`. */
  ferry_stream *alloc_stream = stream->device == device ? stream : NULL;
  st = ferry_device_malloc(device, alloc_stream, nb->total_bytes, &nb->base);
  if (st == FERRY_OK)
    st = ferry__memcpy_or_wait(stream, nb->base, b->base, nb->total_bytes,
                              ferry__copy_kind_between(ferry__batch_bytes_on_host(b),
                                                      device->kind == FERRY_DEVICE_HOST));
  /* A queued copy may still be writing the new storage: let it finish, then free. */
  if (st != FERRY_OK) {
    ferry_stream_synchronize(stream);
    ferry_device_free(device, alloc_stream, nb->base);
    ferry__batch_shell_free(nb);
    return ferry__error_prefix(st, "packing a batch onto %s: ", device->name);
  }
  /* nb's event makes releasing nb wait for the copy into it (a device batch's release
   * waits for its held events before freeing). */
  ferry__batch_hold_stream(b, stream);
  ferry__batch_hold_stream(nb, stream);
  *out = nb;
  return FERRY_OK;
}

/* Drop a packed device copy without waiting: its storage is freed in stream order,
 * after everything queued on `stream` that reads it. */
static void drop_packed_copy(ferry_batch *nb, ferry_stream *stream) {
  for (size_t i = 0; i < nb->nheld; i++) ferry_event_destroy(nb->held[i]);
  nb->nheld = 0;
  ferry_device_free(nb->device, stream, nb->base);
  ferry__batch_shell_free(nb);
}

ferry_status ferry__packed_to(ferry_batch *batch, ferry_device *device, ferry_stream *stream,
                             ferry_batch **out) {
  if (!batch || !device || !out)
    return ferry__fail(FERRY_EINVAL, "packed_to: batch, device and out are required");
  if (batch->storage == STORAGE_UNPACKED)
    return ferry__fail(FERRY_EUNSUPPORTED, "packed_to: the batch is unpacked");
  if (batch_is_on(batch, device)) {
    *out = batch;
    return FERRY_OK;
  }
  /* `batch` is held by the copy's event, so releasing it now returns at once for an
   * arena, and its memory is reused only once the copy has read it. On failure the
   * caller keeps it. */
  ferry_status st = copying_stream(batch, device, &stream);
  if (st == FERRY_OK) st = pack_onto(batch, device, stream, out);
  if (st != FERRY_OK) return st;
  ferry_batch_release(batch);
  return FERRY_OK;
}


ferry_status ferry__transfer_packed_then_clone(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                                              const ferry_transfer_options *options, ferry_device_batch **out) {
  const ferry_transfer_options *o;
  ferry_status st = ferry__transfer_begin(device, &stream, batch, options, out, &o);
  if (st != FERRY_OK) return st;
  if (batch->storage == STORAGE_UNPACKED)
    return ferry__fail(FERRY_EUNSUPPORTED, "transfer: the packed-then-clone path needs a packed batch");
  if (batch->producer)
    return ferry__fail(FERRY_EUNSUPPORTED, "transfer: a batch whose images a producer makes (the GPU decoder's) "
                       "takes the direct path (nvJPEG reads its compressed bytes from the pinned arena)");
  if (batch_is_on(batch, device)) return ferry__transfer_direct(device, stream, batch, o, out);
  ferry_batch *packed = NULL;
  st = pack_onto(batch, device, stream, &packed);
  if (st != FERRY_OK) return st;
  /* Dropped whether or not the clones were queued: its free is queued after them. */
  st = ferry__transfer_direct(device, stream, packed, o, out);
  drop_packed_copy(packed, stream);
  return st;
}

ferry_status ferry__transfer_by(ferry__transfer_path path, ferry_device *device, ferry_stream *stream,
                               ferry_batch *batch, const ferry_transfer_options *options, ferry_device_batch **out) {
  if (path == FERRY__DIRECT) return ferry_transfer(device, stream, batch, options, out);
  if (path == FERRY__PACKED_THEN_CLONE) return ferry__transfer_packed_then_clone(device, stream, batch, options, out);
  if (out) *out = NULL;
  return ferry__fail(FERRY_EINVAL, "transfer: unknown path %d", (int)path);
}
