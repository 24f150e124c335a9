/* ferry/module.h - a named set of tensors moved to a device once, on first need.
 *
 * A module (model weights, a lookup table) is built on one device and moved lazily:
 * ferry_module_ensure_on(module, device) moves every tensor the first time it is
 * called and returns at once afterwards. Many threads may call it together:
 *   - each module has its own lock, so moving one module never holds up another;
 *   - the "already there?" check runs under that lock and looks at EVERY tensor, so no
 *     caller proceeds while a move is half done (a lock-free check of the first
 *     tensor would let it);
 *   - callers that arrive during a move wait for it and then find the module there;
 *   - a move is all or nothing: new copies are made first and swapped in only when
 *     every one has landed, so a move that fails part-way frees what it made, leaves
 *     the module usable where it was, and the next call simply tries again.
 * Handles are reference counted (ferry_module_ref); every handle is the same module,
 * so two handles never move it twice.
 */
#ifndef FERRY_MODULE_H
#define FERRY_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/device.h"
#include "ferry/tensor.h"
#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_module ferry_module;

/* An empty module whose tensors live on `device`. The name is copied. */
FERRY_API ferry_status ferry_module_create(const char *name, ferry_device *device, ferry_module **out);

/* Another handle to the same module (the reference count goes up). Returns `module`. */
FERRY_API ferry_module *ferry_module_ref(ferry_module *module);
/* Drop a handle; the last one frees every tensor and the module. Safe on NULL. */
FERRY_API void ferry_module_unref(ferry_module *module);

/* Add a tensor under a unique name. It must live on the module's current device and its
 * contents must be complete. Takes ownership of an owned tensor (*tensor is cleared);
 * a view is referenced and its memory must outlive the module's stay on that device
 * (a move leaves views behind and owns the copies). FERRY_EINVAL for a duplicate name
 * or another device. */
FERRY_API ferry_status ferry_module_add(ferry_module *module, const char *name, ferry_tensor *tensor);

/* Make sure every tensor lives on `device`, moving them if not. Returns only once the
 * module is entirely on `device` (FERRY_OK, contents complete) or is entirely where it
 * was (an error). */
FERRY_API ferry_status ferry_module_ensure_on(ferry_module *module, ferry_device *device);

/* The name given to ferry_module_create (owned by the module). */
FERRY_API const char *ferry_module_name(const ferry_module *module);
/* Number of tensors added so far. */
FERRY_API size_t ferry_module_num_tensors(ferry_module *module);
/* The device the module lives on now. */
FERRY_API ferry_device *ferry_module_device(ferry_module *module);
/* Copy of the tensor called `name` (a view: the module keeps ownership) as of now.
 * It stays valid until the next move or the last unref. FERRY_ENOTFOUND if none. */
FERRY_API ferry_status ferry_module_get(ferry_module *module, const char *name, ferry_tensor *out);

typedef struct ferry_module_stats {
  uint64_t moves;         /* moves that completed */
  uint64_t failed_moves;  /* moves that failed and were rolled back */
  uint64_t ensure_calls;  /* calls to ferry_module_ensure_on */
} ferry_module_stats;

/* Counters of moves completed and rolled back, and of ensure_on calls, since create. */
FERRY_API ferry_status ferry_module_stats_get(ferry_module *module, ferry_module_stats *out);

/* A move observer: called under the module's lock before each tensor is copied
 * (index 0..n-1 in insertion order) during a move to `device`. Meant for progress
 * reporting, logging and policy: a negative return aborts the move, which is then
 * rolled back and reported to the ensure_on caller with that status. Pass fn = NULL to
 * remove it. It must not call back into the same module. */
typedef ferry_status (*ferry_module_move_fn)(ferry_module *module, size_t index,
                                             const char *tensor_name, ferry_device *device,
                                             void *user);
FERRY_API void ferry_module_set_move_observer(ferry_module *module, ferry_module_move_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
