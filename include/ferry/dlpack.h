/* ferry/dlpack.h - hand a ferry tensor to another framework through DLPack.
 *
 * ferry_tensor_to_dlpack wraps a tensor in a DLManagedTensor (DLPack 0.6, Debian's
 * libdlpack-dev <dlpack/dlpack.h>) and moves its ownership there: the consumer calls
 * the deleter when it is done, and the deleter frees the device allocation (stream
 * ordered on the device's default stream) and the wrapper.
 *
 * Taking it into PyTorch: wrap the pointer in a PyCapsule named "dltensor" and call
 * torch.from_dlpack(capsule) (docs/transfer.md has a ctypes example). PyTorch then
 * owns the memory and calls the deleter when the torch tensor dies.
 *
 * Rules the consumer cannot check for you:
 *   - the tensor's contents must be complete before it is handed over (wait for the
 *     device batch's event): DLPack 0.6 carries no stream;
 *   - the ferry_device must stay open until the deleter has run.
 * Types: u8 and bool -> kDLUInt 8 (DLPack 0.6 has no bool), i32/i64 -> kDLInt,
 * f16/f32 -> kDLFloat, bf16 -> kDLBfloat. Devices: host -> kDLCPU, cuda:N -> kDLCUDA N.
 * Strides are NULL (compact row-major), as DLPack allows.
 */
#ifndef FERRY_DLPACK_H
#define FERRY_DLPACK_H

#include <dlpack/dlpack.h>

#include "ferry/tensor.h"
#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Move *tensor into a new DLManagedTensor. On success *tensor is cleared (ownership has
 * moved). A view (owned == 0) is wrapped too; its deleter then frees only the wrapper.
 * On failure *tensor is untouched. */
FERRY_API ferry_status ferry_tensor_to_dlpack(ferry_tensor *tensor, DLManagedTensor **out);

#ifdef __cplusplus
}
#endif
#endif
