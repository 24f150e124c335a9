/* lib/transfer/device_batch.h - device_batch.c's calls for a producer (internal; a
 * floor header, which lib/transfer/producer.h includes: what produce may do to the
 * device batch it is handed, producer.h's contract). */
#ifndef FERRY_LIB_TRANSFER_DEVICE_BATCH_H
#define FERRY_LIB_TRANSFER_DEVICE_BATCH_H

#include <stdint.h>

#include "ferry/tensor.h"
#include "ferry/transfer.h"

/* Allocate db's images tensor (dtype, [ndim] shape, its first dimension the samples
 * kept) on db's stream; *out points at it, owned by db (freed with it, and by a failed
 * transfer). Once per transfer, after any ferry__device_batch_leave_out. */
ferry_status ferry__device_batch_alloc_images(ferry_device_batch *db, ferry_dtype dtype, int ndim, const int64_t *shape,
                                              ferry_tensor **out);
/* Leave the source samples flagged in left_out[0..source batch size) out of db (a
 * producer that could not make their images, under the skip policy): db's batch size
 * becomes the count kept. Only before any record or images tensor exists. */
ferry_status ferry__device_batch_leave_out(ferry_device_batch *db, const uint8_t *left_out);

#endif
