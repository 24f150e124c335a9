/* loaders/gpu_fill.c - the GPU decoder's side of the workers and of the layout.
 *
 * Owns: the file sizes a batch is laid out from (stat'ed at open), each worker's
 * nvJPEG parser, the fill of a sample laid out for the GPU decoder, and the stats
 * slot of each fallback reason. Where a sample's pixels go is its route, read from
 * and reported to loaders/gpu_route.c, never written here.
 * Invariants: a sample has exactly one of (jpeg rows = its file's size, no cpu_images
 * row) while its route is GPU, or (no jpeg rows, one cpu_images row) once a CPU route
 * is recorded (a worker's report, or the transfer stage's for an image nvJPEG failed
 * to decode); a slot is filled by its layout, never by a route recorded since. No
 * pixel of a sample nvJPEG takes is decoded here: the transfer stage decodes the
 * jpeg rows on the device. Masks, boxes and every other target are written by the
 * CPU path's code (fill.c), so they are the CPU decoder's bit for bit.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/alloc.h"
#include "image/gpu/nvjpeg_table.h"
#include "image/gpu/jpeg_stage.h"
#include "image/resize_kernels.h"
#include "loaders/gpu_fill.h"
#include "loaders/gpu_route.h"
#include "loaders/loader_internal.h"

static ferry__nvjpeg_route_kind route_of(const ferry__fill_context *ctx, size_t index) {
  return ferry__gpu_route(ctx->gpu.routes, index);
}

void ferry__gpu_plan_rows(const ferry__fill_context *ctx, const size_t *dataset_index, size_t count, int64_t *rows) {
  int64_t *jpeg = rows + (size_t)ctx->slots.jpeg * count;
  int64_t *cpu = rows + (size_t)ctx->slots.cpu_images * count;
  for (size_t i = 0; i < count; i++) {
    size_t index = dataset_index[i];
    int on_cpu = route_of(ctx, index) != FERRY_NVJPEG_ROUTE_GPU;
    int64_t bytes = ctx->gpu.file_bytes[index];
    jpeg[i] = on_cpu || bytes < 0 ? 0 : bytes;
    cpu[i] = on_cpu;
  }
}

void ferry__gpu_decoder_note(ferry_loader *l, ferry_status st) {
  snprintf(l->decoder_note, sizeof l->decoder_note, "decode = AUTO runs on the CPU: %s",
           ferry_last_error()[0] ? ferry_last_error() : ferry_strerror(st));
}

const char *ferry_loader_decoder_note(const ferry_loader *l) { return l ? l->decoder_note : ""; }

/* ---- the transfer stage ---- */

ferry_status ferry__gpu_stage_open(ferry__fill_context *ctx, int skip_unreadable) {
  static const ferry__jpeg_stage_fields fields = {
      .images = FERRY_FIELD_IMAGES, .jpeg = FERRY_FIELD_JPEG, .cpu_images = FERRY_FIELD_CPU_IMAGES};
  ferry_status st = ferry__gpu_routes_open(ctx->coco, skip_unreadable, &ctx->gpu.routes);
  if (st != FERRY_OK) return st;
  ferry__jpeg_stage_hooks hooks = ferry__gpu_routes_stage_hooks(ctx->gpu.routes);
  return ferry__jpeg_stage_open(ctx->gpu.api, ctx->resolution, &ctx->image, &fields, &hooks, &ctx->gpu.stage);
}

/* image/'s reasons one by one (a switch, so that a reason image/ adds and the loader
 * does not count fails the build: -Wswitch under -Werror), each in the slot
 * ferry/loader.h promises, its own value. */
size_t ferry__loader_fallback_slot(int reason) {
  switch ((ferry_decode_fallback)reason) {
    case FERRY_FALLBACK_NOT_JPEG: return 0;
    case FERRY_FALLBACK_CORRUPT: return 1;
    case FERRY_FALLBACK_COMPONENTS: return 2;
    case FERRY_FALLBACK_PRECISION: return 3;
    case FERRY_FALLBACK_ENCODING: return 4;
    case FERRY_FALLBACK_SUBSAMPLING: return 5;
    case FERRY_FALLBACK_UNSUPPORTED: return 6;
    case FERRY_FALLBACK_ORIENTED: return 7;
    case FERRY_FALLBACK_REASONS: break;
  }
  return FERRY_LOADER_FALLBACK_SLOTS;
}
_Static_assert(FERRY_FALLBACK_REASONS <= FERRY_LOADER_FALLBACK_SLOTS,
               "every fallback reason has a slot in ferry_loader_stats.samples_cpu_fallback");

/* ---- the stat at open ---- */

typedef struct stat_range {
  ferry__fill_context *ctx;
  size_t begin, end;
} stat_range;

