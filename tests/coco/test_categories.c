/* tests/coco/test_categories.c - RF-DETR's category rule (coco/categories.c), labels
 * taken from another split, and targets in a reduced decode's frame (coco/target.h).
 *
 * The cases restate RF-DETR 1.11's filter_parent_categories documentation and #609 (a
 * Roboflow export's unannotated root), plus the edges the rule states: a category that
 * is its own supercategory, a parent between classes, unsorted ids, a rule that would
 * drop everything, a supercategory that is not a string. python/tests checks the same
 * rule against RF-DETR's own code on a real export (test_rfdetr_train.py).
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "coco/target.h"
#include "ferry/coco.h"

static ferry_coco *open_with(const char *json, const char *name, int policy, const ferry_coco *from) {
  ferry_coco_options o;
  ferry_coco_options_default(&o);
  o.remap_categories = policy;
  o.labels_from = from;
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open_buffer(json, strlen(json), name, &o, &coco), FERRY_OK, "%s", ferry_last_error());
  return coco;
}

/* Each category's label, in categories order. */
static void expect_labels(const ferry_coco *coco, const int64_t *want, size_t n) {
  cr_assert_eq(ferry_coco_num_categories(coco), n);
  for (size_t i = 0; i < n; i++) {
    int64_t label;
    cr_assert_eq(ferry_coco_category_label(coco, i, &label), FERRY_OK);
    cr_expect_eq(label, want[i], "category %zu: label %lld, want %lld", i, (long long)label, (long long)want[i]);
  }
}

/* One image; an annotation for each category id listed. */
static const char *with_annotations(char *buf, size_t size, const char *categories, const int *ids, size_t n) {
  int k = snprintf(buf, size, "{\"images\": [{\"id\": 1, \"width\": 100, \"height\": 80}], \"categories\": %s, "
                   "\"annotations\": [", categories);
  for (size_t i = 0; i < n; i++)
    k += snprintf(buf + k, size - (size_t)k, "%s{\"id\": %zu, \"image_id\": 1, \"category_id\": %d, "
                  "\"bbox\": [1, 2, 30, 40], \"area\": 100}", i ? ", " : "", i, ids[i]);
  snprintf(buf + k, size - (size_t)k, "]}");
  return buf;
}

#define ROBOFLOW_CATEGORIES                                                                    \
  "[{\"id\": 0, \"name\": \"eggmasses\", \"supercategory\": \"none\"},"                       \
  " {\"id\": 1, \"name\": \"stake\", \"supercategory\": \"eggmasses\"},"                      \
  " {\"id\": 2, \"name\": \"tree\", \"supercategory\": \"eggmasses\"}]"

Test(categories, an_exports_unannotated_root_takes_no_label) {
  char json[2048];
  const int used[] = {2, 1, 2};
  ferry_coco *coco = open_with(with_annotations(json, sizeof json, ROBOFLOW_CATEGORIES, used, 3), "rf.json",
                               FERRY_CATEGORIES_RFDETR, NULL);
  expect_labels(coco, (const int64_t[]){-1, 0, 1}, 3);
  ferry_coco_annotation a;
  cr_assert_eq(ferry_coco_annotation_at(coco, 0, &a), FERRY_OK);
  cr_expect_eq(a.category_id, 2);
  ferry_target_options t;
  ferry_target_options_default(&t);
  int64_t labels[3];
  ferry_coco_target target = {.labels = labels};
  cr_assert_eq(ferry_coco_target_write(coco, 0, &t, &target), FERRY_OK, "%s", ferry_last_error());
  cr_expect(labels[0] == 1 && labels[1] == 0 && labels[2] == 1, "labels %lld %lld %lld", (long long)labels[0],
            (long long)labels[1], (long long)labels[2]);
  ferry_coco_close(coco);
  /* the raw ids and the positions are what the other policies give the same file */
  coco = open_with(json, "rf.json", FERRY_CATEGORIES_RAW, NULL);
  expect_labels(coco, (const int64_t[]){0, 1, 2}, 3);
  ferry_coco_close(coco);
  coco = open_with(json, "rf.json", FERRY_CATEGORIES_REMAP, NULL);
  expect_labels(coco, (const int64_t[]){0, 1, 2}, 3);
  ferry_coco_close(coco);
}

