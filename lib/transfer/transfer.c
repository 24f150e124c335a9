/* lib/transfer/transfer.c - the direct path, the previous path, and ferry_packed_to.
 *
 * The direct path never makes a device buffer that holds a whole packed field: every
 * sample's slice goes from the arena straight into its own allocation. The previous
 * path is ferry_packed_to (one device copy of the whole packed batch) followed by the
 * direct path reading from that copy (device-to-device clones), then a stream-ordered
 * free of the copy; it is kept so the difference stays measurable.
 *
 * Every copy goes through ferry__memcpy_or_wait: an arena is pinned memory of the
 * device its pool is bound for, so its copies are queued; the host side of any other
 * copy (an unpacked batch's per-sample buffers, host-device memory a GPU batch is
 * packed onto) is pageable, and pageable memory is copied synchronously (device.h).
 *
 * Owns nothing between calls: what a transfer makes is the device batch it returns and
 * the events it hands to the source batch (ferry_batch_hold_until).
 * Callers: any number of threads at once, each on its own stream; the only shared
 * state, the device's accounting and stream list, is locked in device.c.
 *
 * What one direct transfer queues on its stream, in this order (docs/transfer.md):
 * the batch tensor's allocation and one copy (or normalisation) per sample into it;
 * per sample, per other field, an allocation of exactly the slice and its copy; an
 * event held by the source batch; the ENQUEUE hooks' own work; one host function
 * running the ON_STREAM hooks; the `ready` event. Since it is all one stream, each
 * step sees every earlier one complete. Invariants this keeps:
 *   - the source batch is held until every copy that reads it has run, on failure
 *     too: its arena never returns to the pool under a queued copy;
 *   - no allocation holds more than one sample's slice of a field, except the batch
 *     tensor (an output), and nothing but a normalisation's one-image staging buffer
 *     (CUDA) is freed during the transfer: the device's extra peak is 0, one u8 image
 *     with normalisation (the previous path's is its packed copy);
 *   - a failed transfer leaves nothing allocated and returns no device batch.
 */
#include <math.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/device_internal.h"
#include "lib/transfer/jpeg_stage.h"
#include "lib/transfer/normalize.h"
#include "lib/transfer/transfer_internal.h"
#include "ferry/advanced.h"

ferry_status ferry__resolve_stream(ferry_device *device, ferry_stream **stream) {
  if (*stream) {
    if ((*stream)->device != device)
      return ferry__fail(FERRY_EINVAL, "transfer: the stream belongs to %s, not to %s",
                        (*stream)->device->name, device->name);
    return FERRY_OK;
  }
  ferry_status st = ferry_device_init(device);
  if (st == FERRY_OK) *stream = device->default_stream;
  return st;
}

/* Bytes already in `device`'s own memory (a device batch there), as opposed to the
 * host memory of an arena bound for it. */
static int batch_is_on(const ferry_batch *b, const ferry_device *device) {
  return b->storage == STORAGE_DEVICE && b->device == device;
}

/* Keep `batch` from reuse until the work queued so far on `stream` has run. If no event
 * can be recorded, wait for the stream instead: the guarantee matters more than the
 * wait. */
static void hold_batch(ferry_batch *batch, ferry_stream *stream) {
  ferry_event *event = NULL;
  if (ferry_event_record(stream, &event) == FERRY_OK) ferry_batch_hold_until(batch, event);
  else ferry_stream_synchronize(stream);
}

/* ---- ferry_packed_to ---------------------------------------------------------- */

/* A storage-less batch with b's fields and row counts: the layout is a function of
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
  ferry_status st = ferry__batch_shell(bs, n, specs, rows, out);
  ferry__free(rows);
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
  hold_batch(b, stream);
  hold_batch(nb, stream);
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

ferry_status ferry_packed_to(ferry_batch *batch, ferry_device *device, ferry_stream *stream,
                             ferry_batch **out) {
  if (!batch || !device || !out)
    return ferry__fail(FERRY_EINVAL, "ferry_packed_to: batch, device and out are required");
  if (batch->storage == STORAGE_UNPACKED)
    return ferry__fail(FERRY_EUNSUPPORTED, "ferry_packed_to: the batch is unpacked");
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

/* ---- the direct path ---------------------------------------------------------- */

typedef struct transfer_job {
  ferry_device_batch *db;
  ferry_batch *batch;
  const ferry_transfer_options *options;
  ferry_copy_kind kind;
  int src_on_host;
} transfer_job;

