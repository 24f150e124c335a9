/* lib/transfer/transfer_internal.h - the device batch's insides and the helpers the
 * transfer paths share (internal). The invariants of the device batch's fields are in
 * device_batch.c's opening comment. */
#ifndef FERRY_LIB_TRANSFER_INTERNAL_H
#define FERRY_LIB_TRANSFER_INTERNAL_H

#include "ferry/transfer.h"
#include "lib/batch_internal.h"
#include "lib/status.h"
#include "lib/transfer/producer.h" /* the device batch calls producers use, and sample naming */

/* One sample's tensor for one field; `present` is 0 once taken out (an empty tensor,
 * [0,4] with data NULL, is present). */
typedef struct ferry__record_slot {
  ferry_tensor tensor;
  int present;
} ferry__record_slot;

struct ferry_device_batch {
  ferry_device *device;
  ferry_stream *stream;
  size_t batch_size;
  size_t *source;                                   /* sample j is the source batch's source[j];
                                                     * NULL: sample j (none left out) */
  size_t nfields;                                   /* per-sample fields */
  char names[FERRY_MAX_FIELDS][FERRY_FIELD_NAME_MAX];
  int source_field[FERRY_MAX_FIELDS];               /* index in the source batch */
  ferry__record_slot images;
  ferry__record_slot *slots;                        /* [sample * nfields + k] */
  ferry_event *ready;                               /* after copies and hooks */
  ferry_transfer_hook stream_hooks[FERRY_TRANSFER_MAX_HOOKS];
  size_t nstream_hooks;
  ferry_status hook_status;                         /* first hook failure */
  char hook_message[FERRY_ERROR_MAX];
};

/* An empty device batch with a record slot for every field of `batch` but those whose
 * bit is set in `not_records` (bit f: field f; the image field, or a GPU-decoded
 * batch's compressed and fallback pixels). */
ferry_status ferry__device_batch_new(ferry_device *device, ferry_stream *stream,
                                    const ferry_batch *batch, uint32_t not_records,
                                    ferry_device_batch **out);
/* Device sample j is the source's sample ferry__device_batch_source(db, j): j, unless a
 * producer left samples out (producer.h, ferry__device_batch_leave_out). */
size_t ferry__device_batch_source(const ferry_device_batch *db, size_t j);
/* Run a hook and remember its failure (the first one wins). */
void ferry__device_batch_run_hook(ferry_device_batch *db, const ferry_transfer_hook *hook);

/* Keep `batch` from reuse until the work queued so far on `stream` has run (an event
 * handed to ferry_batch_hold_until). */
void ferry__batch_hold_stream(ferry_batch *batch, ferry_stream *stream);

/* ferry_transfer's checks: arguments, options (hooks, normalisation), a batch the
 * device's streams can read; *stream resolved, *o the options or the defaults. */
ferry_status ferry__transfer_begin(ferry_device *device, ferry_stream **stream, ferry_batch *batch,
                                   const ferry_transfer_options *options, ferry_device_batch **out,
                                   const ferry_transfer_options **o);
/* The direct path on a batch that passed ferry__transfer_begin. */
ferry_status ferry__transfer_direct(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                                   const ferry_transfer_options *o, ferry_device_batch **out);

/* The shape and dtype of one image once it is on the device (image_tensor.c): its
 * view's, or [3,H,W] normalised from u8 [H,W,3]. FERRY_EINVAL for a field that is
 * not per-sample, FERRY_EUNSUPPORTED for one normalisation cannot read. */
ferry_status ferry__image_shape(const ferry_field_spec *spec, const ferry_tensor *view, ferry_normalize normalize,
                                ferry_dtype *dtype, int *ndim, int64_t *shape);

/* A padded batch tensor (image_tensor.c): its dtype and shape [B, ...], and where
 * the height is in an image's shape (the width follows it). */
typedef struct ferry__padded_layout {
  ferry_dtype dtype;
  int ndim;
  int64_t shape[FERRY_MAX_RANK];
  int hdim;
} ferry__padded_layout;
struct ferry__norm_params;

/* 1 and *out when the transfer pads the batch's images into one tensor: options ask
 * for it (pad_multiple) and the images differ in size or are not multiples of it;
 * 0 otherwise, or on error (*st, with its message). */
int ferry__images_padded_layout(const ferry_batch *batch, int field, const ferry_transfer_options *o,
                                ferry__padded_layout *out, ferry_status *st);
/* Allocate the padded tensor as db's images and queue every sample's image into it,
 * normalised (norm non-NULL) or copied. */
ferry_status ferry__copy_padded_images(ferry_device_batch *db, ferry_batch *batch, size_t field,
                                       const ferry__padded_layout *layout, const struct ferry__norm_params *norm,
                                       int src_on_host, ferry_copy_kind kind);

/* The stream to use: `stream` (checked to belong to `device`) or the default one. */
ferry_status ferry__resolve_stream(ferry_device *device, ferry_stream **stream);

#endif
