/* tests/fuzz/fuzz_polygon.c - polygon and box rasterisation with extreme values.
 *
 * Input: height byte, width byte, a flags byte, then coordinates. Flags bits 1-3
 * repeat the vertex list 4^r times (up to MAX_VERTICES: "many vertices"), in a mask
 * of at most MANY_VERTICES_SIDE a side; without repetition, bit 0 makes the mask 4x
 * larger each way (up to 1020x1020). The mask size stays bounded, and so does the
 * outline's length inside it, which is what the rasteriser's time is proportional
 * to (a polygon whose outline crosses a large image many times is legitimately slow,
 * and only that). Each
 * coordinate is one selector byte: 0..199 a value around the image ((s - 20) / 160 of
 * its larger side, so -12.5% to 112%), 200..247 one of
 * the extreme values below (1e12, -1e12, NaN, inf, the +-1e8 limit and its
 * neighbours, int and uint32 edges), 248..255 the next 8 bytes as a raw double.
 * A polygon is either refused with a message or gives runs summing to h*w; merged
 * with its bounding box, the union is at least as large as either.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ferry/error.h"
#include "ferry/mask.h"
#include "tests/fuzz/fuzz_check.h"

#define MAX_VERTICES (1u << 13)
#define MANY_VERTICES_SIDE 63
#define SMALL 16

static const double extremes[] = {
  1e12, -1e12, NAN, -NAN, INFINITY, -INFINITY, 1e8, -1e8, 1e8 + 0.5, -1e8 - 0.5, 100000000.2,
  99999999.9, DBL_MAX, -DBL_MAX, DBL_MIN, -0.0, 2147483647.0, -2147483648.0, 429496729.6,
  858993459.0, 4294967295.0, 1e300, -1e300, 5e-324, 0.5, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7,
  0.9, 1.0 / 3.0, 255.5, 1019.9, 1020.0, 1020.1, -0.5, -0.1, 1e-9, 12345678.9, -12345678.9,
  6e7, -6e7, 3e7, 9.5, 64.49999999, 64.5,
};
#define NUM_EXTREMES (sizeof extremes / sizeof extremes[0])
_Static_assert(NUM_EXTREMES <= 48, "selectors 200..247 name the extreme values");

/* Decode one coordinate at data[*pos]; 0 when the input is exhausted. */
static int next_coordinate(const uint8_t *data, size_t size, size_t *pos, double side,
                           double *out) {
  if (*pos >= size) return 0;
  uint8_t s = data[(*pos)++];
  if (s < 200) {
    *out = ((double)s - 20.0) / 160.0 * side;
  } else if (s < 200 + NUM_EXTREMES) {
    *out = extremes[s - 200];
  } else {
    if (size - *pos < sizeof(double)) return 0;
    memcpy(out, data + *pos, sizeof(double));
    *pos += sizeof(double);
  }
  return 1;
}

static void check_rle(const ferry_rle *rle, uint32_t h, uint32_t w) {
  FUZZ_CHECK(rle->h == h && rle->w == w && rle->m >= 1);
  uint64_t sum = 0;
  for (size_t i = 0; i < rle->m; i++) sum += rle->counts[i];
  FUZZ_CHECK(sum == (uint64_t)h * w);
  uint8_t small[SMALL * SMALL];
  FUZZ_CHECK(ferry_rle_decode_resized(rle, small, sizeof small, SMALL, SMALL) == FERRY_OK);
}

/* Union with the box of the first two vertices' span, and IoU against it. */
static void check_with_box(const ferry_rle *poly, const double *xy, uint32_t h, uint32_t w) {
  double box[4] = {xy[0], xy[1], xy[2] - xy[0], xy[3] - xy[1]};
  ferry_rle rects[2] = {{0}, {0}};
  ferry_status st = ferry_rle_from_bbox(box, h, w, &rects[1]);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
    return;
  }
  check_rle(&rects[1], h, w);
  rects[0] = *poly;
  ferry_rle merged = {0};
  FUZZ_CHECK(ferry_rle_merge(rects, 2, 0, &merged) == FERRY_OK);
  uint64_t area = ferry_rle_area(&merged);
  FUZZ_CHECK(area >= ferry_rle_area(poly) && area >= ferry_rle_area(&rects[1]));
  double iou;
  FUZZ_CHECK(ferry_rle_iou(poly, 1, &rects[1], 1, NULL, &iou) == FERRY_OK);
  FUZZ_CHECK(iou >= 0.0 && iou <= 1.0);
  ferry_rle_free(&merged);
  ferry_rle_free(&rects[1]);
}

int FUZZ_ENTRY(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  size_t reps = (size_t)1 << (2 * ((data[2] >> 1) & 7));
  uint32_t scale = (data[2] & 1) && reps == 1 ? 4 : 1;
  uint32_t h = (uint32_t)data[0] * scale, w = (uint32_t)data[1] * scale;
  if (reps > 1) h %= MANY_VERTICES_SIDE + 1, w %= MANY_VERTICES_SIDE + 1;
  size_t pos = 3, n = 0, cap = (size - 3) + 2;
  double *coords = malloc(cap * sizeof *coords);
  FUZZ_CHECK(coords != NULL);
  double side = h > w ? h : w;
  while (next_coordinate(data, size, &pos, side, &coords[n])) n++;
  size_t k = n / 2;
  if (k == 0 || k * reps > MAX_VERTICES) reps = 1;
  double *xy = malloc((k * reps * 2 + 4) * sizeof *xy);
  FUZZ_CHECK(xy != NULL);
  for (size_t r = 0; r < reps; r++) memcpy(xy + r * k * 2, coords, k * 2 * sizeof *xy);
  free(coords);
  ferry_rle poly = {0};
  ferry_status st = ferry_rle_from_polygon(xy, k * reps, h, w, &poly);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
    FUZZ_CHECK(st == FERRY_ELIMIT || st == FERRY_ENOMEM);
  } else {
    check_rle(&poly, h, w);
    if (k >= 2) check_with_box(&poly, xy, h, w);
    ferry_rle_free(&poly);
  }
  free(xy);
  return 0;
}
