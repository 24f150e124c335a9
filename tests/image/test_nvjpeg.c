/* tests/image/test_nvjpeg.c - nvJPEG's routing rules through a fake table, and the real
 * table filled by dlopen.
 *
 * The fake stands for libnvjpeg: its parser "reads" whatever the test put in `fake`,
 * so every rule is driven from here and the code under test is exactly what runs with
 * the real library (image/gpu/nvjpeg_api.c). Built only where nvjpeg.h is (FERRY_HAVE_NVJPEG).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "image/gpu/nvjpeg_table.h"

/* What the fake library reports for the next parse. */
static struct {
  nvjpegStatus_t parse;
  unsigned components, precision;
  nvjpegJpegEncoding_t encoding;
  nvjpegChromaSubsampling_t css;
  nvjpegExifOrientation_t orientation;
  int hw_unsupported;     /* DecodeBatchedSupported's flag: 0 means supported */
  int refuse_hardware;    /* CreateEx refuses NVJPEG_BACKEND_HARDWARE */
  int parses, supported_calls;
  int info_width, info_height; /* GetImageInfo; 0: refuse the header */
  nvjpegStatus_t decode;       /* DecodeBatched's answer */
  int inits, init_batch, decodes;
  nvjpegOutputFormat_t init_format;
} fake;

static int handle_token, stream_token;

