/* tests/coco/test_masks.c - the masks API (ferry/mask.h) against masks computed pixel by
 * pixel in the test, and against values pycocotools printed (golden/README.md cases). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/mask.h"

/* xorshift: deterministic masks without depending on rand()'s implementation */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}

/* A random row-major mask: noise, rectangles, empty, or full. */
static uint8_t *random_mask(uint32_t h, uint32_t w) {
  uint8_t *m = calloc((size_t)h * w + 1, 1);
  uint32_t style = next_u32() % 4, density = next_u32() % 100;
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++) {
      uint8_t *p = &m[(size_t)y * w + x];
      if (style == 0) *p = next_u32() % 100 < density;
      else if (style == 1) *p = x >= w / 4 && x < w / 2 + 1 && y >= h / 3 && y < h - h / 4;
      else if (style == 3) *p = 1;
    }
  return m;
}

static ferry_rle encode(const uint8_t *m, uint32_t h, uint32_t w) {
  ferry_rle r = {0};
  cr_assert_eq(ferry_rle_encode(m, h, w, &r), FERRY_OK, "%s", ferry_last_error());
  return r;
}

static ferry_rle parse(const char *s, uint32_t h, uint32_t w) {
  ferry_rle r = {0};
  cr_assert_eq(ferry_rle_from_string(s, strlen(s), h, w, &r), FERRY_OK, "%s", ferry_last_error());
  return r;
}

static char *to_string(const ferry_rle *r) {
  char *s = NULL;
  cr_assert_eq(ferry_rle_to_string(r, &s), FERRY_OK);
  return s;
}

Test(masks, encode_decode_round_trip) {
  for (int t = 0; t < 300; t++) {
    uint32_t h = next_u32() % 40, w = next_u32() % 40;
    uint8_t *m = random_mask(h, w);
    ferry_rle r = encode(m, h, w);
    uint64_t sum = 0, fg = 0;
    for (size_t j = 0; j < r.m; j++) sum += r.counts[j];
    for (size_t i = 0; i < (size_t)h * w; i++) fg += m[i];
    cr_expect_eq(sum, (uint64_t)h * w);
    cr_expect_eq(ferry_rle_area(&r), fg);
    uint8_t *back = malloc((size_t)h * w + 1);
    cr_assert_eq(ferry_rle_decode(&r, back, (size_t)h * w), FERRY_OK);
    cr_expect_eq(memcmp(back, m, (size_t)h * w), 0, "round trip differs at %ux%u", h, w);
    /* the string form round-trips to the same runs */
    char *s = to_string(&r);
    ferry_rle again = parse(s, h, w);
    cr_expect_eq(again.m, r.m);
    cr_expect_eq(memcmp(again.counts, r.counts, r.m * sizeof(uint32_t)), 0);
    ferry_rle_free_string(s);
    ferry_rle_free(&again);
    ferry_rle_free(&r);
    free(back);
    free(m);
  }
}

Test(masks, runs_are_column_major_starting_with_background) {
  /* 2x3 mask, row-major: [1 0 0; 1 1 0] -> columns (1,1) (0,1) (0,0) -> 1 1 0 1 0 0 */
  const uint8_t m[6] = {1, 0, 0, 1, 1, 0};
  ferry_rle r = encode(m, 2, 3);
  cr_assert_eq(r.m, 5);
  const uint32_t want[5] = {0, 2, 1, 1, 2};
  for (int i = 0; i < 5; i++) cr_expect_eq(r.counts[i], want[i], "run %d", i);
  ferry_rle_free(&r);
}

/* Nearest by ferry_nearest_index_map on the full mask: the reference for
 * decode_resized (the map itself is checked against torch by check_nearest_torch.py). */
static void reference_resize(const uint8_t *src, uint32_t h, uint32_t w, uint8_t *dst, uint32_t dh, uint32_t dw) {
  uint32_t *rows = malloc(dh * sizeof *rows), *cols = malloc(dw * sizeof *cols);
  cr_assert_eq(ferry_nearest_index_map(h, dh, rows), FERRY_OK);
  cr_assert_eq(ferry_nearest_index_map(w, dw, cols), FERRY_OK);
  for (uint32_t i = 0; i < dh; i++)
    for (uint32_t j = 0; j < dw; j++) dst[(size_t)i * dw + j] = src[(size_t)rows[i] * w + cols[j]];
  free(rows);
  free(cols);
}

