/* tests/hardening/test_hostile.c - hostile inputs, each with its expected error.
 *
 * Every row goes through a public API (ferry_coco_open_buffer and the target/mask
 * calls, ferry_image_load_resized / ferry_image_decode_resized, the mask API,
 * ferry_loader_open/next, ferry_coco_index_*) on data made here at test time (in a scratch folder) from
 * hand-written JSON and the real files of ../shared/realdata. A row states the status
 * the call must return and a substring its message must contain; every row is printed
 * as a line of the table in docs/reliability.md, and all mismatches are listed before
 * the test fails.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ferry/coco.h"
#include "ferry/ferry.h"
#include "ferry/image.h"
#include "ferry/loader.h"
#include "ferry/mask.h"
#include "coco/hash64.h"
#include "coco/index_format.h"
#include "tests/hardening/hardening.h"

#define MASK 16
#define MESSAGE_MAX 1024

typedef struct outcome {
  ferry_status status;
  char message[MESSAGE_MAX];
} outcome;

static outcome result(ferry_status st) {
  outcome o = {.status = st};
  snprintf(o.message, sizeof o.message, "%s", st == FERRY_OK ? "" : ferry_last_error());
  return o;
}

/* One table line; returns 1 when the outcome is not the expected one. */
static int check_row(const char *group, const char *name, outcome got, ferry_status expected,
                     const char *substring) {
  int ok = got.status == expected && strstr(got.message, substring) != NULL;
  fprintf(stderr, "| %s | %s | %s | `%s` |%s\n", group, name, ferry_strerror(got.status),
          got.message, ok ? "" : " MISMATCH");
  if (!ok)
    fprintf(stderr, "    expected %s with \"%s\"\n", ferry_strerror(expected), substring);
  return !ok;
}

/* ---- annotation files --------------------------------------------------------- */

typedef enum { AT_OPEN, AT_TARGET, AT_MASK } json_stage;

typedef struct json_case {
  const char *name;
  const char *json;
  json_stage stage;   /* the call whose outcome is checked */
  ferry_status expected;
  const char *substring;
} json_case;

#define IMG1 "\"images\": [{\"id\": 1, \"width\": 40, \"height\": 30, \"file_name\": \"a.jpg\"}]"
#define CAT1 "\"categories\": [{\"id\": 1, \"name\": \"thing\"}]"
#define ANN(fields) "{" IMG1 ", " CAT1 ", \"annotations\": [{\"id\": 5, \"image_id\": 1, \"category_id\": 1, " fields "}]}"
#define BOX "\"bbox\": [1, 2, 10, 8]"

