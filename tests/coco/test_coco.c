/* tests/coco/test_coco.c - parsing, the per-image index and targets (ferry/coco.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/coco.h"
#include "../common/realdata.h"

static ferry_coco *open_text(const char *json, const ferry_coco_options *o) {
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open_buffer(json, strlen(json), "mem.json", o, &coco), FERRY_OK, "%s", ferry_last_error());
  return coco;
}

static ferry_coco *open_shared(const char *rel) {
  const char *path = realdata_path(rel);
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(path, NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  return coco;
}

/* ---- accepted variants ------------------------------------------------------------ */

static const char *variants_json =
    "{\"info\": null, \"licenses\": null, \"extra\": {\"x\": [1, 2]},"
    " \"categories\": [{\"id\": 0, \"name\": \"zero\", \"color\": [1, 2, 3]}, {\"id\": 7, \"name\": \"seven\"}],"
    " \"images\": [{\"id\": 0, \"file_name\": \"sub/dir/a.jpg\", \"width\": 20, \"height\": 10, \"flickr_url\": \"\"},"
    "              {\"id\": 5.0, \"file_name\": \"b.png\", \"width\": 4, \"height\": 4}],"
    " \"annotations\": ["
    "   {\"id\": 0, \"image_id\": 0, \"category_id\": 7, \"bbox\": [-5, 2, 10, 30], \"area\": 12.5, \"is_crowd\": 0,"
    "    \"attributes\": {\"occluded\": false}},"
    "   {\"id\": 1, \"image_id\": 5, \"category_id\": 0, \"bbox\": [0, 0, 2, 2], \"area\": 4, \"iscrowd\": true},"
    "   {\"id\": 2, \"image_id\": 0, \"category_id\": 0, \"bbox\": [25, 0, 5, 5], \"area\": 1, \"iscrowd\": 0},"
    "   {\"id\": 3, \"image_id\": 0, \"category_id\": 0, \"bbox\": [3, 3, 0, 4], \"area\": 0, \"iscrowd\": 0},"
    "   {\"id\": 4, \"image_id\": 0, \"category_id\": 0, \"bbox\": [1.5, 1.25, 4, 5], \"area\": 9, \"iscrowd\": 0,"
    "    \"segmentation\": [[1, 1, 6, 1, 6, 6, 1, 6]]}"
    " ]}";

Test(coco, accepts_the_variants_real_files_have) {
  ferry_coco *coco = open_text(variants_json, NULL);
  cr_expect_eq(ferry_coco_num_images(coco), 2);
  cr_expect_eq(ferry_coco_num_annotations(coco), 5);
  cr_expect_eq(ferry_coco_num_categories(coco), 2);
  ferry_coco_image img;
  cr_assert_eq(ferry_coco_image_at(coco, 0, &img), FERRY_OK);
  cr_expect_eq(img.id, 0);
  cr_expect_str_eq(img.file_name, "sub/dir/a.jpg");
  cr_expect_eq(img.height, 10);
  cr_expect_eq(img.width, 20);
  cr_expect_eq(img.num_annotations, 4);
  cr_assert_eq(ferry_coco_image_at(coco, 1, &img), FERRY_OK);
  cr_expect_eq(img.id, 5);
  cr_expect_eq(img.num_annotations, 1);
  size_t index;
  cr_expect_eq(ferry_coco_find_image(coco, 5, &index), FERRY_OK);
  cr_expect_eq(index, 1);
  cr_expect_eq(ferry_coco_find_image(coco, 6, &index), FERRY_ENOTFOUND);
  ferry_coco_annotation a;
  cr_assert_eq(ferry_coco_annotation_at(coco, 1, &a), FERRY_OK);
  cr_expect_eq(a.iscrowd, 1);
  cr_expect_eq(a.label, 0);
  cr_expect_eq(a.image_index, 1);
  cr_expect_eq(ferry_coco_image_at(coco, 2, &img), FERRY_EINVAL);
  ferry_coco_close(coco);
}