/* torch's float32 rule, not exact integers: 428 -> 312 maps 78 and 156 to 106 and 213
 * (torch 1.13 and 2.5 alike; exact integers give 107 and 214), and the two special
 * cases hold. */
Test(masks, nearest_map_is_torchs_float32_rule) {
  uint32_t map[640];
  cr_assert_eq(ferry_nearest_index_map(428, 312, map), FERRY_OK);
  cr_expect_eq(map[78], 106);
  cr_expect_eq(map[156], 213);
  cr_expect_eq(map[77], 105);
  cr_expect_eq(map[311], 426);
  cr_assert_eq(ferry_nearest_index_map(320, 640, map), FERRY_OK);
  for (uint32_t i = 0; i < 640; i++) cr_expect_eq(map[i], i / 2);
  cr_assert_eq(ferry_nearest_index_map(7, 7, map), FERRY_OK);
  for (uint32_t i = 0; i < 7; i++) cr_expect_eq(map[i], i);
  cr_expect_eq(ferry_nearest_index_map(0, 5, map), FERRY_EINVAL);
  cr_expect_eq(ferry_nearest_index_map(5, 5, NULL), FERRY_EINVAL);
  cr_expect_eq(ferry_nearest_index_map(5, 0, NULL), FERRY_OK);
}

/* A mask whose rows 106 and 107 differ, resized 428 -> 312: row 78 is row 106. */
Test(masks, decode_resized_takes_torchs_row) {
  uint8_t *m = calloc(428 * 3, 1);
  for (int j = 0; j < 3; j++) m[106 * 3 + j] = 1;
  ferry_rle r = encode(m, 428, 3);
  uint8_t out[312 * 3];
  cr_assert_eq(ferry_rle_decode_resized(&r, out, sizeof out, 312, 3), FERRY_OK);
  for (int i = 0; i < 312; i++) cr_expect_eq(out[i * 3], i == 78, "row %d", i);
  ferry_rle_free(&r);
  free(m);
}

Test(masks, decode_resized_equals_decode_then_nearest) {
  /* small sizes, then training sizes, where the float32 rule and exact integers part */
  for (int t = 0; t < 460; t++) {
    uint32_t h = 1 + next_u32() % 50, w = 1 + next_u32() % 50;
    uint32_t dh = 1 + next_u32() % 80, dw = 1 + next_u32() % 80;
    if (t >= 400) {
      h = 300 + next_u32() % 700, w = 300 + next_u32() % 700;
      dh = 276 + 12 * (next_u32() % 8), dw = 384 + next_u32() % 300;
    }
    uint8_t *m = random_mask(h, w);
    ferry_rle r = encode(m, h, w);
    uint8_t *want = malloc((size_t)dh * dw), *got = malloc((size_t)dh * dw);
    reference_resize(m, h, w, want, dh, dw);
    memset(got, 7, (size_t)dh * dw);
    cr_assert_eq(ferry_rle_decode_resized(&r, got, (size_t)dh * dw, dh, dw), FERRY_OK);
    cr_expect_eq(memcmp(got, want, (size_t)dh * dw), 0, "%ux%u -> %ux%u differs", h, w, dh, dw);
    ferry_rle_free(&r);
    free(m);
    free(want);
    free(got);
  }
}

Test(masks, decode_rejects_a_short_buffer) {
  const uint8_t m[4] = {1, 1, 0, 1};
  ferry_rle r = encode(m, 2, 2);
  uint8_t out[4];
  cr_expect_eq(ferry_rle_decode(&r, out, 3), FERRY_EINVAL);
  cr_expect_eq(ferry_rle_decode_resized(&r, out, 4, 3, 2), FERRY_EINVAL);
  ferry_rle_free(&r);
}

