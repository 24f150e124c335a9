/* lib/transfer/sample_name.h - sample_name.c's calls: how a failure names its sample
 * (internal; a floor header, which lib/transfer/producer.h includes: the transfer and
 * a producer name samples alike). */
#ifndef FERRY_LIB_TRANSFER_SAMPLE_NAME_H
#define FERRY_LIB_TRANSFER_SAMPLE_NAME_H

#include <stddef.h>

#include "ferry/batch.h"
#include "ferry/error.h"

/* st, its message prefixed with sample i of `batch` (sample_name.c): "sample 3
 * (dataset index 41): ", the dataset index read from the batch's field holding
 * FERRY_ROLE_SAMPLE_INDEX where it has one in host memory (the loader's batches do).
 * Every failure of one sample's work says so, the producer's too. */
ferry_status ferry__sample_error(ferry_status st, const ferry_batch *batch, size_t i);
/* Sample i's dataset index (its FERRY_ROLE_SAMPLE_INDEX field), -1 where the host
 * cannot read one. */
long long ferry__dataset_index(const ferry_batch *batch, size_t i);

#endif