Test(coco, per_image_index_keeps_file_order) {
  ferry_coco *coco = open_text(variants_json, NULL);
  const int64_t want[4] = {0, 2, 3, 4};
  for (size_t k = 0; k < 4; k++) {
    size_t ann;
    cr_assert_eq(ferry_coco_image_annotation(coco, 0, k, &ann), FERRY_OK);
    ferry_coco_annotation a;
    ferry_coco_annotation_at(coco, ann, &a);
    cr_expect_eq(a.id, want[k]);
  }
  size_t ann;
  cr_expect_eq(ferry_coco_image_annotation(coco, 0, 4, &ann), FERRY_EINVAL);
  ferry_coco_close(coco);
}

Test(coco, remapped_labels_follow_category_order) {
  ferry_coco_options o;
  ferry_coco_options_default(&o);
  o.remap_categories = 1;
  ferry_coco *coco = open_text(variants_json, &o);
  ferry_coco_annotation a;
  ferry_coco_annotation_at(coco, 0, &a);
  cr_expect_eq(a.category_id, 7);
  cr_expect_eq(a.label, 1);
  ferry_coco_annotation_at(coco, 1, &a);
  cr_expect_eq(a.label, 0);
  ferry_coco_close(coco);
}

/* ---- targets ------------------------------------------------------------------------ */

Test(coco, target_boxes_are_clamped_and_degenerate_ones_dropped) {
  ferry_coco *coco = open_text(variants_json, NULL);
  ferry_target_options t;
  ferry_target_options_default(&t);
  int64_t n;
  cr_assert_eq(ferry_coco_target_count(coco, 0, &t, &n), FERRY_OK);
  cr_assert_eq(n, 2, "kept: ann 0 (clamped) and ann 4; ann 2 is right of the image, ann 3 has width 0");
  float boxes[8], area[2];
  int64_t labels[2], crowd[2];
  uint8_t masks[2 * 10 * 20];
  ferry_coco_target out = {.boxes = boxes, .labels = labels, .area = area, .iscrowd = crowd, .masks = masks};
  cr_assert_eq(ferry_coco_target_write(coco, 0, &t, &out), FERRY_OK, "%s", ferry_last_error());
  const float want[8] = {0, 2, 5, 10, 1.5f, 1.25f, 5.5f, 6.25f};
  for (int i = 0; i < 8; i++) cr_expect_eq(boxes[i], want[i], "box value %d: %g", i, boxes[i]);
  cr_expect_eq(labels[0], 7);
  cr_expect_eq(labels[1], 0);
  cr_expect_eq(area[0], 12.5f);
  cr_expect_eq(crowd[0], 0);
  cr_expect_eq(out.image_id, 0);
  cr_expect_eq(out.orig_h, 10);
  cr_expect_eq(out.orig_w, 20);
  for (int i = 0; i < 200; i++) cr_expect_eq(masks[i], 0, "annotation 0 has no segmentation");
  /* the square (1,1)-(6,6) covers the pixels whose centres lie inside: 1..5 x 1..5 */
  for (int y = 0; y < 10; y++)
    for (int x = 0; x < 20; x++)
      cr_expect_eq(masks[200 + y * 20 + x], x >= 1 && x <= 5 && y >= 1 && y <= 5, "pixel (%d, %d)", x, y);
  ferry_coco_close(coco);
}

Test(coco, crowd_is_dropped_unless_kept) {
  ferry_coco *coco = open_text(variants_json, NULL);
  ferry_target_options t;
  ferry_target_options_default(&t);
  int64_t n;
  cr_assert_eq(ferry_coco_target_count(coco, 1, &t, &n), FERRY_OK);
  cr_expect_eq(n, 0);
  t.keep_crowd = 1;
  cr_assert_eq(ferry_coco_target_count(coco, 1, &t, &n), FERRY_OK);
  cr_expect_eq(n, 1);
  int64_t crowd;
  ferry_coco_target out = {.iscrowd = &crowd};
  cr_assert_eq(ferry_coco_target_write(coco, 1, &t, &out), FERRY_OK);
  cr_expect_eq(crowd, 1);
  ferry_coco_close(coco);
}

/* Masks at R x R equal the annotation's full mask resized by the nearest rule
 * (ferry_nearest_index_map, checked against torch by check_nearest_torch.py). */
