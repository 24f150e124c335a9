/* tests/loaders/test_instance_cap.c - config.max_instances (issue 25, item 11): what
 * one image may ask of an arena.
 *
 * A three-image set over the build's synthetic JPEGs (FERRY_LOADER_DATA), its
 * annotations rewritten here: image 0 has more instances than the cap, image 1
 * exactly the cap, image 2 one. Image 0 must fail as a sample whose message names it,
 * its count and the cap, under the fail policy; under the skip policy the epoch
 * holds images 1 and 2 only, and the pinned pool never held image 0's rows (its masks
 * alone would be larger than every arena the pool had); with a recipe as without. The
 * default cap (10,000) and the refusal of 0 are checked too.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry/ferry.h"
#include "ferry/loader.h"
#include "tests/loaders/loader_fixture.h"

#define MASK_SIDE 64

static char scratch[4096], first_file[512];

static void remove_scratch(void) {
  char path[8192];
  snprintf(path, sizeof path, "%s/annotations.json", scratch);
  unlink(path);
  rmdir(scratch);
}

/* One bbox-only instance (the synthetic images are at least 16 pixels a side). */
static json_t *instance(json_int_t id, json_int_t image_id) {
  return json_pack("{s:I, s:I, s:i, s:[i,i,i,i], s:f, s:i, s:[[i,i,i,i,i,i,i,i]]}", "id", id, "image_id",
                   image_id, "category_id", 1, "bbox", 1, 1, 6, 6, "area", 36.0, "iscrowd", 0, "segmentation",
                   1, 1, 7, 1, 7, 7, 1, 7);
}

/* The first three images of the build's synthetic set, with `counts[i]` instances
 * each, written to a scratch annotations file; returns its path. */