static ferry_status copy_sample_field(transfer_job *job, size_t sample, size_t k) {
  ferry_device_batch *db = job->db;
  record_slot *slot = &db->slots[sample * db->nfields + k];
  ferry_tensor view;
  ferry_status st = ferry_batch_sample(job->batch, (size_t)db->source_field[k], sample, &view);
  if (st == FERRY_OK)
    st = ferry_tensor_alloc(&slot->tensor, db->device, db->stream, view.dtype, view.ndim, view.shape);
  if (st != FERRY_OK) return st;
  /* Present from its allocation on, so that if the copy fails the device batch's free
   * still releases it. */
  slot->present = 1;
  return ferry__memcpy_or_wait(db->stream, slot->tensor.data, view.data, view.nbytes, job->kind);
}

/* The shape and dtype of the batch tensor, checking what normalisation needs. */
static ferry_status image_layout(const ferry_field_spec *spec, size_t batch_size,
                                 ferry_normalize normalize, ferry_dtype *dtype, int *ndim,
                                 int64_t *shape) {
  if (spec->kind != FERRY_FIELD_PER_SAMPLE)
    return ferry__fail(FERRY_EINVAL, "transfer: image field '%s' must be a per-sample field", spec->name);
  shape[0] = (int64_t)batch_size;
  if (normalize == FERRY_NORMALIZE_NONE) {
    *dtype = spec->dtype;
    *ndim = 1 + spec->inner_ndim;
    for (int d = 0; d < spec->inner_ndim; d++) shape[1 + d] = spec->inner_shape[d];
    return FERRY_OK;
  }
  if (normalize != FERRY_NORMALIZE_F32 && normalize != FERRY_NORMALIZE_BF16)
    return ferry__fail(FERRY_EINVAL, "transfer: unknown normalisation %d", (int)normalize);
  if (spec->dtype != FERRY_U8 || spec->inner_ndim != 3 || spec->inner_shape[2] != 3)
    return ferry__fail(FERRY_EUNSUPPORTED, "transfer: normalising '%s' needs u8 [H,W,3] images",
                      spec->name);
  /* Normalisation also transposes: [H,W,3] per sample becomes [B,3,H,W]. */
  *dtype = normalize == FERRY_NORMALIZE_F32 ? FERRY_F32 : FERRY_BF16;
  *ndim = 4;
  shape[1] = 3;
  shape[2] = spec->inner_shape[0];
  shape[3] = spec->inner_shape[1];
  return FERRY_OK;
}

/* Row i of the batch tensor from sample i: a copy, or a normalisation (params set). */
static ferry_status copy_image_rows(transfer_job *job, size_t field, size_t hw,
                                    const ferry_norm_params *params) {
  ferry_device_batch *db = job->db;
  size_t item = db->images.tensor.nbytes / db->batch_size;
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < db->batch_size && st == FERRY_OK && item; i++) {
    ferry_tensor view;
    st = ferry_batch_sample(job->batch, field, i, &view);
    char *dst = (char *)db->images.tensor.data + i * item;
    if (st == FERRY_OK && !params)
      st = ferry__memcpy_or_wait(db->stream, dst, view.data, view.nbytes, job->kind);
    else if (st == FERRY_OK)
      st = ferry__normalize_enqueue(db->stream, view.data, job->src_on_host, dst, hw, params);
    if (st != FERRY_OK) ferry__error_prefix(st, "sample %zu: ", i);
  }
  return st;
}

static ferry_status copy_images(transfer_job *job, size_t field) {
  ferry_device_batch *db = job->db;
  const ferry_transfer_options *o = job->options;
  ferry_dtype dtype = FERRY_U8;
  int ndim = 0;
  int64_t shape[FERRY_MAX_RANK];
  ferry_status st = image_layout(ferry_batch_field_spec(job->batch, field), db->batch_size,
                                 o->normalize, &dtype, &ndim, shape);
  if (st != FERRY_OK) return st;
  ferry_norm_params params, *norm = NULL;
  size_t hw = 0;
  if (o->normalize != FERRY_NORMALIZE_NONE) {
    /* The kernel reads its source on the target device: a batch in another GPU's
     * memory would need a copy between devices first. */
    if (!job->src_on_host && job->batch->device != db->device)
      return ferry__fail(FERRY_EUNSUPPORTED, "transfer: %s cannot normalise images held on %s",
                        db->device->name, job->batch->device->name);
    ferry__norm_params_init(&params, o->mean, o->std, o->normalize == FERRY_NORMALIZE_BF16);
    norm = &params;
    hw = (size_t)(shape[2] * shape[3]);
  }
  /* Present once allocated, for the same reason as a sample's slot. */
  st = ferry_tensor_alloc(&db->images.tensor, db->device, db->stream, dtype, ndim, shape);
  db->images.present = st == FERRY_OK;
  return st == FERRY_OK ? copy_image_rows(job, field, hw, norm) : st;
}

