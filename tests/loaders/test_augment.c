/* tests/loaders/test_augment.c - the loader with a recipe (issue 24): every sample's
 * record, size, image, masks and instance counts agree; batch k is the same bytes for
 * any worker count and after a resume; options out of range are refused naming them;
 * the combinations a recipe cannot take are refused; the pixel limit is applied
 * before allocation; no pixel is decoded without the images field. The pixels and
 * targets against Pillow and torch are python/tests/test_augment.py's. */
#include "ferry/advanced.h"
#include "loader_fixture.h"

enum { MAXB = 32 };

/* RF-DETR's recipe at a small scale, so that even TSan decodes quickly: scales 32..128
 * (resolution 64, patch 16, one window), branch B's sides 100/120/140, crops 64..100. */
static void recipe_config(ferry_loader_config *c, ferry_augment recipe, ferry_multi_scale ms) {
  test_config(c);
  c->augment.recipe = recipe;
  c->augment.multi_scale = ms;
  c->resolution = 64;
  c->augment.patch_size = 16;
  c->augment.num_windows = 1;
  c->augment.resize_b[0] = 100, c->augment.resize_b[1] = 120, c->augment.resize_b[2] = 140;
  c->augment.crop_min = 64, c->augment.crop_max = 100;
  c->augment.max_size = 160;
  c->fields = FERRY_LOADER_FIELDS_DEFAULT | FERRY_LOADER_FIELD_AUGMENT;
}

static const int32_t *record_of(ferry_batch *b, size_t i) {
  ferry_tensor v;
  cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_AUGMENT), i, &v), FERRY_OK);
  cr_assert_eq(v.ndim, 1);
  cr_assert_eq(v.shape[0], FERRY_AUGMENT_RECORD_LEN);
  return v.data;
}

static int64_t rows_of(ferry_batch *b, const char *field, size_t i) {
  const int64_t *o = ferry_batch_offsets(b, (size_t)ferry_batch_find_field(b, field));
  return o[i + 1] - o[i];
}

/* Each sample: the record's output size is the image's, the masks', the size field's
 * and the batch's; every per-instance field has the same rows; the record's choices
 * are in range. */
static void check_batch(ferry_batch *b, const ferry_loader_config *c, int *branches, int *flips) {
  for (size_t i = 0; i < ferry_batch_size(b); i++) {
    const int32_t *r = record_of(b, i);
    int64_t h = r[FERRY_AUGMENT_OUT_H], w = r[FERRY_AUGMENT_OUT_W], bh, bw;
    cr_assert_eq(ferry_batch_sample_size(b, i, &bh, &bw), FERRY_OK);
    cr_assert(bh == h && bw == w, "sample %zu: record %lldx%lld, batch %lldx%lld", i, (long long)h, (long long)w,
              (long long)bh, (long long)bw);
    ferry_tensor img, masks, size;
    cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_IMAGES), i, &img), FERRY_OK);
    cr_assert(img.ndim == 3 && img.shape[0] == 3 && img.shape[1] == h && img.shape[2] == w);
    cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_MASKS), i, &masks), FERRY_OK);
    cr_assert(masks.ndim == 3 && masks.shape[1] == h && masks.shape[2] == w);
    cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_SIZE), i, &size), FERRY_OK);
    cr_assert(((int64_t *)size.data)[0] == h && ((int64_t *)size.data)[1] == w);
    int64_t n = rows_of(b, FERRY_FIELD_BOXES, i);
    cr_assert(rows_of(b, FERRY_FIELD_LABELS, i) == n && rows_of(b, FERRY_FIELD_MASKS, i) == n &&
              rows_of(b, FERRY_FIELD_AREA, i) == n && masks.shape[0] == n);
    cr_assert(r[FERRY_AUGMENT_FLIP] == 0 || r[FERRY_AUGMENT_FLIP] == 1);
    cr_assert(r[FERRY_AUGMENT_BRANCH] == 0 || r[FERRY_AUGMENT_BRANCH] == 1);
    *branches += r[FERRY_AUGMENT_BRANCH];
    *flips += r[FERRY_AUGMENT_FLIP];
    if (r[FERRY_AUGMENT_BRANCH]) {
      int side = r[FERRY_AUGMENT_CROP_H];
      cr_assert_eq(side, r[FERRY_AUGMENT_CROP_W], "RandomSizedCrop is square");
      cr_assert(r[FERRY_AUGMENT_CROP_TOP] + side <= r[FERRY_AUGMENT_RESIZE_H]);
      cr_assert(r[FERRY_AUGMENT_CROP_LEFT] + side <= r[FERRY_AUGMENT_RESIZE_W]);
      cr_assert(side <= c->augment.crop_max);
    }
    /* boxes inside the content, cxcywh normalised or xyxy */
    ferry_tensor boxes;
    cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_BOXES), i, &boxes), FERRY_OK);
    for (int64_t k = 0; k < n; k++) {
      const float *bx = (const float *)boxes.data + 4 * k;
      cr_assert(bx[0] >= 0 && bx[1] >= 0 && bx[2] <= w + 1e-3 && bx[3] <= h + 1e-3 && bx[2] > bx[0] && bx[3] > bx[1],
                "sample %zu box %lld out of its %lldx%lld image", i, (long long)k, (long long)w, (long long)h);
    }
  }
}