static void check_resized_masks(ferry_coco *coco, size_t image, uint32_t R) {
  ferry_target_options t;
  ferry_target_options_default(&t);
  t.keep_crowd = 1;
  t.mask_height = t.mask_width = R;
  int64_t n;
  cr_assert_eq(ferry_coco_target_count(coco, image, &t, &n), FERRY_OK, "%s", ferry_last_error());
  uint8_t *masks = malloc((size_t)(n ? n : 1) * R * R);
  ferry_coco_target out = {.masks = masks};
  cr_assert_eq(ferry_coco_target_write(coco, image, &t, &out), FERRY_OK, "%s", ferry_last_error());
  ferry_coco_image img;
  ferry_coco_image_at(coco, image, &img);
  int64_t slot = 0;
  for (size_t k = 0; k < img.num_annotations; k++) {
    size_t ann;
    ferry_coco_image_annotation(coco, image, k, &ann);
    ferry_coco_annotation a;
    ferry_coco_annotation_at(coco, ann, &a);
    float x2 = (float)a.bbox[0] + (float)a.bbox[2], y2 = (float)a.bbox[1] + (float)a.bbox[3];
    if (!(fminf(x2, img.width) > fmaxf((float)a.bbox[0], 0) && fminf(y2, img.height) > fmaxf((float)a.bbox[1], 0)))
      continue;
    size_t full_n = (size_t)img.height * img.width;
    uint8_t *full = calloc(full_n, 1);
    ferry_rle rle = {0};
    if (a.segm != FERRY_SEGM_NONE) {
      cr_assert_eq(ferry_coco_annotation_rle(coco, ann, &rle), FERRY_OK, "%s", ferry_last_error());
      cr_assert_eq(ferry_rle_decode(&rle, full, full_n), FERRY_OK);
    }
    const uint8_t *got = masks + (size_t)slot * R * R;
    uint32_t *rows = malloc(R * sizeof *rows), *cols = malloc(R * sizeof *cols);
    cr_assert_eq(ferry_nearest_index_map((uint32_t)img.height, R, rows), FERRY_OK);
    cr_assert_eq(ferry_nearest_index_map((uint32_t)img.width, R, cols), FERRY_OK);
    for (uint32_t i = 0; i < R; i++)
      for (uint32_t j = 0; j < R; j++) {
        size_t sy = rows[i], sx = cols[j];
        cr_assert_eq(got[i * R + j], full[sy * img.width + sx], "image %zu ann %zu pixel (%u, %u)", image, ann, i, j);
      }
    ferry_rle_free(&rle);
    free(full);
    free(rows);
    free(cols);
    slot++;
  }
  cr_expect_eq(slot, n);
  free(masks);
}

Test(coco, real_masks_at_312_equal_full_decode_then_nearest, .timeout = 120) {
  ferry_coco *coco = open_shared("dali_coco/coco_pixelwise/instances.json");
  for (size_t i = 0; i < ferry_coco_num_images(coco); i++) check_resized_masks(coco, i, 312);
  ferry_coco_close(coco);
  coco = open_shared("golden/edgecases_seed7.json");
  for (size_t i = 0; i < ferry_coco_num_images(coco); i += 5) check_resized_masks(coco, i, 57);
  ferry_coco_close(coco);
}

