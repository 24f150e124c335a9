/* lib/transfer/transfer.c - the direct path: ferry_transfer.
 *
 * The direct path never makes a device buffer that holds a whole packed field: every
 * sample's slice goes from the arena straight into its own allocation. A batch that
 * carries a producer (producer.h: the GPU decoder's) has its images tensor made by it
 * instead of copied; nothing here knows what the producer does. The whole-batch copy
 * that preceded this path is packed_copy.c's, kept as the measured baseline.
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
#include "lib/transfer/normalize.h"
#include "lib/transfer/producer.h"
#include "lib/transfer/device_batch_internal.h"
#include "lib/transfer/image_tensor.h"
#include "lib/transfer/sample_name.h"
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

/* If no event can be recorded, wait for the stream instead: the guarantee matters more
 * than the wait. */
void ferry__batch_hold_stream(ferry_batch *batch, ferry_stream *stream) {
  ferry_event *event = NULL;
  if (ferry_event_record(stream, &event) == FERRY_OK) ferry_batch_hold_until(batch, event);
  else ferry_stream_synchronize(stream);
}

/* ---- naming what failed (sample_name.c names a sample) ---------------------- */

/* A failed transfer's message opens with the batch it was given, so that a caller
 * holding several knows which one to retry: its size and first dataset index. */
static ferry_status batch_error(ferry_status st, const ferry_batch *batch, const ferry_device *device) {
  long long first = ferry__dataset_index(batch, 0);
  if (first < 0)
    return ferry__error_prefix(st, "transfer to %s of the batch of %zu samples: ", device->name, batch->batch_size);
  return ferry__error_prefix(st, "transfer to %s of the batch of %zu samples from dataset index %lld: ",
                             device->name, batch->batch_size, first);
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
  ferry__record_slot *slot = &db->slots[sample * db->nfields + k];
  ferry_tensor view;
  ferry_status st = ferry_batch_sample(job->batch, (size_t)db->source_field[k], ferry__device_batch_source(db, sample),
                                       &view);
  if (st == FERRY_OK)
    st = ferry_tensor_alloc(&slot->tensor, db->device, db->stream, view.dtype, view.ndim, view.shape);
  if (st != FERRY_OK) return st;
  /* Present from its allocation on, so that if the copy fails the device batch's free
   * still releases it. */
  slot->present = 1;
  return ferry__memcpy_or_wait(db->stream, slot->tensor.data, view.data, view.nbytes, job->kind);
}

/* The batch tensor's: [B, one image's shape]. */
static ferry_status image_layout(const ferry_batch *batch, size_t field, ferry_normalize normalize, ferry_dtype *dtype,
                                 int *ndim, int64_t *shape) {
  ferry_tensor first;
  ferry_status st = ferry_batch_sample(batch, field, 0, &first);
  if (st == FERRY_OK) st = ferry__image_shape(ferry_batch_field_spec(batch, field), &first, normalize, dtype, ndim, shape + 1);
  shape[0] = (int64_t)ferry_batch_size(batch);
  *ndim += 1;
  return st;
}

/* 1 when the image field's samples do not all have one shape (a recipe's sizes,
 * batch.h's sample dimensions): then each sample gets its own image tensor. */
static int images_differ(const ferry_batch *batch, int field) {
  if (field < 0 || !ferry__spec_has_sample_dims(ferry_batch_field_spec(batch, (size_t)field))) return 0;
  for (size_t i = 1; i < batch->batch_size; i++)
    if (batch->sample_hw[2 * i] != batch->sample_hw[0] || batch->sample_hw[2 * i + 1] != batch->sample_hw[1]) return 1;
  return 0;
}

/* The kernel reads its source on the target device: a batch in another GPU's memory
 * would need a copy between devices first. */
static ferry_status normalisation_params(const transfer_job *job, ferry__norm_params *params) {
  const ferry_transfer_options *o = job->options;
  if (!job->src_on_host && job->batch->device != job->db->device)
    return ferry__fail(FERRY_EUNSUPPORTED, "transfer: %s cannot normalise images held on %s",
                      job->db->device->name, job->batch->device->name);
  ferry__norm_params_init(params, o->mean, o->std, o->normalize == FERRY_NORMALIZE_BF16);
  return FERRY_OK;
}

/* Row i of the batch tensor from sample i: a copy, or a normalisation (params set) of
 * an h x w image. */
static ferry_status copy_image_rows(transfer_job *job, size_t field, const ferry__norm_shape *hw,
                                    const ferry__norm_params *params) {
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
    if (st != FERRY_OK) ferry__sample_error(st, job->batch, i);
  }
  return st;
}