Test(categories, an_annotated_parent_keeps_its_label) {
  char json[2048];
  const int used[] = {0, 1, 2};
  ferry_coco *coco = open_with(with_annotations(json, sizeof json, ROBOFLOW_CATEGORIES, used, 3), "rf.json",
                               FERRY_CATEGORIES_RFDETR, NULL);
  expect_labels(coco, (const int64_t[]){0, 1, 2}, 3);
  ferry_coco_close(coco);
}

Test(categories, its_own_supercategory_is_no_parent_but_one_between_classes_is) {
  /* RF-DETR's example: person is its own supercategory (kept), vehicle groups car and
   * is unannotated (dropped), car follows it */
  const char *cats = "[{\"id\": 1, \"name\": \"person\", \"supercategory\": \"person\"},"
                     " {\"id\": 2, \"name\": \"vehicle\", \"supercategory\": \"none\"},"
                     " {\"id\": 3, \"name\": \"car\", \"supercategory\": \"vehicle\"}]";
  char json[2048];
  const int used[] = {3};
  ferry_coco *coco = open_with(with_annotations(json, sizeof json, cats, used, 1), "self.json",
                               FERRY_CATEGORIES_RFDETR, NULL);
  expect_labels(coco, (const int64_t[]){0, -1, 1}, 3);
  ferry_coco_close(coco);
}

Test(categories, labels_follow_ids_not_file_order) {
  const char *cats = "[{\"id\": 9, \"name\": \"c\"}, {\"id\": 2, \"name\": \"a\", \"supercategory\": \"null\"},"
                     " {\"id\": 5, \"name\": \"b\", \"supercategory\": null}]";
  char json[2048];
  const int used[] = {9};
  ferry_coco *coco = open_with(with_annotations(json, sizeof json, cats, used, 1), "flat.json",
                               FERRY_CATEGORIES_RFDETR, NULL);
  expect_labels(coco, (const int64_t[]){2, 0, 1}, 3);
  ferry_coco_close(coco);
  /* FERRY_CATEGORIES_REMAP, by contrast, is the file order */
  coco = open_with(json, "flat.json", FERRY_CATEGORIES_REMAP, NULL);
  expect_labels(coco, (const int64_t[]){0, 1, 2}, 3);
  ferry_coco_close(coco);
}

Test(categories, a_rule_that_would_drop_every_category_drops_none) {
  const char *cats = "[{\"id\": 1, \"name\": \"a\", \"supercategory\": \"b\"},"
                     " {\"id\": 2, \"name\": \"b\", \"supercategory\": \"a\"}]";
  char json[1024];
  ferry_coco *coco = open_with(with_annotations(json, sizeof json, cats, NULL, 0), "loop.json",
                               FERRY_CATEGORIES_RFDETR, NULL);
  expect_labels(coco, (const int64_t[]){0, 1}, 2);
  ferry_coco_close(coco);
}

Test(categories, a_supercategory_that_is_not_a_string_names_no_parent) {
  const char *cats = "[{\"id\": 1, \"name\": \"7\"}, {\"id\": 2, \"name\": \"x\", \"supercategory\": 7}]";
  char json[1024];
  const int used[] = {2};
  ferry_coco *coco = open_with(with_annotations(json, sizeof json, cats, used, 1), "odd.json",
                               FERRY_CATEGORIES_RFDETR, NULL);
  expect_labels(coco, (const int64_t[]){0, 1}, 2);
  ferry_coco_close(coco);
}

/* ---- labels from another split (RF-DETR's _train_split_cat2label) ------------------- */

