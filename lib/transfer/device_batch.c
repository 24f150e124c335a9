/* lib/transfer/device_batch.c - the result of a transfer: the batch tensor and one
 * record of independently owned tensors per sample.
 *
 * Owns: a ferry_device_batch: the images slot, batch_size x nfields record slots, the
 * `ready` event, the ON_STREAM hooks copied from the options, and the first hook
 * failure with its message.
 * Callers: the thread that made it, one call at a time; between ferry_transfer and the
 * completion of `ready`, an ON_STREAM hook also reads and writes it, on the stream's
 * thread (CUDA: a driver thread), so the caller leaves its records alone until then
 * (transfer.h).
 *
 * Invariants:
 *   - a slot is `present` exactly when the device batch owns its tensor and will free
 *     it; take clears the slot and hands the tensor over, replace frees the old one
 *     and takes the new one;
 *   - names[k] is the k-th per-sample field and source_field[k] its index in the
 *     source batch; the image field, if any, has no per-sample slots;
 *   - hook_status is 0 or the first negative status a hook returned, and hook_message
 *     holds that hook's message;
 *   - `ready` is NULL until everything of the transfer is queued; a failed transfer
 *     frees its device batch itself, so a caller never sees one without it;
 *   - `source` is NULL, or maps each of batch_size device samples to its sample in
 *     the source batch, increasing (samples a producer left out are skipped).
 * Not done here: no copying (transfer.c queues the copies), no locking.
 */
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/transfer/device_batch_internal.h"

ferry_status ferry__device_batch_new(ferry_device *device, ferry_stream *stream,
                                    const ferry_batch *batch, uint32_t not_records,
                                    ferry_device_batch **out) {
  size_t nfields = ferry_batch_num_fields(batch) - (size_t)__builtin_popcount(not_records);
  size_t batch_size = ferry_batch_size(batch);
  ferry_device_batch *db = ferry__calloc(1, sizeof *db);
  ferry__record_slot *slots = db && nfields ? ferry__calloc(batch_size * nfields, sizeof *slots) : NULL;
  if (!db || (nfields && !slots)) {
    ferry__free(db);
    return ferry__fail(FERRY_ENOMEM, "transfer: out of memory for %zu sample records", batch_size);
  }
  db->device = device;
  db->stream = stream;
  db->batch_size = batch_size;
  db->slots = slots;
  for (size_t f = 0; f < ferry_batch_num_fields(batch); f++) {
    if (not_records >> f & 1) continue;
    /* A batch's field names fit FERRY_FIELD_NAME_MAX (batch.c checks). */
    strcpy(db->names[db->nfields], ferry_batch_field_spec(batch, f)->name);
    db->source_field[db->nfields++] = (int)f;
  }
  *out = db;
  return FERRY_OK;
}

ferry_status ferry__device_batch_leave_out(ferry_device_batch *db, const uint8_t *left_out) {
  size_t n = db->batch_size, kept = 0;
  size_t *source = ferry__calloc(n ? n : 1, sizeof *source);
  if (!source) return ferry__fail(FERRY_ENOMEM, "transfer: out of memory for %zu samples' order", n);
  for (size_t i = 0; i < n; i++)
    if (!left_out[i]) source[kept++] = db->source ? db->source[i] : i;
  ferry__free(db->source);
  db->source = source;
  db->batch_size = kept;
  return FERRY_OK;
}

ferry_status ferry__device_batch_alloc_images(ferry_device_batch *db, ferry_dtype dtype, int ndim, const int64_t *shape,
                                              ferry_tensor **out) {
  /* Present once allocated, so that a failed transfer frees it with the batch. */
  ferry_status st = ferry_tensor_alloc(&db->images.tensor, db->device, db->stream, dtype, ndim, shape);
  db->images.present = st == FERRY_OK;
  *out = st == FERRY_OK ? &db->images.tensor : NULL;
  return st;
}

size_t ferry__device_batch_source(const ferry_device_batch *db, size_t j) {
  return db->source ? db->source[j] : j;
}

/* The message is copied now, on the thread that ran the hook (the stream's, for an
 * ON_STREAM hook): ferry_last_error is per thread, and ferry_device_batch_wait restores
 * the copy on the caller's. */
void ferry__device_batch_run_hook(ferry_device_batch *db, const ferry_transfer_hook *hook) {
  ferry_status st = hook->fn(db, hook->user);
  if (st >= 0 || db->hook_status < 0) return;
  db->hook_status = st;
  const char *why = ferry_last_error();
  snprintf(db->hook_message, sizeof db->hook_message, "transfer hook failed: %s",
           why[0] ? why : ferry_strerror(st));
}

