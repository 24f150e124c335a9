/* loaders/gpu_route.c - the GPU decoder's per-image routes and the loader's answers to
 * the transfer stage (see gpu_route.h for what it owns and its invariant).
 */
#include <stdatomic.h>
#include <stdio.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "loaders/gpu_route.h"

struct ferry__gpu_routes {
  const ferry_coco *coco; /* fixed: names an image in a message */
  size_t images;
  int skip_unreadable; /* fixed: config.on_error is SKIP */
  atomic_uchar *route; /* [images] ferry__nvjpeg_route_kind; zeroed: every image on the GPU */
  atomic_uint_fast64_t skipped_in_transfer;
};

ferry_status ferry__gpu_routes_open(const ferry_coco *coco, int skip_unreadable, ferry__gpu_routes **out) {
  size_t n = ferry_coco_num_images(coco);
  ferry__gpu_routes *r = ferry__calloc(1, sizeof *r);
  atomic_uchar *route = ferry__calloc(n ? n : 1, sizeof *route);
  if (!r || !route) {
    ferry__free(r);
    ferry__free(route);
    return ferry__fail(FERRY_ENOMEM, "loader: out of memory for %zu images' routes", n);
  }
  r->coco = coco;
  r->images = n;
  r->skip_unreadable = skip_unreadable;
  r->route = route;
  atomic_init(&r->skipped_in_transfer, 0);
  *out = r;
  return FERRY_OK;
}

void ferry__gpu_routes_close(ferry__gpu_routes *r) {
  if (!r) return;
  ferry__free(r->route);
  ferry__free(r);
}

ferry__nvjpeg_route_kind ferry__gpu_route(const ferry__gpu_routes *r, size_t index) {
  if (index >= r->images) return FERRY_NVJPEG_ROUTE_GPU;
  return (ferry__nvjpeg_route_kind)atomic_load_explicit(&r->route[index], memory_order_relaxed);
}

/* The one write of a route: from GPU only (compare and exchange), so the invariant
 * holds whoever reports and in whatever order. */
int ferry__gpu_route_to_cpu(ferry__gpu_routes *r, size_t index, ferry__nvjpeg_route_kind route) {
  if (index >= r->images || route <= FERRY_NVJPEG_ROUTE_GPU || route >= FERRY_NVJPEG_ROUTES) return 0;
  unsigned char gpu = FERRY_NVJPEG_ROUTE_GPU;
  if (atomic_compare_exchange_strong_explicit(&r->route[index], &gpu, (unsigned char)route, memory_order_relaxed,
                                              memory_order_relaxed))
    return 1;
  return gpu == (unsigned char)route;
}

/* ---- the loader's answers to the transfer stage (jpeg_stage.h's hooks) ---- */

/* nvJPEG failed to decode it in a transfer: from now on its layouts give it a
 * cpu_images row (CORRUPT), unless a worker recorded another CPU route first; a plan
 * already laid out for nvJPEG is laid out again when a worker meets it
 * (ferry__gpu_fill_sample). */
static void gpu_failed(void *arg, int64_t index) {
  if (index >= 0) ferry__gpu_route_to_cpu(arg, (size_t)index, FERRY_NVJPEG_ROUTE_CORRUPT);
}

/* No decoder reads it: named for the message, and skipped (counted) or not by the
 * policy. */
static int unreadable(void *arg, int64_t index, char *name, size_t size) {
  ferry__gpu_routes *r = arg;
  ferry_coco_image img;
  if (index >= 0 && (size_t)index < r->images && ferry_coco_image_at(r->coco, (size_t)index, &img) == FERRY_OK)
    snprintf(name, size, "image id %lld, file %s", (long long)img.id, img.file_name);
  if (!r->skip_unreadable) return 0;
  atomic_fetch_add_explicit(&r->skipped_in_transfer, 1, memory_order_relaxed);
  return 1;
}

ferry__jpeg_stage_hooks ferry__gpu_routes_stage_hooks(ferry__gpu_routes *r) {
  return (ferry__jpeg_stage_hooks){.ctx = r, .gpu_failed = gpu_failed, .unreadable = unreadable};
}

uint64_t ferry__gpu_routes_skipped(const ferry__gpu_routes *r) {
  return r ? (uint64_t)atomic_load_explicit(&r->skipped_in_transfer, memory_order_relaxed) : 0;
}