static void one_epoch_checked(ferry_augment recipe, ferry_multi_scale ms) {
  ferry_loader_config c;
  recipe_config(&c, recipe, ms);
  ferry_loader *l = open_loader(&c);
  int branches = 0, flips = 0, samples = 0;
  for (;;) {
    ferry_batch *b;
    ferry_status st = ferry_loader_next(l, &b);
    if (st == FERRY_EEND) break;
    cr_assert_eq(st, FERRY_OK, "%s", ferry_last_error());
    check_batch(b, &c, &branches, &flips);
    if (ms == FERRY_MULTI_SCALE_PER_BATCH) {
      int64_t h0, w0, h, w;
      ferry_batch_sample_size(b, 0, &h0, &w0);
      for (size_t i = 1; i < ferry_batch_size(b); i++) {
        ferry_batch_sample_size(b, i, &h, &w);
        if (recipe == FERRY_AUGMENT_RFDETR_SQUARE) cr_assert(h == h0 && w == w0, "one scale per batch");
      }
    }
    samples += (int)ferry_batch_size(b);
    ferry_batch_release(b);
  }
  ferry_loader_close(l);
  cr_assert_eq(samples, LOADER_TEST_IMAGES);
  cr_assert(branches > 0 && branches < samples, "both branches taken (%d of %d)", branches, samples);
  cr_assert(flips > 0 && flips < samples, "both flips taken (%d of %d)", flips, samples);
}

Test(augment, rfdetr_square_per_sample_records_agree_with_the_batch, .timeout = 120) {
  one_epoch_checked(FERRY_AUGMENT_RFDETR_SQUARE, FERRY_MULTI_SCALE_PER_SAMPLE);
}

Test(augment, rfdetr_per_batch_records_agree_with_the_batch, .timeout = 120) {
  one_epoch_checked(FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_BATCH);
}

static size_t digests_with(ferry_loader_config *c, size_t workers, uint64_t *out) {
  c->workers = workers;
  ferry_loader *l = open_loader(c);
  size_t n = epoch_digests(l, out, MAXB);
  ferry_loader_close(l);
  return n;
}

/* Batch k is the same bytes whatever the worker count, and epochs draw anew. */
Test(augment, batch_k_is_the_same_for_1_2_and_16_workers, .timeout = 300) {
  ferry_loader_config c;
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  uint64_t ref[MAXB], got[MAXB];
  size_t n = digests_with(&c, 1, ref);
  const size_t workers[] = {2, 16};
  for (size_t w = 0; w < 2; w++) {
    cr_assert_eq(digests_with(&c, workers[w], got), n);
    for (size_t k = 0; k < n; k++) cr_assert_eq(got[k], ref[k], "batch %zu differs with %zu workers", k, workers[w]);
  }
}

/* A resume from state_get mid-epoch continues with the same batches, per-batch scales
 * included (they are drawn from the batch's index in the epoch). */
