/* loaders/gpu_route.h - where each image's pixels go under the GPU decoder (internal).
 *
 * A sample is laid out before its file is read, so where its pixels go is decided
 * from what is known then: the image's ROUTE, FERRY_NVJPEG_ROUTE_GPU (0: jpeg rows,
 * for nvJPEG) until the loader learns otherwise, then the CPU route that sent it to
 * the CPU decoder (one cpu_images row). Two reports teach the loader otherwise: a
 * worker whose parser finds that nvJPEG must not take the image (gpu_fill.c), and the
 * transfer stage saying that nvJPEG failed to decode it (image/gpu/jpeg_stage.h's
 * gpu_failed hook, answered here). Both only report; the route is decided here.
 *
 * Owns: the per-image routes; the stage's hooks (the loader's answers to the
 * transfer: the route of an image nvJPEG failed on, and the skip policy for one no
 * decoder reads); the count of samples the stage left out under that policy. Fixed
 * at open: the dataset (to name an image) and the policy.
 * Invariant, enforced here alone: a route only goes from 0 to a CPU route, once (the
 * first report wins, later ones change nothing), so a sample is laid out again at
 * most once per loader (FERRY_EAGAIN, fill.h).
 * Callers: any thread at once, with no lock: the workers (fills), the coordinator
 * (layouts), the transfer's thread (the hooks); relaxed atomics, since a layout only
 * needs some recent route and a fill checks the slot's layout against the route it
 * reads (gpu_fill.c).
 */
#ifndef FERRY_LOADERS_GPU_ROUTE_H
#define FERRY_LOADERS_GPU_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/coco.h"
#include "image/gpu/jpeg_stage.h"
#include "image/gpu/nvjpeg_api.h"

typedef struct ferry__gpu_routes ferry__gpu_routes;

/* Every image of `coco` routed to the GPU; skip_unreadable: config.on_error is SKIP,
 * so the stage leaves out what no decoder reads. */
ferry_status ferry__gpu_routes_open(const ferry_coco *coco, int skip_unreadable, ferry__gpu_routes **out);
/* After the stage whose hooks point here is closed. NULL is fine. */
void ferry__gpu_routes_close(ferry__gpu_routes *routes);

/* Image `index`'s route now (GPU out of range). */
ferry__nvjpeg_route_kind ferry__gpu_route(const ferry__gpu_routes *routes, size_t index);
/* A worker's report: image `index` must go to the CPU decoder for `route` (a CPU
 * route). 1 when it now does for that route; 0 when it already had a CPU route (kept),
 * or for GPU or an index out of range. */
int ferry__gpu_route_to_cpu(ferry__gpu_routes *routes, size_t index, ferry__nvjpeg_route_kind route);

/* The hooks to open the transfer stage with: they answer it from `routes`. */
ferry__jpeg_stage_hooks ferry__gpu_routes_stage_hooks(ferry__gpu_routes *routes);
/* Samples the stage left out of device batches under the skip policy (0 for NULL). */
uint64_t ferry__gpu_routes_skipped(const ferry__gpu_routes *routes);

#endif
