/* ferry/tensor.h - a typed, shaped block of memory on a device.
 *
 * A ferry_tensor is a plain value (like DLPack's DLTensor): read its fields freely.
 * It either OWNS its allocation (made by ferry_tensor_alloc, released by
 * ferry_tensor_free in the order of the stream it was allocated on) or is a VIEW of
 * memory owned by something else (a packed batch, the caller), which
 * ferry_tensor_free never releases. Tensors are row-major and contiguous.
 */
#ifndef FERRY_TENSOR_H
#define FERRY_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"
#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_device ferry_device;
typedef struct ferry_stream ferry_stream;

typedef enum ferry_dtype {
  FERRY_U8 = 0,
  FERRY_BOOL = 1, /* one byte per element, 0 or 1 */
  FERRY_I32 = 2,
  FERRY_I64 = 3,
  FERRY_F16 = 4,
  FERRY_BF16 = 5,
  FERRY_F32 = 6
} ferry_dtype;

#define FERRY_MAX_RANK 4

typedef struct ferry_tensor {
  void *data;                      /* NULL when nbytes is 0 */
  ferry_dtype dtype;
  int ndim;                        /* 0..FERRY_MAX_RANK */
  int64_t shape[FERRY_MAX_RANK];   /* entries past ndim are 0 */
  size_t nbytes;                   /* element size x product of shape */
  ferry_device *device;            /* where data lives */
  ferry_stream *stream;            /* owned tensors: the stream that orders their free */
  int owned;                       /* 1: ferry_tensor_free releases data; 0: a view */
} ferry_tensor;

/* Bytes per element (bool is 1). */
FERRY_API size_t ferry_dtype_size(ferry_dtype dtype);
/* The dtype's short name, as messages print it: "u8", "bool", "i32", "i64", "f16",
 * "bf16", "f32". */
FERRY_API const char *ferry_dtype_name(ferry_dtype dtype);

/* Number of elements: the product of the shape (1 for rank 0). */
FERRY_API int64_t ferry_tensor_numel(const ferry_tensor *t);

/* Allocate an owned tensor on `device`, ordered on `stream` (NULL: the device's
 * default stream). A shape with a zero gives a valid empty tensor (data NULL). */
FERRY_API ferry_status ferry_tensor_alloc(ferry_tensor *t, ferry_device *device, ferry_stream *stream,
                                          ferry_dtype dtype, int ndim, const int64_t *shape);

/* Describe memory owned elsewhere; ferry_tensor_free will not release it. */
FERRY_API ferry_status ferry_tensor_view(ferry_tensor *t, ferry_device *device, void *data,
                                         ferry_dtype dtype, int ndim, const int64_t *shape);

/* Release an owned tensor's memory (stream-ordered) and clear *t. Clears a view
 * without touching its memory. Safe on a cleared tensor. */
FERRY_API void ferry_tensor_free(ferry_tensor *t);

/* Check shape and dtype; fill nbytes. Returns FERRY_EINVAL for a rank over
 * FERRY_MAX_RANK, a negative dimension or a byte size that overflows. */
FERRY_API ferry_status ferry_tensor_describe(ferry_tensor *t, ferry_dtype dtype, int ndim,
                                             const int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif
