/* image/gpu/jpeg_stage.c - the GPU decoder's transfer stage (see jpeg_stage.h).
 *
 * Owns: one nvJPEG decoder (handle and state) per stream it has decoded on, each used
 * by one transfer at a time (its lock); the CPU resize's filter tables for every input
 * side met so far, in memory of the one device the stage serves (built on the host
 * once per side, copied synchronously once, read by every later resize); and, per
 * transfer, scratch device memory freed in stream order after the work that reads it.
 * What one transfer does, in order: every nvJPEG sample's size, held to the pixel
 * limit before anything is allocated; the scratch; the batched decode of the nvJPEG
 * samples into scratch (nvJPEG itself does its host part in the call, and reports a
 * bad stream there); if it fails, each sample alone, and each that still fails
 * decoded by the CPU decoder into its scratch (and reported to the loader, whose
 * routes decide where its later layouts put it), or, where no decoder reads it, left
 * out of the device batch or failed by the loader's policy (jpeg_stage.h's hooks); the images tensor's allocation, a row
 * per sample kept; per sample, the two resize passes into u8 [R,R,3] pixels (the
 * images tensor itself without normalisation, else a u8 staging buffer); the
 * fallbacks' u8 rows copied from the arena into the same pixels; per sample, the
 * normalisation kernel; the scratch frees. On the host backend the same order holds:
 * the decode runs in the call and the resizes run as one host function on the stream
 * (ferry__resize_reference: the kernels' own element functions).
 * Includes of lib/: its floor only (lib/alloc.h, lib/device_native.h, the producer's and
 * the normalisation's headers), never the device's or the transfer's insides.
 * Invariants: the arithmetic is the CPU path's (image/gpu/resize_cuda.h, normalize.h), so
 * only the decoders' IDCT and chroma upsampling separate the two paths' pixels; on
 * failure nothing the transfer allocated is left (the caller frees the images tensor
 * with the device batch).
 */
#include <pthread.h>
#include <string.h>

#include "ferry_config.h"
#include "image/gpu/jpeg_stage.h"
#include "lib/alloc.h"
#include "lib/device_native.h"
#include "lib/transfer/normalize.h"
#include "lib/transfer/producer.h"

#if !FERRY_HAVE_NVJPEG

ferry_status ferry__jpeg_stage_open(const struct ferry__nvjpeg_api *api, int resolution,
                                    const ferry_image_options *opts, const ferry__jpeg_stage_fields *fields,
                                    const ferry__jpeg_stage_hooks *hooks, ferry__jpeg_stage **out) {
  *out = NULL;
  return ferry__fail(FERRY_ENODEV, "transfer: GPU decoding needs ferry built with CUDA and nvjpeg.h");
}

void ferry__jpeg_stage_close(ferry__jpeg_stage *stage) { (void)stage; }

const ferry__producer *ferry__jpeg_stage_producer(const ferry__jpeg_stage *stage) { return NULL; }

#else
#include "image/gpu/nvjpeg_table.h"
#include "image/gpu/resize_cuda.h"
#include "image/resize_kernels.h"

/* JPEG sides are 16-bit. */
enum { MAX_SIDE = 65536 };

/* One input side's filter tables, in device memory. */
typedef struct axis_entry {
  void *mem;
  ferry__resize_filter filter;
} axis_entry;

typedef struct stream_decoder {
  ferry_stream *stream;
  pthread_mutex_t lock; /* one decode at a time on this state */
  ferry__nvjpeg_decoder decoder;
  struct stream_decoder *next;
} stream_decoder;

struct ferry__jpeg_stage {
  const ferry__nvjpeg_api *api;
  ferry__producer producer;   /* what batches carry; self is the stage */
  int resolution;
  ferry_image_options image;  /* its max_pixels: what a sample may ask of the device */
  ferry__jpeg_stage_fields fields; /* the loader's names of the fields it reads and makes */
  ferry__jpeg_stage_hooks hooks;   /* where it reports samples nvJPEG cannot decode */
  pthread_mutex_t lock;       /* guards everything below */
  ferry_device *device;       /* the device of the first transfer: the tables live there */
  axis_entry *axes;           /* [MAX_SIDE], by input side */
  stream_decoder *decoders;
};

static ferry_status produce_images(void *self, ferry_device_batch *db, const ferry_batch *batch,
                                   const ferry_transfer_options *o);

