/* lib/transfer/transfer_internal.h - transfer.c's calls for the other transfer path,
 * packed_copy.c (internal): the checks every path begins with, the direct path, the
 * stream and the hold. The device batch's insides are device_batch_internal.h's. */
#ifndef FERRY_LIB_TRANSFER_INTERNAL_H
#define FERRY_LIB_TRANSFER_INTERNAL_H

#include "ferry/transfer.h"
#include "lib/batch_internal.h"
#include "lib/status.h"


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
