/* lib/transfer/device_batch_internal.h - the device batch's insides and device_batch.c's
 * calls for the transfer's own files (internal; lib/'s own, not a floor header: a
 * producer reaches the device batch through lib/transfer/device_batch.h only). The
 * invariants of the fields are in device_batch.c's opening comment. */
#ifndef FERRY_LIB_TRANSFER_DEVICE_BATCH_INTERNAL_H
#define FERRY_LIB_TRANSFER_DEVICE_BATCH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/transfer.h"
#include "lib/batch_internal.h"
#include "lib/status.h"
#include "lib/transfer/device_batch.h"

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
  size_t *source; /* sample j is the source batch's source[j];
                                                     * NULL: sample j (none left out) */
  size_t nfields; /* per-sample fields */
  char names[FERRY_MAX_FIELDS][FERRY_FIELD_NAME_MAX];
  int source_field[FERRY_MAX_FIELDS]; /* index in the source batch */
  ferry__record_slot images;
  ferry__record_slot *slots; /* [sample * nfields + k] */
  ferry_event *ready;        /* after copies and hooks */
  ferry_transfer_hook stream_hooks[FERRY_TRANSFER_MAX_HOOKS];
  size_t nstream_hooks;
  ferry_status hook_status; /* first hook failure */
  char hook_message[FERRY_ERROR_MAX];
};

/* An empty device batch with a record slot for every field of `batch` but those whose
 * bit is set in `not_records` (bit f: field f; the image field, or a GPU-decoded
 * batch's compressed and fallback pixels). */
ferry_status ferry__device_batch_new(ferry_device *device, ferry_stream *stream, const ferry_batch *batch,
                                     uint32_t not_records, ferry_device_batch **out);
/* Device sample j is the source's sample ferry__device_batch_source(db, j): j, unless a
 * producer left samples out (producer.h, ferry__device_batch_leave_out). */
size_t ferry__device_batch_source(const ferry_device_batch *db, size_t j);
/* Run a hook and remember its failure (the first one wins). */
void ferry__device_batch_run_hook(ferry_device_batch *db, const ferry_transfer_hook *hook);

#endif
