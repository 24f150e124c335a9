/* lib/transfer/jpeg_stage.h - the GPU decoder's transfer stage (internal; issue 15).
 *
 * A loader with the GPU decoder hands out batches whose pixels are compressed JPEG
 * bytes (FERRY_FIELD_JPEG rows) or, for the samples nvJPEG cannot take, u8 pixels
 * decoded on the CPU (FERRY_FIELD_CPU_IMAGES rows). It attaches its stage to every
 * such batch; ferry_transfer's direct path then builds the device batch's images
 * tensor with the stage instead of copying an images field: nvJPEG's batched decode
 * of the jpeg rows on the transfer's stream (one nvJPEG state per stream), the resize
 * kernel with the CPU resize's filter tables, and the normalisation kernel, for the
 * fallbacks' u8 pixels too. No decoded pixel of an nvJPEG sample touches host memory.
 *
 * lib/ knows nothing of the CPU resize's code, so the loader passes the functions that
 * build its filter tables (ferry_resize_tables).
 */
#ifndef FERRY_LIB_TRANSFER_JPEG_STAGE_H
#define FERRY_LIB_TRANSFER_JPEG_STAGE_H

#include "ferry/batch.h"
#include "ferry/transfer.h"
#include "lib/resize_cuda.h"
#include "lib/status.h"

struct ferry_nvjpeg_api;
typedef struct ferry_jpeg_stage ferry_jpeg_stage;

/* The CPU resize's filter tables, for the GPU resize to agree with it byte for byte. */
typedef struct ferry_resize_tables {
  size_t (*axis_bytes)(int in_size, int out_size);
  /* The axis' tables laid out in mem (axis_bytes long, 8-byte aligned); out points
   * into mem. */
  void (*axis_build)(ferry_resize_filter *out, int in_size, int out_size, void *mem);
  int (*vertical_first)(int width, int height, int size);
} ferry_resize_tables;

/* A stage decoding with `api` to `resolution` x `resolution`. FERRY_ENODEV without
 * nvJPEG at build time. */
ferry_status ferry__jpeg_stage_open(const struct ferry_nvjpeg_api *api, const ferry_resize_tables *tables,
                                   int resolution, ferry_jpeg_stage **out);
/* Waits for the device's queued work (it may use the stage's states and tables), then
 * frees. The batches the stage was attached to must not be transferred afterwards. */
void ferry__jpeg_stage_close(ferry_jpeg_stage *stage);

/* Attach the stage to a batch laid out by the GPU decoder (NULL detaches). */
void ferry__batch_set_jpeg_stage(ferry_batch *batch, ferry_jpeg_stage *stage);
ferry_jpeg_stage *ferry__batch_jpeg_stage(const ferry_batch *batch);

struct ferry_device_batch;
/* Allocate and fill db's images tensor from `batch`'s jpeg and cpu_images fields, on
 * db's stream: [B,3,R,R] f32/bf16 normalised with o's mean and std, or u8 [B,R,R,3]
 * without normalisation. Everything it reads from the batch is read by work queued on
 * the stream (the caller holds the batch until that has run). */
ferry_status ferry__jpeg_stage_images(ferry_jpeg_stage *stage, struct ferry_device_batch *db,
                                     const ferry_batch *batch, const ferry_transfer_options *o);

#endif
