/* lib/transfer/transfer_internal.h - the device batch's insides and the helpers the
 * transfer paths share (internal). The invariants of the device batch's fields are in
 * device_batch.c's opening comment. */
#ifndef FERRY_LIB_TRANSFER_INTERNAL_H
#define FERRY_LIB_TRANSFER_INTERNAL_H

#include "ferry/transfer.h"
#include "lib/batch_internal.h"
#include "lib/status.h"

/* One sample's tensor for one field; `present` is 0 once taken out (an empty tensor,
 * [0,4] with data NULL, is present). */
typedef struct record_slot {
  ferry_tensor tensor;
  int present;
} record_slot;

struct ferry_device_batch {
  ferry_device *device;
  ferry_stream *stream;
  size_t batch_size;
  size_t nfields;                                   /* per-sample fields */
  char names[FERRY_MAX_FIELDS][FERRY_FIELD_NAME_MAX];
  int source_field[FERRY_MAX_FIELDS];               /* index in the source batch */
  record_slot images;
  record_slot *slots;                               /* [sample * nfields + k] */
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

/* The stream to use: `stream` (checked to belong to `device`) or the default one. */
ferry_status ferry__resolve_stream(ferry_device *device, ferry_stream **stream);

#endif