ferry_status ferry__jpeg_stage_open(const struct ferry__nvjpeg_api *api, int resolution,
                                    const ferry_image_options *opts, const ferry__jpeg_stage_fields *fields,
                                    const ferry__jpeg_stage_hooks *hooks, ferry__jpeg_stage **out) {
  *out = NULL;
  if (!fields || !fields->images || !fields->jpeg || !fields->cpu_images)
    return ferry__fail(FERRY_EINVAL, "transfer: the GPU decoder's stage needs the names of its three fields");
  ferry__jpeg_stage *s = ferry__calloc(1, sizeof *s);
  axis_entry *axes = ferry__calloc(MAX_SIDE, sizeof *axes);
  if (!s || !axes) {
    ferry__free(s);
    ferry__free(axes);
    return ferry__fail(FERRY_ENOMEM, "transfer: out of memory for the GPU decoder's stage");
  }
  s->api = api;
  s->fields = *fields;
  s->producer = (ferry__producer){.output = fields->images,
                                  .inputs = {fields->jpeg, fields->cpu_images},
                                  .ninputs = 2,
                                  .produce = produce_images,
                                  .self = s};
  s->resolution = resolution;
  if (opts) s->image = *opts;
  else ferry_image_options_default(&s->image);
  if (hooks) s->hooks = *hooks;
  s->axes = axes;
  pthread_mutex_init(&s->lock, NULL);
  *out = s;
  return FERRY_OK;
}

const ferry__producer *ferry__jpeg_stage_producer(const ferry__jpeg_stage *s) { return &s->producer; }

void ferry__jpeg_stage_close(ferry__jpeg_stage *s) {
  if (!s) return;
  if (s->device) ferry_device_synchronize(s->device);
  for (int i = 0; i < MAX_SIDE; i++)
    if (s->axes[i].mem) ferry_device_free(s->device, NULL, s->axes[i].mem);
  while (s->decoders) {
    stream_decoder *d = s->decoders;
    s->decoders = d->next;
    ferry__nvjpeg_decoder_close(&d->decoder);
    pthread_mutex_destroy(&d->lock);
    ferry__free(d);
  }
  pthread_mutex_destroy(&s->lock);
  ferry__free(s->axes);
  ferry__free(s);
}

/* ---- what the stage keeps between transfers (under s->lock) ---- */

static int is_host(const ferry_device *device) { return ferry_device_get_kind(device) == FERRY_DEVICE_HOST; }

/* Host bytes up to `device`: what every copy of the stage is. */
static ferry_copy_kind upload_kind(const ferry_device *device) { return ferry__copy_kind_between(1, is_host(device)); }

static void *relocate(const void *p, const void *from, void *to) {
  return (char *)to + ((const char *)p - (const char *)from);
}

/* The filter tables of an input side, built and copied to the device the first time. */
static ferry_status device_axis(ferry__jpeg_stage *s, ferry_stream *stream, int side, ferry__resize_filter *out) {
  axis_entry *e = &s->axes[side];
  if (!e->mem) {
    size_t bytes = ferry__resize_axis_bytes(side, s->resolution);
    void *host = ferry__malloc(bytes), *dev = NULL;
    if (!host) return ferry__fail(FERRY_ENOMEM, "transfer: out of memory for resize tables");
    ferry__resize_axis axis;
    ferry__resize_axis_build(&axis, side, s->resolution, host);
    ferry__resize_filter hf = {axis.first, axis.count, axis.offset, axis.weights};
    ferry_status st = ferry_device_malloc(s->device, NULL, bytes, &dev);
    if (st == FERRY_OK) st = ferry_memcpy(stream, dev, host, bytes, upload_kind(s->device));
    if (st == FERRY_OK)
      e->filter = (ferry__resize_filter){relocate(hf.first, host, dev), relocate(hf.count, host, dev),
                                         relocate(hf.offset, host, dev), relocate(hf.weights, host, dev)};
    ferry__free(host);
    if (st != FERRY_OK) {
      if (dev) ferry_device_free(s->device, NULL, dev);
      return ferry__error_prefix(st, "transfer: resize tables for side %d: ", side);
    }
    e->mem = dev;
  }
  *out = e->filter;
  return FERRY_OK;
}

static ferry_status bind_device(ferry__jpeg_stage *s, ferry_device *device) {
  if (!s->device) s->device = device;
  if (s->device == device) return FERRY_OK;
  return ferry__fail(FERRY_EUNSUPPORTED, "transfer: the GPU decoder's batches go to %s, not %s",
                     ferry_device_name(s->device), ferry_device_name(device));
}