static const json_case json_cases[] = {
  {"bbox with NaN", ANN("\"bbox\": [1, NaN, 3, 4]"), AT_OPEN, FERRY_EFORMAT, "invalid JSON"},
  {"bbox with Infinity", ANN("\"bbox\": [1, 2, Infinity, 4]"), AT_OPEN, FERRY_EFORMAT, "invalid JSON"},
  {"bbox with 1e400 (overflows a double)", ANN("\"bbox\": [1e400, 2, 3, 4]"), AT_OPEN, FERRY_EFORMAT, "invalid JSON"},
  {"bbox value a string", ANN("\"bbox\": [1, 2, \"3\", 4]"), AT_OPEN, FERRY_EFORMAT, "annotations[0].bbox[2]: expected a number"},
  {"bbox of 3 numbers", ANN("\"bbox\": [1, 2, 3]"), AT_OPEN, FERRY_EFORMAT, "annotations[0].bbox: expected an array of 4 numbers"},
  {"bbox missing (targets need it)", ANN("\"area\": 3"), AT_TARGET, FERRY_EFORMAT, "annotations[0]: no \"bbox\""},
  {"bbox negative width (dropped, target OK)", ANN("\"bbox\": [5, 5, -3, 4]"), AT_TARGET, FERRY_OK, ""},
  {"bbox 1e300 wide (clamped to the image, OK)", ANN("\"bbox\": [-1e300, 0, 1e300, 1e300]"), AT_TARGET, FERRY_OK, ""},
  {"image width 0 (targets need a size)",
   "{\"images\": [{\"id\": 1, \"width\": 0, \"height\": 30}], \"annotations\": []}", AT_TARGET, FERRY_EFORMAT,
   "no height/width"},
  {"image height negative", "{\"images\": [{\"id\": 1, \"width\": 40, \"height\": -30}]}", AT_OPEN, FERRY_EFORMAT,
   "images[0].height: -30 is not a valid image size"},
  {"image width 2^40", "{\"images\": [{\"id\": 1, \"width\": 1099511627776, \"height\": 3}]}", AT_OPEN,
   FERRY_EFORMAT, "images[0].width: 1099511627776 is not a valid image size"},
  {"image width a string", "{\"images\": [{\"id\": 1, \"width\": \"40\", \"height\": 30}]}", AT_OPEN,
   FERRY_EFORMAT, "images[0].width: expected an integer, got a string"},
  {"image id 1.5", "{\"images\": [{\"id\": 1.5}]}", AT_OPEN, FERRY_EFORMAT, "images[0].id: expected an integer"},
  {"duplicate image ids", "{\"images\": [{\"id\": 3}, {\"id\": 3}]}", AT_OPEN, FERRY_EFORMAT,
   "images[1].id: duplicate id 3 (also images[0])"},
  {"duplicate category ids", "{\"images\": [], \"categories\": [{\"id\": 2}, {\"id\": 2}]}", AT_OPEN,
   FERRY_EFORMAT, "categories[1].id: duplicate id 2"},
  {"annotation on an unknown image",
   "{" IMG1 ", " CAT1 ", \"annotations\": [{\"image_id\": 42, \"category_id\": 1, " BOX "}]}", AT_OPEN,
   FERRY_EFORMAT, "annotations[0].image_id: no image 42"},
  {"annotation on an unknown category",
   "{" IMG1 ", " CAT1 ", \"annotations\": [{\"image_id\": 1, \"category_id\": 9, " BOX "}]}", AT_OPEN,
   FERRY_EFORMAT, "annotations[0].category_id: no category 9"},
  {"iscrowd 2", ANN(BOX ", \"iscrowd\": 2"), AT_OPEN, FERRY_EFORMAT, "annotations[0].iscrowd: expected 0 or 1"},
  {"keypoints of 5 numbers", ANN(BOX ", \"keypoints\": [1, 2, 2, 4, 5]"), AT_OPEN, FERRY_EFORMAT,
   "annotations[0].keypoints: 5 numbers is not a multiple of 3"},
  {"more keypoints than the categories name",
   "{" IMG1 ", \"categories\": [{\"id\": 1, \"keypoints\": [\"nose\"]}], \"annotations\": [{\"image_id\": 1, "
   "\"category_id\": 1, " BOX ", \"keypoints\": [1, 2, 2, 4, 5, 2]}]}",
   AT_OPEN, FERRY_EFORMAT, "annotations[0].keypoints: 2 keypoints, but the categories name at most 1"},
  {"keypoint value a string", ANN(BOX ", \"keypoints\": [1, \"2\", 2]"), AT_OPEN, FERRY_EFORMAT,
   "annotations[0].keypoints[1]: expected a number"},
  {"RLE counts summing to less than h*w",
   ANN(BOX ", \"segmentation\": {\"size\": [30, 40], \"counts\": [100, 20]}"), AT_OPEN, FERRY_EFORMAT,
   "segmentation.counts: runs sum to 120, expected height*width = 1200"},
  {"RLE counts summing to more than h*w",
   ANN(BOX ", \"segmentation\": {\"size\": [30, 40], \"counts\": [1000, 4294967295]}"), AT_OPEN, FERRY_EFORMAT,
   "runs sum to 4294968295"},
  {"RLE negative count", ANN(BOX ", \"segmentation\": {\"size\": [30, 40], \"counts\": [1300, -100]}"), AT_OPEN,
   FERRY_EFORMAT, "segmentation.counts[1]: expected a run length"},
  {"RLE string summing to less than h*w",
   ANN(BOX ", \"segmentation\": {\"size\": [30, 40], \"counts\": \"1d1\"}"), AT_MASK, FERRY_EFORMAT,
   "annotations[0].segmentation.counts: RLE counts sum to"},
  {"RLE string with a character outside '0'..'o'",
   ANN(BOX ", \"segmentation\": {\"size\": [30, 40], \"counts\": \"1d~1\"}"), AT_MASK, FERRY_EFORMAT,
   "is outside '0'..'o'"},
  {"RLE string ending inside a value",
   ANN(BOX ", \"segmentation\": {\"size\": [30, 40], \"counts\": \"0`\"}"), AT_MASK, FERRY_EFORMAT,
   "RLE string ends inside the value that starts at character 1"},
  {"RLE size 100000 x 100000",
   ANN(BOX ", \"segmentation\": {\"size\": [100000, 100000], \"counts\": \"0\"}"), AT_OPEN, FERRY_EFORMAT,
   "100000x100000 exceeds 2^32-1 pixels"},
  {"RLE size differing from the image (targets)",
   ANN(BOX ", \"segmentation\": {\"size\": [3, 4], \"counts\": [12]}"), AT_TARGET, FERRY_EFORMAT,
   "segmentation.size: [3, 4] differs from the image's [30, 40]"},
  {"polygon with 1e12 coordinates", ANN(BOX ", \"segmentation\": [[1e12, 1, 2, 1e12, -1e12, 3]]"), AT_MASK,
   FERRY_ELIMIT, "segmentation[0]: polygon vertex 0 (1e+12, 1) is not finite or beyond +-1e+08"},
  {"polygon with 1e12 coordinates (targets)",
   ANN(BOX ", \"segmentation\": [[1e12, 1, 2, 1e12, -1e12, 3]]"), AT_TARGET, FERRY_ELIMIT, "(image 1, \"a.jpg\")"},
  {"polygon coordinate a string", ANN(BOX ", \"segmentation\": [[1, 2, \"3\", 4, 5, 6]]"), AT_OPEN,
   FERRY_EFORMAT, "annotations[0].segmentation[0][2]: expected a number, got a string"},
  {"polygon part not an array", ANN(BOX ", \"segmentation\": [7]"), AT_OPEN, FERRY_EFORMAT,
   "annotations[0].segmentation[0]: expected a polygon"},
  {"polygon on an image without a size",
   "{\"images\": [{\"id\": 1}], " CAT1 ", \"annotations\": [{\"image_id\": 1, \"category_id\": 1, " BOX
   ", \"segmentation\": [[1, 2, 3, 4, 5, 9]]}]}",
   AT_MASK, FERRY_EFORMAT, "polygons need an image size, and image 1 has no height/width"},
  {"polygon on an image over 2^32 pixels",
   "{\"images\": [{\"id\": 1, \"width\": 100000, \"height\": 100000}], " CAT1 ", \"annotations\": [{"
   "\"image_id\": 1, \"category_id\": 1, " BOX ", \"segmentation\": [[1, 2, 3, 4, 5, 9]]}]}",
   AT_MASK, FERRY_ELIMIT, "image 1 is 100000x100000, over 2^32-1 pixels"},
  {"a 1 GiB image claimed (32768^2): masks stay small, OK",
   "{\"images\": [{\"id\": 1, \"width\": 32768, \"height\": 32768}], " CAT1 ", \"annotations\": [{"
   "\"image_id\": 1, \"category_id\": 1, \"bbox\": [0, 0, 32768, 32768], \"segmentation\": "
   "{\"size\": [32768, 32768], \"counts\": [0, 1073741824]}}]}",
   AT_TARGET, FERRY_OK, ""},
  {"segmentation a number", ANN(BOX ", \"segmentation\": 3"), AT_OPEN, FERRY_EFORMAT,
   "annotations[0].segmentation: expected polygons (an array) or an RLE object, got an integer"},
  {"top level a string", "\"instances\"", AT_OPEN, FERRY_EFORMAT, "invalid JSON: '[' or '{' expected"},
  {"\"images\" an object", "{\"images\": {}}", AT_OPEN, FERRY_EFORMAT, "images: expected an array, got an object"},
  {"\"images\" missing", "{\"annotations\": []}", AT_OPEN, FERRY_EFORMAT, "images: missing (expected an array)"},
  {"truncated JSON", "{\"images\": [{\"id\": 1, \"wid", AT_OPEN, FERRY_EFORMAT, "invalid JSON"},
  {"empty file", "", AT_OPEN, FERRY_EFORMAT, "invalid JSON"},
  {"invalid UTF-8 in a file name", "{\"images\": [{\"id\": 1, \"file_name\": \"\xff\xfe.jpg\"}]}", AT_OPEN,
   FERRY_EFORMAT, "invalid JSON"},
};

static outcome run_json_case(const json_case *c) {
  ferry_coco *coco = NULL;
  ferry_status st = ferry_coco_open_buffer(c->json, strlen(c->json), "hostile.json", NULL, &coco);
  if (st != FERRY_OK || c->stage == AT_OPEN) {
    outcome o = result(st);
    ferry_coco_close(coco);
    return o;
  }
  if (c->stage == AT_MASK) {
    ferry_rle rle = {0};
    outcome o = result(ferry_coco_annotation_rle(coco, 0, &rle));
    ferry_rle_free(&rle);
    ferry_coco_close(coco);
    return o;
  }
  ferry_target_options opts;
  ferry_target_options_default(&opts);
  opts.mask_height = opts.mask_width = MASK;
  int64_t n = 0;
  st = ferry_coco_target_count(coco, 0, &opts, &n);
  if (st != FERRY_OK) {
    outcome o = result(st);
    ferry_coco_close(coco);
    return o;
  }
  size_t rows = (size_t)n;
  ferry_coco_target t = {.boxes = calloc(rows * 4 + 1, sizeof(float)), .masks = calloc(rows * MASK * MASK + 1, 1)};
  outcome o = result(ferry_coco_target_write(coco, 0, &opts, &t));
  free(t.boxes);
  free(t.masks);
  ferry_coco_close(coco);
  return o;
}

Test(hostile, annotation_files) {
  int mismatches = 0;
  for (size_t i = 0; i < sizeof json_cases / sizeof json_cases[0]; i++) {
    const json_case *c = &json_cases[i];
    mismatches += check_row("JSON", c->name, run_json_case(c), c->expected, c->substring);
  }
  cr_assert_eq(mismatches, 0, "%d annotation rows did not give their expected error", mismatches);
}

/* JSON too large to write inline. */
static outcome deeply_nested(void) {
  size_t depth = 100000;
  char *text = malloc(2 * depth + 1);
  memset(text, '[', depth);
  memset(text + depth, ']', depth);
  text[2 * depth] = '\0';
  ferry_coco *coco = NULL;
  outcome o = result(ferry_coco_open_buffer(text, 2 * depth, "nested.json", NULL, &coco));
  ferry_coco_close(coco);
  free(text);
  return o;
}

/* A polygon of a million vertices zigzagging across a 640 x 480 image: allowed, and
 * rasterised in time proportional to its outline inside the image. */
