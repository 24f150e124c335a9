/* lib/transfer/dlpack.c - ferry tensors as DLPack managed tensors.
 *
 * Owns: per exported tensor, one dl_holder: the DLManagedTensor, the shape array it
 * points at, and the ferry tensor whose memory it hands out. All three go together in
 * the deleter, which is the only way the memory is freed once exported.
 * Callers: any thread; the deleter runs on whatever thread the consumer drops its
 * tensor on (a Python garbage collection, say), which is safe because the free goes
 * through device.c's locked accounting on the device's default stream. The ferry
 * device must still be open then.
 * DLPack 0.6 carries no stream, so the contents must be complete before the hand-over
 * (the caller waits for the device batch's event); u8 and bool are both kDLUInt 8
 * (0.6 has no bool); strides are NULL (compact row-major); byte_offset is 0.
 * Not done here: no import (DLPack into ferry), no versioned (1.x) structs. A view
 * (owned == 0) can be exported: its deleter frees the wrapper and not the memory.
 */
#include <string.h>

#include "ferry/dlpack.h"
#include "lib/alloc.h"
#include "lib/device_internal.h"
#include "lib/status.h"

/* The DLManagedTensor and everything it points at, freed together by the deleter. */
typedef struct dl_holder {
  DLManagedTensor managed;
  int64_t shape[FERRY_MAX_RANK];
  ferry_tensor tensor;
} dl_holder;

static void dl_deleter(DLManagedTensor *self) {
  dl_holder *h = self->manager_ctx;
  ferry_tensor_free(&h->tensor);
  ferry__free(h);
}

static DLDataType dl_dtype(ferry_dtype dtype) {
  DLDataType t = {.code = kDLUInt, .bits = 8, .lanes = 1};
  switch (dtype) {
    case FERRY_U8:
    case FERRY_BOOL: break;
    case FERRY_I32: t.code = kDLInt; t.bits = 32; break;
    case FERRY_I64: t.code = kDLInt; t.bits = 64; break;
    case FERRY_F16: t.code = kDLFloat; t.bits = 16; break;
    case FERRY_BF16: t.code = kDLBfloat; t.bits = 16; break;
    case FERRY_F32: t.code = kDLFloat; t.bits = 32; break;
  }
  return t;
}

ferry_status ferry_tensor_to_dlpack(ferry_tensor *tensor, DLManagedTensor **out) {
  if (!tensor || !out) return ferry__fail(FERRY_EINVAL, "ferry_tensor_to_dlpack: tensor and out are required");
  if (!tensor->device || ferry_dtype_size(tensor->dtype) == 0 || tensor->ndim < 0 ||
      tensor->ndim > FERRY_MAX_RANK)
    return ferry__fail(FERRY_EINVAL, "ferry_tensor_to_dlpack: not a valid tensor");
  dl_holder *h = ferry__calloc(1, sizeof *h);
  if (!h) return ferry__fail(FERRY_ENOMEM, "ferry_tensor_to_dlpack: out of memory");
  h->tensor = *tensor;
  /* The consumer frees it whenever it likes, long after any stream of ours may have
   * closed; the contents are complete by contract, so the default stream will do. */
  h->tensor.stream = NULL;
  memcpy(h->shape, tensor->shape, sizeof h->shape);
  DLTensor *dl = &h->managed.dl_tensor;
  dl->data = tensor->data;
  dl->device.device_type = tensor->device->kind == FERRY_DEVICE_CUDA ? kDLCUDA : kDLCPU;
  dl->device.device_id = tensor->device->kind == FERRY_DEVICE_CUDA ? tensor->device->index : 0;
  dl->ndim = tensor->ndim;
  dl->dtype = dl_dtype(tensor->dtype);
  dl->shape = h->shape;
  dl->strides = NULL;
  dl->byte_offset = 0;
  h->managed.manager_ctx = h;
  h->managed.deleter = dl_deleter;
  memset(tensor, 0, sizeof *tensor);
  *out = &h->managed;
  return FERRY_OK;
}
