/* loaders/gpu_fill.h - the GPU decoder's side of the workers and of the layout
 * (gpu_fill.c; internal).
 *
 * Declares gpu_fill.c's calls: each worker's nvJPEG parser and the fill of a sample
 * laid out for the GPU decoder (workers.c), the jpeg and cpu_images rows of a plan
 * (coordinator.c), and what open needs (the probe, the file sizes, the transfer
 * stage, the decoder note; loader_open.c). The fill context they read is fill.h's,
 * fixed at open; a sample's route is read from and reported to gpu_route.c, never
 * written here.
 */
#ifndef FERRY_LOADERS_GPU_FILL_H
#define FERRY_LOADERS_GPU_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/image.h"
#include "ferry/loader.h"
#include "loaders/fill.h"

/* The GPU decoder's side of the workers (gpu_fill.c). A worker's parser: opened once
 * per worker, NULL with the CPU decoder. */
typedef struct ferry__gpu_worker ferry__gpu_worker;
ferry_status ferry__gpu_worker_open(const ferry__fill_context *ctx, ferry__gpu_worker **out);
void ferry__gpu_worker_close(ferry__gpu_worker *w);
/* Fill a sample laid out for the GPU decoder: its file's bytes into the jpeg rows, or
 * (routed to the CPU) its u8 pixels into cpu_images. *fallback is the
 * ferry_decode_fallback it went to the CPU for, -1 when nvJPEG takes it. FERRY_EAGAIN:
 * laid out for nvJPEG but found to need the CPU (its route reported, gpu_route.h). */
ferry_status ferry__gpu_fill_sample(const ferry__fill_context *ctx, ferry__gpu_worker *w, ferry_decoder *decoder,
                                    ferry_batch *batch, size_t slot, size_t index, int *fallback);
/* The jpeg and cpu_images rows of a plan's samples (rows: [nfields * count], the
 * coordinator's layout, every other field's rows already set). O(count), no lock. */
void ferry__gpu_plan_rows(const ferry__fill_context *ctx, const size_t *dataset_index, size_t count, int64_t *rows);
/* Whether the GPU decoder can start with `api`: a parser opened and closed, as every
 * worker will open one (nvjpegCreateEx refuses a GPU nvJPEG does not run on). The
 * message names the failing call and its status. */
ferry_status ferry__gpu_decoder_probe(const struct ferry__nvjpeg_api *api);
/* The routes (ctx->gpu.routes) and the transfer stage that decodes this loader's
 * batches on the device (ctx->gpu.stage, image/gpu/jpeg_stage.h), its hooks answered
 * by the routes; skip_unreadable: config.on_error is SKIP. At open. */
ferry_status ferry__gpu_stage_open(ferry__fill_context *ctx, int skip_unreadable);
/* The slot of ferry_loader_stats.samples_cpu_fallback that counts `reason` (a
 * ferry_decode_fallback): the loader's own table of image/'s reasons;
 * FERRY_LOADER_FALLBACK_SLOTS for none (-1). */
size_t ferry__loader_fallback_slot(int reason);
/* Stat every image's file at open (in parallel), for the jpeg rows' sizes. */
ferry_status ferry__gpu_stat_files(ferry__fill_context *ctx, size_t threads);
/* The loader decodes on the CPU under AUTO: remember why (the message `st` left;
 * gpu_fill.c, which also answers ferry_loader_decoder_note). */
void ferry__gpu_decoder_note(struct ferry_loader *loader, ferry_status st);

#endif
