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

/* The names of the fields the loader fills (ferry_loader_config.fields chooses which);
 * FERRY_FIELD_IMAGES is also the field ferry_transfer turns into the batch tensor. */
#define FERRY_FIELD_IMAGES "images"             /* u8 [R,R,3] or f32 [3,R,R], per sample */
#define FERRY_FIELD_SAMPLE_INDEX "sample_index" /* i64 [1]: the dataset index, per sample */
#define FERRY_FIELD_BOXES "boxes"               /* f32 [N,4] rows */
#define FERRY_FIELD_LABELS "labels"             /* i64 [N] rows */
#define FERRY_FIELD_MASKS "masks"               /* bool [N,R,R] rows */
#define FERRY_FIELD_AREA "area"                 /* f32 [N] rows */
#define FERRY_FIELD_ISCROWD "iscrowd"           /* i64 [N] rows */
#define FERRY_FIELD_IMAGE_ID "image_id"         /* i64 [1] per sample */
#define FERRY_FIELD_ORIG_SIZE "orig_size"       /* i64 [2] = h, w, per sample */
#define FERRY_FIELD_SIZE "size"                 /* i64 [2] = h, w of the content, per sample */
#define FERRY_FIELD_AUGMENT "augment"           /* i32 [FERRY_AUGMENT_RECORD_LEN] per sample: the
                                                   sample's augmentation record (ferry/image.h) */
/* With the GPU decoder (ferry_image_options.decode), a loader's batch has no images
 * field: each sample's pixels arrive in exactly one of these two, and the transfer
 * stage builds the images tensor on the device from them (docs/images.md). */
#define FERRY_FIELD_JPEG "jpeg"                 /* u8 [N] rows: the file's bytes, for nvJPEG (N = 0 for a fallback) */
#define FERRY_FIELD_CPU_IMAGES "cpu_images"     /* u8 [N,R,R,3] rows, N = 1 for a sample decoded on the CPU, else 0 */

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
