/* image/gpu/nvjpeg_api.c - nvJPEG's table, filled by dlopen, and the routing rules.
 *
 * Owns: the one process-wide table (loaded once under pthread_once and kept for the
 * process' life: a dlclose would invalidate handles still in use), the per-worker
 * parser, and the rules that send an image to nvJPEG or to the CPU path.
 * Invariants: libferry has no link-time dependency on libnvjpeg (`ldd libferry.so`
 * shows none; tests/lib checks it); every rule reads the image only through the table,
 * so a test's fake table exercises exactly the code the real one runs.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/device_native.h"
#include "image/gpu/nvjpeg_table.h"
#include "image/pixel_limit.h"
#include "lib/status.h"

static const char *const route_names[FERRY_NVJPEG_ROUTES] = {
    "gpu", "not-jpeg", "corrupt", "components", "precision", "encoding", "subsampling",
    "unsupported", "oriented"};

const char *ferry__nvjpeg_route_name(ferry__nvjpeg_route_kind route) {
  return route >= 0 && route < FERRY_NVJPEG_ROUTES ? route_names[route] : "?";
}

/* Every CPU route and the public reason it is counted under. */
static const int route_reasons[FERRY_NVJPEG_ROUTES] = {[FERRY_NVJPEG_ROUTE_GPU] = -1,
                                                       [FERRY_NVJPEG_ROUTE_NOT_JPEG] = FERRY_FALLBACK_NOT_JPEG,
                                                       [FERRY_NVJPEG_ROUTE_CORRUPT] = FERRY_FALLBACK_CORRUPT,
                                                       [FERRY_NVJPEG_ROUTE_COMPONENTS] = FERRY_FALLBACK_COMPONENTS,
                                                       [FERRY_NVJPEG_ROUTE_PRECISION] = FERRY_FALLBACK_PRECISION,
                                                       [FERRY_NVJPEG_ROUTE_ENCODING] = FERRY_FALLBACK_ENCODING,
                                                       [FERRY_NVJPEG_ROUTE_SUBSAMPLING] = FERRY_FALLBACK_SUBSAMPLING,
                                                       [FERRY_NVJPEG_ROUTE_UNSUPPORTED] = FERRY_FALLBACK_UNSUPPORTED,
                                                       [FERRY_NVJPEG_ROUTE_ORIENTED] = FERRY_FALLBACK_ORIENTED};
_Static_assert(FERRY_FALLBACK_REASONS == FERRY_NVJPEG_ROUTES - 1,
               "every CPU route has its reason in ferry_decode_fallback, and every reason a route");

int ferry__nvjpeg_route_reason(ferry__nvjpeg_route_kind route) {
  return route > FERRY_NVJPEG_ROUTE_GPU && route < FERRY_NVJPEG_ROUTES ? route_reasons[route] : -1;
}

ferry_status ferry__nvjpeg_device_check(ferry_device *device) {
  static const char need[] = "GPU decoding needs a CUDA device and nvJPEG";
  if (!device || ferry_device_get_kind(device) != FERRY_DEVICE_CUDA)
    return ferry__fail(FERRY_EUNSUPPORTED, "%s; the device is %s", need,
                      device ? ferry_device_name(device) : "host");
  const struct ferry__nvjpeg_api *api;
  if (ferry__nvjpeg_load(&api) != FERRY_OK)
    return ferry__error_prefix(FERRY_EUNSUPPORTED, "%s: ", need);
  return FERRY_OK;
}

#if !FERRY_HAVE_NVJPEG

ferry_status ferry__nvjpeg_load(const struct ferry__nvjpeg_api **out) {
  *out = NULL;
  return ferry__fail(FERRY_ENODEV, "no nvJPEG: ferry was built without the CUDA backend or without "
                                  "nvjpeg.h (pip install nvidia-nvjpeg, then meson -Dnvjpeg=enabled)");
}

#else
#include <dlfcn.h>