static ferry_status decoder_for(ferry__jpeg_stage *s, ferry_stream *stream, stream_decoder **out) {
  for (stream_decoder *d = s->decoders; d; d = d->next)
    if (d->stream == stream) return *out = d, FERRY_OK;
  stream_decoder *d = ferry__calloc(1, sizeof *d);
  if (!d) return ferry__fail(FERRY_ENOMEM, "transfer: out of memory for an nvJPEG decoder");
  ferry_status st = ferry__nvjpeg_decoder_open(s->api, &d->decoder);
  if (st != FERRY_OK) {
    ferry__free(d);
    return st;
  }
  d->stream = stream;
  pthread_mutex_init(&d->lock, NULL);
  d->next = s->decoders;
  s->decoders = d;
  *out = d;
  return FERRY_OK;
}

/* ---- one transfer ---- */

/* An nvJPEG sample: where its bytes are, its size, its scratch. */
typedef struct gpu_sample {
  size_t index;
  const uint8_t *data;
  size_t len;
  int width, height;
  uint8_t *decoded, *tmp;
} gpu_sample;

typedef struct stage_run {
  ferry__jpeg_stage *s;
  ferry_device_batch *db;
  ferry_device *device; /* db's device and stream */
  ferry_stream *stream;
  const ferry_batch *batch;
  size_t nsource;          /* the source batch's samples */
  uint8_t *left_out;       /* [nsource]: samples no decoder could read, under skip */
  size_t *row;             /* [nsource]: a kept sample's row in the images tensor */
  int jpeg, cpu_images;    /* field indices */
  size_t item;             /* bytes of one u8 [R,R,3] image */
  ferry_tensor *images;    /* db's images tensor, once allocated */
  uint8_t *pixels;         /* u8 [B,R,R,3]: the images tensor, or staging */
  uint8_t *staging;        /* owned when normalising */
  gpu_sample *gpu;         /* [B] */
  size_t ngpu;
  stream_decoder *decoder;
} stage_run;

static ferry_status alloc_images(stage_run *r, const ferry_transfer_options *o) {
  size_t kept = ferry_device_batch_size(r->db);
  int64_t R = r->s->resolution, B = (int64_t)kept;
  int64_t u8_shape[4] = {B, R, R, 3}, norm_shape[4] = {B, 3, R, R};
  int normalise = o->normalize != FERRY_NORMALIZE_NONE;
  ferry_dtype dtype = !normalise ? FERRY_U8 : o->normalize == FERRY_NORMALIZE_F32 ? FERRY_F32 : FERRY_BF16;
  ferry_status st = ferry__device_batch_alloc_images(r->db, dtype, 4, normalise ? norm_shape : u8_shape, &r->images);
  if (st != FERRY_OK) return st;
  if (!normalise) {
    r->pixels = r->images->data;
    return FERRY_OK;
  }
  st = ferry_device_malloc(r->device, r->stream, r->item * kept, (void **)&r->staging);
  r->pixels = r->staging;
  return st;
}

/* The nvJPEG samples (those with jpeg rows) and their sizes, each held to the pixel
 * limit and to JPEG's sides: nothing is allocated for any sample until every one is
 * known to fit, so a header claiming a huge image costs no device memory. */
static ferry_status collect_gpu(stage_run *r) {
  const int64_t *rows = ferry_batch_offsets(r->batch, (size_t)r->jpeg);
  for (size_t i = 0; i < r->nsource; i++) {
    if (rows[i + 1] == rows[i]) continue;
    gpu_sample *g = &r->gpu[r->ngpu++];
    ferry_tensor view;
    ferry_status st = ferry_batch_sample(r->batch, (size_t)r->jpeg, i, &view);
    g->index = i;
    g->data = view.data;
    g->len = view.nbytes;
    if (st == FERRY_OK)
      st = ferry__nvjpeg_image_size(&r->decoder->decoder.parser, g->data, g->len, "its jpeg rows", &r->s->image,
                                    &g->width, &g->height);
    if (st == FERRY_OK && (g->width >= MAX_SIDE || g->height >= MAX_SIDE))
      st = ferry__fail(FERRY_EUNSUPPORTED, "image of %dx%d", g->width, g->height);
    if (st != FERRY_OK) return ferry__sample_error(st, r->batch, i);
  }
  return FERRY_OK;
}