Test(categories, the_other_splits_take_the_train_splits_labels) {
  char train_json[2048], valid_json[2048];
  const int train_used[] = {1, 2}, valid_used[] = {2};
  ferry_coco *train = open_with(with_annotations(train_json, sizeof train_json, ROBOFLOW_CATEGORIES, train_used, 2),
                                "train.json", FERRY_CATEGORIES_RFDETR, NULL);
  /* valid alone would label tree 1 too, but a valid split whose parent is annotated
   * would shift: its labels are taken from train whatever it holds */
  const char *valid_cats = "[{\"id\": 0, \"name\": \"eggmasses\", \"supercategory\": \"none\"},"
                           " {\"id\": 2, \"name\": \"tree\", \"supercategory\": \"eggmasses\"},"
                           " {\"id\": 4, \"name\": \"unused\"}]";
  ferry_coco *valid = open_with(with_annotations(valid_json, sizeof valid_json, valid_cats, valid_used, 1),
                                "valid.json", FERRY_CATEGORIES_RFDETR, train);
  expect_labels(valid, (const int64_t[]){-1, 1, -1}, 3);
  ferry_coco_close(valid);
  ferry_coco_close(train);
}

Test(categories, an_annotation_without_a_label_in_the_train_split_fails_the_open) {
  char train_json[2048], valid_json[2048];
  const int train_used[] = {1, 2}, valid_used[] = {1, 0};
  ferry_coco *train = open_with(with_annotations(train_json, sizeof train_json, ROBOFLOW_CATEGORIES, train_used, 2),
                                "train.json", FERRY_CATEGORIES_RFDETR, NULL);
  ferry_coco_options o;
  ferry_coco_options_default(&o);
  o.remap_categories = FERRY_CATEGORIES_RFDETR;
  o.labels_from = train;
  with_annotations(valid_json, sizeof valid_json, ROBOFLOW_CATEGORIES, valid_used, 2);
  ferry_coco *valid = NULL;
  cr_assert_eq(ferry_coco_open_buffer(valid_json, strlen(valid_json), "valid.json", &o, &valid), FERRY_EFORMAT);
  cr_expect_null(valid);
  const char *msg = ferry_last_error();
  cr_expect(strstr(msg, "valid.json") && strstr(msg, "annotations[1].category_id") && strstr(msg, "category 0") &&
            strstr(msg, "train.json"), "%s", msg);
  /* labels_from must itself carry RF-DETR's labels */
  ferry_coco *raw = open_with(train_json, "raw.json", FERRY_CATEGORIES_RAW, NULL);
  o.labels_from = raw;
  cr_expect_eq(ferry_coco_open_buffer(valid_json, strlen(valid_json), "valid.json", &o, &valid), FERRY_EINVAL);
  cr_expect(strstr(ferry_last_error(), "FERRY_CATEGORIES_RFDETR"), "%s", ferry_last_error());
  ferry_coco_close(raw);
  ferry_coco_close(train);
}

/* ---- the options' size -------------------------------------------------------------- */

Test(categories, the_old_default_leaves_labels_from_unwritten) {
  /* what a program built before labels_from calls: its struct ends there */
  unsigned char bytes[sizeof(ferry_coco_options)];
  memset(bytes, 0xAB, sizeof bytes);
  (ferry_coco_options_default)((ferry_coco_options *)bytes);
  size_t end = offsetof(ferry_coco_options, labels_from);
  for (size_t i = 0; i < sizeof bytes; i++)
    cr_assert_eq(bytes[i], i < end ? 0 : 0xAB, "byte %zu", i);
  ferry_coco_options o;
  memset(&o, 0xAB, sizeof o);
  ferry_coco_options_default(&o); /* the macro: this header's whole struct */
  cr_expect(o.labels_from == NULL && o.remap_categories == 0 && o.on_problem == NULL);
}

/* ---- targets in a reduced decode's frame (coco/target.h) ------------------------- */