static int field_index(const ferry_device_batch *db, const char *name) {
  for (size_t k = 0; name && k < db->nfields; k++)
    if (strcmp(db->names[k], name) == 0) return (int)k;
  return -1;
}

static ferry__record_slot *find_slot(ferry_device_batch *db, size_t sample, const char *name) {
  int k = db ? field_index(db, name) : -1;
  if (k < 0 || sample >= db->batch_size) return NULL;
  return &db->slots[sample * db->nfields + (size_t)k];
}

size_t ferry_device_batch_size(const ferry_device_batch *db) { return db->batch_size; }
ferry_device *ferry_device_batch_device(const ferry_device_batch *db) { return db->device; }
ferry_stream *ferry_device_batch_stream(const ferry_device_batch *db) { return db->stream; }
size_t ferry_device_batch_num_fields(const ferry_device_batch *db) { return db->nfields; }

const char *ferry_device_batch_field_name(const ferry_device_batch *db, size_t k) {
  return k < db->nfields ? db->names[k] : NULL;
}

ferry_tensor *ferry_device_batch_images(ferry_device_batch *db) {
  return db && db->images.present ? &db->images.tensor : NULL;
}

ferry_tensor *ferry_device_batch_sample_field(ferry_device_batch *db, size_t sample,
                                              const char *name) {
  ferry__record_slot *slot = find_slot(db, sample, name);
  return slot && slot->present ? &slot->tensor : NULL;
}

static ferry_status take_slot(ferry__record_slot *slot, ferry_tensor *out, const char *what) {
  if (!out) return ferry__fail(FERRY_EINVAL, "ferry_device_batch_take: out is NULL");
  if (!slot || !slot->present) return ferry__fail(FERRY_ENOTFOUND, "device batch: no tensor %s", what);
  *out = slot->tensor;
  memset(&slot->tensor, 0, sizeof slot->tensor);
  slot->present = 0;
  return FERRY_OK;
}

ferry_status ferry_device_batch_take(ferry_device_batch *db, size_t sample, const char *name,
                                     ferry_tensor *out) {
  char what[FERRY_FIELD_NAME_MAX + 48];
  snprintf(what, sizeof what, "'%s' for sample %zu", name ? name : "(null)", sample);
  return take_slot(find_slot(db, sample, name), out, what);
}

ferry_status ferry_device_batch_take_images(ferry_device_batch *db, ferry_tensor *out) {
  return take_slot(db ? &db->images : NULL, out, "for the images");
}

ferry_status ferry_device_batch_replace(ferry_device_batch *db, size_t sample, const char *name,
                                        ferry_tensor *tensor) {
  ferry__record_slot *slot = find_slot(db, sample, name);
  if (!tensor) return ferry__fail(FERRY_EINVAL, "ferry_device_batch_replace: tensor is NULL");
  if (!slot)
    return ferry__fail(FERRY_ENOTFOUND, "device batch: no field '%s' for sample %zu",
                      name ? name : "(null)", sample);
  if (slot->present) ferry_tensor_free(&slot->tensor);
  slot->tensor = *tensor;
  slot->present = 1;
  memset(tensor, 0, sizeof *tensor);
  return FERRY_OK;
}

ferry_event *ferry_device_batch_event(ferry_device_batch *db) { return db->ready; }

ferry_status ferry_device_batch_wait(ferry_device_batch *db) {
  if (!db) return ferry__fail(FERRY_EINVAL, "ferry_device_batch_wait: batch is NULL");
  if (db->ready) {
    ferry_status st = ferry_event_synchronize(db->ready);
    if (st != FERRY_OK) return st;
  }
  if (db->hook_status < 0) return ferry__error_restore(db->hook_status, db->hook_message);
  return FERRY_OK;
}

void ferry_device_batch_free(ferry_device_batch *db) {
  if (!db) return;
  /* A hook still queued on the stream holds a pointer to this batch. */
  if (db->nstream_hooks && db->ready) ferry_event_synchronize(db->ready);
  /* Each tensor is freed in the order of its own stream: a free queued behind the copies
   * that fill it cannot take memory from under them. */
  if (db->images.present) ferry_tensor_free(&db->images.tensor);
  for (size_t i = 0; i < db->batch_size * db->nfields; i++)
    if (db->slots[i].present) ferry_tensor_free(&db->slots[i].tensor);
  ferry_event_destroy(db->ready);
  ferry__free(db->source);
  ferry__free(db->slots);
  ferry__free(db);
}