static outcome million_vertices(double *seconds) {
  size_t k = 1000000;
  double *xy = malloc(2 * k * sizeof *xy);
  for (size_t j = 0; j < k; j++) {
    xy[2 * j] = (double)(j % 640);
    xy[2 * j + 1] = (j & 1) ? 110.0 : 100.0 + (double)(j % 7);
  }
  ferry_rle rle = {0};
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  outcome o = result(ferry_rle_from_polygon(xy, k, 480, 640, &rle));
  clock_gettime(CLOCK_MONOTONIC, &b);
  *seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
  ferry_rle_free(&rle);
  free(xy);
  return o;
}

/* Vertices far outside the image with an outline over the 2^30-step limit. */
static outcome outline_over_limit(void) {
  double xy[8] = {-9e7, -9e7, 9e7, -9e7, 9e7, 9e7, -9e7, 9e7};
  ferry_rle rle = {0};
  outcome o = result(ferry_rle_from_polygon(xy, 4, 480, 640, &rle));
  ferry_rle_free(&rle);
  return o;
}

/* A far vertex inside the limits: must not cost time proportional to its distance. */
static outcome far_vertex(double *seconds) {
  double xy[6] = {16, 16, 3e7, 3e7, 224, 128};
  ferry_rle rle = {0};
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  outcome o = result(ferry_rle_from_polygon(xy, 3, 256, 256, &rle));
  clock_gettime(CLOCK_MONOTONIC, &b);
  *seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
  ferry_rle_free(&rle);
  return o;
}

Test(hostile, masks_and_limits, .timeout = 120) {
  int mismatches = 0;
  mismatches += check_row("JSON", "nested 100000 deep", deeply_nested(), FERRY_EFORMAT,
                          "maximum parsing depth reached");
  double secs = 0;
  mismatches += check_row("mask", "polygon of 1,000,000 vertices (OK)", million_vertices(&secs), FERRY_OK, "");
  cr_log_info("1,000,000 vertices rasterised in %.2f s", secs);
  mismatches += check_row("mask", "polygon vertex at 3e7 (OK, fast)", far_vertex(&secs), FERRY_OK, "");
  cr_assert_lt(secs, 1.0, "a far vertex took %.2f s", secs);
  mismatches += check_row("mask", "polygon outline over 2^30 grid steps", outline_over_limit(), FERRY_ELIMIT,
                          "exceeds the limit");
  double nan_xy[6] = {1, 2, NAN, 4, 5, 6};
  ferry_rle rle = {0};
  mismatches += check_row("mask", "polygon vertex NaN", result(ferry_rle_from_polygon(nan_xy, 3, 8, 8, &rle)),
                          FERRY_ELIMIT, "polygon vertex 1 (nan, 4) is not finite");
  uint32_t runs[2] = {3, 4};
  mismatches += check_row("mask", "RLE counts summing to 7 for 2x3",
                          result(ferry_rle_from_counts(runs, 2, 2, 3, &rle)), FERRY_EFORMAT,
                          "RLE counts sum to 7, expected h*w = 2*3 = 6");
  mismatches += check_row("mask", "RLE size 65536 x 65536",
                          result(ferry_rle_from_counts(runs, 2, 65536, 65536, &rle)), FERRY_ELIMIT,
                          "mask size 65536x65536 exceeds 2^32-1 pixels");
  const char *eight = "oooooooo";
  mismatches += check_row("mask", "RLE string value over 7 characters",
                          result(ferry_rle_from_string(eight, 8, 4, 4, &rle)), FERRY_EFORMAT,
                          "overflows (more than 7 characters)");
  uint32_t ok_runs[1] = {6};
  cr_assert_eq(ferry_rle_from_counts(ok_runs, 1, 2, 3, &rle), FERRY_OK);
  uint8_t small[4];
  mismatches += check_row("mask", "decode into a buffer too small",
                          result(ferry_rle_decode(&rle, small, sizeof small)), FERRY_EINVAL,
                          "output of 4 bytes, need 6");
  ferry_rle_free(&rle);
  cr_assert_eq(mismatches, 0, "%d mask rows did not give their expected error", mismatches);
}

/* ---- image files -------------------------------------------------------------- */

static ferry_decoder *decoder;

static outcome load_file(const char *path) {
  float out[3 * MASK * MASK];
  int w, h;
  return result(ferry_image_load_resized(decoder, path, NULL, MASK, FERRY_LAYOUT_F32_CHW, out, &w, &h));
}

static outcome decode_bytes(const void *data, size_t len, const char *name) {
  float out[3 * MASK * MASK];
  int w, h;
  return result(ferry_image_decode_resized(decoder, data, len, name, NULL, MASK, FERRY_LAYOUT_F32_CHW, out, &w, &h));
}

static void be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
  p[3] = (unsigned char)v;
}

static uint32_t crc32_of(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

/* A PNG signature and a valid IHDR claiming w x h (8-bit RGB), nothing after. */
static size_t png_header(unsigned char *out, uint32_t w, uint32_t h) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  memcpy(out, sig, 8);
  be32(out + 8, 13);
  memcpy(out + 12, "IHDR", 4);
  be32(out + 16, w);
  be32(out + 20, h);
  out[24] = 8, out[25] = 2, out[26] = out[27] = out[28] = 0;
  be32(out + 29, crc32_of(out + 12, 17));
  return 33;
}

/* A baseline JPEG whose SOF0 claims w x h: the real photo's bytes with its SOF edited. */
static unsigned char *jpeg_claiming(const unsigned char *jpeg, size_t len, unsigned w, unsigned h) {
  unsigned char *copy = malloc(len);
  memcpy(copy, jpeg, len);
  for (size_t i = 2; i + 9 < len; i++) {
    if (copy[i] == 0xFF && (copy[i + 1] == 0xC0 || copy[i + 1] == 0xC2)) {
      copy[i + 5] = (unsigned char)(h >> 8), copy[i + 6] = (unsigned char)h;
      copy[i + 7] = (unsigned char)(w >> 8), copy[i + 8] = (unsigned char)w;
      return copy;
    }
  }
  cr_assert_fail("no SOF marker in the JPEG");
  return NULL;
}