static const char *frame_json =
    "{\"images\": [{\"id\": 1, \"width\": 1001, \"height\": 600}],"
    " \"categories\": [{\"id\": 1, \"name\": \"a\"}],"
    " \"annotations\": [{\"id\": 1, \"image_id\": 1, \"category_id\": 1, \"bbox\": [10.3, 20.7, 300.1, 100.9], \"area\": 777.7},"
    "   {\"id\": 2, \"image_id\": 1, \"category_id\": 1, \"bbox\": [900.5, 500, 200, 200], \"area\": 12345},"
    "   {\"id\": 3, \"image_id\": 1, \"category_id\": 1, \"bbox\": [5, 5, 0.2, 10], \"area\": 2}]}";

Test(categories, targets_at_a_reduced_size_scale_per_axis_then_round) {
  ferry_coco *coco = open_with(frame_json, "frame.json", FERRY_CATEGORIES_RAW, NULL);
  ferry_target_options t;
  ferry_target_options_default(&t);
  /* 1/4 of 1001 x 600: ceil gives 251 x 150, so the two axes scale differently */
  const int64_t w = 251, h = 150;
  const double sx = 251.0 / 1001.0, sy = 150.0 / 600.0;
  int64_t n;
  cr_assert_eq(ferry__coco_target_count_at(coco, 0, &t, w, h, &n), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(n, 3);
  float boxes[12], area[3];
  ferry_coco_target out = {.boxes = boxes, .area = area};
  cr_assert_eq(ferry__coco_target_write_at(coco, 0, &t, w, h, &out), FERRY_OK, "%s", ferry_last_error());
  /* as RF-DETR: x * sx in double, then float32; x2 = x + w in float32; clamped */
  float x = (float)(10.3 * sx), y = (float)(20.7 * sy);
  cr_expect_eq(boxes[0], x);
  cr_expect_eq(boxes[1], y);
  cr_expect_eq(boxes[2], x + (float)(300.1 * sx));
  cr_expect_eq(boxes[3], y + (float)(100.9 * sy));
  cr_expect_eq(area[0], (float)(777.7 * sx * sy));
  cr_expect_eq(boxes[6], 251.0f, "clamped to the reduced width");
  cr_expect_eq(boxes[7], 150.0f, "clamped to the reduced height");
  cr_expect_eq(boxes[8], (float)(5 * sx));
  /* the annotated frame is the public call's, value for value */
  float full[12], full_area[3];
  ferry_coco_target whole = {.boxes = full, .area = full_area};
  cr_assert_eq(ferry__coco_target_write_at(coco, 0, &t, 1001, 600, &whole), FERRY_OK);
  float pub[12], pub_area[3];
  ferry_coco_target same = {.boxes = pub, .area = pub_area};
  cr_assert_eq(ferry_coco_target_write(coco, 0, &t, &same), FERRY_OK);
  cr_expect(memcmp(full, pub, sizeof full) == 0, "boxes in the annotated frame differ from the public call's");
  cr_expect(memcmp(full_area, pub_area, sizeof full_area) == 0, "areas differ from the public call's");
  ferry_coco_close(coco);
}

Test(categories, a_reduced_frame_refuses_masks_and_enlargements) {
  ferry_coco *coco = open_with(frame_json, "frame.json", FERRY_CATEGORIES_RAW, NULL);
  ferry_target_options t;
  ferry_target_options_default(&t);
  t.mask_height = t.mask_width = 8;
  uint8_t masks[3 * 64];
  ferry_coco_target out = {.masks = masks};
  cr_expect_eq(ferry__coco_target_write_at(coco, 0, &t, 501, 300, &out), FERRY_EINVAL);
  cr_expect(strstr(ferry_last_error(), "masks"), "%s", ferry_last_error());
  int64_t n;
  cr_expect_eq(ferry__coco_target_count_at(coco, 0, &t, 2002, 1200, &n), FERRY_EINVAL);
  cr_expect(strstr(ferry_last_error(), "not a reduction"), "%s", ferry_last_error());
  ferry_coco_close(coco);
}