static void run_stream_hooks(void *arg) {
  ferry_device_batch *db = arg;
  for (size_t h = 0; h < db->nstream_hooks; h++) ferry__device_batch_run_hook(db, &db->stream_hooks[h]);
}

/* ENQUEUE hooks now; ON_STREAM hooks as one host function after the copies. The
 * ON_STREAM hooks are copied into the device batch, since the caller's options need not
 * outlive ferry_transfer; if the host function cannot be queued, none is recorded, so
 * nothing waits for hooks that will never run. */
static ferry_status schedule_hooks(ferry_device_batch *db, const ferry_transfer_options *o) {
  for (size_t h = 0; h < o->nhooks; h++) {
    if (o->hooks[h].stage == FERRY_HOOK_ENQUEUE) ferry__device_batch_run_hook(db, &o->hooks[h]);
    else db->stream_hooks[db->nstream_hooks++] = o->hooks[h];
  }
  if (!db->nstream_hooks) return FERRY_OK;
  ferry_status st = ferry_stream_call(db->stream, run_stream_hooks, db);
  if (st != FERRY_OK) db->nstream_hooks = 0;
  return st;
}

static ferry_status queue_copies(transfer_job *job, int image_field) {
  ferry_status st = FERRY_OK;
  if (image_field >= 0) st = copy_images(job, (size_t)image_field);
  for (size_t i = 0; i < job->db->batch_size && st == FERRY_OK; i++)
    for (size_t k = 0; k < job->db->nfields && st == FERRY_OK; k++) {
      st = copy_sample_field(job, i, k);
      if (st != FERRY_OK)
        ferry__error_prefix(st, "sample %zu field '%s': ", i, job->db->names[k]);
    }
  return st;
}

/* The GPU decoder's stage, when it makes this transfer's images tensor: the batch has
 * one and the options ask for the images field (the default). */
static ferry_jpeg_stage *images_stage(const ferry_batch *batch, const ferry_transfer_options *o) {
  const char *image_name = o->image_field ? o->image_field : FERRY_FIELD_IMAGES;
  return strcmp(image_name, FERRY_FIELD_IMAGES) == 0 ? batch->jpeg_stage : NULL;
}

/* The fields that do not become per-sample records: the image field, or the fields a
 * stage makes the images tensor from. */
static uint32_t fields_not_records(const ferry_batch *batch, int image_field, const ferry_jpeg_stage *stage) {
  if (!stage) return image_field >= 0 ? 1u << image_field : 0;
  uint32_t mask = 0;
  int jpeg = ferry_batch_find_field(batch, FERRY_FIELD_JPEG);
  int cpu = ferry_batch_find_field(batch, FERRY_FIELD_CPU_IMAGES);
  if (jpeg >= 0) mask |= 1u << jpeg;
  if (cpu >= 0) mask |= 1u << cpu;
  return mask;
}

static ferry_status transfer_direct(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                                    const ferry_transfer_options *o, ferry_device_batch **out) {
  const char *image_name = o->image_field ? o->image_field : FERRY_FIELD_IMAGES;
  int image_field = image_name[0] ? ferry_batch_find_field(batch, image_name) : -1;
  ferry_jpeg_stage *stage = images_stage(batch, o);
  ferry_device_batch *db = NULL;
  ferry_status st = ferry__device_batch_new(device, stream, batch,
                                            fields_not_records(batch, image_field, stage), &db);
  if (st != FERRY_OK) return st;
  transfer_job job = {.db = db, .batch = batch, .options = o,
                      .src_on_host = ferry__batch_bytes_on_host(batch)};
  job.kind = ferry__copy_kind_between(job.src_on_host, device->kind == FERRY_DEVICE_HOST);
  if (stage) st = ferry__jpeg_stage_images(stage, db, batch, o);
  if (st == FERRY_OK) st = queue_copies(&job, stage ? -1 : image_field);
  /* Whatever was queued reads the batch: hold it until that has run, even on failure.
   * The hold comes before the hooks: the source batch need not wait for them. */
  hold_batch(batch, stream);
  if (st == FERRY_OK) st = schedule_hooks(db, o);
  if (st == FERRY_OK) st = ferry_event_record(stream, &db->ready);
  if (st != FERRY_OK) {
    ferry_stream_synchronize(stream); /* queued hooks and normalisation jobs finish first */
    db->nstream_hooks = 0;
    ferry_device_batch_free(db);
    return st;
  }
  *out = db;
  return FERRY_OK;
}