Test(hostile, image_files, .timeout = 120) {
  cr_assert_eq(ferry_decoder_open(&decoder), FERRY_OK);
  size_t jlen, plen;
  unsigned char *jpeg = read_whole(realdata_path("photos/mmcv/color.jpg"), &jlen);
  unsigned char *png = read_whole(realdata_path("photos/skimage/coffee.png"), &plen);
  int mismatches = 0;
  mismatches += check_row("image", "zero-byte file named .jpg", load_file(write_scratch("empty.jpg", "", 0)),
                          FERRY_EFORMAT, "empty.jpg: empty file");
  mismatches += check_row("image", "text file named .jpg",
                          load_file(write_scratch_text("notes.jpg", "these are not pixels\n")),
                          FERRY_EUNSUPPORTED, "notes.jpg: not a JPEG or PNG file");
  mismatches += check_row("image", "GIF named .jpg", load_file(write_scratch_text("anim.jpg", "GIF89a\1\0\1\0")),
                          FERRY_EUNSUPPORTED, "anim.jpg: not a JPEG or PNG file");
  mismatches += check_row("image", "JPEG cut at 2 bytes", load_file(write_scratch("cut2.jpg", jpeg, 2)),
                          FERRY_EFORMAT, "cut2.jpg: truncated: the file ends inside the image header");
  mismatches += check_row("image", "JPEG cut at 300 bytes (inside the headers)",
                          load_file(write_scratch("cut300.jpg", jpeg, 300)), FERRY_EFORMAT, "cut300.jpg");
  mismatches += check_row("image", "JPEG cut in half (inside the scan)",
                          load_file(write_scratch("half.jpg", jpeg, jlen / 2)), FERRY_EFORMAT, "half.jpg");
  mismatches += check_row("image", "real truncated JPEG (skimage truncated.jpg)",
                          load_file(realdata_path("photos/skimage/truncated.jpg")), FERRY_EFORMAT, "truncated.jpg");
  unsigned char *noisy = malloc(jlen);
  memcpy(noisy, jpeg, jlen);
  for (size_t i = jlen / 3; i < jlen / 3 + 64; i++) noisy[i] = 0xFF;
  mismatches += check_row("image", "JPEG with 64 bytes of 0xFF in the scan",
                          decode_bytes(noisy, jlen, "noisy.jpg"), FERRY_EFORMAT, "noisy.jpg");
  free(noisy);
  unsigned char *huge = jpeg_claiming(jpeg, jlen, 65000, 65000);
  mismatches += check_row("image", "JPEG SOF claiming 65000 x 65000", decode_bytes(huge, jlen, "bomb.jpg"),
                          FERRY_ELIMIT, "bomb.jpg: 65000x65000 = 4225000000 pixels exceeds the limit");
  free(huge);
  unsigned char *zero = jpeg_claiming(jpeg, jlen, 0, 480);
  mismatches += check_row("image", "JPEG SOF claiming width 0", decode_bytes(zero, jlen, "zero.jpg"),
                          FERRY_EUNSUPPORTED, "zero.jpg: JPEG: zero width or height in the frame header");
  free(zero);
  unsigned char header[64];
  size_t hlen = png_header(header, 100000, 100000);
  mismatches += check_row("image", "PNG of only a header claiming 100000 x 100000",
                          load_file(write_scratch("bomb-header.png", header, hlen)), FERRY_EFORMAT,
                          "bomb-header.png: PNG: file is truncated");
  unsigned char *bomb = malloc(plen);
  memcpy(bomb, png, plen);
  memcpy(bomb, header, hlen); /* a real PNG (IHDR first) whose IHDR now claims 100000^2 */
  mismatches += check_row("image", "PNG header claiming 100000 x 100000",
                          load_file(write_scratch("bomb.png", bomb, plen)), FERRY_ELIMIT,
                          "bomb.png: 100000x100000 = 10000000000 pixels exceeds the limit");
  free(bomb);
  hlen = png_header(header, 0, 10);
  mismatches += check_row("image", "PNG header claiming width 0", decode_bytes(header, hlen, "w0.png"),
                          FERRY_EFORMAT, "w0.png: PNG");
  mismatches += check_row("image", "PNG cut after 100 bytes", load_file(write_scratch("cut.png", png, 100)),
                          FERRY_EFORMAT, "cut.png");
  unsigned char *crc = malloc(plen);
  memcpy(crc, png, plen);
  crc[plen / 2] ^= 0x55;
  mismatches += check_row("image", "PNG with a corrupted byte in its data",
                          decode_bytes(crc, plen, "flipped.png"), FERRY_EFORMAT, "flipped.png");
  free(crc);
  mismatches += check_row("image", "missing file", load_file(scratch_path("nowhere.jpg")), FERRY_ENOTFOUND,
                          "nowhere.jpg: cannot open: No such file or directory");
  cr_assert_eq(mkdir(scratch_path("folder.jpg"), 0700), 0);
  mismatches += check_row("image", "a directory named .jpg", load_file(scratch_path("folder.jpg")), FERRY_EIO,
                          "folder.jpg: not a regular file");
  cr_assert_eq(mkfifo(scratch_path("pipe.jpg"), 0600), 0);
  mismatches += check_row("image", "a FIFO named .jpg (must not block)", load_file(scratch_path("pipe.jpg")),
                          FERRY_EIO, "pipe.jpg: not a regular file");
  cr_assert_eq(symlink("loop.jpg", scratch_path("loop.jpg")), 0);
  mismatches += check_row("image", "a symlink loop (unreadable)", load_file(scratch_path("loop.jpg")), FERRY_EIO,
                          "loop.jpg: cannot open: Too many levels of symbolic links");
  if (geteuid() != 0) {
    const char *locked = write_scratch("locked.jpg", jpeg, jlen);
    chmod(locked, 0);
    mismatches += check_row("image", "a file without read permission", load_file(locked), FERRY_EIO,
                            "locked.jpg: cannot open: Permission denied");
  }
  ferry_decoder_close(decoder);
  free(jpeg);
  free(png);
  cr_assert_eq(mismatches, 0, "%d image rows did not give their expected error", mismatches);
}

/* ---- the loader: file names, folders ------------------------------------------ */

typedef struct real_image {
  char name[256];
  int64_t width, height;
} real_image;

/* The first image of the real dali_coco set: its file name and size. */
static real_image first_real_image(void) {
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(realdata_path("dali_coco/coco/instances.json"), NULL, &coco), FERRY_OK);
  ferry_coco_image img;
  cr_assert_eq(ferry_coco_image_at(coco, 0, &img), FERRY_OK);
  real_image r = {.width = img.width, .height = img.height};
  snprintf(r.name, sizeof r.name, "%s", img.file_name);
  ferry_coco_close(coco);
  return r;
}

/* A one-worker loader of batches of 1 at MASK x MASK, rank 0 of 1. */
static void small_config(ferry_loader_config *cfg, const char *annotations, const char *images) {
  ferry_loader_config_default(cfg);
  cfg->annotations = annotations;
  cfg->images = images;
  cfg->batch_size = 1;
  cfg->resolution = MASK;
  cfg->workers = 1;
  cfg->rank = 0;
  cfg->world_size = 1;
}

/* Open the loader and run an epoch; *delivered (may be NULL) the samples its batches held. */
static outcome run_epoch(const ferry_loader_config *cfg, uint64_t *delivered) {
  ferry_loader *loader = NULL;
  ferry_status st = ferry_loader_open(cfg, &loader);
  if (st != FERRY_OK) return result(st);
  ferry_batch *batch = NULL;
  uint64_t samples = 0;
  while ((st = ferry_loader_next(loader, &batch)) == FERRY_OK) {
    samples += ferry_batch_size(batch);
    ferry_batch_release(batch);
  }
  outcome o = result(st == FERRY_EEND ? FERRY_OK : st);
  if (delivered) *delivered = samples;
  ferry_loader_close(loader);
  return o;
}

/* Open a loader on one image called `file_name` (w x h) in `images` and run an epoch. */
static outcome run_loader(const char *file_name, int64_t w, int64_t h, const char *images, int allow) {
  static int serial;
  char json[8192], name[32];
  snprintf(json, sizeof json,
           "{\"images\": [{\"id\": 1, \"file_name\": \"%s\", \"width\": %lld, \"height\": %lld}], "
           "\"annotations\": [], \"categories\": [{\"id\": 1}]}", file_name, (long long)w, (long long)h);
  snprintf(name, sizeof name, "loader-%d.json", serial++);
  ferry_loader_config cfg;
  small_config(&cfg, write_scratch_text(name, json), images);
  cfg.allow_escaping_paths = allow;
  return run_epoch(&cfg, NULL);
}

