/* ferry/batch.h - packed batches: one buffer per field plus an offset table.
 *
 * A packed batch holds B samples. Each FIELD (images, boxes, masks, labels, ...) is
 * one contiguous region of the batch's arena with a dtype, an inner shape and an
 * offset table of B+1 row indices: sample i's slice is rows
 * [offsets[i], offsets[i+1]). Looking at sample i costs no copy.
 *
 *   FERRY_FIELD_ROWS        a variable number of rows per sample (boxes [N,4],
 *                           masks [N,R,R]); the sample view has shape [rows, inner...]
 *   FERRY_FIELD_PER_SAMPLE  exactly one item per sample (an image [3,R,R],
 *                           image_id [1]); the sample view has the inner shape
 *
 * The layout (every offset, every byte) is computed from the per-sample row counts
 * before any data is written, so the arena is sized once and workers fill their
 * slices in place.
 *
 * An UNPACKED batch has the same fields and views but one host allocation per
 * sample and field: the baseline that packing is measured against.
 */
#ifndef FERRY_BATCH_H
#define FERRY_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/device.h"
#include "ferry/pool.h"
#include "ferry/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_batch ferry_batch;

typedef enum ferry_field_kind {
  FERRY_FIELD_ROWS = 0,
  FERRY_FIELD_PER_SAMPLE = 1
} ferry_field_kind;

#define FERRY_MAX_FIELDS 16
#define FERRY_FIELD_NAME_MAX 32

typedef struct ferry_field_spec {
  const char *name;        /* copied; at most FERRY_FIELD_NAME_MAX-1 characters */
  ferry_dtype dtype;
  ferry_field_kind kind;
  int inner_ndim;          /* 0..3: the shape of one row (ROWS) or one item (PER_SAMPLE) */
  int64_t inner_shape[3];
} ferry_field_spec;

/* Bytes a packed batch with these fields and row counts needs in its arena, field
 * regions aligned for device copies. rows[f * batch_size + i] is field f's row count
 * for sample i (ignored for PER_SAMPLE fields; rows may be NULL if there are none). */
ferry_status ferry_batch_layout_bytes(size_t batch_size, size_t nfields,
                                      const ferry_field_spec *fields, const int64_t *rows,
                                      size_t *out_bytes);

/* A packed batch in an arena taken from `pool` (blocks while none is free). */
ferry_status ferry_batch_create(ferry_pool *pool, size_t batch_size, size_t nfields,
                                const ferry_field_spec *fields, const int64_t *rows,
                                ferry_batch **out);
/* An unpacked batch: one host allocation per sample and field. */
ferry_status ferry_batch_create_unpacked(ferry_device *host, size_t batch_size, size_t nfields,
                                         const ferry_field_spec *fields, const int64_t *rows,
                                         ferry_batch **out);

/* Number of samples B; every offset table has B + 1 entries. */
size_t ferry_batch_size(const ferry_batch *batch);
/* Number of fields; field indices run from 0 to this minus one. */
size_t ferry_batch_num_fields(const ferry_batch *batch);
/* 1 for a packed batch (one arena), 0 for an unpacked one (an allocation per sample
 * and field). */
int ferry_batch_is_packed(const ferry_batch *batch);
/* The device the batch's bytes live on (host batches: the pool's device). */
ferry_device *ferry_batch_device(const ferry_batch *batch);
/* Index of the field called `name`, or -1. */
int ferry_batch_find_field(const ferry_batch *batch, const char *name);
const ferry_field_spec *ferry_batch_field_spec(const ferry_batch *batch, size_t field);
/* The offset table: batch_size + 1 row indices (for PER_SAMPLE fields 0, 1, ..., B). */
const int64_t *ferry_batch_offsets(const ferry_batch *batch, size_t field);
/* Bytes of one row (ROWS) or one item (PER_SAMPLE). */
size_t ferry_batch_row_bytes(const ferry_batch *batch, size_t field);

/* A view of sample i's slice of a field (no copy). */
ferry_status ferry_batch_sample(const ferry_batch *batch, size_t field, size_t sample,
                                ferry_tensor *view);
/* A view of a whole packed field: [total_rows, inner...] or [B, inner...].
 * FERRY_EUNSUPPORTED on an unpacked batch. */
ferry_status ferry_batch_field(const ferry_batch *batch, size_t field, ferry_tensor *view);

/* Keep the batch's memory from being reused until `event` completes (the transfer
 * stage calls this after queueing the copies that read the batch). Takes ownership. */
ferry_status ferry_batch_hold_until(ferry_batch *batch, ferry_event *event);

/* Call fn(batch, user) from ferry_batch_release, before the memory is handed back:
 * how the owner of a batch (the loader) learns that the consumer is done with it.
 * One hook per batch; a later call replaces it. */
typedef void (*ferry_batch_release_fn)(ferry_batch *batch, void *user);
void ferry_batch_set_release_hook(ferry_batch *batch, ferry_batch_release_fn fn, void *user);

/* Hand the batch back: its arena returns to the pool once every held event has
 * completed, without blocking. Only a batch held in device memory (made by
 * ferry_packed_to) or an unpacked one waits here for its held events before its
 * memory is freed. The batch must not be used afterwards. */
void ferry_batch_release(ferry_batch *batch);

#ifdef __cplusplus
}
#endif
#endif