static ferry_status copy_images(transfer_job *job, size_t field) {
  ferry_device_batch *db = job->db;
  const ferry_transfer_options *o = job->options;
  ferry_dtype dtype = FERRY_U8;
  int ndim = 0;
  int64_t shape[FERRY_MAX_RANK];
  ferry_status st = image_layout(job->batch, field, o->normalize, &dtype, &ndim, shape);
  if (st != FERRY_OK) return st;
  ferry__norm_params params, *norm = NULL;
  ferry__norm_shape hw = {0, 0, 0, 0};
  if (o->normalize != FERRY_NORMALIZE_NONE) {
    if ((st = normalisation_params(job, &params)) != FERRY_OK) return st;
    norm = &params;
    hw = (ferry__norm_shape){(size_t)shape[2], (size_t)shape[3], (size_t)shape[2], (size_t)shape[3]};
  }
  ferry_tensor *images;
  st = ferry__device_batch_alloc_images(db, dtype, ndim, shape, &images);
  return st == FERRY_OK ? copy_image_rows(job, field, &hw, norm) : ferry__error_prefix(st, "the images tensor: ");
}

/* A sample's own image tensor, when the batch's images differ in shape: a copy of its
 * slice, or its normalisation into [3,h,w]. */
static ferry_status copy_sample_image(transfer_job *job, size_t sample, size_t k) {
  ferry_device_batch *db = job->db;
  ferry__record_slot *slot = &db->slots[sample * db->nfields + k];
  const ferry_transfer_options *o = job->options;
  ferry_tensor view;
  ferry_dtype dtype;
  int ndim;
  int64_t shape[FERRY_MAX_RANK];
  size_t field = (size_t)db->source_field[k];
  ferry_status st = ferry_batch_sample(job->batch, field, sample, &view);
  if (st == FERRY_OK) st = ferry__image_shape(ferry_batch_field_spec(job->batch, field), &view, o->normalize, &dtype, &ndim, shape);
  if (st == FERRY_OK) st = ferry_tensor_alloc(&slot->tensor, db->device, db->stream, dtype, ndim, shape);
  if (st != FERRY_OK) return st;
  slot->present = 1;
  if (o->normalize == FERRY_NORMALIZE_NONE)
    return ferry__memcpy_or_wait(db->stream, slot->tensor.data, view.data, view.nbytes, job->kind);
  ferry__norm_params params;
  if ((st = normalisation_params(job, &params)) != FERRY_OK) return st;
  ferry__norm_shape hw = {(size_t)shape[1], (size_t)shape[2], (size_t)shape[1], (size_t)shape[2]};
  return ferry__normalize_enqueue(db->stream, view.data, job->src_on_host, slot->tensor.data, &hw, &params);
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

/* The padded batch tensor of images that differ in size (image_tensor.c). */
static ferry_status copy_padded(transfer_job *job, size_t field, const ferry__padded_layout *layout) {
  ferry__norm_params params;
  ferry_status st = job->options->normalize != FERRY_NORMALIZE_NONE ? normalisation_params(job, &params) : FERRY_OK;
  if (st != FERRY_OK) return st;
  return ferry__copy_padded_images(job->db, job->batch, field, layout,
                                   job->options->normalize != FERRY_NORMALIZE_NONE ? &params : NULL,
                                   job->src_on_host, job->kind);
}

/* The batch tensor (image_field >= 0: padded when `padded` is set), then every
 * sample's record of every other field; `own_images` is the record index of images
 * that differ in shape (-1). */
static ferry_status queue_copies(transfer_job *job, int image_field, const ferry__padded_layout *padded,
                                 int own_images) {
  ferry_status st = FERRY_OK;
  if (image_field >= 0) st = padded ? copy_padded(job, (size_t)image_field, padded) : copy_images(job, (size_t)image_field);
  for (size_t i = 0; i < job->db->batch_size && st == FERRY_OK; i++)
    for (size_t k = 0; k < job->db->nfields && st == FERRY_OK; k++) {
      st = (int)k == own_images ? copy_sample_image(job, i, k) : copy_sample_field(job, i, k);
      if (st != FERRY_OK)
        ferry__sample_error(ferry__error_prefix(st, "field '%s': ", job->db->names[k]), job->batch,
                            ferry__device_batch_source(job->db, i));
    }
  return st;
}

void ferry__batch_set_producer(ferry_batch *batch, const ferry__producer *producer) { batch->producer = producer; }

/* The field that becomes the batch tensor: the one the options name, or (NULL) the
 * one holding FERRY_ROLE_IMAGES; -1 for none ("", or no such field). */
static int image_field_of(const ferry_batch *batch, const ferry_transfer_options *o) {
  if (!o->image_field) return ferry_batch_find_role(batch, FERRY_ROLE_IMAGES);
  return o->image_field[0] ? ferry_batch_find_field(batch, o->image_field) : -1;
}

/* The batch's producer, when it makes this transfer's images: the options name no
 * field (the producer stands for the batch's images, which it has no field of) or
 * name the field it outputs. */
static const ferry__producer *images_producer(const ferry_batch *batch, const ferry_transfer_options *o) {
  if (!batch->producer) return NULL;
  return !o->image_field || strcmp(o->image_field, batch->producer->output) == 0 ? batch->producer : NULL;
}

/* The fields that do not become per-sample records: the image field, or the fields a
 * producer makes the images tensor from. */
static uint32_t fields_not_records(const ferry_batch *batch, int image_field, const ferry__producer *producer) {
  if (!producer) return image_field >= 0 ? 1u << image_field : 0;
  uint32_t mask = 0;
  for (size_t k = 0; k < producer->ninputs; k++) {
    int f = ferry_batch_find_field(batch, producer->inputs[k]);
    if (f >= 0) mask |= 1u << f;
  }
  return mask;
}

ferry_status ferry__transfer_direct(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                                   const ferry_transfer_options *o, ferry_device_batch **out) {
  int image_field = image_field_of(batch, o);
  const ferry__producer *producer = images_producer(batch, o);
  /* Images of different shapes: one padded batch tensor when asked (pad_multiple),
   * else no batch tensor and each sample's image a record. */
  ferry__padded_layout layout;
  ferry_status st = FERRY_OK;
  int padded = !producer && ferry__images_padded_layout(batch, image_field, o, &layout, &st);
  if (st != FERRY_OK) return st;
  int own_images = !producer && !padded && images_differ(batch, image_field);
  int own_images_field = own_images ? image_field : -1;
  if (own_images) image_field = -1;
  ferry_device_batch *db = NULL;
  st = ferry__device_batch_new(device, stream, batch,
                                            fields_not_records(batch, image_field, producer), &db);
  if (st != FERRY_OK) return st;
  transfer_job job = {.db = db, .batch = batch, .options = o,
                      .src_on_host = ferry__batch_bytes_on_host(batch)};
  job.kind = ferry__copy_kind_between(job.src_on_host, device->kind == FERRY_DEVICE_HOST);
  int own_k = -1;
  for (size_t k = 0; own_images && k < db->nfields; k++)
    if (db->source_field[k] == own_images_field) own_k = (int)k;
  if (producer && !job.src_on_host)
    st = ferry__fail(FERRY_EUNSUPPORTED,
                     "transfer: a batch whose images a producer makes must be in host "
                     "memory (it reads its inputs there: nvJPEG the compressed bytes)");
  if (producer && st == FERRY_OK) st = producer->produce(producer->self, db, batch, o);
  if (st == FERRY_OK) st = queue_copies(&job, producer ? -1 : image_field, padded ? &layout : NULL, own_k);
  /* Whatever was queued reads the batch: hold it until that has run, even on failure.
   * The hold comes before the hooks: the source batch need not wait for them. */
  ferry__batch_hold_stream(batch, stream);
  if (st == FERRY_OK) st = schedule_hooks(db, o);
  if (st == FERRY_OK) st = ferry_event_record(stream, &db->ready);
  if (st != FERRY_OK) {
    ferry_stream_synchronize(stream); /* queued hooks and normalisation jobs finish first */
    db->nstream_hooks = 0;
    ferry_device_batch_free(db);
    return batch_error(st, batch, device);
  }
  *out = db;
  return FERRY_OK;
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
  if (o->nhooks > FERRY_TRANSFER_MAX_HOOKS || (o->nhooks && !o->hooks))
    return ferry__fail(FERRY_EINVAL, "transfer: at most %d hooks, given as an array",
                      FERRY_TRANSFER_MAX_HOOKS);
  for (size_t h = 0; h < o->nhooks; h++)
    if (!o->hooks[h].fn || (o->hooks[h].stage != FERRY_HOOK_ON_STREAM &&
                            o->hooks[h].stage != FERRY_HOOK_ENQUEUE))
      return ferry__fail(FERRY_EINVAL, "transfer: hook %zu has no function or an unknown stage", h);
  return check_normalization(o);
}

ferry_status ferry__transfer_begin(ferry_device *device, ferry_stream **stream, ferry_batch *batch,
                                   const ferry_transfer_options *options, ferry_device_batch **out,
                                   const ferry_transfer_options **o) {
  if (!device || !batch || !out)
    return ferry__fail(FERRY_EINVAL, "ferry_transfer: device, batch and out are required");
  *out = NULL;
  static const ferry_transfer_options defaults = {0};
  *o = options ? options : &defaults;
  ferry_status st = check_options(*o);
  /* The host backend's stream threads can only memmove, so GPU memory is out of reach. */
  if (st == FERRY_OK && device->kind == FERRY_DEVICE_HOST && !ferry__batch_bytes_on_host(batch))
    st = ferry__fail(FERRY_EUNSUPPORTED, "transfer: a batch in %s memory cannot be read by the host "
                    "backend's streams", batch->device->name);
  if (st == FERRY_OK) st = ferry__resolve_stream(device, stream);
  return st;
}

ferry_status ferry_transfer(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                            const ferry_transfer_options *options, ferry_device_batch **out) {
  const ferry_transfer_options *o;
  ferry_status st = ferry__transfer_begin(device, &stream, batch, options, out, &o);
  return st == FERRY_OK ? ferry__transfer_direct(device, stream, batch, o, out) : st;
}