Test(hostile, loader_paths, .timeout = 120) {
  real_image real = first_real_image();
  const char *images = realdata_path("dali_coco/coco/images");
  char path[3 * HARD_PATH];
  int mismatches = 0;
  mismatches += check_row("loader", "the real image (control, OK)",
                          run_loader(real.name, real.width, real.height, images, 0), FERRY_OK, "");
  snprintf(path, sizeof path, "../images/%s", real.name);
  mismatches += check_row("loader", "file name with \"..\"", run_loader(path, real.width, real.height, images, 0),
                          FERRY_EINVAL, "leaves the images folder");
  mismatches += check_row("loader", "file name with \"..\", allow_escaping_paths (OK)",
                          run_loader(path, real.width, real.height, images, 1), FERRY_OK, "");
  snprintf(path, sizeof path, "%s/%s", images, real.name);
  mismatches += check_row("loader", "absolute file name", run_loader(path, real.width, real.height, images, 0),
                          FERRY_EINVAL, "leaves the images folder");
  mismatches += check_row("loader", "absolute file name, allow_escaping_paths (OK)",
                          run_loader(path, real.width, real.height, images, 1), FERRY_OK, "");
  mismatches += check_row("loader", "file name \"sub/../../x.jpg\"",
                          run_loader("sub/../../x.jpg", 4, 4, images, 0), FERRY_EINVAL, "leaves the images folder");
  mismatches += check_row("loader", "empty file name", run_loader("", 4, 4, images, 0), FERRY_EFORMAT,
                          "image id 1 has no file_name");
  mismatches += check_row("loader", "missing image file", run_loader("missing.jpg", 4, 4, images, 0),
                          FERRY_ENOTFOUND, "missing.jpg: cannot open: No such file or directory");
  mismatches += check_row("loader", "missing images folder",
                          run_loader(real.name, real.width, real.height, scratch_path("no-such-folder"), 0),
                          FERRY_ENOTFOUND, "no-such-folder: No such file or directory");
  mismatches += check_row("loader", "images path that is a file",
                          run_loader(real.name, real.width, real.height, realdata_path("dali_coco/coco/instances.json"), 0),
                          FERRY_EIO, "instances.json is not a folder");
  cr_assert_eq(mkdir(scratch_path("adir.jpg"), 0700), 0);
  mismatches += check_row("loader", "image file that is a folder",
                          run_loader("adir.jpg", 4, 4, scratch_dir(), 0), FERRY_EIO, "adir.jpg: not a regular file");
  mismatches += check_row("loader", "size differing from the annotations",
                          run_loader(real.name, real.width + 1, real.height, images, 0), FERRY_EFORMAT,
                          "but the annotations say");
  mismatches += check_row("loader", "zero-byte image in the dataset",
                          run_loader("empty.jpg", 4, 4, (write_scratch("empty.jpg", "", 0), scratch_dir()), 0),
                          FERRY_EFORMAT, "empty.jpg: empty file");
  ferry_loader_config cfg;
  ferry_loader_config_default(&cfg);
  cfg.annotations = scratch_path("no-annotations.json");
  cfg.images = images;
  ferry_loader *loader = NULL;
  mismatches += check_row("loader", "missing annotation file", result(ferry_loader_open(&cfg, &loader)), FERRY_EIO,
                          "no-annotations.json: cannot open: No such file or directory");
  cfg.annotations = images;
  mismatches += check_row("loader", "annotation \"file\" that is a folder",
                          result(ferry_loader_open(&cfg, &loader)), FERRY_EIO, "Is a directory");
  cr_assert_null(loader);
  cr_assert_eq(mismatches, 0, "%d loader rows did not give their expected error", mismatches);
}

/* ---- tar shards (issue 26) -------------------------------------------------------- */

#define SIDECAR "{\"image_id\": 1, \"file_name\": \"a.jpg\", \"annotations\": []}"

/* A sample: the real image as KEY.jpg and its sidecar. */
static void tar_sample(tar_bytes *t, const char *key, const char *sidecar) {
  static unsigned char *jpeg;
  static size_t jpeg_len;
  if (!jpeg) jpeg = read_whole(realdata_path("mmpose_coco/000000000785.jpg"), &jpeg_len);
  char name[256];
  snprintf(name, sizeof name, "%s.jpg", key);
  tar_add(t, name, '0', jpeg_len, jpeg, jpeg_len, 0);
  snprintf(name, sizeof name, "%s.json", key);
  tar_text(t, name, sidecar);
}

/* A loader's epoch over the annotations `spec` (a .tar, or an index) of scratch, under
 * `policy`; *delivered (may be NULL) the samples its batches held. */
static outcome run_spec_policy(const char *spec, ferry_error_policy policy, uint64_t *delivered) {
  ferry_loader_config cfg;
  small_config(&cfg, spec, NULL);
  cfg.on_error = policy;
  return run_epoch(&cfg, delivered);
}

static outcome run_spec(const char *spec) { return run_spec_policy(spec, FERRY_ON_ERROR_FAIL, NULL); }

static outcome run_tar(tar_bytes *t, int end) {
  static int serial;
  char name[32];
  if (end) tar_end(t);
  snprintf(name, sizeof name, "shard-%d.tar", serial++);
  return run_spec(write_scratch(name, t->data, t->len));
}

typedef void (*tar_maker)(tar_bytes *t);

static void valid(tar_bytes *t) { tar_sample(t, "00000000", SIDECAR); }
/* A pax header giving the next member's path: "LEN path=NAME\n", LEN counting its own
 * digits too. */
static void tar_pax_path(tar_bytes *t, const char *name) {
  char record[300];
  size_t rest = strlen(" path=\n") + strlen(name), len = rest + 1;
  while (len != rest + (size_t)snprintf(NULL, 0, "%zu", len)) len++;
  snprintf(record, sizeof record, "%zu path=%s\n", len, name);
  tar_add(t, "PaxHeader", 'x', strlen(record), record, strlen(record), 0);
}

static void pax_long_name(tar_bytes *t) {
  char key[200], name[220];
  memset(key, 'k', 150);
  key[150] = '\0';
  size_t len;
  unsigned char *jpeg = read_whole(realdata_path("mmpose_coco/000000000785.jpg"), &len);
  snprintf(name, sizeof name, "%s.jpg", key);
  tar_pax_path(t, name);
  tar_add(t, name, '0', len, jpeg, len, 0);  /* its own header holds the name cut to 100 bytes */
  snprintf(name, sizeof name, "%s.json", key);
  tar_pax_path(t, name);
  tar_text(t, name, SIDECAR);
  free(jpeg);
}
static void gnu_long_name(tar_bytes *t) {
  char name[220];
  memset(name, 'g', 150);
  snprintf(name + 150, sizeof name - 150, ".json");
  size_t len;
  unsigned char *jpeg = read_whole(realdata_path("mmpose_coco/000000000785.jpg"), &len);
  char image[220];
  memset(image, 'g', 150);
  snprintf(image + 150, sizeof image - 150, ".jpg");
  tar_add(t, "././@LongLink", 'L', strlen(image) + 1, image, strlen(image) + 1, 0);
  tar_add(t, "cut", '0', len, jpeg, len, 0);
  tar_add(t, "././@LongLink", 'L', strlen(name) + 1, name, strlen(name) + 1, 0);
  tar_text(t, "cut", SIDECAR);
  free(jpeg);
}
static void bad_checksum(tar_bytes *t) {
  valid(t);
  tar_add(t, "00000001.json", '0', 2, "{}", 2, TAR_BAD_CHECKSUM);
}
static void past_end(tar_bytes *t) { tar_add(t, "00000000.jpg", '0', 4096, "x", 1, 0); }
static void dotdot(tar_bytes *t) { tar_text(t, "../00000000.json", SIDECAR); }
static void absolute(tar_bytes *t) { tar_text(t, "/etc/00000000.json", SIDECAR); }
static void symlink_member(tar_bytes *t) { tar_add(t, "00000000.jpg", '2', 0, NULL, 0, 0); }
static void hard_link(tar_bytes *t) { tar_add(t, "00000000.jpg", '1', 0, NULL, 0, 0); }
static void device(tar_bytes *t) { tar_add(t, "00000000.jpg", '3', 0, NULL, 0, 0); }
static void huge(tar_bytes *t) { tar_add(t, "00000000.jpg", '0', 3ull << 30, NULL, 0, 0); }
static void cut_header(tar_bytes *t) {
  valid(t);
  t->len += 100;  /* 100 bytes of a header: the shard ends inside it */
}
static void bad_pax(tar_bytes *t) { tar_add(t, "PaxHeader", 'x', 9, "9 path=x", 9, 0); }
static void no_sidecar(tar_bytes *t) {
  valid(t);
  size_t len;
  unsigned char *jpeg = read_whole(realdata_path("mmpose_coco/000000000785.jpg"), &len);
  tar_add(t, "00000001.jpg", '0', len, jpeg, len, 0);
  free(jpeg);
}
static void sidecar_not_json(tar_bytes *t) { tar_sample(t, "00000000", "{\"image_id\": 1, "); }
static void sidecar_no_id(tar_bytes *t) { tar_sample(t, "00000000", "{\"file_name\": \"a.jpg\", \"annotations\": []}"); }
static void sidecar_other_image(tar_bytes *t) {
  tar_sample(t, "00000000", "{\"image_id\": 1, \"annotations\": [{\"id\": 1, \"image_id\": 2, \"category_id\": 1, "
                            "\"bbox\": [1, 1, 2, 2]}]}");
}
static void bad_bbox(tar_bytes *t) {
  tar_sample(t, "00000000", "{\"image_id\": 1, \"annotations\": [{\"id\": 1, \"category_id\": 1, \"bbox\": [1, 1]}]}");
}

