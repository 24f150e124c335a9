/* lib/transfer/module.c - deferred, all-or-nothing device moves under a per-module lock.
 *
 * Owns: a ferry_module: its name, reference count, tensors (each with its name), move
 * statistics and observer.
 * Callers: any threads at once. Each module has its own mutex and there is no global
 * one, so a move of one module never holds up another.
 *
 * Invariants, under `lock`:
 *   - every tensor's device is m->device (add refuses others; a move replaces all of
 *     them or none);
 *   - tensor names are unique;
 *   - every tensor's stream is NULL: its free goes on its device's default stream, so
 *     no stream the module does not own has to outlive it;
 *   - added owned tensors, and every tensor after a move, are owned by the module;
 *     added views are only referenced (module.h).
 * The lock is held across a whole move: the allocations, the copies, the stream's
 * synchronisation and every observer call. That is what makes a caller arriving
 * mid-move wait, then find the module moved; it is also why the observer must not
 * call into the same module (the mutex is not recursive).
 * Not done here: the devices must outlive the module; the reference count is not a
 * lock (the last unref frees without taking it: no other handle exists then).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "ferry/module.h"
#include "lib/alloc.h"
#include "lib/device_internal.h"
#include "lib/transfer/transfer_internal.h"

typedef struct module_tensor {
  char *name;
  ferry_tensor tensor;
} module_tensor;

struct ferry_module {
  char *name;
  atomic_int refs;
  pthread_mutex_t lock; /* guards everything below */
  ferry_device *device;
  module_tensor *tensors;
  size_t count, capacity;
  ferry_module_stats stats;
  ferry_module_move_fn observer;
  void *observer_user;
};

ferry_status ferry_module_create(const char *name, ferry_device *device, ferry_module **out) {
  if (!name || !device || !out)
    return ferry__fail(FERRY_EINVAL, "ferry_module_create: name, device and out are required");
  ferry_module *m = ferry__calloc(1, sizeof *m);
  char *copy = m ? ferry__strdup(name) : NULL;
  if (!copy) {
    ferry__free(m);
    return ferry__fail(FERRY_ENOMEM, "module '%s': out of memory", name);
  }
  m->name = copy;
  m->device = device;
  atomic_init(&m->refs, 1);
  pthread_mutex_init(&m->lock, NULL);
  *out = m;
  return FERRY_OK;
}

ferry_module *ferry_module_ref(ferry_module *m) {
  if (m) atomic_fetch_add(&m->refs, 1);
  return m;
}

void ferry_module_unref(ferry_module *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  for (size_t i = 0; i < m->count; i++) {
    ferry_tensor_free(&m->tensors[i].tensor);
    ferry__free(m->tensors[i].name);
  }
  ferry__free(m->tensors);
  pthread_mutex_destroy(&m->lock);
  ferry__free(m->name);
  ferry__free(m);
}

