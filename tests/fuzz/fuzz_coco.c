/* tests/fuzz/fuzz_coco.c - the COCO JSON loader: parse, index, masks and targets.
 *
 * Input: the bytes of an annotation file. It is opened strictly and, when that fails,
 * again collecting problems (the faulty elements left out), so the index and target
 * code also see the surviving parts of broken files. Every image's target is written
 * with all fields at a small mask size (MASK x MASK: the mask size stays bounded
 * whatever the image claims), and every annotation's full-size RLE is built.
 */
#include <math.h>
#include <string.h>

#include "ferry/coco.h"
#include "ferry/error.h"
#include "tests/fuzz/fuzz_check.h"

#define MASK 8
/* Polygons are rasterised at the image's own size, in time proportional to their
 * outline inside it: on larger images only the cheap parts are fuzzed (the limits
 * themselves are tests/hardening/test_hostile.c rows). */
#define MAX_MASK_PIXELS (1u << 22)

static int small_image(const ferry_coco_image *img) {
  return (uint64_t)img->width * (uint64_t)img->height <= MAX_MASK_PIXELS;
}

static void count_problem(void *user, const char *message) {
  FUZZ_CHECK(message != NULL && message[0] != '\0');
  ++*(size_t *)user;
}

static void *zalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  FUZZ_CHECK(p != NULL);
  return p;
}

static void check_target(const ferry_coco *coco, size_t index, int keep_crowd) {
  ferry_coco_image img;
  FUZZ_CHECK(ferry_coco_image_at(coco, index, &img) == FERRY_OK);
  ferry_target_options opts;
  ferry_target_options_default(&opts);
  opts.keep_crowd = keep_crowd;
  opts.mask_height = opts.mask_width = MASK;
  int64_t n = 0;
  ferry_status st = ferry_coco_target_count(coco, index, &opts, &n);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
    return;
  }
  FUZZ_CHECK(n >= 0 && (size_t)n <= img.num_annotations);
  size_t K = ferry_coco_num_keypoints(coco);
  ferry_coco_target t = {
    .boxes = zalloc((size_t)n * 4, sizeof(float)),
    .labels = zalloc((size_t)n, sizeof(int64_t)),
    .area = zalloc((size_t)n, sizeof(float)),
    .iscrowd = zalloc((size_t)n, sizeof(int64_t)),
    .masks = small_image(&img) ? zalloc((size_t)n * MASK * MASK, 1) : NULL,
    .keypoints = zalloc((size_t)n * K * 3, sizeof(float)),
  };
  st = ferry_coco_target_write(coco, index, &opts, &t);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
  } else {
    FUZZ_CHECK(t.image_id == img.id);
    for (int64_t i = 0; i < n; i++) {
      const float *b = t.boxes + 4 * i;
      FUZZ_CHECK(b[0] >= 0 && b[1] >= 0 && b[2] > b[0] && b[3] > b[1]);
      FUZZ_CHECK(b[2] <= (float)img.width && b[3] <= (float)img.height);
      FUZZ_CHECK(t.iscrowd[i] == 0 || (keep_crowd && t.iscrowd[i] == 1));
    }
    for (size_t p = 0; t.masks && p < (size_t)n * MASK * MASK; p++) FUZZ_CHECK(t.masks[p] <= 1);
  }
  free(t.boxes);
  free(t.labels);
  free(t.area);
  free(t.iscrowd);
  free(t.masks);
  free(t.keypoints);
}

static void check_annotation(const ferry_coco *coco, size_t index) {
  ferry_coco_annotation ann;
  FUZZ_CHECK(ferry_coco_annotation_at(coco, index, &ann) == FERRY_OK);
  FUZZ_CHECK(ann.iscrowd == 0 || ann.iscrowd == 1);
  ferry_coco_image img;
  if (ann.segm == FERRY_SEGM_POLYGONS && ann.image_index != SIZE_MAX &&
      (ferry_coco_image_at(coco, ann.image_index, &img) != FERRY_OK || !small_image(&img)))
    return;
  ferry_rle rle = {0};
  ferry_status st = ferry_coco_annotation_rle(coco, index, &rle);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
    FUZZ_CHECK(st != FERRY_ENOTFOUND || ann.segm == FERRY_SEGM_NONE);
    return;
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < rle.m; i++) sum += rle.counts[i];
  FUZZ_CHECK(sum == (uint64_t)rle.h * rle.w);
  ferry_rle_free(&rle);
}

static void walk(const ferry_coco *coco) {
  for (size_t i = 0; i < ferry_coco_num_categories(coco); i++) {
    int64_t id;
    const char *name;
    FUZZ_CHECK(ferry_coco_category_at(coco, i, &id, &name) == FERRY_OK && name != NULL);
  }
  size_t total = 0;
  for (size_t i = 0; i < ferry_coco_num_images(coco); i++) {
    ferry_coco_image img;
    FUZZ_CHECK(ferry_coco_image_at(coco, i, &img) == FERRY_OK && img.file_name != NULL);
    size_t found;
    FUZZ_CHECK(ferry_coco_find_image(coco, img.id, &found) == FERRY_OK);
    for (size_t k = 0; k < img.num_annotations; k++) {
      size_t a;
      FUZZ_CHECK(ferry_coco_image_annotation(coco, i, k, &a) == FERRY_OK);
      FUZZ_CHECK(a < ferry_coco_num_annotations(coco));
    }
    total += img.num_annotations;
    check_target(coco, i, (int)(i & 1));
  }
  FUZZ_CHECK(total <= ferry_coco_num_annotations(coco));
  for (size_t i = 0; i < ferry_coco_num_annotations(coco); i++) check_annotation(coco, i);
}

#ifndef FUZZ_COCO_WALK_ONLY /* fuzz_index.c reuses walk() with an entry of its own */
int FUZZ_ENTRY(const uint8_t *data, size_t size) {
  ferry_coco *coco = NULL;
  ferry_status st = ferry_coco_open_buffer((const char *)data, size, "fuzz.json", NULL, &coco);
  if (st == FERRY_OK) {
    walk(coco);
    ferry_coco_close(coco);
    return 0;
  }
  FUZZ_CHECK_FAILURE(st);
  FUZZ_CHECK(coco == NULL);
  size_t problems = 0;
  ferry_coco_options opts;
  ferry_coco_options_default(&opts);
  opts.remap_categories = 1;
  opts.on_problem = count_problem;
  opts.problem_user = &problems;
  st = ferry_coco_open_buffer((const char *)data, size, "fuzz.json", &opts, &coco);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
    return 0;
  }
  FUZZ_CHECK(problems > 0); /* what failed the strict open was reported */
  walk(coco);
  ferry_coco_close(coco);
  return 0;
}
#endif