static nvjpegStatus_t f_create(nvjpegBackend_t b, nvjpegDevAllocator_t *d, nvjpegPinnedAllocator_t *p,
                               unsigned flags, nvjpegHandle_t *h) {
  if (b == NVJPEG_BACKEND_HARDWARE && fake.refuse_hardware) return NVJPEG_STATUS_ARCH_MISMATCH;
  *h = (nvjpegHandle_t)&handle_token;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_destroy(nvjpegHandle_t h) { return NVJPEG_STATUS_SUCCESS; }
static nvjpegStatus_t f_stream_create(nvjpegHandle_t h, nvjpegJpegStream_t *s) {
  *s = (nvjpegJpegStream_t)&stream_token;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_stream_destroy(nvjpegJpegStream_t s) { return NVJPEG_STATUS_SUCCESS; }
static nvjpegStatus_t f_parse(nvjpegHandle_t h, const unsigned char *d, size_t n, int meta, int keep,
                              nvjpegJpegStream_t s) {
  fake.parses++;
  return fake.parse;
}
static nvjpegStatus_t f_encoding(nvjpegJpegStream_t s, nvjpegJpegEncoding_t *e) {
  *e = fake.encoding;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_components(nvjpegJpegStream_t s, unsigned *n) {
  *n = fake.components;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_precision(nvjpegJpegStream_t s, unsigned *p) {
  *p = fake.precision;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_css(nvjpegJpegStream_t s, nvjpegChromaSubsampling_t *c) {
  *c = fake.css;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_orientation(nvjpegJpegStream_t s, nvjpegExifOrientation_t *o) {
  *o = fake.orientation;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_supported(nvjpegHandle_t h, nvjpegJpegStream_t s, int *flag) {
  fake.supported_calls++;
  *flag = fake.hw_unsupported;
  return NVJPEG_STATUS_SUCCESS;
}

static int state_token;
static nvjpegStatus_t f_state_create(nvjpegHandle_t h, nvjpegJpegState_t *st) {
  *st = (nvjpegJpegState_t)&state_token;
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_state_destroy(nvjpegJpegState_t st) { return NVJPEG_STATUS_SUCCESS; }
static nvjpegStatus_t f_info(nvjpegHandle_t h, const unsigned char *d, size_t n, int *components,
                             nvjpegChromaSubsampling_t *css, int *w, int *hh) {
  if (!fake.info_width) return NVJPEG_STATUS_BAD_JPEG;
  *components = 3;
  *css = NVJPEG_CSS_420;
  w[0] = fake.info_width, hh[0] = fake.info_height;
  w[1] = w[2] = fake.info_width / 2; /* chroma planes: never what sizes the output */
  return NVJPEG_STATUS_SUCCESS;
}
static nvjpegStatus_t f_init(nvjpegHandle_t h, nvjpegJpegState_t st, int batch, int threads,
                             nvjpegOutputFormat_t format) {
  fake.inits++;
  fake.init_batch = batch;
  fake.init_format = format;
  return NVJPEG_STATUS_SUCCESS;
}
/* "Decodes" image i by writing i + 1 over its first row, whose length is the pitch. */
static nvjpegStatus_t f_decode(nvjpegHandle_t h, nvjpegJpegState_t st, const unsigned char *const *data,
                               const size_t *len, nvjpegImage_t *out, cudaStream_t s) {
  fake.decodes++;
  if (fake.decode != NVJPEG_STATUS_SUCCESS) return fake.decode;
  for (int i = 0; i < fake.init_batch; i++) memset(out[i].channel[0], i + 1, out[i].pitch[0]);
  return NVJPEG_STATUS_SUCCESS;
}

/* What nvjpegGetProperty reports: a major and minor, or a failure. */
static int property_major = NVJPEG_VER_MAJOR, property_minor = 1;
static nvjpegStatus_t property_status = NVJPEG_STATUS_SUCCESS;
static nvjpegStatus_t f_property(libraryPropertyType type, int *value) {
  if (property_status != NVJPEG_STATUS_SUCCESS) return property_status;
  *value = type == MAJOR_VERSION ? property_major : type == MINOR_VERSION ? property_minor : 0;
  return NVJPEG_STATUS_SUCCESS;
}

static const ferry__nvjpeg_api fake_api = {
    .GetProperty = f_property,
    .JpegStateCreate = f_state_create,
    .JpegStateDestroy = f_state_destroy,
    .GetImageInfo = f_info,
    .DecodeBatchedInitialize = f_init,
    .DecodeBatched = f_decode,
    .CreateEx = f_create,
    .Destroy = f_destroy,
    .JpegStreamCreate = f_stream_create,
    .JpegStreamDestroy = f_stream_destroy,
    .JpegStreamParse = f_parse,
    .JpegStreamGetJpegEncoding = f_encoding,
    .JpegStreamGetComponentsNum = f_components,
    .JpegStreamGetSamplePrecision = f_precision,
    .JpegStreamGetChromaSubsampling = f_css,
    .JpegStreamGetExifOrientation = f_orientation,
    .DecodeBatchedSupported = f_supported,
};

static const uint8_t jpeg_bytes[] = {0xFF, 0xD8, 0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0};
static const uint8_t png_bytes[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n', 0, 0, 0, 13};

/* A baseline 4:2:0 colour JPEG, upright: what val2017 is made of. */
static void typical_image(void) {
  memset(&fake, 0, sizeof fake);
  fake.parse = NVJPEG_STATUS_SUCCESS;
  fake.components = 3;
  fake.precision = 8;
  fake.encoding = NVJPEG_ENCODING_BASELINE_DCT;
  fake.css = NVJPEG_CSS_420;
  fake.orientation = NVJPEG_ORIENTATION_NORMAL;
}

static ferry__nvjpeg_parser open_parser(int hardware) {
  typical_image();
  fake.refuse_hardware = !hardware;
  ferry__nvjpeg_parser p;
  cr_assert_eq(ferry__nvjpeg_parser_open(&fake_api, &p), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(p.hardware, hardware, "the hardware backend is taken exactly when CreateEx accepts it");
  return p;
}

static ferry__nvjpeg_route_kind route(ferry__nvjpeg_parser *p, int apply_exif) {
  return ferry__nvjpeg_route(p, jpeg_bytes, sizeof jpeg_bytes, apply_exif);
}

#define expect_route(p, exif, want)                                                          \
  cr_expect_eq(route(p, exif), want, "got %s, want %s", ferry__nvjpeg_route_name(route(p, exif)), \
               ferry__nvjpeg_route_name(want))

/* The same image on the hardware engine and on the default backend. */
static void expect_on_both(ferry__nvjpeg_parser *hw, ferry__nvjpeg_parser *gpu, ferry__nvjpeg_route_kind want_hw,
                           ferry__nvjpeg_route_kind want_gpu) {
  expect_route(hw, 0, want_hw);
  expect_route(gpu, 0, want_gpu);
}

Test(nvjpeg_route, a_typical_jpeg_goes_to_the_gpu_on_both_backends) {
  for (int hw = 0; hw <= 1; hw++) {
    ferry__nvjpeg_parser p = open_parser(hw);
    typical_image();
    expect_route(&p, 0, FERRY_NVJPEG_ROUTE_GPU);
    cr_expect_eq(fake.supported_calls, hw, "only the hardware engine is asked for its own check");
    fake.css = NVJPEG_CSS_GRAY;
    fake.components = 1;
    expect_route(&p, 0, FERRY_NVJPEG_ROUTE_GPU);
    ferry__nvjpeg_parser_close(&p);
  }
}

Test(nvjpeg_route, png_and_other_formats_stay_on_the_cpu_without_parsing) {
  ferry__nvjpeg_parser p = open_parser(1);
  cr_expect_eq(ferry__nvjpeg_route(&p, png_bytes, sizeof png_bytes, 0), FERRY_NVJPEG_ROUTE_NOT_JPEG);
  cr_expect_eq(ferry__nvjpeg_route(&p, jpeg_bytes, 2, 0), FERRY_NVJPEG_ROUTE_NOT_JPEG);
  cr_expect_eq(ferry__nvjpeg_route(&p, NULL, 0, 0), FERRY_NVJPEG_ROUTE_NOT_JPEG);
  cr_expect_eq(fake.parses, 0);
  ferry__nvjpeg_parser_close(&p);
}

Test(nvjpeg_route, a_stream_the_parser_refuses_is_corrupt_and_goes_to_the_cpu) {
  ferry__nvjpeg_parser p = open_parser(1);
  fake.parse = NVJPEG_STATUS_BAD_JPEG;
  expect_route(&p, 0, FERRY_NVJPEG_ROUTE_CORRUPT);
  fake.parse = NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
  expect_route(&p, 0, FERRY_NVJPEG_ROUTE_CORRUPT);
  ferry__nvjpeg_parser_close(&p);
}

Test(nvjpeg_route, cmyk_and_odd_component_counts_go_to_the_cpu) {
  ferry__nvjpeg_parser p = open_parser(0);
  unsigned counts[] = {4, 2, 0};
  for (size_t i = 0; i < 3; i++) {
    fake.components = counts[i];
    expect_route(&p, 0, FERRY_NVJPEG_ROUTE_COMPONENTS);
  }
  ferry__nvjpeg_parser_close(&p);
}

Test(nvjpeg_route, twelve_bit_samples_go_to_the_cpu) {
  ferry__nvjpeg_parser p = open_parser(0);
  fake.precision = 12;
  expect_route(&p, 0, FERRY_NVJPEG_ROUTE_PRECISION);
  ferry__nvjpeg_parser_close(&p);
}

Test(nvjpeg_route, progressive_goes_to_the_cpu_only_on_the_hardware_engine) {
  ferry__nvjpeg_parser hw = open_parser(1), gpu = open_parser(0);
  fake.encoding = NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN;
  expect_on_both(&hw, &gpu, FERRY_NVJPEG_ROUTE_ENCODING, FERRY_NVJPEG_ROUTE_GPU);
  fake.encoding = NVJPEG_ENCODING_EXTENDED_SEQUENTIAL_DCT_HUFFMAN;
  expect_route(&hw, 0, FERRY_NVJPEG_ROUTE_GPU);
  nvjpegJpegEncoding_t never[] = {NVJPEG_ENCODING_LOSSLESS_HUFFMAN, NVJPEG_ENCODING_UNKNOWN};
  for (size_t i = 0; i < 2; i++) {
    fake.encoding = never[i];
    expect_on_both(&hw, &gpu, FERRY_NVJPEG_ROUTE_ENCODING, FERRY_NVJPEG_ROUTE_ENCODING);
  }
  ferry__nvjpeg_parser_close(&hw);
  ferry__nvjpeg_parser_close(&gpu);
}

Test(nvjpeg_route, subsamplings_follow_the_backends_capabilities) {
  ferry__nvjpeg_parser hw = open_parser(1), gpu = open_parser(0);
  nvjpegChromaSubsampling_t everywhere[] = {NVJPEG_CSS_444, NVJPEG_CSS_422, NVJPEG_CSS_420,
                                            NVJPEG_CSS_440};
  for (size_t i = 0; i < 4; i++) {
    fake.css = everywhere[i];
    expect_on_both(&hw, &gpu, FERRY_NVJPEG_ROUTE_GPU, FERRY_NVJPEG_ROUTE_GPU);
  }
  nvjpegChromaSubsampling_t not_on_hw[] = {NVJPEG_CSS_411, NVJPEG_CSS_410, NVJPEG_CSS_410V};
  for (size_t i = 0; i < 3; i++) {
    fake.css = not_on_hw[i];
    expect_on_both(&hw, &gpu, FERRY_NVJPEG_ROUTE_SUBSAMPLING, FERRY_NVJPEG_ROUTE_GPU);
  }
  fake.css = NVJPEG_CSS_UNKNOWN;
  expect_on_both(&hw, &gpu, FERRY_NVJPEG_ROUTE_SUBSAMPLING, FERRY_NVJPEG_ROUTE_SUBSAMPLING);
  ferry__nvjpeg_parser_close(&hw);
  ferry__nvjpeg_parser_close(&gpu);
}

Test(nvjpeg_route, the_hardware_engines_own_check_has_the_last_word) {
  ferry__nvjpeg_parser hw = open_parser(1), gpu = open_parser(0);
  fake.hw_unsupported = 1; /* nonzero: NOT supported */
  expect_on_both(&hw, &gpu, FERRY_NVJPEG_ROUTE_UNSUPPORTED, FERRY_NVJPEG_ROUTE_GPU);
  ferry__nvjpeg_parser_close(&hw);
  ferry__nvjpeg_parser_close(&gpu);
}

Test(nvjpeg_route, an_exif_rotation_goes_to_the_cpu_only_when_the_config_applies_exif) {
  ferry__nvjpeg_parser p = open_parser(1);
  fake.orientation = NVJPEG_ORIENTATION_ROTATE_90;
  expect_route(&p, 1, FERRY_NVJPEG_ROUTE_ORIENTED);
  expect_route(&p, 0, FERRY_NVJPEG_ROUTE_GPU);
  fake.orientation = NVJPEG_ORIENTATION_UNKNOWN; /* no EXIF */
  expect_route(&p, 1, FERRY_NVJPEG_ROUTE_GPU);
  ferry__nvjpeg_parser_close(&p);
}

Test(nvjpeg_route, every_route_has_a_name) {
  for (int r = 0; r < FERRY_NVJPEG_ROUTES; r++)
    cr_expect_neq(strcmp(ferry__nvjpeg_route_name((ferry__nvjpeg_route_kind)r), "?"), 0, "route %d", r);
  cr_expect_str_eq(ferry__nvjpeg_route_name(FERRY_NVJPEG_ROUTES), "?");
}

/* ---- batched decode through the fake ---- */

static ferry__nvjpeg_decoder open_decoder(void) {
  typical_image();
  ferry__nvjpeg_decoder d;
  cr_assert_eq(ferry__nvjpeg_decoder_open(&fake_api, &d), FERRY_OK, "%s", ferry_last_error());
  return d;
}

/* A stream of the host device: the fake never touches it but for its name. */
static ferry_stream *host_stream(void) {
  ferry_device *host;
  cr_assert_eq(ferry_device_open("host", &host), FERRY_OK);
  ferry_stream *s;
  cr_assert_eq(ferry_stream_open(host, &s), FERRY_OK);
  return s;
}

static void close_host_stream(ferry_stream *s) {
  ferry_device *host = ferry_stream_device(s);
  ferry_stream_close(s);
  ferry_device_close(host);
}

Test(nvjpeg_decode, images_land_in_their_buffers_at_three_bytes_a_pixel) {
  ferry__nvjpeg_decoder d = open_decoder();
  ferry_stream *s = host_stream();
  enum { N = 3 };
  const int width[N] = {5, 17, 2};
  uint8_t *dst[N];
  const uint8_t *data[N];
  size_t len[N];
  for (int i = 0; i < N; i++) {
    dst[i] = calloc(3 * (size_t)width[i] + 1, 1); /* one guard byte past the row */
    data[i] = jpeg_bytes;
    len[i] = sizeof jpeg_bytes;
  }
  for (int round = 0; round < 2; round++)
    cr_assert_eq(ferry__nvjpeg_decode_rgbi(&d, data, len, width, dst, N, s), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(fake.inits, 1, "the state is initialised once for a batch size that repeats");
  cr_expect_eq(fake.init_batch, N);
  cr_expect_eq(fake.init_format, NVJPEG_OUTPUT_RGBI);
  cr_expect_eq(fake.decodes, 2);
  for (int i = 0; i < N; i++) {
    for (int b = 0; b < 3 * width[i]; b++) cr_expect_eq(dst[i][b], i + 1, "image %d byte %d", i, b);
    cr_expect_eq(dst[i][3 * width[i]], 0, "image %d: the pitch is 3 * width", i);
  }
  cr_assert_eq(ferry__nvjpeg_decode_rgbi(&d, data, len, width, dst, 2, s), FERRY_OK);
  cr_expect_eq(fake.inits, 2, "a new batch size initialises again");
  for (int i = 0; i < N; i++) free(dst[i]);
  close_host_stream(s);
  ferry__nvjpeg_decoder_close(&d);
}

Test(nvjpeg_decode, a_failed_batch_is_named_and_resets_the_state) {
  ferry__nvjpeg_decoder d = open_decoder();
  ferry_stream *s = host_stream();
  uint8_t row[3 * 4];
  uint8_t *dst[1] = {row};
  const uint8_t *data[1] = {jpeg_bytes};
  size_t len[1] = {sizeof jpeg_bytes};
  int width[1] = {4};
  fake.decode = NVJPEG_STATUS_EXECUTION_FAILED;
  cr_assert_eq(ferry__nvjpeg_decode_rgbi(&d, data, len, width, dst, 1, s), FERRY_EDEVICE);
  cr_expect(strstr(ferry_last_error(), "nvjpegDecodeBatched") && strstr(ferry_last_error(), "status 6"), "%s",
            ferry_last_error());
  fake.decode = NVJPEG_STATUS_SUCCESS;
  cr_assert_eq(ferry__nvjpeg_decode_rgbi(&d, data, len, width, dst, 1, s), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(fake.inits, 2, "initialised again after the failure");
  close_host_stream(s);
  ferry__nvjpeg_decoder_close(&d);
}

Test(nvjpeg_decode, the_size_is_the_first_components_and_a_bad_header_is_named) {
  ferry__nvjpeg_decoder d = open_decoder();
  fake.info_width = 641, fake.info_height = 427;
  int w = 0, h = 0;
  cr_assert_eq(ferry__nvjpeg_image_size(&d.parser, jpeg_bytes, sizeof jpeg_bytes, "a.jpg", NULL, &w, &h), FERRY_OK);
  cr_expect(w == 641 && h == 427, "%dx%d", w, h);
  fake.info_width = 0;
  cr_assert_eq(ferry__nvjpeg_image_size(&d.parser, jpeg_bytes, sizeof jpeg_bytes, "b.jpg", NULL, &w, &h), FERRY_EFORMAT);
  cr_expect(strstr(ferry_last_error(), "b.jpg"), "%s", ferry_last_error());
  /* The CPU decoder's pixel limit (issue 25): a header claiming 65,000 x 65,000. */
  fake.info_width = fake.info_height = 65000;
  w = h = 0;
  cr_assert_eq(ferry__nvjpeg_image_size(&d.parser, jpeg_bytes, sizeof jpeg_bytes, "c.jpg", NULL, &w, &h), FERRY_ELIMIT);
  cr_expect(strstr(ferry_last_error(), "c.jpg: 65000x65000") && strstr(ferry_last_error(), "exceeds the limit of 89478485"),
            "%s", ferry_last_error());
  cr_expect(w == 0 && h == 0, "no size is given for a refused header");
  ferry_image_options unlimited;
  ferry_image_options_default(&unlimited);
  unlimited.max_pixels = 0;
  cr_assert_eq(ferry__nvjpeg_image_size(&d.parser, jpeg_bytes, sizeof jpeg_bytes, "c.jpg", &unlimited, &w, &h), FERRY_OK);
  cr_expect_eq(w, 65000);
  ferry__nvjpeg_decoder_close(&d);
}

/* The real library: where it loads, every entry point is there; where it does not,
 * the message names both sonames. FERRY_EXPECT_NVJPEG=1 (set by tests/lib/meson.build
 * when it knows where PyPI's nvidia-nvjpeg put the library) makes loading mandatory. */
Test(nvjpeg_table, dlopen_fills_every_entry_or_says_what_is_missing) {
  const ferry__nvjpeg_api *api = NULL;
  ferry_status st = ferry__nvjpeg_load(&api);
  const char *expect = getenv("FERRY_EXPECT_NVJPEG");
  if (expect && strcmp(expect, "1") == 0) cr_assert_eq(st, FERRY_OK, "%s", ferry_last_error());
  if (st != FERRY_OK) {
    cr_expect_eq(st, FERRY_ENODEV);
    cr_expect_null(api);
    cr_expect(strstr(ferry_last_error(), FERRY_NVJPEG_SONAME), "%s", ferry_last_error());
    return;
  }
  int major = -1;
  cr_expect_eq(api->GetProperty(MAJOR_VERSION, &major), NVJPEG_STATUS_SUCCESS);
  cr_expect_eq(major, NVJPEG_VER_MAJOR, "the library loaded is the major ferry was built for");
  void *const *entries = (void *const *)api;
  for (size_t i = 0; i < sizeof *api / sizeof(void *); i++) cr_expect_not_null(entries[i], "entry %zu", i);
  const ferry__nvjpeg_api *again = NULL;
  cr_expect_eq(ferry__nvjpeg_load(&again), FERRY_OK);
  cr_expect_eq(again, api, "loaded once per process");
}

/* Issue 25: one name, the built major's, and the library's own version checked. */
Test(nvjpeg_table, only_the_built_major_is_loaded_and_its_reported_version_checked) {
  char want[32];
  snprintf(want, sizeof want, "libnvjpeg.so.%d", NVJPEG_VER_MAJOR);
  cr_expect_str_eq(FERRY_NVJPEG_SONAME, want);
  property_major = NVJPEG_VER_MAJOR;
  cr_expect_eq(ferry__nvjpeg_check_version(&fake_api, "libnvjpeg.so.x"), FERRY_OK, "%s", ferry_last_error());
  property_major = NVJPEG_VER_MAJOR - 1; /* a CUDA 12 library named or linked as the 13 one */
  property_minor = 9;
  cr_assert_eq(ferry__nvjpeg_check_version(&fake_api, "libnvjpeg.so.x"), FERRY_ENODEV);
  char says[64];
  snprintf(says, sizeof says, "libnvjpeg.so.x is nvJPEG %d.9", NVJPEG_VER_MAJOR - 1);
  cr_expect(strstr(ferry_last_error(), says) && strstr(ferry_last_error(), "built against nvjpeg.h"), "%s",
            ferry_last_error());
  property_major = NVJPEG_VER_MAJOR;
  property_status = NVJPEG_STATUS_NOT_INITIALIZED;
  cr_assert_eq(ferry__nvjpeg_check_version(&fake_api, "libnvjpeg.so.x"), FERRY_ENODEV);
  cr_expect(strstr(ferry_last_error(), "NVJPEG_STATUS_NOT_INITIALIZED"), "%s", ferry_last_error());
  property_status = NVJPEG_STATUS_SUCCESS;
  cr_expect_str_eq(ferry__nvjpeg_status_name(NVJPEG_STATUS_ARCH_MISMATCH), "NVJPEG_STATUS_ARCH_MISMATCH");
  cr_expect_str_eq(ferry__nvjpeg_status_name((nvjpegStatus_t)99), "unknown status");
}

/* ---- the real library on the shared photos (a GPU node: nvjpegCreateEx needs a device) ---- */

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
  *len = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

static ferry__nvjpeg_route_kind route_photo(ferry__nvjpeg_parser *p, const char *rel, int apply_exif) {
  char path[4096];
  snprintf(path, sizeof path, "%s/realdata/photos/%s", getenv("FERRY_SHARED"), rel);
  size_t len;
  uint8_t *data = read_file(path, &len);
  ferry__nvjpeg_route_kind r = ferry__nvjpeg_route(p, data, len, apply_exif);
  cr_log_info("%s%s: %s (%s backend)", rel, apply_exif ? " (exif)" : "", ferry__nvjpeg_route_name(r),
              p->hardware ? "hardware" : "default");
  free(data);
  return r;
}

Test(nvjpeg_table, the_real_parser_routes_the_shared_photos) {
  if (!getenv("FERRY_SHARED")) cr_skip_test("FERRY_SHARED is not set");
  const ferry__nvjpeg_api *api = NULL;
  if (ferry__nvjpeg_load(&api) != FERRY_OK) cr_skip_test("%s", ferry_last_error());
  ferry__nvjpeg_parser p;
  if (ferry__nvjpeg_parser_open(api, &p) != FERRY_OK) {
    const char *require = getenv("FERRY_REQUIRE_CUDA");
    if (require && strcmp(require, "1") == 0) cr_assert_fail("FERRY_REQUIRE_CUDA=1: %s", ferry_last_error());
    cr_skip_test("no device for nvJPEG: %s", ferry_last_error());
  }
  cr_expect_eq(route_photo(&p, "skimage/astronaut.png", 0), FERRY_NVJPEG_ROUTE_NOT_JPEG);
  static const char *const common[] = {"dali_jpeg_subsampling/420.jpg", "dali_jpeg_subsampling/422.jpg",
                                       "dali_jpeg_subsampling/444.jpg", "mmcv/grayscale.jpg",
                                       "mmcv/color.jpg"};
  for (size_t i = 0; i < sizeof common / sizeof *common; i++)
    cr_expect_eq(route_photo(&p, common[i], 0), FERRY_NVJPEG_ROUTE_GPU, "%s", common[i]);
  cr_expect_eq(route_photo(&p, "mmcv/color_exif.jpg", 1), FERRY_NVJPEG_ROUTE_ORIENTED);
  if (p.hardware) {
    cr_expect_eq(route_photo(&p, "dali_jpeg_subsampling/411.jpg", 0), FERRY_NVJPEG_ROUTE_SUBSAMPLING);
    cr_expect_eq(route_photo(&p, "dali_jpeg_subsampling/410.jpg", 0), FERRY_NVJPEG_ROUTE_SUBSAMPLING);
  }
  /* logged, not asserted: what nvJPEG makes of the unusual ones */
  static const char *const logged[] = {"dali_jpeg_subsampling/2x4.jpg", "dali_jpeg_subsampling/440.jpg",
                                       "dali_jpeg_subsampling/411.jpg", "dali_jpeg_subsampling/420-odd-both.jpg",
                                       "skimage/hubble_deep_field.jpg"};
  for (size_t i = 0; i < sizeof logged / sizeof *logged; i++) route_photo(&p, logged[i], 0);
  ferry__nvjpeg_parser_close(&p);
}