/* The previous path: the whole packed batch onto the device, clone each sample's
 * slice from there, free the packed copy in stream order. */
static ferry_status transfer_previous(ferry_device *device, ferry_stream *stream,
                                      ferry_batch *batch, const ferry_transfer_options *o,
                                      ferry_device_batch **out) {
  if (batch->storage == STORAGE_UNPACKED)
    return ferry__fail(FERRY_EUNSUPPORTED, "transfer: the previous path needs a packed batch");
  if (images_stage(batch, o))
    return ferry__fail(FERRY_EUNSUPPORTED, "transfer: a batch of the GPU decoder takes the direct path "
                       "(nvJPEG reads its compressed bytes from the pinned arena)");
  if (batch_is_on(batch, device)) return transfer_direct(device, stream, batch, o, out);
  ferry_batch *packed = NULL;
  ferry_status st = pack_onto(batch, device, stream, &packed);
  if (st != FERRY_OK) return st;
  /* Dropped whether or not the clones were queued: its free is queued after them. */
  st = transfer_direct(device, stream, packed, o, out);
  drop_packed_copy(packed, stream);
  return st;
}

/* An all-zero std asks for ImageNet's values; any other std must be finite and
 * non-zero in every channel, and the mean finite, or the images come out inf or NaN. */
static ferry_status check_normalization(const ferry_transfer_options *o) {
  if (o->normalize == FERRY_NORMALIZE_NONE) return FERRY_OK;
  int all_zero = o->std[0] == 0.0f && o->std[1] == 0.0f && o->std[2] == 0.0f;
  for (int c = 0; c < 3 && !all_zero; c++)
    if (!isfinite(o->std[c]) || o->std[c] == 0.0f || !isfinite(o->mean[c]))
      return ferry__fail(FERRY_EINVAL, "transfer: normalisation channel %d has mean %g and std %g; "
                         "std must be finite and non-zero (all zeros: ImageNet's)",
                         c, (double)o->mean[c], (double)o->std[c]);
  return FERRY_OK;
}

static ferry_status check_options(const ferry_transfer_options *o) {
  if (o->mode != FERRY_TRANSFER_DIRECT && o->mode != FERRY_TRANSFER_PACKED_THEN_CLONE)
    return ferry__fail(FERRY_EINVAL, "transfer: unknown mode %d", (int)o->mode);
  if (o->nhooks > FERRY_TRANSFER_MAX_HOOKS || (o->nhooks && !o->hooks))
    return ferry__fail(FERRY_EINVAL, "transfer: at most %d hooks, given as an array",
                      FERRY_TRANSFER_MAX_HOOKS);
  for (size_t h = 0; h < o->nhooks; h++)
    if (!o->hooks[h].fn || (o->hooks[h].stage != FERRY_HOOK_ON_STREAM &&
                            o->hooks[h].stage != FERRY_HOOK_ENQUEUE))
      return ferry__fail(FERRY_EINVAL, "transfer: hook %zu has no function or an unknown stage", h);
  return check_normalization(o);
}

ferry_status ferry_transfer(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                            const ferry_transfer_options *options, ferry_device_batch **out) {
  if (!device || !batch || !out)
    return ferry__fail(FERRY_EINVAL, "ferry_transfer: device, batch and out are required");
  *out = NULL;
  static const ferry_transfer_options defaults = {0};
  const ferry_transfer_options *o = options ? options : &defaults;
  ferry_status st = check_options(o);
  /* The host backend's stream threads can only memmove, so GPU memory is out of reach. */
  if (st == FERRY_OK && device->kind == FERRY_DEVICE_HOST && !ferry__batch_bytes_on_host(batch))
    st = ferry__fail(FERRY_EUNSUPPORTED, "transfer: a batch in %s memory cannot be read by the host "
                    "backend's streams; bring it over with ferry_packed_to first", batch->device->name);
  if (st == FERRY_OK) st = ferry__resolve_stream(device, &stream);
  if (st != FERRY_OK) return st;
  if (o->mode == FERRY_TRANSFER_PACKED_THEN_CLONE)
    return transfer_previous(device, stream, batch, o, out);
  return transfer_direct(device, stream, batch, o, out);
}