typedef struct shard_case {
  const char *name;
  tar_maker make;
  ferry_status expected;
  const char *substring;
} shard_case;

static const shard_case shard_cases[] = {
  {"a valid shard (control, OK)", valid, FERRY_OK, ""},
  {"pax extended header with a 154-byte path (OK)", pax_long_name, FERRY_OK, ""},
  {"GNU long names (OK)", gnu_long_name, FERRY_OK, ""},
  {"header checksum wrong", bad_checksum, FERRY_EFORMAT, "(after member '00000000.json'): the header's checksum is wrong"},
  {"member size past the end of the shard", past_end, FERRY_EFORMAT, "member '00000000.jpg': 4096 bytes that would end past the end of the shard"},
  {"member name with \"..\"", dotdot, FERRY_EFORMAT, "member '../00000000.json': a name with a '..' component is refused"},
  {"absolute member name", absolute, FERRY_EFORMAT, "member '/etc/00000000.json': an absolute name is refused"},
  {"symbolic link member", symlink_member, FERRY_EFORMAT, "member '00000000.jpg': a symbolic link"},
  {"hard link member", hard_link, FERRY_EFORMAT, "member '00000000.jpg': a hard link"},
  {"device member", device, FERRY_EFORMAT, "a member type ferry does not read"},
  {"member of 3 GiB", huge, FERRY_EFORMAT, "3221225472 bytes, more than the 1073741824 a member may have"},
  {"shard ending inside a header", cut_header, FERRY_EFORMAT, "the shard ends inside a header"},
  {"pax records that do not parse", bad_pax, FERRY_EFORMAT, "a pax extended header whose records do not parse"},
  {"sample without its sidecar (fails at its fill)", no_sidecar, FERRY_EFORMAT, "sample '00000001': no .json sidecar"},
  {"sidecar that is not JSON", sidecar_not_json, FERRY_EFORMAT, "member '00000000.json': invalid JSON"},
  {"sidecar without image_id", sidecar_no_id, FERRY_EFORMAT, "member '00000000.json': a sidecar is an object with an integer \"image_id\""},
  {"annotation of another image in a sidecar", sidecar_other_image, FERRY_EFORMAT, "annotations[0].image_id is not the sidecar's image_id 1"},
  {"annotation with a bad bbox", bad_bbox, FERRY_EFORMAT, "sample of member '00000000.jpg': "},
};

/* An index beside shard.tar (a valid one) with its fields given. */
static outcome run_index(const char *name, const char *fields) {
  tar_bytes *t = calloc(1, sizeof *t);
  valid(t);
  tar_end(t);
  write_scratch("indexed-000000.tar", t->data, t->len);
  free(t);
  char json[1024];
  snprintf(json, sizeof json, "{\"version\": 1, \"split\": \"val\", %s}", fields);
  return run_spec(write_scratch_text(name, json));
}

Test(hostile, shard_files, .timeout = 120) {
  int mismatches = 0;
  for (size_t i = 0; i < sizeof shard_cases / sizeof shard_cases[0]; i++) {
    tar_bytes *t = calloc(1, sizeof *t);
    cr_assert_not_null(t);
    shard_cases[i].make(t);
    mismatches += check_row("shards", shard_cases[i].name, run_tar(t, shard_cases[i].make != cut_header),
                            shard_cases[i].expected, shard_cases[i].substring);
    free(t);
  }
  tar_bytes *t = calloc(1, sizeof *t);
  no_sidecar(t);
  tar_end(t);
  uint64_t delivered = 0;
  outcome o = run_spec_policy(write_scratch("skip.tar", t->data, t->len), FERRY_ON_ERROR_SKIP, &delivered);
  free(t);
  if (o.status == FERRY_OK && delivered != 1) {  /* of 2: the one without sidecar skipped */
    o.status = FERRY_EFORMAT;
    snprintf(o.message, sizeof o.message, "delivered %llu samples, not 1", (unsigned long long)delivered);
  }
  mismatches += check_row("shards", "sample without its sidecar, skip policy (OK, that one skipped)", o, FERRY_OK, "");
  const char *ok = "\"shards\": [\"indexed-000000.tar\"], \"num_samples\": 1, \"categories\": [], "
                   "\"annotated_category_ids\": [], \"category_ids\": \"raw\", \"samples_per_shard\": [1]";
  mismatches += check_row("shards", "an index (control, OK)", run_index("ok-index.json", ok), FERRY_OK, "");
  mismatches += check_row("shards", "index naming a shard outside its folder",
                          run_index("out-index.json", "\"shards\": [\"../x.tar\"], \"num_samples\": 1"), FERRY_EFORMAT,
                          "shards[0]: a name with a '..' component (a shard must be inside the index's folder)");
  mismatches += check_row("shards", "index whose samples_per_shard is wrong",
                          run_index("count-index.json", "\"shards\": [\"indexed-000000.tar\"], \"num_samples\": 1, "
                                    "\"samples_per_shard\": [2]"), FERRY_EFORMAT, "samples_per_shard[0] says 2 samples");
  mismatches += check_row("shards", "index whose num_samples is wrong",
                          run_index("num-index.json", "\"shards\": [\"indexed-000000.tar\"], \"num_samples\": 5"),
                          FERRY_EFORMAT, "num_samples says 5, but the shards hold 1 samples");
  mismatches += check_row("shards", "index with an unknown category_ids policy",
                          run_index("policy-index.json", "\"shards\": [], \"num_samples\": 0, \"category_ids\": \"x\""),
                          FERRY_EFORMAT, "\"category_ids\": expected \"remap\" or \"raw\"");
  mismatches += check_row("shards", "missing shard of a pattern", run_spec(scratch_path("none-{0..1}.tar")),
                          FERRY_ENOTFOUND, "none-0.tar: cannot open");
  cr_assert_eq(mismatches, 0, "%d shard rows did not give their expected error", mismatches);
}

/* ---- binary index files (issue 16) ------------------------------------------------ */