Test(augment, a_resumed_epoch_is_the_uninterrupted_one, .timeout = 300) {
  ferry_loader_config c;
  recipe_config(&c, FERRY_AUGMENT_RFDETR_SQUARE, FERRY_MULTI_SCALE_PER_BATCH);
  uint64_t ref[MAXB];
  ferry_loader *l = open_loader(&c);
  size_t n = epoch_digests(l, ref, MAXB); /* epoch 0 */
  n = epoch_digests(l, ref, MAXB);        /* epoch 1, the reference */
  ferry_loader_close(l);
  l = open_loader(&c);
  cr_assert_eq(ferry_loader_set_epoch(l, 1), FERRY_OK);
  ferry_batch *b;
  for (int k = 0; k < 4; k++) {
    cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
    ferry_batch_release(b);
  }
  ferry_loader_state saved;
  cr_assert_eq(ferry_loader_state_get(l, &saved), FERRY_OK);
  ferry_loader_close(l);
  l = open_loader(&c);
  cr_assert_eq(ferry_loader_state_set(l, &saved), FERRY_OK);
  for (size_t k = 4; k < n; k++) {
    cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
    cr_assert_eq(batch_digest(b), ref[k], "batch %zu after the resume", k);
    ferry_batch_release(b);
  }
  ferry_loader_close(l);
}

static void expect_refused(ferry_loader_config *c, ferry_status want, const char *names) {
  ferry_loader *l = NULL;
  cr_assert_eq(ferry_loader_open(c, &l), want, "expected a refusal naming %s: %s", names, ferry_last_error());
  cr_assert(strstr(ferry_last_error(), names), "'%s' does not name %s", ferry_last_error(), names);
}

Test(augment, bad_options_are_refused_naming_them) {
  ferry_loader_config c;
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.recipe = (ferry_augment)9;
  expect_refused(&c, FERRY_EINVAL, "recipe 9");
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.patch_size = 0;
  expect_refused(&c, FERRY_EINVAL, "patch_size");
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.num_windows = -1;
  expect_refused(&c, FERRY_EINVAL, "num_windows");
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.crop_min = 700;
  expect_refused(&c, FERRY_EINVAL, "crop bounds");
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.hflip = 1.5f;
  expect_refused(&c, FERRY_EINVAL, "hflip");
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.resize_b[1] = 0;
  expect_refused(&c, FERRY_EINVAL, "resize_b[1]");
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.max_size = 0;
  expect_refused(&c, FERRY_EINVAL, "max_size");
  recipe_config(&c, FERRY_AUGMENT_VAL, FERRY_MULTI_SCALE_PER_SAMPLE);
  expect_refused(&c, FERRY_EINVAL, "needs a training recipe");
  /* no scale left: every multiple of 1000 x 10 is past the largest side (8192) */
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.augment.patch_size = 1000;
  c.augment.num_windows = 10;
  expect_refused(&c, FERRY_EINVAL, "no scale");
  /* what a recipe cannot take, naming both options */
  recipe_config(&c, FERRY_AUGMENT_RFDETR_SQUARE, FERRY_MULTI_SCALE_OFF);
  c.fields |= FERRY_LOADER_FIELD_KEYPOINTS;
  expect_refused(&c, FERRY_EUNSUPPORTED, "keypoints");
  recipe_config(&c, FERRY_AUGMENT_RFDETR_SQUARE, FERRY_MULTI_SCALE_OFF);
  c.image.decode = FERRY_DECODE_GPU;
  expect_refused(&c, FERRY_EUNSUPPORTED, "config.image.decode = GPU");
}