/* -1 where the name is refused or the file is missing or not a regular file: the
 * sample is laid out with no bytes and its fill fails naming the file, by the same
 * policy as the CPU path. */
static void *stat_files(void *arg) {
  stat_range *r = arg;
  for (size_t i = r->begin; i < r->end; i++) {
    ferry_coco_image img;
    char path[4096];
    struct stat st;
    int ok = ferry__loader_image_file(r->ctx, i, &img, path, sizeof path) == FERRY_OK &&
             stat(path, &st) == 0 && S_ISREG(st.st_mode);
    r->ctx->gpu.file_bytes[i] = ok ? (int64_t)st.st_size : -1;
  }
  return NULL;
}

/* Images per thread at least: below this a thread costs more than the stats it saves. */
enum { STAT_CHUNK = 2048, STAT_MAX_THREADS = 32 };

ferry_status ferry__gpu_stat_files(ferry__fill_context *ctx, size_t threads) {
  size_t n = ferry_coco_num_images(ctx->coco);
  ctx->gpu.file_bytes = ferry__calloc(n ? n : 1, sizeof *ctx->gpu.file_bytes);
  if (!ctx->gpu.file_bytes) return ferry__fail(FERRY_ENOMEM, "loader: out of memory for %zu images' sizes", n);
  size_t want = n / STAT_CHUNK + 1;
  if (threads > want) threads = want;
  if (threads > STAT_MAX_THREADS) threads = STAT_MAX_THREADS;
  if (threads < 1) threads = 1;
  stat_range ranges[STAT_MAX_THREADS];
  pthread_t ids[STAT_MAX_THREADS];
  size_t started = 0;
  for (size_t t = 0; t < threads; t++) {
    ranges[t] = (stat_range){ctx, n * t / threads, n * (t + 1) / threads};
    /* The last range runs here; a thread that cannot start has its range run here too. */
    if (t + 1 < threads && pthread_create(&ids[started], NULL, stat_files, &ranges[t]) == 0) started++;
    else stat_files(&ranges[t]);
  }
  for (size_t t = 0; t < started; t++) pthread_join(ids[t], NULL);
  return FERRY_OK;
}

/* ---- the workers' side ---- */

#if FERRY_HAVE_NVJPEG

/* A CPU-planned sample: the CPU path's decode and resize, as u8 [R,R,3] (the transfer
 * stage normalises it on the device as it does nvJPEG's pixels). */
static ferry_status fill_on_cpu(const ferry__fill_context *ctx, ferry_decoder *decoder, ferry_batch *batch, size_t slot,
                                const char *path, const ferry_coco_image *img) {
  int w = 0, h = 0;
  ferry_status st = ferry_image_load_resized(decoder, path, &ctx->image, ctx->resolution,
                                             FERRY_LAYOUT_U8_HWC,
                                             ferry__loader_slice(batch, ctx->slots.cpu_images, slot), &w, &h);
  return st == FERRY_OK ? ferry__loader_check_size(path, w, h, img) : st;
}

/* Exactly the `want` bytes stat'ed at open into dst; a file that changed since is
 * refused (its rows were laid out for the old size). */
static ferry_status read_exact(const char *path, uint8_t *dst, int64_t want) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return ferry__fail(errno == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
  struct stat st;
  ferry_status status = FERRY_OK;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (int64_t)st.st_size != want)
    status = ferry__fail(FERRY_EIO, "%s: %lld bytes now, %lld when the loader opened (the file "
                         "changed, or is not a regular file)", path,
                         (long long)(fstat(fd, &st) == 0 ? st.st_size : -1), (long long)want);
  for (int64_t done = 0; status == FERRY_OK && done < want;) {
    ssize_t n = read(fd, dst + done, (size_t)(want - done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) status = ferry__fail(FERRY_EIO, "%s: read failed after %lld of %lld bytes: %s", path,
                                     (long long)done, (long long)want, n ? strerror(errno) : "end of file");
    else done += n;
  }
  close(fd);
  return status;
}

struct ferry__gpu_worker {
  ferry__nvjpeg_parser parser;
};

ferry_status ferry__gpu_worker_open(const ferry__fill_context *ctx, ferry__gpu_worker **out) {
  *out = ferry__calloc(1, sizeof **out);
  if (!*out) return ferry__fail(FERRY_ENOMEM, "worker: out of memory for an nvJPEG parser");
  ferry_status st = ferry__nvjpeg_parser_open(ctx->gpu.api, &(*out)->parser);
  if (st != FERRY_OK) {
    ferry__free(*out);
    *out = NULL;
  }
  return st;
}

ferry_status ferry__gpu_decoder_probe(const struct ferry__nvjpeg_api *api) {
  ferry__nvjpeg_parser p;
  ferry_status st = ferry__nvjpeg_parser_open(api, &p);
  if (st != FERRY_OK) return ferry__error_prefix(st, "nvJPEG does not start on this device: ");
  ferry__nvjpeg_parser_close(&p);
  return FERRY_OK;
}