/* Values from golden/datumaro_instances_val.jsonl (pycocotools' output). */
Test(masks, golden_datumaro_values) {
  const uint32_t counts[3] = {0, 20, 30};
  ferry_rle r = {0};
  cr_assert_eq(ferry_rle_from_counts(counts, 3, 10, 5, &r), FERRY_OK);
  char *s = to_string(&r);
  cr_expect_str_eq(s, "0d0n0");
  double bb[4];
  ferry_rle_to_bbox(&r, bb);
  cr_expect(bb[0] == 0 && bb[1] == 0 && bb[2] == 2 && bb[3] == 10);
  cr_expect_eq(ferry_rle_area(&r), 20);
  ferry_rle_free_string(s);
  ferry_rle_free(&r);

  const double poly[8] = {0, 0, 1, 0, 1, 2, 0, 2};
  cr_assert_eq(ferry_rle_from_polygon(poly, 4, 10, 5, &r), FERRY_OK);
  s = to_string(&r);
  cr_expect_str_eq(s, "02`1");
  cr_expect_eq(ferry_rle_area(&r), 2);
  ferry_rle_to_bbox(&r, bb);
  cr_expect(bb[0] == 0 && bb[1] == 0 && bb[2] == 1 && bb[3] == 2);
  ferry_rle_free_string(s);
  ferry_rle_free(&r);
}

Test(masks, polygon_square_covers_pixel_centres_inside) {
  /* [2,2]-[6,5]: pixel (x, y) has its centre (x+.5, y+.5) inside for x 2..5, y 2..4 */
  const double poly[8] = {2, 2, 6, 2, 6, 5, 2, 5};
  ferry_rle r = {0};
  cr_assert_eq(ferry_rle_from_polygon(poly, 4, 8, 9, &r), FERRY_OK);
  uint8_t m[72];
  cr_assert_eq(ferry_rle_decode(&r, m, sizeof m), FERRY_OK);
  for (int y = 0; y < 8; y++)
    for (int x = 0; x < 9; x++)
      cr_expect_eq(m[y * 9 + x], x >= 2 && x <= 5 && y >= 2 && y <= 4, "pixel (%d, %d)", x, y);
  ferry_rle_free(&r);
}

Test(masks, polygon_with_fewer_than_3_vertices_is_empty) {
  const double line[4] = {1, 1, 7, 7};
  ferry_rle r = {0};
  cr_assert_eq(ferry_rle_from_polygon(line, 2, 8, 8, &r), FERRY_OK);
  cr_expect_eq(r.m, 1);
  cr_expect_eq(r.counts[0], 64);
  cr_expect_eq(ferry_rle_area(&r), 0);
  ferry_rle_free(&r);
}

Test(masks, polygon_limits) {
  ferry_rle r = {0};
  const double far[6] = {0, 0, 2e8, 0, 5, 5};
  cr_expect_eq(ferry_rle_from_polygon(far, 3, 10, 10, &r), FERRY_ELIMIT);
  const double nan_xy[6] = {0, 0, NAN, 0, 5, 5};
  cr_expect_eq(ferry_rle_from_polygon(nan_xy, 3, 10, 10, &r), FERRY_ELIMIT);
  const double ok[6] = {0, 0, 4, 0, 4, 4};
  cr_expect_eq(ferry_rle_from_polygon(ok, 3, 70000, 70000, &r), FERRY_ELIMIT);
  cr_expect_eq(ferry_rle_from_polygon(ok, 3, 0, 10, &r), FERRY_OK);
  cr_expect_eq(r.m, 1);
  cr_expect_eq(r.counts[0], 0);
  ferry_rle_free(&r);
}

Test(masks, box_is_the_rectangle_polygon) {
  const double bb[4] = {1.5, 0.25, 3, 2.5};
  const double poly[8] = {1.5, 0.25, 1.5, 2.75, 4.5, 2.75, 4.5, 0.25};
  ferry_rle a = {0}, b = {0};
  cr_assert_eq(ferry_rle_from_bbox(bb, 6, 7, &a), FERRY_OK);
  cr_assert_eq(ferry_rle_from_polygon(poly, 4, 6, 7, &b), FERRY_OK);
  cr_expect_eq(a.m, b.m);
  cr_expect_eq(memcmp(a.counts, b.counts, a.m * sizeof(uint32_t)), 0);
  ferry_rle_free(&a);
  ferry_rle_free(&b);
}

static void expect_bbox_of_mask(const uint8_t *m, uint32_t h, uint32_t w, const double bb[4]) {
  int64_t x0 = w, y0 = h, x1 = -1, y1 = -1;
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++)
      if (m[(size_t)y * w + x]) {
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
  if (x1 < 0) {
    cr_expect(bb[0] == 0 && bb[1] == 0 && bb[2] == 0 && bb[3] == 0);
    return;
  }
  /* rleToBbox widens to the full height when one run spans two columns */
  cr_expect_eq(bb[0], (double)x0);
  cr_expect_eq(bb[2], (double)(x1 - x0 + 1));
  cr_expect(bb[1] <= y0 && bb[1] + bb[3] >= y1 + 1, "bbox rows [%g, %g) miss [%lld, %lld]", bb[1], bb[1] + bb[3],
            (long long)y0, (long long)y1);
}

