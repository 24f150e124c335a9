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
#ifndef FERRY_IMAGE_GPU_JPEG_STAGE_H
#define FERRY_IMAGE_GPU_JPEG_STAGE_H

#include "ferry/batch.h"
#include "ferry/image.h"
#include "ferry/transfer.h"
#include "lib/status.h"
#include "lib/transfer/producer.h"

struct ferry__nvjpeg_api;
typedef struct ferry__jpeg_stage ferry__jpeg_stage;

/* What the stage asks of the loader about a sample nvJPEG failed to decode (its
 * dataset index: the batch's sample_index). Called on the transfer's thread, any
 * number at once; either may be NULL. */
typedef struct ferry__jpeg_stage_hooks {
  void *ctx;
  /* nvJPEG failed on it alone: lay it out for the CPU decoder from now on. */
  void (*reroute)(void *ctx, int64_t dataset_index);
  /* The CPU decoder failed on it too. Write what names it ("image id 8, file x.jpg")
   * into name; 1: the loader's policy skips it (it is left out of the device batch,
   * and counted), 0: it fails the transfer. NULL hook: it fails the transfer. */
  int (*unreadable)(void *ctx, int64_t dataset_index, char *name, size_t size);
} ferry__jpeg_stage_hooks;

/* A stage decoding with `api` to `resolution` x `resolution`, holding every image to
 * `opts`' pixel limit (the loader's image options; NULL: the defaults) before any
 * device memory is asked for it, and asking `hooks` (copied; NULL: none) about images
 * nvJPEG cannot decode: each is decoded on the CPU in the transfer instead, or, where
 * no decoder can, skipped or failed by the hooks' word. FERRY_ENODEV without nvJPEG at
 * build time. */
ferry_status ferry__jpeg_stage_open(const struct ferry__nvjpeg_api *api, int resolution,
                                    const ferry_image_options *opts, const ferry__jpeg_stage_hooks *hooks,
                                    ferry__jpeg_stage **out);
/* Waits for the device's queued work (it may use the stage's states and tables), then
 * frees. The batches the stage was attached to must not be transferred afterwards. */
void ferry__jpeg_stage_close(ferry__jpeg_stage *stage);

/* The producer to attach to every batch the GPU decoder lays out
 * (ferry__batch_set_producer): it makes the device batch's images tensor from the
 * batch's jpeg and cpu_images fields, on the transfer's stream: [B,3,R,R] f32/bf16
 * normalised with the options' mean and std, or u8 [B,R,R,3] without normalisation.
 * Owned by the stage. */
const ferry__producer *ferry__jpeg_stage_producer(const ferry__jpeg_stage *stage);

#endif