/* Every record kind: polygons, uncompressed and compressed RLE, keypoints, strings. */
static const char index_source_json[] =
  "{\"images\": [{\"id\": 1, \"width\": 40, \"height\": 30, \"file_name\": \"a.jpg\"},"
  " {\"id\": 2, \"width\": 2, \"height\": 2, \"file_name\": \"b.jpg\"}],"
  " \"categories\": [{\"id\": 1, \"name\": \"thing\", \"keypoints\": [\"p\", \"q\"]}],"
  " \"annotations\": ["
  "  {\"id\": 5, \"image_id\": 1, \"category_id\": 1, \"bbox\": [1, 2, 10, 8],"
  "   \"segmentation\": [[1, 2, 11, 2, 11, 10, 1, 10]], \"keypoints\": [1, 2, 2, 3, 4, 2]},"
  "  {\"id\": 6, \"image_id\": 2, \"category_id\": 1, \"bbox\": [0, 0, 1, 1], \"iscrowd\": 1,"
  "   \"segmentation\": {\"size\": [2, 2], \"counts\": [1, 2, 1]}},"
  "  {\"id\": 7, \"image_id\": 2, \"category_id\": 1, \"bbox\": [0, 0, 2, 2],"
  "   \"segmentation\": {\"size\": [2, 2], \"counts\": \"04\"}}]}";

typedef struct index_bytes {
  unsigned char *data;
  size_t len;
} index_bytes;

static ferry__index_header *header_of(index_bytes *b) { return (ferry__index_header *)b->data; }
static void *section_of(index_bytes *b, int id) { return b->data + header_of(b)->sections[id].offset; }
static ferry__coco_ann *first_ann(index_bytes *b) { return section_of(b, SEC_ANNS); }

/* Recompute every checksum, so that only the structural damage is left to find. */
static void reseal(index_bytes *b) {
  ferry__index_header *h = header_of(b);
  for (int id = 0; id < SEC_COUNT; id++) {
    ferry__index_section *s = &h->sections[id];
    if (s->offset <= b->len && s->count <= (b->len - s->offset) / (s->elem_size ? s->elem_size : 1))
      s->checksum = ferry__hash64(b->data + s->offset, s->count * s->elem_size, 0);
  }
  h->checksum = ferry__hash64(h, offsetof(ferry__index_header, checksum), 0);
}

static void truncate_to_8(index_bytes *b) { b->len = 8; }
static void truncate_header(index_bytes *b) { b->len = sizeof(ferry__index_header) / 2; }
static void truncate_data(index_bytes *b) { b->len -= 64; }
static void extend(index_bytes *b) { b->len += 1; }  /* the buffer has room: read_whole adds one */
static void wrong_magic(index_bytes *b) { b->data[7] = 'Y'; }
static void wrong_version(index_bytes *b) { header_of(b)->version = FERRY_INDEX_VERSION + 1, reseal(b); }
static void header_damaged(index_bytes *b) { header_of(b)->num_keypoints ^= 1; }
static void anns_damaged(index_bytes *b) { first_ann(b)->pub.bbox[0] += 1; }
static void coords_damaged(index_bytes *b) { *(double *)section_of(b, SEC_COORDS) += 1; }
static void unknown_flags(index_bytes *b) { header_of(b)->flags |= 0x80, reseal(b); }
static void section_past_end(index_bytes *b) { header_of(b)->sections[SEC_COORDS].offset = (uint64_t)b->len + 64, reseal(b); }
static void count_overflows(index_bytes *b) { header_of(b)->sections[SEC_ANNS].count = UINT64_MAX / 8, reseal(b); }
static void misaligned(index_bytes *b) { header_of(b)->sections[SEC_PARTS].offset += 8, reseal(b); }
static void record_size(index_bytes *b) { header_of(b)->sections[SEC_ANNS].elem_size = 160, reseal(b); }
static void polygon_parts(index_bytes *b) { first_ann(b)->seg_first = UINT64_MAX - 1, reseal(b); }
static void part_vertices(index_bytes *b) {
  ((ferry__coco_part *)section_of(b, SEC_PARTS))[0].k = SIZE_MAX / 2 + 1, reseal(b);
}
static void image_index(index_bytes *b) { first_ann(b)->pub.image_index = 2, reseal(b); }
static void image_of_other(index_bytes *b) { first_ann(b)->pub.image_index = 1, reseal(b); }
static void image_ids_swapped(index_bytes *b) {
  ferry__coco_id_entry *t = section_of(b, SEC_IMAGE_IDS);
  t[1] = t[0];
  reseal(b);
}
static void image_id_differs(index_bytes *b) {
  ((ferry__coco_id_entry *)section_of(b, SEC_IMAGE_IDS))[1].id = 3, reseal(b);
}
static void image_range(index_bytes *b) {
  ((ferry__coco_image *)section_of(b, SEC_IMAGES))[1].first_ann = UINT64_MAX, reseal(b);
}
static void file_name(index_bytes *b) {
  ((ferry__coco_image *)section_of(b, SEC_IMAGES))[0].file_name = 1u << 30, reseal(b);
}
static void rle_counts(index_bytes *b) { first_ann(b)[1].seg_len = 1000, reseal(b); }
static void rle_string(index_bytes *b) { first_ann(b)[2].rle_string = UINT64_MAX, reseal(b); }
static void segm_kind(index_bytes *b) { first_ann(b)->pub.segm = (ferry_segm_kind)7, reseal(b); }
static void keypoints(index_bytes *b) { first_ann(b)->kp_first = 5, reseal(b); }
static void image_anns(index_bytes *b) { ((size_t *)section_of(b, SEC_IMAGE_ANNS))[0] = 3, reseal(b); }
static void image_anns_twice(index_bytes *b) { ((size_t *)section_of(b, SEC_IMAGE_ANNS))[2] = 1, reseal(b); }
static void image_anns_order(index_bytes *b) {
  size_t *t = section_of(b, SEC_IMAGE_ANNS);
  t[1] = 2, t[2] = 1;
  reseal(b);
}
static void category(index_bytes *b) { first_ann(b)->pub.category_id = 99, reseal(b); }
static void keypoints_k(index_bytes *b) { header_of(b)->num_keypoints = 1u << 30, reseal(b); }
static void strings_unterminated(index_bytes *b) {
  ferry__index_section *s = &header_of(b)->sections[SEC_STRINGS];
  b->data[s->offset + s->count - 1] = 'x';
  reseal(b);
}
static void rle_sum(index_bytes *b) { ((uint32_t *)section_of(b, SEC_COUNTS))[0] = 2, reseal(b); }

typedef enum { INDEX_OPEN, INDEX_VERIFY, INDEX_MASK } index_stage;

typedef struct index_case {
  const char *name;
  void (*damage)(index_bytes *b);
  index_stage stage;
  ferry_status expected;
  const char *substring;
} index_case;