/* compute_multi_scale_scales(312, False, 12, 1) (RF-DETR Seg Nano) is 276, 288, ..., 360. */
Test(augment, the_scales_are_rfdetrs) {
  ferry_augment_options o;
  ferry_augment_options_default(&o);
  o.recipe = FERRY_AUGMENT_RFDETR_SQUARE;
  o.multi_scale = FERRY_MULTI_SCALE_PER_SAMPLE;
  o.patch_size = 12;
  o.num_windows = 1;
  int s[16];
  size_t n;
  cr_assert_eq(ferry_augment_scales(&o, 312, s, 16, &n), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(n, 8);
  for (size_t i = 0; i < n; i++) cr_expect_eq(s[i], 276 + 12 * (int)i);
  o.expanded_scales = 1;
  cr_assert_eq(ferry_augment_scales(&o, 312, s, 16, &n), FERRY_OK);
  cr_assert_eq(n, 11);
  cr_expect_eq(s[0], 252);
  cr_expect_eq(s[10], 372);
  /* RF-DETR's defaults (patch 16, 4 windows) at 640: 448..704 by 64 */
  ferry_augment_options_default(&o);
  o.recipe = FERRY_AUGMENT_RFDETR;
  o.multi_scale = FERRY_MULTI_SCALE_PER_SAMPLE;
  cr_assert_eq(ferry_augment_scales(&o, 640, s, 16, &n), FERRY_OK);
  cr_assert_eq(n, 8);
  cr_expect_eq(s[0], 448);
  cr_expect_eq(s[7], 896);
  ferry_augment r;
  cr_assert_eq(ferry_augment_parse("val-square", &r), FERRY_OK);
  cr_expect_eq(r, FERRY_AUGMENT_NONE);
  cr_assert_eq(ferry_augment_parse("rfdetr", &r), FERRY_OK);
  cr_expect_eq(r, FERRY_AUGMENT_RFDETR);
  cr_expect_eq(ferry_augment_parse("rf-detr", &r), FERRY_EINVAL);
  ferry_multi_scale m;
  cr_assert_eq(ferry_multi_scale_parse("per-batch", &m), FERRY_OK);
  cr_expect_eq(m, FERRY_MULTI_SCALE_PER_BATCH);
}

/* Without the images field nothing is decoded: the records come from the annotations
 * alone, so a folder without the files serves. */
Test(augment, records_without_images_decode_nothing, .timeout = 60) {
  ferry_loader_config c;
  recipe_config(&c, FERRY_AUGMENT_RFDETR, FERRY_MULTI_SCALE_PER_SAMPLE);
  c.fields = FERRY_LOADER_FIELD_AUGMENT | FERRY_LOADER_FIELD_NO_IMAGES | FERRY_LOADER_FIELD_BOXES;
  char empty[] = "/tmp/ferry-no-images-XXXXXX"; /* mkdtemp's template: an empty images folder */
  cr_assert_not_null(mkdtemp(empty));
  c.images = empty;
  ferry_loader *l = open_loader(&c);
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_batch_find_field(b, FERRY_FIELD_IMAGES), -1);
  cr_assert_gt(record_of(b, 0)[FERRY_AUGMENT_OUT_H], 0);
  ferry_batch_release(b);
  ferry_loader_close(l);
  remove_folder(empty);
}

/* A record whose sizes pass the pixel limit is laid out without pixels and fails its
 * sample naming the sizes, before anything is allocated for them; skip skips it. Here
 * every file passes the limit, and branch B's first resize (shortest side 1000) does
 * not. */
Test(augment, the_pixel_limit_applies_to_the_recipes_sizes, .timeout = 120) {
  ferry_loader_config c;
  recipe_config(&c, FERRY_AUGMENT_RFDETR_SQUARE, FERRY_MULTI_SCALE_OFF);
  c.image.max_pixels = 640 * 640;
  c.augment.resize_b[0] = c.augment.resize_b[1] = c.augment.resize_b[2] = 1000;
  ferry_loader *l = open_loader(&c);
  ferry_batch *b;
  ferry_status st;
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) ferry_batch_release(b);
  cr_assert_eq(st, FERRY_ELIMIT, "%s", ferry_last_error());
  cr_assert(strstr(ferry_last_error(), "would pass the pixel limit of 409600"), "%s", ferry_last_error());
  ferry_loader_close(l);
  c.on_error = FERRY_ON_ERROR_SKIP;
  uint64_t skipped;
  watch_first_epoch_skips(&c, &skipped);
  l = open_loader(&c);
  int branches = 0, flips = 0, samples = 0;
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
    check_batch(b, &c, &branches, &flips);
    samples += (int)ferry_batch_size(b);
    ferry_batch_release(b);
  }
  cr_assert_eq(st, FERRY_EEND, "%s", ferry_last_error());
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  ferry_loader_stats_get(l, &stats);
  cr_assert_eq(branches, 0, "every branch B sample is over the limit");
  cr_assert(skipped > 0 && skipped != UINT64_MAX, "skipped %llu", (unsigned long long)skipped);
  cr_assert_eq((uint64_t)samples + skipped, LOADER_TEST_IMAGES, "%d delivered, %llu skipped", samples,
               (unsigned long long)skipped);
  cr_assert_geq(stats.samples_skipped, skipped, "since open counts at least the first epoch's");
  ferry_loader_close(l);
}
