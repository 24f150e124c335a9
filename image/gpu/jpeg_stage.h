/* image/gpu/jpeg_stage.h - the GPU decoder's transfer stage (internal; issue 15).
 *
 * A loader with the GPU decoder hands out batches whose pixels are compressed JPEG
 * bytes (FERRY_FIELD_JPEG rows) or, for the samples nvJPEG cannot take, u8 pixels
 * decoded on the CPU (FERRY_FIELD_CPU_IMAGES rows). It attaches the stage's producer
 * (lib/transfer/producer.h) to every such batch; ferry_transfer's direct path then
 * asks it for the device batch's images tensor instead of copying an images field:
 * nvJPEG's batched decode of the jpeg rows on the transfer's stream (one nvJPEG state
 * per stream), the resize kernel with the CPU resize's own filter tables
 * (image/resize.c), and the normalisation kernel, for the fallbacks' u8 pixels too.
 * No decoded pixel of an nvJPEG sample touches host memory.
 */
#ifndef FERRY_LIB_TRANSFER_JPEG_STAGE_H
#define FERRY_LIB_TRANSFER_JPEG_STAGE_H

#include "ferry/batch.h"
#include "ferry/image.h"
#include "ferry/transfer.h"
#include "lib/status.h"
#include "lib/transfer/producer.h"

struct ferry_nvjpeg_api;
typedef struct ferry_jpeg_stage ferry_jpeg_stage;

/* A stage decoding with `api` to `resolution` x `resolution`, holding every image to
 * `opts`' pixel limit (the loader's image options; NULL: the defaults) before any
 * device memory is asked for it. FERRY_ENODEV without nvJPEG at build time. */
ferry_status ferry__jpeg_stage_open(const struct ferry_nvjpeg_api *api, int resolution,
                                    const ferry_image_options *opts, ferry_jpeg_stage **out);
/* Waits for the device's queued work (it may use the stage's states and tables), then
 * frees. The batches the stage was attached to must not be transferred afterwards. */
void ferry__jpeg_stage_close(ferry_jpeg_stage *stage);

/* The producer to attach to every batch the GPU decoder lays out
 * (ferry__batch_set_producer): it makes the device batch's images tensor from the
 * batch's jpeg and cpu_images fields, on the transfer's stream: [B,3,R,R] f32/bf16
 * normalised with the options' mean and std, or u8 [B,R,R,3] without normalisation.
 * Owned by the stage. */
const ferry__producer *ferry__jpeg_stage_producer(const ferry_jpeg_stage *stage);

#endif