Test(masks, bbox_contains_the_mask) {
  for (int t = 0; t < 200; t++) {
    uint32_t h = 1 + next_u32() % 30, w = 1 + next_u32() % 30;
    uint8_t *m = random_mask(h, w);
    ferry_rle r = encode(m, h, w);
    double bb[4];
    ferry_rle_to_bbox(&r, bb);
    expect_bbox_of_mask(m, h, w, bb);
    ferry_rle_free(&r);
    free(m);
  }
}

Test(masks, merge_is_pixelwise_or_and_and_canonical) {
  for (int t = 0; t < 200; t++) {
    uint32_t h = 1 + next_u32() % 30, w = 1 + next_u32() % 30;
    size_t n = (size_t)h * w;
    uint8_t *a = random_mask(h, w), *b = random_mask(h, w), *c = random_mask(h, w), *want = malloc(n);
    int intersect = t % 2;
    for (size_t i = 0; i < n; i++) want[i] = intersect ? (a[i] && b[i] && c[i]) : (a[i] || b[i] || c[i]);
    ferry_rle rles[3] = {encode(a, h, w), encode(b, h, w), encode(c, h, w)};
    ferry_rle merged = {0}, canonical = encode(want, h, w);
    cr_assert_eq(ferry_rle_merge(rles, 3, intersect, &merged), FERRY_OK);
    cr_expect_eq(merged.m, canonical.m);
    cr_expect_eq(memcmp(merged.counts, canonical.counts, merged.m * sizeof(uint32_t)), 0);
    for (int i = 0; i < 3; i++) ferry_rle_free(&rles[i]);
    ferry_rle_free(&merged);
    ferry_rle_free(&canonical);
    free(a), free(b), free(c), free(want);
  }
}

Test(masks, merge_rejects_different_sizes) {
  const uint8_t m[6] = {0};
  ferry_rle rles[2] = {encode(m, 2, 3), encode(m, 3, 2)}, out = {0};
  cr_expect_eq(ferry_rle_merge(rles, 2, 0, &out), FERRY_EINVAL);
  cr_expect_eq(ferry_rle_merge(rles, 0, 0, &out), FERRY_EINVAL);
  ferry_rle_free(&rles[0]);
  ferry_rle_free(&rles[1]);
}

/* h*w past 2^32-1: maskApi.c's uint run lengths cannot describe it. Merging two used to
 * wrap a run and return a wrong 1-run mask with FERRY_OK. */
Test(masks, oversized_hand_built_rles_are_refused) {
  uint32_t counts[3] = {4294967295u, 0, 65537};
  ferry_rle big = {.h = 65536, .w = 65537, .m = 3, .counts = counts}, pair[2] = {big, big}, out = {0};
  cr_expect_eq(ferry_rle_merge(pair, 2, 0, &out), FERRY_ELIMIT);
  cr_expect(strstr(ferry_last_error(), "ferry_rle_merge") && strstr(ferry_last_error(), "2^32-1"), "%s",
            ferry_last_error());
  cr_expect_eq(out.counts, NULL);
  double iou = 0;
  cr_expect_eq(ferry_rle_iou(pair, 1, pair, 1, NULL, &iou), FERRY_ELIMIT);
}