static int find_tensor(const ferry_module *m, const char *name) {
  for (size_t i = 0; i < m->count; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return (int)i;
  return -1;
}

static ferry_status add_locked(ferry_module *m, const char *name, ferry_tensor *t) {
  if (t->device != m->device)
    return ferry__fail(FERRY_EINVAL, "module '%s': tensor '%s' is on %s, the module on %s", m->name,
                      name, t->device ? t->device->name : "no device", m->device->name);
  if (find_tensor(m, name) >= 0)
    return ferry__fail(FERRY_EINVAL, "module '%s': a tensor called '%s' already exists", m->name, name);
  if (m->count == m->capacity) {
    size_t cap = m->capacity ? 2 * m->capacity : 8;
    module_tensor *grown = ferry__realloc(m->tensors, cap * sizeof *grown);
    if (!grown) return ferry__fail(FERRY_ENOMEM, "module '%s': out of memory", m->name);
    m->tensors = grown;
    m->capacity = cap;
  }
  char *copy = ferry__strdup(name);
  if (!copy) return ferry__fail(FERRY_ENOMEM, "module '%s': out of memory", m->name);
  m->tensors[m->count].name = copy;
  m->tensors[m->count].tensor = *t;
  /* Its contents are complete, so its eventual free needs no ordering after the
   * stream it was made on, which the caller may close: use the default stream. */
  m->tensors[m->count].tensor.stream = NULL;
  m->count++;
  memset(t, 0, sizeof *t);
  return FERRY_OK;
}

ferry_status ferry_module_add(ferry_module *m, const char *name, ferry_tensor *t) {
  if (!m || !name || !t) return ferry__fail(FERRY_EINVAL, "ferry_module_add: module, name and tensor are required");
  pthread_mutex_lock(&m->lock);
  ferry_status st = add_locked(m, name, t);
  pthread_mutex_unlock(&m->lock);
  return st;
}

/* Every tensor, not just the first: a move is all or nothing, but the check must not
 * rely on that to be right. */
static int all_on(const ferry_module *m, const ferry_device *device) {
  if (m->device != device) return 0;
  for (size_t i = 0; i < m->count; i++)
    if (m->tensors[i].tensor.device != device) return 0;
  return 1;
}

/* The copies are queued on a private stream of the CUDA device involved (the host
 * backend is happy either way), so unrelated moves never order after each other. */
static ferry_device *stream_device(ferry_device *from, ferry_device *to) {
  if (to->kind == FERRY_DEVICE_CUDA || from->kind == FERRY_DEVICE_HOST) return to;
  return from;
}

/* Copy every tensor into `fresh`; stops at the first failure. A module's host tensors
 * are host-device allocations, pageable to CUDA, so those copies are waited for
 * (ferry__memcpy_or_wait); the move synchronises at the end anyway. */
static ferry_status copy_all(ferry_module *m, ferry_device *device, ferry_stream *stream,
                             ferry_tensor *fresh) {
  /* Allocated on the private stream when it is the destination's (ordered before the
   * copy), else on the destination's default stream. */
  ferry_stream *alloc_stream = stream->device == device ? stream : NULL;
  int to_host = device->kind == FERRY_DEVICE_HOST;
  for (size_t i = 0; i < m->count; i++) {
    const module_tensor *mt = &m->tensors[i];
    ferry_status st = FERRY_OK;
    if (m->observer) {
      st = m->observer(m, i, mt->name, device, m->observer_user);
      if (st < 0) return ferry__fail(st, "tensor '%s': the move observer stopped the move", mt->name);
    }
    st = ferry_tensor_alloc(&fresh[i], device, alloc_stream, mt->tensor.dtype, mt->tensor.ndim,
                            mt->tensor.shape);
    if (st == FERRY_OK)
      st = ferry__memcpy_or_wait(stream, fresh[i].data, mt->tensor.data, mt->tensor.nbytes,
                                ferry__copy_kind_between(m->device->kind == FERRY_DEVICE_HOST, to_host));
    if (st != FERRY_OK) return ferry__error_prefix(st, "tensor '%s': ", mt->name);
  }
  return FERRY_OK;
}

/* New copies first, on a private stream, synchronised; only then are they swapped in
 * and the old tensors freed. A failure frees the copies and leaves the module as it
 * was, so the next ensure_on retries from scratch. */
static ferry_status move_locked(ferry_module *m, ferry_device *device) {
  ferry_tensor *fresh = ferry__calloc(m->count ? m->count : 1, sizeof *fresh);
  if (!fresh) return ferry__fail(FERRY_ENOMEM, "module '%s': out of memory for a move", m->name);
  ferry_stream *stream = NULL;
  ferry_status st = ferry_stream_open(stream_device(m->device, device), &stream);
  if (st == FERRY_OK) {
    st = copy_all(m, device, stream, fresh);
    ferry_status synced = ferry_stream_synchronize(stream);
    if (st == FERRY_OK) st = synced;
    ferry_stream_close(stream);
  }
  for (size_t i = 0; i < m->count; i++) fresh[i].stream = NULL; /* its stream is closed */
  if (st != FERRY_OK) {
    for (size_t i = 0; i < m->count; i++) ferry_tensor_free(&fresh[i]);
    ferry__free(fresh);
    m->stats.failed_moves++;
    return ferry__error_prefix(st, "module '%s': moving to %s: ", m->name, device->name);
  }
  for (size_t i = 0; i < m->count; i++) {
    ferry_tensor_free(&m->tensors[i].tensor);
    m->tensors[i].tensor = fresh[i];
  }
  ferry__free(fresh);
  m->device = device;
  m->stats.moves++;
  return FERRY_OK;
}

ferry_status ferry_module_ensure_on(ferry_module *m, ferry_device *device) {
  if (!m || !device) return ferry__fail(FERRY_EINVAL, "ferry_module_ensure_on: module and device are required");
  pthread_mutex_lock(&m->lock);
  m->stats.ensure_calls++;
  ferry_status st = all_on(m, device) ? FERRY_OK : move_locked(m, device);
  pthread_mutex_unlock(&m->lock);
  return st;
}

const char *ferry_module_name(const ferry_module *m) { return m->name; }

size_t ferry_module_num_tensors(ferry_module *m) {
  pthread_mutex_lock(&m->lock);
  size_t n = m->count;
  pthread_mutex_unlock(&m->lock);
  return n;
}

ferry_device *ferry_module_device(ferry_module *m) {
  pthread_mutex_lock(&m->lock);
  ferry_device *d = m->device;
  pthread_mutex_unlock(&m->lock);
  return d;
}

ferry_status ferry_module_get(ferry_module *m, const char *name, ferry_tensor *out) {
  if (!m || !name || !out) return ferry__fail(FERRY_EINVAL, "ferry_module_get: module, name and out are required");
  pthread_mutex_lock(&m->lock);
  int i = find_tensor(m, name);
  ferry_status st = FERRY_OK;
  if (i < 0) {
    st = ferry__fail(FERRY_ENOTFOUND, "module '%s': no tensor called '%s'", m->name, name);
  } else {
      /* A view: the caller may not free it, and it dangles after the next move. */
    *out = m->tensors[i].tensor;
    out->owned = 0;
    out->stream = NULL;
  }
  pthread_mutex_unlock(&m->lock);
  return st;
}

ferry_status ferry_module_stats_get(ferry_module *m, ferry_module_stats *out) {
  if (!m || !out) return ferry__fail(FERRY_EINVAL, "ferry_module_stats_get: module and out are required");
  pthread_mutex_lock(&m->lock);
  *out = m->stats;
  pthread_mutex_unlock(&m->lock);
  return FERRY_OK;
}

void ferry_module_set_move_observer(ferry_module *m, ferry_module_move_fn fn, void *user) {
  pthread_mutex_lock(&m->lock);
  m->observer = fn;
  m->observer_user = user;
  pthread_mutex_unlock(&m->lock);
}
