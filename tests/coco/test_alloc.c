/* tests/coco/test_alloc.c - every allocation failure in coco/ is FERRY_ENOMEM: no crash,
 * no leak (run under ASan), no half-built object. Needs -Dalloc_failure_injection=true;
 * skipped otherwise. */
#include <criterion/criterion.h>
#include <string.h>

#include "ferry/coco.h"
#include "lib/alloc.h"

static const char *json =
    "{\"categories\": [{\"id\": 1, \"keypoints\": [\"a\"]}, {\"id\": 2}],"
    " \"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"width\": 30, \"height\": 20}],"
    " \"annotations\": ["
    "  {\"id\": 1, \"image_id\": 1, \"category_id\": 1, \"bbox\": [1, 1, 9, 9], \"keypoints\": [1, 2, 2],"
    "   \"segmentation\": [[1, 1, 9, 1, 9, 9], [2, 2, 5, 2, 5, 5, 2, 5]]},"
    "  {\"id\": 2, \"image_id\": 1, \"category_id\": 2, \"bbox\": [0, 0, 5, 10], \"iscrowd\": 1,"
    "   \"segmentation\": {\"size\": [20, 30], \"counts\": [5, 10, 585]}},"
    "  {\"id\": 3, \"image_id\": 1, \"category_id\": 2, \"bbox\": [0, 0, 5, 10],"
    "   \"segmentation\": {\"size\": [20, 30], \"counts\": \"5:Yb0\"}}]}";

/* Run `attempt` with the n-th allocation failing, n = 0, 1, ... until it succeeds. */
static void each_failure(ferry_status (*attempt)(void *), void *arg) {
  if (!ferry__alloc_injection_available()) cr_skip_test("built without -Dalloc_failure_injection=true");
  for (long n = 0;; n++) {
    ferry__alloc_fail_after(n);
    ferry_status st = attempt(arg);
    ferry__alloc_fail_after(-1);
    if (st == FERRY_OK) break;
    cr_assert_eq(st, FERRY_ENOMEM, "failure %ld gave %d: %s", n, st, ferry_last_error());
    cr_assert_lt(n, 10000);
  }
}

static ferry_status open_and_close(void *arg) {
  ferry_coco *coco = NULL;
  ferry_status st = ferry_coco_open_buffer(json, strlen(json), "alloc.json", NULL, &coco);
  if (st < 0) cr_assert_null(coco);
  ferry_coco_close(coco);
  return st;
}

static ferry_status write_target(void *arg) {
  const ferry_coco *coco = arg;
  ferry_target_options t;
  ferry_target_options_default(&t);
  t.keep_crowd = 1;
  t.mask_height = t.mask_width = 16;
  uint8_t masks[3 * 16 * 16];
  float boxes[12], kp[9];
  ferry_coco_target out = {.masks = masks, .boxes = boxes, .keypoints = kp};
  return ferry_coco_target_write(coco, 0, &t, &out);
}

static ferry_status rle_round_trip(void *arg) {
  (void)arg;
  const double poly[6] = {1, 1, 9, 1, 9, 9};
  ferry_rle a = {0}, b = {0}, m = {0};
  char *s = NULL;
  ferry_status st = ferry_rle_from_polygon(poly, 3, 12, 12, &a);
  if (st == FERRY_OK) st = ferry_rle_to_string(&a, &s);
  if (st == FERRY_OK) st = ferry_rle_from_string(s, strlen(s), 12, 12, &b);
  if (st == FERRY_OK) {
    ferry_rle both[2] = {a, b};
    st = ferry_rle_merge(both, 2, 1, &m);
  }
  ferry_rle_free_string(s);
  ferry_rle_free(&a);
  ferry_rle_free(&b);
  ferry_rle_free(&m);
  return st;
}

Test(coco_alloc, open_survives_every_allocation_failure) { each_failure(open_and_close, NULL); }

Test(coco_alloc, targets_survive_every_allocation_failure) {
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open_buffer(json, strlen(json), "alloc.json", NULL, &coco), FERRY_OK, "%s",
               ferry_last_error());
  each_failure(write_target, coco);
  ferry_coco_close(coco);
}

Test(coco_alloc, masks_survive_every_allocation_failure) { each_failure(rle_round_trip, NULL); }