Test(coco, real_file_variants) {
  ferry_coco *coco = open_shared("dali_coco/coco/instances.json");
  cr_expect_eq(ferry_coco_num_images(coco), 61);
  cr_expect_eq(ferry_coco_num_annotations(coco), 91);
  int64_t cat_id;
  cr_assert_eq(ferry_coco_category_at(coco, 0, &cat_id, NULL), FERRY_OK);
  cr_expect_eq(cat_id, 0);
  /* image id 0 has one annotation, a crowd with category 16 */
  size_t index;
  cr_assert_eq(ferry_coco_find_image(coco, 0, &index), FERRY_OK);
  ferry_target_options t;
  ferry_target_options_default(&t);
  int64_t n;
  cr_assert_eq(ferry_coco_target_count(coco, index, &t, &n), FERRY_OK);
  cr_expect_eq(n, 0);
  t.keep_crowd = 1;
  cr_assert_eq(ferry_coco_target_count(coco, index, &t, &n), FERRY_OK);
  cr_expect_eq(n, 1);
  int64_t label;
  ferry_coco_target out = {.labels = &label};
  cr_assert_eq(ferry_coco_target_write(coco, index, &t, &out), FERRY_OK);
  cr_expect_eq(label, 16);
  /* annotations with ids 8, 69, 79 (positions 7, 68, 78) are 2-point polygons: empty masks */
  const size_t two_point[3] = {7, 68, 78};
  for (int i = 0; i < 3; i++) {
    ferry_rle rle = {0};
    cr_assert_eq(ferry_coco_annotation_rle(coco, two_point[i], &rle), FERRY_OK);
    cr_expect_eq(ferry_rle_area(&rle), 0);
    ferry_rle_free(&rle);
  }
  ferry_coco_close(coco);

  coco = open_shared("dali_coco/coco_pixelwise/instances.json");
  ferry_coco_annotation a;
  cr_assert_eq(ferry_coco_annotation_at(coco, 0, &a), FERRY_OK);
  cr_expect_eq(a.iscrowd, 0, "\"is_crowd\": 0 read");
  ferry_coco_close(coco);

  coco = open_shared("cocoapi_results/instances_val2014_fakesegm100_results.json");
  cr_expect(ferry_coco_is_result_list(coco));
  cr_expect_eq(ferry_coco_num_images(coco), 0);
  cr_expect_eq(ferry_coco_num_annotations(coco), 734);
  cr_assert_eq(ferry_coco_annotation_at(coco, 0, &a), FERRY_OK);
  cr_expect_eq(a.has_id, 0);
  cr_expect_eq(a.segm, FERRY_SEGM_RLE);
  ferry_coco_close(coco);
}

Test(coco, keypoints_fill_k_triplets) {
  ferry_coco *coco = open_shared("mmpose_coco/test_coco.json");
  cr_assert_eq(ferry_coco_num_keypoints(coco), 17);
  size_t index;
  cr_assert_eq(ferry_coco_find_image(coco, 785, &index), FERRY_OK);
  ferry_target_options t;
  ferry_target_options_default(&t);
  int64_t n;
  cr_assert_eq(ferry_coco_target_count(coco, index, &t, &n), FERRY_OK);
  cr_assert_geq(n, 1);
  float *kp = malloc((size_t)n * 17 * 3 * sizeof(float));
  ferry_coco_target out = {.keypoints = kp};
  cr_assert_eq(ferry_coco_target_write(coco, index, &t, &out), FERRY_OK);
  /* test_coco.json: the first annotation of image 785 starts [367, 81, 2, 374, 73, 2] */
  const float want[6] = {367, 81, 2, 374, 73, 2};
  for (int i = 0; i < 6; i++) cr_expect_eq(kp[i], want[i]);
  free(kp);
  ferry_coco_close(coco);

  const char *json =
      "{\"images\": [{\"id\": 1, \"width\": 4, \"height\": 4}],"
      " \"categories\": [{\"id\": 1, \"keypoints\": [\"a\", \"b\"]}],"
      " \"annotations\": [{\"id\": 1, \"image_id\": 1, \"category_id\": 1, \"bbox\": [0, 0, 2, 2], \"keypoints\": [1, 2, 2]},"
      "                   {\"id\": 2, \"image_id\": 1, \"category_id\": 1, \"bbox\": [0, 0, 2, 2]}]}";
  coco = open_text(json, NULL);
  float got[12];
  memset(got, 0xff, sizeof got);
  ferry_coco_target small = {.keypoints = got};
  cr_assert_eq(ferry_coco_target_write(coco, 0, &t, &small), FERRY_OK);
  const float want2[12] = {1, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 12; i++) cr_expect_eq(got[i], want2[i], "keypoint value %d", i);
  ferry_coco_close(coco);
}

/* ---- errors ------------------------------------------------------------------------- */