static ferry__nvjpeg_api loaded;
static ferry_status load_status;
static char load_message[FERRY_ERROR_MAX];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* Each entry is checked against the header's prototype, then looked up by name. */
#define ENTRY(name)                                                                                                   \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&nvjpeg##name), __typeof__(((ferry__nvjpeg_api *)0)->name)), \
                 "ferry__nvjpeg_api." #name " differs from nvjpeg.h");                                                \
  if (!(*(void **)&api->name = dlsym(lib, "nvjpeg" #name))) return "nvjpeg" #name;

/* NULL when every entry point was found, else the first missing one. */
static const char *fill_table(void *lib, ferry__nvjpeg_api *api) {
  ENTRY(CreateEx)
  ENTRY(Destroy)
  ENTRY(JpegStateCreate)
  ENTRY(JpegStateDestroy)
  ENTRY(GetImageInfo)
  ENTRY(JpegStreamCreate)
  ENTRY(JpegStreamDestroy)
  ENTRY(JpegStreamParse)
  ENTRY(JpegStreamGetJpegEncoding)
  ENTRY(JpegStreamGetComponentsNum)
  ENTRY(JpegStreamGetSamplePrecision)
  ENTRY(JpegStreamGetChromaSubsampling)
  ENTRY(JpegStreamGetExifOrientation)
  ENTRY(DecodeBatchedSupported)
  ENTRY(DecodeBatchedInitialize)
  ENTRY(DecodeBatched)
  ENTRY(GetProperty)
  return NULL;
}
#undef ENTRY

static const char *const status_names[] = {
    "NVJPEG_STATUS_SUCCESS", "NVJPEG_STATUS_NOT_INITIALIZED", "NVJPEG_STATUS_INVALID_PARAMETER",
    "NVJPEG_STATUS_BAD_JPEG", "NVJPEG_STATUS_JPEG_NOT_SUPPORTED", "NVJPEG_STATUS_ALLOCATOR_FAILURE",
    "NVJPEG_STATUS_EXECUTION_FAILED", "NVJPEG_STATUS_ARCH_MISMATCH", "NVJPEG_STATUS_INTERNAL_ERROR",
    "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED", "NVJPEG_STATUS_INCOMPLETE_BITSTREAM"};

const char *ferry__nvjpeg_status_name(nvjpegStatus_t status) {
  size_t n = sizeof status_names / sizeof *status_names;
  return (size_t)status < n ? status_names[status] : "unknown status";
}

ferry_status ferry__nvjpeg_check_version(const ferry__nvjpeg_api *api, const char *soname) {
  int major = -1, minor = -1;
  nvjpegStatus_t st = api->GetProperty(MAJOR_VERSION, &major);
  if (st == NVJPEG_STATUS_SUCCESS) st = api->GetProperty(MINOR_VERSION, &minor);
  if (st != NVJPEG_STATUS_SUCCESS)
    return ferry__fail(FERRY_ENODEV, "%s: nvjpegGetProperty failed with status %d (%s), so its version is "
                       "unknown; ferry was built for nvJPEG %d", soname, (int)st, ferry__nvjpeg_status_name(st),
                       NVJPEG_VER_MAJOR);
  if (major == NVJPEG_VER_MAJOR) return FERRY_OK;
  return ferry__fail(FERRY_ENODEV, "%s is nvJPEG %d.%d, but ferry was built against nvjpeg.h %d.%d: install "
                     "the nvJPEG of CUDA %d (or build ferry against the nvjpeg.h of CUDA %d)", soname, major, minor,
                     NVJPEG_VER_MAJOR, NVJPEG_VER_MINOR, NVJPEG_VER_MAJOR, major);
}

/* One name, one dlopen: the entry points, then the version the library reports. */
static void load_once_fn(void) {
  const char *soname = FERRY_NVJPEG_SONAME;
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  const char *missing = lib ? fill_table(lib, &loaded) : NULL;
  if (lib && !missing && ferry__nvjpeg_check_version(&loaded, soname) == FERRY_OK) {
    load_status = FERRY_OK;
    return;
  }
  if (!lib)
    snprintf(load_message, sizeof load_message, "no nvJPEG: %s: %s (ferry was built for nvJPEG %d: pip install "
             "the nvidia-nvjpeg of CUDA %d and put its lib folder on LD_LIBRARY_PATH)", soname, dlerror(),
             NVJPEG_VER_MAJOR, NVJPEG_VER_MAJOR);
  else if (missing)
    snprintf(load_message, sizeof load_message, "no nvJPEG: %s has no symbol %s", soname, missing);
  else
    snprintf(load_message, sizeof load_message, "no nvJPEG: %s", ferry_last_error());
  if (lib) dlclose(lib);
  memset(&loaded, 0, sizeof loaded);
  load_status = FERRY_ENODEV;
}

ferry_status ferry__nvjpeg_load(const ferry__nvjpeg_api **out) {
  pthread_once(&load_once, load_once_fn);
  *out = load_status == FERRY_OK ? &loaded : NULL;
  if (load_status != FERRY_OK) return ferry__fail(load_status, "%s", load_message);
  return FERRY_OK;
}

/* ---- the per-worker parser ---- */

static ferry_status nvjpeg_error(const char *what, nvjpegStatus_t st) {
  return ferry__fail(FERRY_EDEVICE, "nvJPEG: %s failed with status %d (%s)", what, (int)st,
                     ferry__nvjpeg_status_name(st));
}

ferry_status ferry__nvjpeg_parser_open(const ferry__nvjpeg_api *api, ferry__nvjpeg_parser *out) {
  memset(out, 0, sizeof *out);
  out->api = api;
  /* The hardware engine where there is one; nvjpegCreateEx refuses it elsewhere. */
  nvjpegStatus_t st = api->CreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &out->handle);
  out->hardware = st == NVJPEG_STATUS_SUCCESS;
  if (!out->hardware) st = api->CreateEx(NVJPEG_BACKEND_DEFAULT, NULL, NULL, 0, &out->handle);
  if (st != NVJPEG_STATUS_SUCCESS) return nvjpeg_error("nvjpegCreateEx", st);
  st = api->JpegStreamCreate(out->handle, &out->stream);
  if (st != NVJPEG_STATUS_SUCCESS) {
    api->Destroy(out->handle);
    out->handle = NULL;
    return nvjpeg_error("nvjpegJpegStreamCreate", st);
  }
  return FERRY_OK;
}

void ferry__nvjpeg_parser_close(ferry__nvjpeg_parser *p) {
  if (p->stream) p->api->JpegStreamDestroy(p->stream);
  if (p->handle) p->api->Destroy(p->handle);
  p->stream = NULL;
  p->handle = NULL;
}

/* ---- batched decode ---- */

ferry_status ferry__nvjpeg_decoder_open(const ferry__nvjpeg_api *api, ferry__nvjpeg_decoder *out) {
  memset(out, 0, sizeof *out);
  ferry_status st = ferry__nvjpeg_parser_open(api, &out->parser);
  if (st != FERRY_OK) return st;
  nvjpegStatus_t ns = api->JpegStateCreate(out->parser.handle, &out->state);
  if (ns != NVJPEG_STATUS_SUCCESS) {
    ferry__nvjpeg_parser_close(&out->parser);
    return nvjpeg_error("nvjpegJpegStateCreate", ns);
  }
  return FERRY_OK;
}

void ferry__nvjpeg_decoder_close(ferry__nvjpeg_decoder *d) {
  if (d->state) d->parser.api->JpegStateDestroy(d->state);
  d->state = NULL;
  ferry__nvjpeg_parser_close(&d->parser);
}

ferry_status ferry__nvjpeg_image_size(ferry__nvjpeg_parser *p, const uint8_t *data, size_t len, const char *name,
                                      const ferry_image_options *opts, int *width, int *height) {
  int components = 0, widths[NVJPEG_MAX_COMPONENT] = {0}, heights[NVJPEG_MAX_COMPONENT] = {0};
  nvjpegChromaSubsampling_t css;
  nvjpegStatus_t ns = p->api->GetImageInfo(p->handle, data, len, &components, &css,
                                                  widths, heights);
  if (ns != NVJPEG_STATUS_SUCCESS || widths[0] <= 0 || heights[0] <= 0)
    return ferry__fail(FERRY_EFORMAT, "%s: nvJPEG cannot read the header (status %d)", name, (int)ns);
  ferry_image_options defaults;
  if (!opts) ferry_image_options_default(&defaults);
  ferry_status st = ferry__image_check_limit(name, widths[0], heights[0], opts ? opts : &defaults);
  if (st != FERRY_OK) return st;
  *width = widths[0];
  *height = heights[0];
  return FERRY_OK;
}

ferry_status ferry__nvjpeg_decode_rgbi(ferry__nvjpeg_decoder *d, const uint8_t *const *data, const size_t *len,
                                       const int *width, uint8_t *const *dst, int n, ferry_stream *stream) {
  const ferry__nvjpeg_api *api = d->parser.api;
  if (n <= 0) return FERRY_OK;
  nvjpegImage_t *out = ferry__calloc((size_t)n, sizeof *out);
  if (!out) return ferry__fail(FERRY_ENOMEM, "nvJPEG: out of memory for %d destinations", n);
  for (int i = 0; i < n; i++) {
    out[i].channel[0] = dst[i];
    out[i].pitch[0] = (size_t)width[i] * 3;
  }
  nvjpegStatus_t ns = NVJPEG_STATUS_SUCCESS;
  const char *what = "nvjpegDecodeBatchedInitialize";
  if (d->batch != n) ns = api->DecodeBatchedInitialize(d->parser.handle, d->state, n, 1, NVJPEG_OUTPUT_RGBI);
  if (ns == NVJPEG_STATUS_SUCCESS) {
    d->batch = n;
    what = "nvjpegDecodeBatched";
    ns = api->DecodeBatched(d->parser.handle, d->state, data, len, out, (cudaStream_t)ferry__stream_native(stream));
  }
  ferry__free(out);
  if (ns == NVJPEG_STATUS_SUCCESS) return FERRY_OK;
  d->batch = 0; /* nvJPEG: initialise again to reset a failed batch */
  if (ns == NVJPEG_STATUS_ALLOCATOR_FAILURE) /* its own device (or pinned) memory: the caller may free and retry */
    return ferry__fail(FERRY_ENOMEM, "nvJPEG: %s of %d images on %s ran out of memory (%s)", what, n,
                       ferry_device_name(ferry_stream_device(stream)), ferry__nvjpeg_status_name(ns));
  return ferry__fail(FERRY_EDEVICE, "nvJPEG: %s of %d images on %s failed with status %d (%s)", what, n,
                     ferry_device_name(ferry_stream_device(stream)), (int)ns, ferry__nvjpeg_status_name(ns));
}

/* ---- routing ---- */

static int is_jpeg(const uint8_t *data, size_t len) {
  return len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

/* Baseline and extended sequential Huffman everywhere; progressive on the GPU
 * backends only (the hardware engine takes single-scan baseline); lossless and
 * arithmetic coding (reported as unknown) nowhere. */
static int encoding_ok(nvjpegJpegEncoding_t e, int hardware) {
  if (e == NVJPEG_ENCODING_BASELINE_DCT || e == NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN)
    return 1;
  return e == NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN && !hardware;
}

/* nvjpeg.h: the hardware backend does not support 4:1:0 and 4:1:1. */
static int subsampling_ok(nvjpegChromaSubsampling_t s, int hardware) {
  if (s == NVJPEG_CSS_UNKNOWN) return 0;
  if (!hardware) return 1;
  return s != NVJPEG_CSS_411 && s != NVJPEG_CSS_410 && s != NVJPEG_CSS_410V;
}

/* What the parsed stream says, in the order of the rules (cheapest, most common
 * reason first). */
static ferry__nvjpeg_route_kind route_parsed(ferry__nvjpeg_parser *p, int apply_exif) {
  const ferry__nvjpeg_api *api = p->api;
  unsigned components = 0, precision = 0;
  nvjpegJpegEncoding_t encoding = NVJPEG_ENCODING_UNKNOWN;
  nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
  if (api->JpegStreamGetComponentsNum(p->stream, &components) != NVJPEG_STATUS_SUCCESS)
    return FERRY_NVJPEG_ROUTE_CORRUPT;
  if (components != 1 && components != 3) return FERRY_NVJPEG_ROUTE_COMPONENTS;
  if (api->JpegStreamGetSamplePrecision(p->stream, &precision) != NVJPEG_STATUS_SUCCESS ||
      precision != 8)
    return FERRY_NVJPEG_ROUTE_PRECISION;
  if (api->JpegStreamGetJpegEncoding(p->stream, &encoding) != NVJPEG_STATUS_SUCCESS ||
      !encoding_ok(encoding, p->hardware))
    return FERRY_NVJPEG_ROUTE_ENCODING;
  if (api->JpegStreamGetChromaSubsampling(p->stream, &css) != NVJPEG_STATUS_SUCCESS ||
      !subsampling_ok(css, p->hardware))
    return FERRY_NVJPEG_ROUTE_SUBSAMPLING;
  if (apply_exif) {
    nvjpegExifOrientation_t o = NVJPEG_ORIENTATION_UNKNOWN;
    if (api->JpegStreamGetExifOrientation(p->stream, &o) == NVJPEG_STATUS_SUCCESS &&
        o != NVJPEG_ORIENTATION_UNKNOWN && o != NVJPEG_ORIENTATION_NORMAL)
      return FERRY_NVJPEG_ROUTE_ORIENTED;
  }
  /* The engine's own word, for what the rules above cannot see (sizes, restart
   * intervals). Its flag is 0 when the stream IS supported. */
  int unsupported = 1;
  if (p->hardware &&
      (api->DecodeBatchedSupported(p->handle, p->stream, &unsupported) != NVJPEG_STATUS_SUCCESS ||
       unsupported != 0))
    return FERRY_NVJPEG_ROUTE_UNSUPPORTED;
  return FERRY_NVJPEG_ROUTE_GPU;
}

ferry__nvjpeg_route_kind ferry__nvjpeg_route(ferry__nvjpeg_parser *p, const uint8_t *data, size_t len, int apply_exif) {
  if (!is_jpeg(data, len)) return FERRY_NVJPEG_ROUTE_NOT_JPEG;
  if (p->api->JpegStreamParse(p->handle, data, len, 0, 0, p->stream) != NVJPEG_STATUS_SUCCESS)
    return FERRY_NVJPEG_ROUTE_CORRUPT;
  return route_parsed(p, apply_exif);
}

#endif /* FERRY_HAVE_NVJPEG */