static const index_case index_cases[] = {
  {"index truncated to its magic", truncate_to_8, INDEX_OPEN, FERRY_EFORMAT, "truncated"},
  {"index truncated inside the header", truncate_header, INDEX_OPEN, FERRY_EFORMAT, "truncated"},
  {"index truncated inside the data", truncate_data, INDEX_OPEN, FERRY_EFORMAT, "truncated or extended"},
  {"index with a byte appended", extend, INDEX_OPEN, FERRY_EFORMAT, "truncated or extended"},
  {"index with a wrong magic (verify)", wrong_magic, INDEX_VERIFY, FERRY_EFORMAT, "wrong magic"},
  {"index of the next version", wrong_version, INDEX_OPEN, FERRY_EFORMAT, "version 3, this ferry reads version 2"},
  {"index header changed (checksum)", header_damaged, INDEX_OPEN, FERRY_EFORMAT, "header checksum mismatch"},
  {"index annotation changed (checksum)", anns_damaged, INDEX_OPEN, FERRY_EFORMAT, "section 2 checksum mismatch"},
  {"index vertex changed: open (not checksummed at open)", coords_damaged, INDEX_OPEN, FERRY_OK, ""},
  {"index vertex changed: verify", coords_damaged, INDEX_VERIFY, FERRY_EFORMAT, "section 4 checksum mismatch"},
  {"index with unknown flags", unknown_flags, INDEX_OPEN, FERRY_EFORMAT, "unknown flags"},
  {"index section past the end", section_past_end, INDEX_OPEN, FERRY_EFORMAT, "lies outside"},
  {"index section count overflowing", count_overflows, INDEX_OPEN, FERRY_EFORMAT, "lies outside"},
  {"index section misaligned", misaligned, INDEX_OPEN, FERRY_EFORMAT, "misaligned"},
  {"index record size differs", record_size, INDEX_OPEN, FERRY_EFORMAT, "160-byte elements"},
  {"index polygon parts out of range", polygon_parts, INDEX_OPEN, FERRY_EFORMAT, "annotation 0: polygon parts out of bounds"},
  {"index polygon vertices overflowing", part_vertices, INDEX_OPEN, FERRY_EFORMAT, "polygon part 0: vertices out of bounds"},
  {"index annotation of image 2 of 2", image_index, INDEX_OPEN, FERRY_EFORMAT, "of another image"},
  {"index annotation listed under another image", image_of_other, INDEX_OPEN, FERRY_EFORMAT, "of another image"},
  {"index image id table naming one image twice", image_ids_swapped, INDEX_OPEN, FERRY_EFORMAT, "image id entry 1: position out of range or repeated"},
  {"index image id table disagreeing with the images", image_id_differs, INDEX_OPEN, FERRY_EFORMAT, "image id entry 1: id differs"},
  {"index image annotation range overflowing", image_range, INDEX_OPEN, FERRY_EFORMAT, "image 1: annotation range"},
  {"index file name outside the strings", file_name, INDEX_OPEN, FERRY_EFORMAT, "image 0: file name outside"},
  {"index RLE counts past their section", rle_counts, INDEX_OPEN, FERRY_EFORMAT, "annotation 1: RLE counts out of bounds"},
  {"index RLE string offset 2^64-1", rle_string, INDEX_OPEN, FERRY_EFORMAT, "annotation 2: RLE string out of bounds"},
  {"index segmentation kind 7", segm_kind, INDEX_OPEN, FERRY_EFORMAT, "unknown segmentation kind"},
  {"index keypoints past their section", keypoints, INDEX_OPEN, FERRY_EFORMAT, "annotation 0: keypoints out of bounds"},
  {"index per-image entry out of range", image_anns, INDEX_OPEN, FERRY_EFORMAT, "per-image annotation entry 0"},
  {"index listing an annotation twice", image_anns_twice, INDEX_OPEN, FERRY_EFORMAT, "per-image annotation entry 2: listed twice"},
  {"index listing an image's annotations out of order", image_anns_order, INDEX_OPEN, FERRY_EFORMAT, "per-image annotation entry 2: listed twice or out of file order"},
  {"index category that does not exist", category, INDEX_OPEN, FERRY_EFORMAT, "annotation 0: no such category"},
  {"index claiming 2^30 keypoints per instance", keypoints_k, INDEX_OPEN, FERRY_EFORMAT, "K = 1073741824 keypoints, the categories name 2"},
  {"index string pool not NUL-terminated", strings_unterminated, INDEX_OPEN, FERRY_EFORMAT, "string pool"},
  {"index RLE runs not summing to h*w (mask)", rle_sum, INDEX_MASK, FERRY_EFORMAT, "annotations[1].segmentation.counts"},
};

static outcome run_index_case(const index_case *c, const index_bytes *pristine, int row) {
  index_bytes b = {malloc(pristine->len + 1), pristine->len};
  memcpy(b.data, pristine->data, pristine->len);
  b.data[pristine->len] = 0;
  c->damage(&b);
  char name[64];
  snprintf(name, sizeof name, "damaged-%d.ferryidx", row);
  const char *path = write_scratch(name, b.data, b.len);
  free(b.data);
  ferry_coco *coco = NULL;
  ferry_status st = c->stage == INDEX_VERIFY ? ferry_coco_index_verify(path) : ferry_coco_open(path, NULL, &coco);
  if (st == FERRY_OK && c->stage == INDEX_MASK) {
    ferry_rle rle = {0};
    st = ferry_coco_annotation_rle(coco, 1, &rle);
    ferry_rle_free(&rle);
  }
  outcome o = result(st);
  ferry_coco_close(coco);
  if (st != FERRY_OK && !strstr(o.message, name)) snprintf(o.message, sizeof o.message, "message without the file name");
  return o;
}

/* The JSON changed after its index was built: the index is stale, and opening the
 * JSON parses the new content instead of using it. */
static int stale_rows(const char *json_path, const char *index_path) {
  int mismatches = 0;
  FILE *f = fopen(json_path, "ab");
  cr_assert_not_null(f);
  fputs(" ", f);
  fclose(f);
  mismatches += check_row("index", "JSON grown after indexing", result(ferry_coco_index_check(index_path, json_path)),
                          FERRY_EFORMAT, "stale: built from");
  /* same size and time, different bytes: only the hash tells */
  struct stat before;
  cr_assert_eq(stat(json_path, &before), 0);
  size_t len;
  unsigned char *text = read_whole(json_path, &len);
  cr_assert_eq(ferry_coco_index_build(json_path, index_path), FERRY_OK, "%s", ferry_last_error());
  char *id7 = strstr((char *)text, "\"id\": 7");
  cr_assert_not_null(id7);
  id7[6] = '8';
  write_scratch("index-source.json", text, len);
  free(text);
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  cr_assert_eq(utimensat(AT_FDCWD, json_path, times, 0), 0);
  mismatches += check_row("index", "JSON rewritten, same size and time", result(ferry_coco_index_check(index_path, json_path)),
                          FERRY_EFORMAT, "different bytes");
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(json_path, NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  ferry_coco_annotation ann;
  cr_assert_eq(ferry_coco_annotation_at(coco, 2, &ann), FERRY_OK);
  cr_assert(!ferry_coco_is_index(coco), "a stale index was used");
  cr_assert_eq(ann.id, 8, "the JSON's new content was not read");
  ferry_coco_close(coco);
  return mismatches;
}

Test(hostile, index_files) {
  char json[2 * HARD_PATH], index[2 * HARD_PATH];  /* scratch_path's buffers are reused */
  snprintf(json, sizeof json, "%s", write_scratch_text("index-source.json", index_source_json));
  snprintf(index, sizeof index, "%s", scratch_path("index-source.json.ferryidx"));
  cr_assert_eq(ferry_coco_index_build(json, index), FERRY_OK, "%s", ferry_last_error());
  index_bytes pristine;
  pristine.data = read_whole(index, &pristine.len);
  int mismatches = 0;
  for (size_t i = 0; i < sizeof index_cases / sizeof index_cases[0]; i++)
    mismatches += check_row("index", index_cases[i].name, run_index_case(&index_cases[i], &pristine, (int)i),
                            index_cases[i].expected, index_cases[i].substring);
  mismatches += check_row("index", "an index given to ferry_coco_index_build", result(ferry_coco_index_build(index, scratch_path("again.ferryidx"))),
                          FERRY_EINVAL, "already a binary index");
  free(pristine.data);
  mismatches += stale_rows(json, index);
  cr_assert_eq(mismatches, 0, "%d index rows did not give their expected error", mismatches);
}
