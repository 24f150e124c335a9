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
 * A field's inner shape may name SAMPLE DIMENSIONS, FERRY_DIM_SAMPLE_H and
 * FERRY_DIM_SAMPLE_W: each sample's own height and width, given when the batch is
 * made (ferry_batch_create_sized). That is how samples of different sizes share a
 * batch (an augmented image [3,h_i,w_i], its masks [N_i,h_i,w_i]); their bytes still
 * lie consecutively in the field, laid out before any is written, and
 * ferry_batch_sample gives each sample's view its own shape.
 *
 * The layout (every offset, every byte) is computed from the per-sample row counts
 * before any data is written, so the arena is sized once and workers fill their
 * slices in place.
 *
 * An UNPACKED batch has the same fields and views but one host allocation per
 * sample and field: the baseline that packing is measured against.
 *
 * This header is what a consumer needs: reading a batch and handing it back.
 * Building batches by hand, their held events and release hook are the advanced
 * API (ferry/advanced.h).
 */
#ifndef FERRY_BATCH_H
#define FERRY_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/device.h"
#include "ferry/export.h"
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

/* A field's ROLE: what lib/ itself does with it, whatever it is called. lib/ knows no
 * field by its name (the names are the loader's, ferry/loader.h); the one who lays a
 * batch out marks the fields the transfer must treat apart (ferry_batch_set_role,
 * ferry/advanced.h; the loader marks its own). At most one field of a batch holds a
 * role; a new batch's fields hold none. */
typedef enum ferry_field_role {
  FERRY_ROLE_NONE = 0,
  /* The images: the field ferry_transfer makes the batch tensor of when its options
   * name none (ferry/transfer.h, image_field NULL). PER_SAMPLE. */
  FERRY_ROLE_IMAGES = 1,
  /* The dataset index of each sample, i64 [1] per sample: how the transfer's errors
   * name a sample ("sample 3 (dataset index 41)"). */
  FERRY_ROLE_SAMPLE_INDEX = 2,
  FERRY_ROLE_COUNT
} ferry_field_role;

/* In ferry_field_spec.inner_shape: this dimension is the sample's height (width). */
#define FERRY_DIM_SAMPLE_H (-1)
#define FERRY_DIM_SAMPLE_W (-2)

typedef struct ferry_field_spec {
  const char *name;        /* copied; at most FERRY_FIELD_NAME_MAX-1 characters */
  ferry_dtype dtype;
  ferry_field_kind kind;
  int inner_ndim;          /* 0..3: the shape of one row (ROWS) or one item (PER_SAMPLE) */
  int64_t inner_shape[3];
} ferry_field_spec;

/* Number of samples B; every offset table has B + 1 entries. */
FERRY_API size_t ferry_batch_size(const ferry_batch *batch);
/* Number of fields; field indices run from 0 to this minus one. */
FERRY_API size_t ferry_batch_num_fields(const ferry_batch *batch);
/* 1 for a packed batch (one arena), 0 for an unpacked one (an allocation per sample
 * and field). */
FERRY_API int ferry_batch_is_packed(const ferry_batch *batch);
/* The device the batch's bytes live on (host batches: the pool's device). */
FERRY_API ferry_device *ferry_batch_device(const ferry_batch *batch);
/* Index of the field called `name`, or -1. */
FERRY_API int ferry_batch_find_field(const ferry_batch *batch, const char *name);
/* Index of the field that holds `role`, or -1 (none does, or FERRY_ROLE_NONE). */
FERRY_API int ferry_batch_find_role(const ferry_batch *batch, ferry_field_role role);
FERRY_API const ferry_field_spec *ferry_batch_field_spec(const ferry_batch *batch, size_t field);
/* The offset table: batch_size + 1 row indices (for PER_SAMPLE fields 0, 1, ..., B). */
FERRY_API const int64_t *ferry_batch_offsets(const ferry_batch *batch, size_t field);
/* Bytes of one row (ROWS) or one item (PER_SAMPLE); 0 for a field with sample
 * dimensions, whose rows have each sample's size. */
FERRY_API size_t ferry_batch_row_bytes(const ferry_batch *batch, size_t field);
/* Sample i's height and width, for a batch with sample dimensions (FERRY_ENOTFOUND
 * for one without). */
FERRY_API ferry_status ferry_batch_sample_size(const ferry_batch *batch, size_t sample, int64_t *height,
                                               int64_t *width);

/* A view of sample i's slice of a field (no copy). */
FERRY_API ferry_status ferry_batch_sample(const ferry_batch *batch, size_t field, size_t sample,
                                          ferry_tensor *view);
/* A view of a whole packed field: [total_rows, inner...] or [B, inner...].
 * FERRY_EUNSUPPORTED on an unpacked batch, and for a field with sample dimensions. */
FERRY_API ferry_status ferry_batch_field(const ferry_batch *batch, size_t field, ferry_tensor *view);

/* Hand the batch back: its arena returns to the pool once every held event has
 * completed, without blocking. Only a batch held in device memory (the internal
 * whole-batch copy's) or an unpacked one waits here for its held events before its
 * memory is freed. The batch must not be used afterwards. */
FERRY_API void ferry_batch_release(ferry_batch *batch);

#ifdef __cplusplus
}
#endif
#endif
