/* lib/tensor.c - dtypes, shapes and tensor ownership.
 *
 * Owns no state: every function works on a ferry_tensor the caller holds. A tensor is
 * not locked; one thread at a time uses it (any thread). What a tensor made here
 * always satisfies:
 *   - nbytes = dtype size x the product of shape[0..ndim), computed without overflow
 *     (ferry_tensor_describe refuses a shape whose byte size does not fit a size_t);
 *     shape entries past ndim are 0;
 *   - nbytes == 0 implies data == NULL (an empty tensor is valid and allocates
 *     nothing: ferry_device_malloc of 0 bytes gives NULL);
 *   - owned == 1: data, unless NULL, is one live ferry_device_malloc allocation of
 *     `device`, to be freed in the order of `stream` (NULL: the default stream);
 *     owned == 0: a view, and freeing it only clears the struct.
 * Not done here: no strides (tensors are compact, row-major), no reference counts
 * (ownership moves by copying the struct and clearing the source).
 */
#include <string.h>

#include "ferry/device.h"
#include "lib/status.h"

size_t ferry_dtype_size(ferry_dtype dtype) {
  switch (dtype) {
    case FERRY_U8:
    case FERRY_BOOL: return 1;
    case FERRY_F16:
    case FERRY_BF16: return 2;
    case FERRY_I32:
    case FERRY_F32: return 4;
    case FERRY_I64: return 8;
  }
  return 0;
}

const char *ferry_dtype_name(ferry_dtype dtype) {
  /* Indexed by the enum's values (tensor.h numbers them 0..6 in this order). */
  static const char *names[] = {"u8", "bool", "i32", "i64", "f16", "bf16", "f32"};
  return (unsigned)dtype < sizeof names / sizeof names[0] ? names[dtype] : "?";
}

int64_t ferry_tensor_numel(const ferry_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

ferry_status ferry_tensor_describe(ferry_tensor *t, ferry_dtype dtype, int ndim,
                                   const int64_t *shape) {
  size_t elem = ferry_dtype_size(dtype);
  if (!t || elem == 0) return ferry__fail(FERRY_EINVAL, "tensor: unknown dtype %d", (int)dtype);
  if (ndim < 0 || ndim > FERRY_MAX_RANK)
    return ferry__fail(FERRY_EINVAL, "tensor: rank %d is outside 0..%d", ndim, FERRY_MAX_RANK);
  memset(t, 0, sizeof *t);
  size_t bytes = elem;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return ferry__fail(FERRY_EINVAL, "tensor: dimension %d is negative (%lld)", i, (long long)shape[i]);
    if (shape[i] > 0 && bytes > SIZE_MAX / (size_t)shape[i])
      return ferry__fail(FERRY_EINVAL, "tensor: byte size overflows");
    bytes *= (size_t)shape[i];
    t->shape[i] = shape[i];
  }
  t->dtype = dtype;
  t->ndim = ndim;
  t->nbytes = bytes;
  return FERRY_OK;
}

ferry_status ferry_tensor_alloc(ferry_tensor *t, ferry_device *device, ferry_stream *stream,
                                ferry_dtype dtype, int ndim, const int64_t *shape) {
  if (!device) return ferry__fail(FERRY_EINVAL, "ferry_tensor_alloc: device is NULL");
  ferry_status st = ferry_tensor_describe(t, dtype, ndim, shape);
  if (st != FERRY_OK) return st;
  st = ferry_device_malloc(device, stream, t->nbytes, &t->data);
  /* Cleared on failure, so that freeing the tensor afterwards is harmless. */
  if (st != FERRY_OK) {
    memset(t, 0, sizeof *t);
    return st;
  }
  t->device = device;
  t->stream = stream;
  t->owned = 1;
  return FERRY_OK;
}

ferry_status ferry_tensor_view(ferry_tensor *t, ferry_device *device, void *data,
                               ferry_dtype dtype, int ndim, const int64_t *shape) {
  ferry_status st = ferry_tensor_describe(t, dtype, ndim, shape);
  if (st != FERRY_OK) return st;
  if (!data && t->nbytes) return ferry__fail(FERRY_EINVAL, "tensor view: NULL data for %zu bytes", t->nbytes);
  t->data = t->nbytes ? data : NULL;
  t->device = device;
  return FERRY_OK;
}

void ferry_tensor_free(ferry_tensor *t) {
  if (!t) return;
  if (t->owned && t->data) ferry_device_free(t->device, t->stream, t->data);
  memset(t, 0, sizeof *t);
}