void ferry__gpu_worker_close(ferry__gpu_worker *w) {
  if (!w) return;
  ferry__nvjpeg_parser_close(&w->parser);
  ferry__free(w);
}

/* A sample laid out for nvJPEG: its bytes into the jpeg rows, then the routing rules.
 * One nvJPEG takes is checked against the annotations' size as the CPU path checks
 * its decode; one it does not is recorded for the next layout (FERRY_EAGAIN). */
static ferry_status fill_for_gpu(const ferry__fill_context *ctx, ferry__gpu_worker *w, ferry_batch *batch, size_t slot,
                                 size_t index, const char *path, const ferry_coco_image *img, int *fallback) {
  int64_t bytes = ctx->gpu.file_bytes[index];
  size_t len = bytes < 0 ? 0 : (size_t)bytes;
  uint8_t *data = ferry__loader_slice(batch, ctx->slots.jpeg, slot);
  ferry_status st = read_exact(path, data, (int64_t)len);
  if (st != FERRY_OK) return st;
  ferry__nvjpeg_route_kind route = ferry__nvjpeg_route(&w->parser, data, len, ctx->image.apply_exif);
  if (route != FERRY_NVJPEG_ROUTE_GPU) {
    ferry__gpu_route_to_cpu(ctx->gpu.routes, index, route);
    return ferry__fail(FERRY_EAGAIN, "%s: goes to the CPU decoder (%s); laid out again", path,
                       ferry__nvjpeg_route_name(route));
  }
  int width = 0, height = 0;
  st = ferry__nvjpeg_image_size(&w->parser, data, len, path, &ctx->image, &width, &height);
  if (st == FERRY_OK) st = ferry__loader_check_size(path, width, height, img);
  *fallback = -1;
  return st;
}

ferry_status ferry__gpu_fill_sample(const ferry__fill_context *ctx, ferry__gpu_worker *w, ferry_decoder *decoder,
                                    ferry_batch *batch, size_t slot, size_t index, int *fallback) {
  ferry_coco_image img;
  char path[4096];
  *fallback = -1;
  ferry_status st = ferry__loader_image_file(ctx, index, &img, path, sizeof path);
  if (st != FERRY_OK) return st;
  /* The slot's layout decides, not the route now: a route recorded after this plan
   * was laid out (by another worker, or by the transfer stage) finds a slot with jpeg
   * rows and no cpu_images row, which is laid out again. */
  ferry__nvjpeg_route_kind route = route_of(ctx, index);
  const int64_t *cpu_rows = ferry_batch_offsets(batch, (size_t)ctx->slots.cpu_images);
  if (cpu_rows[slot + 1] > cpu_rows[slot]) {
    /* A cpu_images row was laid out from a CPU route, which never goes back to GPU. */
    *fallback = ferry__nvjpeg_route_reason(route);
    st = fill_on_cpu(ctx, decoder, batch, slot, path, &img);
  } else if (route) {
    st = ferry__fail(FERRY_EAGAIN,
                     "%s: found to need the CPU decoder (%s) after its batch was laid out; laid "
                     "out again",
                     path, ferry__nvjpeg_route_name(route));
  } else {
    st = fill_for_gpu(ctx, w, batch, slot, index, path, &img, fallback);
  }
  if (st == FERRY_OK) st = ferry__loader_write_targets(ctx, batch, slot, index, &img);
  if (st != FERRY_OK && st != FERRY_EAGAIN)
    return ferry__error_prefix(st, "dataset index %zu (image id %lld, file %s): ", index,
                               (long long)img.id, img.file_name);
  return st;
}

#else /* !FERRY_HAVE_NVJPEG: the loader never selects the GPU decoder */

ferry_status ferry__gpu_decoder_probe(const struct ferry__nvjpeg_api *api) {
  (void)api;
  return ferry__fail(FERRY_ENODEV, "ferry was built without nvJPEG");
}

ferry_status ferry__gpu_worker_open(const ferry__fill_context *ctx, ferry__gpu_worker **out) {
  (void)ctx;
  *out = NULL;
  return ferry__fail(FERRY_ENODEV, "worker: ferry was built without nvJPEG");
}

void ferry__gpu_worker_close(ferry__gpu_worker *w) { (void)w; }

ferry_status ferry__gpu_fill_sample(const ferry__fill_context *ctx, ferry__gpu_worker *w, ferry_decoder *decoder,
                                    ferry_batch *batch, size_t slot, size_t index, int *fallback) {
  *fallback = -1;
  return ferry__fail(FERRY_EUNSUPPORTED, "dataset index %zu: ferry was built without nvJPEG", index);
}

#endif
