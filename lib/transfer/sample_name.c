/* lib/transfer/sample_name.c - how a transfer's errors name a sample.
 *
 * Owns nothing: a sample is named by its position in the batch and, where the batch
 * has a field holding FERRY_ROLE_SAMPLE_INDEX (i64 [1]: the loader marks its
 * sample_index field so) in host memory, by its dataset index, which is what a user
 * can look up (the loader's own messages name the file by it). Used by
 * every file of the transfer that works per sample (transfer.c, image_tensor.c) and by
 * the GPU decoder's stage, so that they all say it the same way.
 */
#include "lib/status.h"
#include "lib/batch_internal.h"
#include "lib/transfer/sample_name.h"

long long ferry__dataset_index(const ferry_batch *batch, size_t i) {
  int f = ferry_batch_find_role(batch, FERRY_ROLE_SAMPLE_INDEX);
  ferry_tensor view;
  if (f < 0 || !ferry__batch_bytes_on_host(batch) || i >= batch->batch_size ||
      ferry_batch_sample(batch, (size_t)f, i, &view) != FERRY_OK || view.dtype != FERRY_I64 || view.nbytes < 8)
    return -1;
  return (long long)*(const int64_t *)view.data;
}

ferry_status ferry__sample_error(ferry_status st, const ferry_batch *batch, size_t i) {
  long long index = ferry__dataset_index(batch, i);
  if (index < 0) return ferry__error_prefix(st, "sample %zu: ", i);
  return ferry__error_prefix(st, "sample %zu (dataset index %lld): ", i, index);
}