Test(masks, iou_matches_pixel_counts) {
  for (int t = 0; t < 300; t++) {
    uint32_t h = 1 + next_u32() % 20, w = 1 + next_u32() % 20;
    size_t n = (size_t)h * w;
    uint8_t *a = random_mask(h, w), *b = random_mask(h, w);
    uint64_t inter = 0, uni = 0, area_a = 0;
    for (size_t i = 0; i < n; i++) {
      inter += a[i] && b[i];
      uni += a[i] || b[i];
      area_a += a[i];
    }
    ferry_rle dt = encode(a, h, w), gt = encode(b, h, w);
    double boxd[4], boxg[4];
    ferry_rle_to_bbox(&dt, boxd);
    ferry_rle_to_bbox(&gt, boxg);
    int boxes_meet = boxd[0] < boxg[0] + boxg[2] && boxg[0] < boxd[0] + boxd[2] && boxd[1] < boxg[1] + boxg[3] &&
                     boxg[1] < boxd[1] + boxd[3];
    for (uint8_t crowd = 0; crowd < 2; crowd++) {
      double o;
      cr_assert_eq(ferry_rle_iou(&dt, 1, &gt, 1, &crowd, &o), FERRY_OK);
      double want = !boxes_meet || inter == 0 ? 0 : (double)inter / (double)(crowd ? area_a : uni);
      cr_expect_eq(o, want, "crowd %d: iou %.17g, want %.17g", crowd, o, want);
    }
    ferry_rle_free(&dt);
    ferry_rle_free(&gt);
    free(a), free(b);
  }
}

Test(masks, iou_of_different_sizes_is_minus_one) {
  const uint8_t full[12] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  ferry_rle a = encode(full, 3, 4), b = encode(full, 4, 3);
  double o;
  cr_assert_eq(ferry_rle_iou(&a, 1, &b, 1, NULL, &o), FERRY_OK);
  cr_expect_eq(o, -1.0);
  ferry_rle_free(&a);
  ferry_rle_free(&b);
}

Test(masks, counts_must_sum_to_the_size) {
  const uint32_t counts[3] = {3, 4, 5};
  ferry_rle r = {0};
  cr_expect_eq(ferry_rle_from_counts(counts, 3, 3, 4, &r), FERRY_OK);
  ferry_rle_free(&r);
  cr_expect_eq(ferry_rle_from_counts(counts, 3, 3, 5, &r), FERRY_EFORMAT);
  cr_expect(strstr(ferry_last_error(), "sum to 12, expected h*w = 3*5 = 15") != NULL, "%s", ferry_last_error());
  cr_expect_eq(ferry_rle_from_counts(counts, 2, 3, 4, &r), FERRY_EFORMAT);
  cr_expect_eq(ferry_rle_from_counts(counts, 3, 70000, 70000, &r), FERRY_ELIMIT);
}

Test(masks, string_errors_name_the_character) {
  ferry_rle r = {0};
  cr_expect_eq(ferry_rle_from_string("0d0n0", 5, 10, 5, &r), FERRY_OK);
  ferry_rle_free(&r);
  cr_expect_eq(ferry_rle_from_string("0d0n0", 4, 10, 5, &r), FERRY_EFORMAT);  /* truncated by len */
  cr_expect(strstr(ferry_last_error(), "ends inside the value that starts at character 3"), "%s", ferry_last_error());
  cr_expect_eq(ferry_rle_from_string("0d/n0", 5, 10, 5, &r), FERRY_EFORMAT);
  cr_expect(strstr(ferry_last_error(), "character 2 (0x2f)"), "%s", ferry_last_error());
  cr_expect_eq(ferry_rle_from_string("0000000000000", 13, 10, 5, &r), FERRY_EFORMAT);
  cr_expect(strstr(ferry_last_error(), "sum to 0"), "%s", ferry_last_error());
  cr_expect_eq(ferry_rle_from_string("ooooooo0", 8, 10, 5, &r), FERRY_EFORMAT);
  cr_expect(strstr(ferry_last_error(), "overflows"), "%s", ferry_last_error());
  const char with_nul[] = {'0', 'd', '\0', 'n', '0'};
  cr_expect_eq(ferry_rle_from_string(with_nul, 5, 10, 5, &r), FERRY_EFORMAT);
}

Test(masks, largest_counts_survive_the_string_codec) {
  /* h*w = 2^32-1: deltas up to +-(2^32-1) need all 7 characters */
  const uint32_t counts[5] = {0, UINT32_MAX - 2, 1, 0, 1};
  ferry_rle r = {0};
  cr_assert_eq(ferry_rle_from_counts(counts, 5, 65535, 65537, &r), FERRY_OK);
  char *s = to_string(&r);
  ferry_rle back = parse(s, 65535, 65537);
  cr_expect_eq(back.m, 5);
  cr_expect_eq(memcmp(back.counts, counts, sizeof counts), 0);
  ferry_rle_free_string(s);
  ferry_rle_free(&back);
  ferry_rle_free(&r);
}