Test(coco, errors_name_file_and_json_path) {
  const char *json = "{\"images\": [{\"id\": 1}], \"annotations\": [{\"id\": 1, \"image_id\": 1,"
                     " \"category_id\": 1, \"bbox\": [0, 0, null, 1]}]}";
  ferry_coco *coco = (ferry_coco *)1;
  cr_expect_eq(ferry_coco_open_buffer(json, strlen(json), "named.json", NULL, &coco), FERRY_EFORMAT);
  cr_expect_null(coco);
  cr_expect_str_eq(ferry_last_error(), "named.json: annotations[0].bbox[2]: expected a number, got null");
  cr_expect_eq(ferry_coco_open("/nonexistent/ferry/x.json", NULL, &coco), FERRY_EIO);
  cr_expect(strstr(ferry_last_error(), "/nonexistent/ferry/x.json: cannot open") != NULL, "%s", ferry_last_error());
}

Test(coco, open_buffer_needs_no_nul_terminator) {
  const char text[] = "{\"images\": []}garbage";
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open_buffer(text, 14, "cut.json", NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(ferry_coco_num_images(coco), 0);
  ferry_coco_close(coco);
}

/* ---- concurrency -------------------------------------------------------------------- */

typedef struct worker {
  const ferry_coco *coco;
  size_t first, step;
  uint8_t **masks;  /* per image, filled by this worker */
  int failed;
} worker;

static void *fill_targets(void *arg) {
  worker *w = arg;
  ferry_target_options t;
  ferry_target_options_default(&t);
  t.keep_crowd = 1;
  t.mask_height = t.mask_width = 32;
  for (size_t i = w->first; i < ferry_coco_num_images(w->coco); i += w->step) {
    int64_t n;
    if (ferry_coco_target_count(w->coco, i, &t, &n) < 0) { w->failed = 1; continue; }
    w->masks[i] = calloc((size_t)n * 32 * 32 + 1, 1);
    ferry_coco_target out = {.masks = w->masks[i]};
    if (ferry_coco_target_write(w->coco, i, &t, &out) < 0) w->failed = 1;
  }
  return NULL;
}

Test(coco_concurrency, targets_from_many_threads_equal_one_thread, .timeout = 120) {
  ferry_coco *coco = open_shared("golden/edgecases_seed7.json");
  size_t n = ferry_coco_num_images(coco);
  uint8_t **serial = calloc(n, sizeof *serial), **parallel = calloc(n, sizeof *parallel);
  worker one = {.coco = coco, .first = 0, .step = 1, .masks = serial};
  fill_targets(&one);
  cr_assert(!one.failed, "%s", ferry_last_error());
  enum { THREADS = 4 };
  pthread_t th[THREADS];
  worker ws[THREADS];
  for (size_t k = 0; k < THREADS; k++) {
    ws[k] = (worker){.coco = coco, .first = k, .step = THREADS, .masks = parallel};
    pthread_create(&th[k], NULL, fill_targets, &ws[k]);
  }
  for (size_t k = 0; k < THREADS; k++) {
    pthread_join(th[k], NULL);
    cr_expect(!ws[k].failed);
  }
  ferry_target_options t;
  ferry_target_options_default(&t);
  t.keep_crowd = 1;
  for (size_t i = 0; i < n; i++) {
    int64_t count;
    ferry_coco_target_count(coco, i, &t, &count);
    cr_expect_eq(memcmp(serial[i], parallel[i], (size_t)count * 32 * 32), 0, "image %zu differs", i);
    free(serial[i]);
    free(parallel[i]);
  }
  free(serial);
  free(parallel);
  ferry_coco_close(coco);
}

/* "annotations" may be an array or absent (an image-info file); null is rejected, as
 * pycocotools rejects it (tests/coco/malformed/annotations_null.json). */
Test(coco, annotations_absent_or_empty_are_valid) {
  const char *absent = "{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 4, \"height\": 4}]}";
  const char *empty = "{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 4, \"height\": 4}],"
                      " \"annotations\": []}";
  const char *texts[] = {absent, empty};
  for (int i = 0; i < 2; i++) {
    ferry_coco *coco = open_text(texts[i], NULL);
    cr_assert_eq(ferry_coco_num_images(coco), 1);
    cr_assert_eq(ferry_coco_num_annotations(coco), 0);
    ferry_coco_close(coco);
  }
}