/* Each nvJPEG sample's scratch: its decoded pixels and the resize's intermediate. */
static ferry_status alloc_scratch(stage_run *r) {
  for (size_t k = 0; k < r->ngpu; k++) {
    gpu_sample *g = &r->gpu[k];
    int vfirst = ferry__resize_vertical_first(g->width, g->height, r->s->resolution);
    ferry_status st = ferry_device_malloc(r->device, r->stream, (size_t)g->width * g->height * 3, (void **)&g->decoded);
    if (st == FERRY_OK)
      st =
          ferry_device_malloc(r->device, r->stream,
                              ferry__resize_tmp_bytes(g->width, g->height, r->s->resolution, vfirst), (void **)&g->tmp);
    if (st != FERRY_OK) return ferry__sample_error(st, r->batch, g->index);
  }
  return FERRY_OK;
}

static ferry_status resize_job(stage_run *r, const gpu_sample *g, ferry__resize_job *job) {
  ferry__jpeg_stage *s = r->s;
  int R = s->resolution;
  *job = (ferry__resize_job){.src = g->decoded,
                             .width = g->width,
                             .height = g->height,
                             .size = R,
                             .vertical_first = ferry__resize_vertical_first(g->width, g->height, R),
                             .tmp = g->tmp,
                             .f32_chw = 0,
                             .dst = r->pixels + r->row[g->index] * r->item};
  pthread_mutex_lock(&s->lock);
  ferry_status st = device_axis(s, r->stream, g->width, &job->h);
  if (st == FERRY_OK) st = device_axis(s, r->stream, g->height, &job->v);
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* The host backend's resizes: one host function on the stream, after the decode. */
typedef struct host_resizes {
  size_t n;
  ferry__resize_job jobs[];
} host_resizes;

static void run_host_resizes(void *arg) {
  host_resizes *h = arg;
  for (size_t i = 0; i < h->n; i++) ferry__resize_reference(&h->jobs[i]);
  ferry__free(h);
}

static ferry_status queue_resizes(stage_run *r) {
  ferry_stream *stream = r->stream;
  int on_host = is_host(r->device);
  host_resizes *h = ferry__malloc(sizeof *h + r->ngpu * sizeof h->jobs[0]);
  if (!h) return ferry__fail(FERRY_ENOMEM, "transfer: out of memory for %zu resizes", r->ngpu);
  h->n = 0;
  ferry_status st = FERRY_OK;
  for (size_t k = 0; k < r->ngpu && st == FERRY_OK; k++) {
    if (r->left_out[r->gpu[k].index]) continue;
    ferry__resize_job *job = &h->jobs[h->n++];
    st = resize_job(r, &r->gpu[k], job);
    int err = st == FERRY_OK && !on_host ? ferry__cuda_resize_launch(ferry__stream_native(stream), job) : 0;
    if (err) st = ferry__fail(FERRY_EDEVICE, "transfer: the resize kernel of sample %zu failed to launch "
                              "(CUDA error %d)", r->gpu[k].index, err);
  }
  if (st != FERRY_OK || !on_host) {
    ferry__free(h);
    return st;
  }
  st = ferry_stream_call(stream, run_host_resizes, h);
  if (st != FERRY_OK) ferry__free(h);
  return st;
}

/* nvJPEG's batched decode of `n` samples, each into its scratch. */
static ferry_status decode_some(stage_run *r, gpu_sample *const *g, size_t n) {
  const uint8_t **data = ferry__malloc(n * sizeof *data);
  size_t *len = ferry__malloc(n * sizeof *len);
  int *width = ferry__malloc(n * sizeof *width);
  uint8_t **dst = ferry__malloc(n * sizeof *dst);
  ferry_status st = FERRY_OK;
  if (!data || !len || !width || !dst) st = ferry__fail(FERRY_ENOMEM, "transfer: out of memory for %zu decodes", n);
  for (size_t k = 0; k < n && st == FERRY_OK; k++) {
    data[k] = g[k]->data;
    len[k] = g[k]->len;
    width[k] = g[k]->width;
    dst[k] = g[k]->decoded;
  }
  if (st == FERRY_OK) {
    pthread_mutex_lock(&r->decoder->lock);
    st = ferry__nvjpeg_decode_rgbi(&r->decoder->decoder, data, len, width, dst, (int)n, r->stream);
    pthread_mutex_unlock(&r->decoder->lock);
  }
  ferry__free(data);
  ferry__free(len);
  ferry__free(width);
  ferry__free(dst);
  return st;
}

/* The CPU decoder's pixels of a sample nvJPEG could not decode, into its scratch: the
 * same bytes, at full size (as nvJPEG decodes), copied up synchronously (a rare path). */
static ferry_status decode_on_cpu(stage_run *r, gpu_sample *g) {
  ferry_image_options opts = r->s->image;
  opts.dct_scaling = 0;
  opts.apply_exif = 0; /* the routes send a rotated image to the CPU before it gets here */
  ferry_decoder *d = NULL;
  ferry_status st = ferry_decoder_open(&d);
  const uint8_t *rgb = NULL;
  int w = 0, h = 0;
  if (st == FERRY_OK) st = ferry_decode_rgb(d, g->data, g->len, "its jpeg rows", &opts, &rgb, &w, &h);
  if (st == FERRY_OK && (w != g->width || h != g->height))
    st = ferry__fail(FERRY_EFORMAT, "the CPU decoder makes %dx%d of a header saying %dx%d", w, h, g->width, g->height);
  if (st == FERRY_OK) st = ferry_memcpy(r->stream, g->decoded, rgb, (size_t)w * h * 3, upload_kind(r->device));
  if (d) ferry_decoder_close(d);
  return st;
}

/* A sample nvJPEG failed on, alone: reported to the loader (which decides where it goes
 * from now on); here the CPU decoder decodes it, or, where it cannot either, the
 * loader's policy decides: left out of this device batch (skip), or the transfer's
 * failure, naming the file (fail). */
static ferry_status rescue(stage_run *r, gpu_sample *g) {
  const ferry__jpeg_stage_hooks *hooks = &r->s->hooks;
  long long index = ferry__dataset_index(r->batch, g->index);
  if (index >= 0 && hooks->gpu_failed) hooks->gpu_failed(hooks->ctx, index);
  ferry_status st = decode_on_cpu(r, g);
  if (st == FERRY_OK || st == FERRY_ENOMEM) return st;
  char name[FERRY_ERROR_MAX] = "";
  if (index >= 0 && hooks->unreadable && hooks->unreadable(hooks->ctx, index, name, sizeof name)) {
    r->left_out[g->index] = 1;
    return FERRY_OK;
  }
  st = ferry__error_prefix(st, "%s%snvJPEG and the CPU decoder both fail on it: ", name, name[0] ? ": " : "");
  return ferry__sample_error(st, r->batch, g->index);
}

/* Every nvJPEG sample into its scratch: one batched decode; if it fails, each sample
 * alone, so that one bad image costs only itself (rescue). Out of device memory is
 * the transfer's failure (the caller may free memory and retry). */
static ferry_status decode_all(stage_run *r) {
  if (!r->ngpu) return FERRY_OK;
  gpu_sample **all = ferry__malloc(r->ngpu * sizeof *all);
  if (!all) return ferry__fail(FERRY_ENOMEM, "transfer: out of memory for %zu decodes", r->ngpu);
  for (size_t k = 0; k < r->ngpu; k++) all[k] = &r->gpu[k];
  ferry_status st = decode_some(r, all, r->ngpu);
  if (st != FERRY_OK && st != FERRY_ENOMEM) {
    st = FERRY_OK;
    for (size_t k = 0; k < r->ngpu && st == FERRY_OK; k++) {
      /* A batch of one failed as that sample: no need to ask again. */
      ferry_status alone = r->ngpu > 1 ? decode_some(r, &all[k], 1) : FERRY_EDEVICE;
      st = alone == FERRY_OK || alone == FERRY_ENOMEM ? alone : rescue(r, all[k]);
    }
  }
  ferry__free(all);
  return st;
}

/* Where each kept sample goes in the images tensor; the device batch without the
 * samples left out. */
static ferry_status place_rows(stage_run *r) {
  size_t kept = 0, left = 0;
  for (size_t i = 0; i < r->nsource; i++) {
    r->row[i] = kept;
    if (r->left_out[i]) left++;
    else kept++;
  }
  return left ? ferry__device_batch_leave_out(r->db, r->left_out) : FERRY_OK;
}

/* The fallbacks' u8 pixels, from the arena into their rows of the pixels. */
static ferry_status copy_fallbacks(stage_run *r) {
  const int64_t *rows = ferry_batch_offsets(r->batch, (size_t)r->cpu_images);
  ferry_copy_kind kind = upload_kind(r->device);
  for (size_t i = 0; i < r->nsource; i++) {
    if (rows[i + 1] == rows[i]) continue;
    ferry_tensor view;
    ferry_status st = ferry_batch_sample(r->batch, (size_t)r->cpu_images, i, &view);
    if (st == FERRY_OK && view.nbytes != r->item)
      st = ferry__fail(FERRY_EINVAL, "%s holds %zu bytes, not one %d x %d x 3 image", r->s->fields.cpu_images,
                       view.nbytes, r->s->resolution, r->s->resolution);
    if (st == FERRY_OK)
      st = ferry__memcpy_or_wait(r->stream, r->pixels + r->row[i] * r->item, view.data, r->item, kind);
    if (st != FERRY_OK) return ferry__sample_error(st, r->batch, i);
  }
  return FERRY_OK;
}

static ferry_status normalise_all(stage_run *r, const ferry_transfer_options *o) {
  size_t kept = ferry_device_batch_size(r->db);
  if (!r->staging || !kept) return FERRY_OK;
  ferry__norm_params params;
  ferry__norm_params_init(&params, o->mean, o->std, o->normalize == FERRY_NORMALIZE_BF16);
  size_t side = (size_t)r->s->resolution;
  ferry__norm_shape shape = {side, side, side, side};
  size_t out_item = r->images->nbytes / kept;
  int pixels_on_host = is_host(r->device);
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < kept && st == FERRY_OK; i++)
    st = ferry__normalize_enqueue(r->stream, r->pixels + i * r->item, pixels_on_host,
                                  (char *)r->images->data + i * out_item, &shape, &params);
  return st;
}