static const char *write_annotations(const ferry_loader_config *data, const size_t counts[3]) {
  json_error_t err;
  json_t *root = json_load_file(data->annotations, 0, &err);
  cr_assert_not_null(root, "%s: %s", data->annotations, err.text);
  json_t *images = json_array(), *anns = json_array();
  json_int_t next_id = 1;
  for (size_t i = 0; i < 3; i++) {
    json_t *img = json_array_get(json_object_get(root, "images"), i);
    cr_assert_not_null(img);
    json_array_append(images, img);
    json_int_t image_id = json_integer_value(json_object_get(img, "id"));
    for (size_t k = 0; k < counts[i]; k++) json_array_append_new(anns, instance(next_id++, image_id));
    if (i == 0) snprintf(first_file, sizeof first_file, "%s", json_string_value(json_object_get(img, "file_name")));
  }
  json_t *out = json_pack("{s:o, s:o, s:O}", "images", images, "annotations", anns, "categories",
                          json_object_get(root, "categories"));
  if (!scratch[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%.3000s/ferry-cap-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    cr_assert_not_null(mkdtemp(scratch), "mkdtemp: %s", strerror(errno));
    atexit(remove_scratch);
  }
  static char path[8192];
  snprintf(path, sizeof path, "%s/annotations.json", scratch);
  cr_assert_eq(json_dump_file(out, path, JSON_COMPACT), 0, "cannot write %s", path);
  json_decref(out);
  json_decref(root);
  return path;
}

/* A config over the three images, in order, one batch of all three. */
static void cap_config(ferry_loader_config *c, const size_t counts[3]) {
  test_config(c);
  c->annotations = write_annotations(c, counts);
  c->shuffle = 0;
  c->batch_size = 3;
  c->rank = 0;
  c->world_size = 1;
}

/* One epoch: the images it delivered (their dataset indexes, in order) and the
 * status that ended it. */
static ferry_status run_epoch(ferry_loader *l, int64_t *indexes, size_t *count, size_t *boxes) {
  *count = *boxes = 0;
  for (;;) {
    ferry_batch *b = NULL;
    ferry_status st = ferry_loader_next(l, &b);
    if (st != FERRY_OK) return st;
    int index_field = ferry_batch_find_field(b, FERRY_FIELD_SAMPLE_INDEX);
    int box_field = ferry_batch_find_field(b, FERRY_FIELD_BOXES);
    for (size_t i = 0; i < ferry_batch_size(b); i++) {
      ferry_tensor view;
      cr_assert_eq(ferry_batch_sample(b, (size_t)index_field, i, &view), FERRY_OK);
      cr_assert_lt(*count, 3);
      indexes[(*count)++] = *(const int64_t *)view.data;
      cr_assert_eq(ferry_batch_sample(b, (size_t)box_field, i, &view), FERRY_OK);
      *boxes += (size_t)view.shape[0];
    }
    ferry_batch_release(b);
  }
}

Test(instance_cap, default_cap_fails_the_image_naming_it, .timeout = 120) {
  const size_t counts[3] = {FERRY_LOADER_MAX_INSTANCES_DEFAULT + 1, 2, 1};
  ferry_loader_config c;
  cap_config(&c, counts);
  cr_assert_eq(c.max_instances, (size_t)10000, "the default cap is %zu", c.max_instances);
  c.fields = FERRY_LOADER_FIELD_BOXES | FERRY_LOADER_FIELD_LABELS; /* small even uncapped */
  ferry_loader *l = open_loader(&c);
  int64_t indexes[3];
  size_t count, boxes;
  ferry_status st = run_epoch(l, indexes, &count, &boxes);
  cr_assert_eq(st, FERRY_ELIMIT, "the epoch ended with %s after %zu samples: %s", ferry_strerror(st), count,
               ferry_last_error());
  const char *msg = ferry_last_error();
  cr_assert(strstr(msg, first_file) && strstr(msg, "dataset index 0") && strstr(msg, "10001 instances") &&
                strstr(msg, "max_instances = 10000"),
            "the message does not name the image (%s), its count and the cap: %s", first_file, msg);
  cr_assert_eq(count, 0, "a batch was delivered before the failure");
  ferry_loader_close(l);
}

/* The skip policy, with and without a recipe: images 1 and 2 only, with their
 * instances, and no arena ever large enough for image 0's masks. */
static void skip_case(ferry_augment recipe) {
  enum { CAP = 8, OVER = 200 };
  const size_t counts[3] = {OVER, CAP, 1};
  ferry_loader_config c;
  cap_config(&c, counts);
  c.max_instances = CAP;
  c.on_error = FERRY_ON_ERROR_SKIP;
  c.resolution = MASK_SIDE;
  c.augment.recipe = recipe;
  c.fields = FERRY_LOADER_FIELD_BOXES | FERRY_LOADER_FIELD_MASKS | FERRY_LOADER_FIELD_NO_IMAGES;
  ferry_loader *l = open_loader(&c);
  for (int epoch = 0; epoch < 2; epoch++) {
    int64_t indexes[3];
    size_t count, boxes;
    ferry_status st = run_epoch(l, indexes, &count, &boxes);
    cr_assert_eq(st, FERRY_EEND, "recipe %d epoch %d: %s", recipe, epoch, ferry_last_error());
    cr_assert_eq(count, 2, "recipe %d epoch %d: %zu samples", recipe, epoch, count);
    cr_assert(indexes[0] == 1 && indexes[1] == 2, "recipe %d: samples %lld, %lld", recipe, (long long)indexes[0],
              (long long)indexes[1]);
    if (recipe == FERRY_AUGMENT_NONE) cr_assert_eq(boxes, CAP + 1, "%zu boxes", boxes);
  }
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  cr_assert_eq(ferry_loader_stats_get(l, &stats), FERRY_OK);
  /* counted since open: the workers may have met image 0 of epoch 2 already */
  cr_assert(stats.samples_skipped == 2 || stats.samples_skipped == 3, "%llu skipped",
            (unsigned long long)stats.samples_skipped);
  /* Every arena the pool had, together, is smaller than image 0's masks alone. */
  uint64_t refused = (uint64_t)OVER * MASK_SIDE * MASK_SIDE;
  cr_assert_lt(stats.pool.peak_reserved_bytes, refused, "recipe %d: the pool reserved %llu bytes, image 0's "
               "masks are %llu", recipe, (unsigned long long)stats.pool.peak_reserved_bytes,
               (unsigned long long)refused);
  ferry_loader_close(l);
}

Test(instance_cap, skip_policy_drops_the_image_before_its_rows, .timeout = 120) {
  skip_case(FERRY_AUGMENT_NONE);
}

Test(instance_cap, skip_policy_with_a_recipe, .timeout = 120) {
  skip_case(FERRY_AUGMENT_VAL);
}

Test(instance_cap, zero_is_refused_naming_the_option, .timeout = 60) {
  const size_t counts[3] = {1, 1, 1};
  ferry_loader_config c;
  cap_config(&c, counts);
  c.max_instances = 0;
  ferry_loader *l = NULL;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  cr_assert_null(l);
  cr_assert(strstr(ferry_last_error(), "max_instances"), "%s", ferry_last_error());
}
