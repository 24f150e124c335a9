/* image/gpu/jpeg_stage.h - the GPU decoder's transfer stage (internal; issue 15).
 *
 * A loader with the GPU decoder hands out batches whose pixels are compressed JPEG
 * bytes (its jpeg rows) or, for the samples nvJPEG cannot take, u8 pixels decoded on
 * the CPU (its cpu_images rows; the loader names both fields at open). It attaches
 * the stage's producer (lib/transfer/producer.h) to every such batch, and the stage
 * reports to the loader what nvJPEG fails on (the hooks below), but decides nothing
 * of the loader's: the routes are the loader's. ferry_transfer's direct path then
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

/* The fields the stage reads and stands for, by the names whoever lays the batches out
 * gave them (the loader's FERRY_FIELD_*: image/ knows no field by name). Static
 * strings: not copied. */
typedef struct ferry__jpeg_stage_fields {
  const char *images;     /* what it makes: its producer's output (the device batch's images) */
  const char *jpeg;       /* u8 rows: a sample's compressed bytes; none for a sample on the CPU */
  const char *cpu_images; /* u8 [N,R,R,3] rows: N = 1 for a sample decoded on the CPU, else 0 */
} ferry__jpeg_stage_fields;

/* What the stage tells the loader about a sample nvJPEG failed to decode (its dataset
 * index: the batch's FERRY_ROLE_SAMPLE_INDEX field), and asks of it. The stage only
 * reports; where the sample goes from now on, and whether a sample no decoder reads
 * is skipped, are the loader's decisions. Called on the transfer's thread, any number
 * at once; either may be NULL. */
typedef struct ferry__jpeg_stage_hooks {
  void *ctx;
  /* nvJPEG failed on it alone (this transfer decodes it on the CPU instead). */
  void (*gpu_failed)(void *ctx, int64_t dataset_index);
  /* The CPU decoder failed on it too. Write what names it ("image id 8, file x.jpg")
   * into name; 1: the loader's policy skips it (it is left out of the device batch,
   * and counted), 0: it fails the transfer. NULL hook: it fails the transfer. */
  int (*unreadable)(void *ctx, int64_t dataset_index, char *name, size_t size);
} ferry__jpeg_stage_hooks;

/* A stage decoding with `api` to `resolution` x `resolution` the batches whose fields
 * `fields` names (required, every name given), holding every image to `opts`' pixel
 * limit (the loader's image options; NULL: the defaults) before any device memory is
 * asked for it, and telling `hooks` (copied; NULL: none) about images nvJPEG cannot
 * decode: each is decoded on the CPU in the transfer instead, or, where no decoder
 * can, skipped or failed by the hooks' word. FERRY_ENODEV without nvJPEG at build
 * time. */
ferry_status ferry__jpeg_stage_open(const struct ferry__nvjpeg_api *api, int resolution,
                                    const ferry_image_options *opts, const ferry__jpeg_stage_fields *fields,
                                    const ferry__jpeg_stage_hooks *hooks, ferry__jpeg_stage **out);
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