/* Scratch back in stream order; after a failure, once the stream has run what was
 * queued (a queued decode or resize may still write it). */
static void free_scratch(stage_run *r, ferry_status st) {
  if (st != FERRY_OK) ferry_stream_synchronize(r->stream);
  for (size_t k = 0; k < r->ngpu; k++) {
    if (r->gpu[k].decoded) ferry_device_free(r->device, r->stream, r->gpu[k].decoded);
    if (r->gpu[k].tmp) ferry_device_free(r->device, r->stream, r->gpu[k].tmp);
  }
  if (r->staging) ferry_device_free(r->device, r->stream, r->staging);
  ferry__free(r->gpu);
  ferry__free(r->left_out);
  ferry__free(r->row);
}

static ferry_status produce_images(void *self, ferry_device_batch *db, const ferry_batch *batch,
                                   const ferry_transfer_options *o) {
  ferry__jpeg_stage *s = self;
  stage_run r = {.s = s,
                 .db = db,
                 .device = ferry_device_batch_device(db),
                 .stream = ferry_device_batch_stream(db),
                 .batch = batch,
                 .nsource = ferry_device_batch_size(db),
                 .jpeg = ferry_batch_find_field(batch, s->fields.jpeg),
                 .cpu_images = ferry_batch_find_field(batch, s->fields.cpu_images),
                 .item = (size_t)s->resolution * s->resolution * 3};
  if (r.jpeg < 0 || r.cpu_images < 0)
    return ferry__fail(FERRY_EINVAL, "transfer: a GPU-decoded batch needs its '%s' and '%s' fields", s->fields.jpeg,
                       s->fields.cpu_images);
  pthread_mutex_lock(&s->lock);
  ferry_status st = bind_device(s, r.device);
  if (st == FERRY_OK) st = decoder_for(s, r.stream, &r.decoder);
  pthread_mutex_unlock(&s->lock);
  if (st != FERRY_OK) return st;
  size_t n = r.nsource ? r.nsource : 1;
  r.gpu = ferry__calloc(n, sizeof *r.gpu);
  r.left_out = ferry__calloc(n, 1);
  r.row = ferry__calloc(n, sizeof *r.row);
  st = r.gpu && r.left_out && r.row ? collect_gpu(&r)
                                    : ferry__fail(FERRY_ENOMEM, "transfer: out of memory for %zu samples", r.nsource);
  if (st == FERRY_OK) st = alloc_scratch(&r);
  if (st == FERRY_OK) st = decode_all(&r);
  if (st == FERRY_OK) st = place_rows(&r);
  if (st == FERRY_OK) st = alloc_images(&r, o);
  if (st == FERRY_OK) st = queue_resizes(&r);
  if (st == FERRY_OK) st = copy_fallbacks(&r);
  if (st == FERRY_OK) st = normalise_all(&r, o);
  free_scratch(&r, st);
  return st == FERRY_OK ? FERRY_OK : ferry__error_prefix(st, "GPU decode: ");
}

#endif /* FERRY_HAVE_NVJPEG */
