/* tests/loaders/test_draft.c - the reduced-size decode in the loader (issue 36,
 * config.image.draft_size): every sample is made at the reduced size its annotations
 * and name plan (orig_size, boxes, a recipe's draws), RF-DETR's rule picks the size
 * from the recipe and turns itself off with masks, the combinations it cannot take are
 * refused naming them, and a file that is not what its name says fails as a sample,
 * saying why. The pixels, boxes and areas against RF-DETR's own decode (simplejpeg and
 * Pillow) are python/tests/test_rfdetr_classes.py's. */
#include <sys/stat.h>
#include <unistd.h>

#include "loader_fixture.h"

/* The reduction, restated from RF-DETR's _jpeg_draft_reduction rather than asked of
 * ferry_image_draft_factor: the largest of 8, 4, 2 keeping both sides >= size. */
static int factor(int64_t w, int64_t h, int size) {
  int64_t fits = w / size < h / size ? w / size : h / size;
  return fits >= 8 ? 8 : fits >= 4 ? 4 : fits >= 2 ? 2 : 1;
}

static const int64_t *sample_field(ferry_batch *b, const char *field, size_t i) {
  ferry_tensor v;
  cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, field), i, &v), FERRY_OK);
  return v.data;
}

/* One epoch: each sample's orig_size is its image's reduced size under `draft`; the
 * factors seen are counted in seen[f]. Boxes (xyxy in the output frame) stay inside
 * the output. */
static void check_epoch(const ferry_loader_config *c, int draft, int seen[9]) {
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(c->annotations, NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  ferry_loader *l = open_loader(c);
  ferry_batch *b;
  size_t samples = 0;
  while (ferry_loader_next(l, &b) == FERRY_OK) {
    for (size_t i = 0; i < ferry_batch_size(b); i++, samples++) {
      ferry_coco_image img;
      cr_assert_eq(ferry_coco_image_at(coco, (size_t)sample_index(b, i), &img), FERRY_OK);
      int f = factor(img.width, img.height, draft);
      const int64_t *orig = sample_field(b, FERRY_FIELD_ORIG_SIZE, i);
      cr_assert(orig[0] == (img.height + f - 1) / f && orig[1] == (img.width + f - 1) / f,
                "%s (%lldx%lld): orig_size %lldx%lld, want 1/%d of it", img.file_name, (long long)img.width,
                (long long)img.height, (long long)orig[1], (long long)orig[0], f);
      seen[f]++;
      const int64_t *size = sample_field(b, FERRY_FIELD_SIZE, i);
      ferry_tensor boxes;
      cr_assert_eq(ferry_batch_sample(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_BOXES), i, &boxes), FERRY_OK);
      for (int64_t k = 0; k < boxes.shape[0]; k++) {
        const float *x = (const float *)boxes.data + 4 * k;
        cr_assert(x[0] >= 0 && x[1] >= 0 && x[2] <= size[1] && x[3] <= size[0] && x[2] > x[0] && x[3] > x[1],
                  "%s: box %lld outside its %lldx%lld sample", img.file_name, (long long)k, (long long)size[1],
                  (long long)size[0]);
      }
    }
    ferry_batch_release(b);
  }
  cr_assert_eq(samples, ferry_coco_num_images(coco), "%s", ferry_last_error());
  ferry_loader_close(l);
  ferry_coco_close(coco);
}

static void draft_config(ferry_loader_config *c, int draft) {
  test_config(c);
  c->image.dct_scaling = 0;  /* one rule for the decode scale */
  c->image.draft_size = draft;
  c->shuffle = 0;
  c->layout = FERRY_LAYOUT_U8_HWC;
  c->fields = FERRY_LOADER_FIELD_BOXES | FERRY_LOADER_FIELD_LABELS | FERRY_LOADER_FIELD_AREA |
              FERRY_LOADER_FIELD_ORIG_SIZE | FERRY_LOADER_FIELD_SIZE;
}

Test(draft, the_square_resize_is_made_from_the_reduced_decode) {
  ferry_loader_config c;
  int seen[9] = {0};
  draft_config(&c, 100);  /* 640 x 480 and 640 x 427: 1/4; 640 x 360: 1/2 */
  check_epoch(&c, 100, seen);
  cr_expect(seen[4] > 0 && seen[2] > 0 && seen[1] == 0, "factors 4: %d, 2: %d, 1: %d", seen[4], seen[2], seen[1]);
  int again[9] = {0};
  draft_config(&c, 60);   /* 1/8 for 640 x 480, 1/4 for 640 x 427 */
  check_epoch(&c, 60, again);
  cr_expect(again[8] > 0 && again[4] > 0, "factors 8: %d, 4: %d", again[8], again[4]);
}

Test(draft, a_recipe_draws_on_the_reduced_size) {
  ferry_loader_config c;
  int seen[9] = {0};
  draft_config(&c, 100);
  c.augment.recipe = FERRY_AUGMENT_RFDETR;
  c.resolution = 64;
  c.augment.patch_size = 16, c.augment.num_windows = 1;
  c.augment.resize_b[0] = 60, c.augment.resize_b[1] = 80, c.augment.resize_b[2] = 100;
  c.augment.crop_min = 40, c.augment.crop_max = 100;
  c.fields |= FERRY_LOADER_FIELD_AUGMENT;
  check_epoch(&c, 100, seen);
  cr_expect(seen[4] > 0 && seen[2] > 0);
}

Test(draft, rfdetrs_rule_takes_the_recipes_size_and_stands_down_for_masks) {
  ferry_loader_config c;
  int seen[9] = {0};
  draft_config(&c, FERRY_DRAFT_SIZE_RFDETR);
  c.augment.recipe = FERRY_AUGMENT_RFDETR_SQUARE;
  c.augment.multi_scale = FERRY_MULTI_SCALE_PER_SAMPLE;
  c.resolution = 64;
  c.augment.patch_size = 16, c.augment.num_windows = 1;  /* scales 32..128 */
  c.augment.resize_b[0] = 60, c.augment.resize_b[1] = 80, c.augment.resize_b[2] = 100;
  c.augment.crop_min = 40, c.augment.crop_max = 100;
  check_epoch(&c, 128, seen);  /* the largest scale, above branch B's 100 */
  cr_expect(seen[2] > 0, "reduced by 2: %d", seen[2]);
  int full[9] = {0};
  c.augment.scale_jitter = 1;
  c.fields |= FERRY_LOADER_FIELD_MASKS;
  check_epoch(&c, 1 << 30, full);  /* masks: full size */
  cr_expect(full[1] > 0 && full[2] == 0 && full[4] == 0 && full[8] == 0);
  int none[9] = {0};
  draft_config(&c, FERRY_DRAFT_SIZE_RFDETR);  /* no training recipe: RF-DETR's val split */
  check_epoch(&c, 1 << 30, none);
  cr_expect(none[1] > 0 && none[2] == 0);
}

static void expect_refused(const ferry_loader_config *c, ferry_status want, const char *says) {
  ferry_loader *l = NULL;
  cr_expect_eq(ferry_loader_open(c, &l), want, "%s", ferry_last_error());
  cr_expect_null(l);
  cr_expect(strstr(ferry_last_error(), says), "'%s' not in: %s", says, ferry_last_error());
}

Test(draft, what_it_cannot_take_is_refused_naming_it) {
  ferry_loader_config c;
  draft_config(&c, 100);
  c.fields |= FERRY_LOADER_FIELD_MASKS;
  expect_refused(&c, FERRY_EINVAL, "masks");
  draft_config(&c, 100);
  c.image.dct_scaling = 1;
  expect_refused(&c, FERRY_EINVAL, "dct_scaling");
  draft_config(&c, -2);
  expect_refused(&c, FERRY_EINVAL, "draft_size -2");
  draft_config(&c, 100);
  c.image.decode = FERRY_DECODE_GPU;
  expect_refused(&c, FERRY_EUNSUPPORTED, "draft_size");
}

Test(draft, auto_decodes_on_the_cpu_saying_why) {
  /* nvJPEG decodes at full size: AUTO must not pick it for a reduced decode (checked
   * before nvJPEG is even looked for, so the answer is the same on a GPU node) */
  ferry_loader_config c;
  draft_config(&c, 100);
  c.image.decode = FERRY_DECODE_AUTO;
  ferry_loader *l = open_loader(&c);
  ferry_loader_stats s;
  ferry_loader_stats_init(&s);
  cr_assert_eq(ferry_loader_stats_get(l, &s), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(s.decoder, FERRY_DECODE_CPU);
  cr_expect(strstr(ferry_loader_decoder_note(l), "reduced size"), "%s", ferry_loader_decoder_note(l));
  ferry_loader_close(l);
}

Test(draft, a_jpeg_under_another_name_fails_as_its_sample_saying_why) {
  char dir[] = "/tmp/ferry-draft-XXXXXX", src[8192], dst[8192], ann[8192];
  cr_assert_not_null(mkdtemp(dir));
  ferry_loader_config c;
  draft_config(&c, 100);
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(c.annotations, NULL, &coco), FERRY_OK);
  ferry_coco_image img;
  cr_assert_eq(ferry_coco_image_at(coco, 0, &img), FERRY_OK);
  snprintf(src, sizeof src, "%s/%s", c.images, img.file_name);
  snprintf(dst, sizeof dst, "%s/photo.png", dir);  /* JPEG bytes, a PNG's name */
  char cmd[20000];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
  cr_assert_eq(system(cmd), 0);
  snprintf(ann, sizeof ann, "%s/a.json", dir);
  FILE *f = fopen(ann, "w");
  fprintf(f, "{\"images\": [{\"id\": 1, \"file_name\": \"photo.png\", \"width\": %lld, \"height\": %lld}],"
             " \"categories\": [{\"id\": 1, \"name\": \"a\"}], \"annotations\": []}",
          (long long)img.width, (long long)img.height);
  fclose(f);
  ferry_coco_close(coco);
  c.annotations = ann;
  c.images = dir;
  c.batch_size = 1;
  ferry_loader *l = open_loader(&c);
  ferry_batch *b = NULL;
  cr_expect_eq(ferry_loader_next(l, &b), FERRY_EFORMAT);
  const char *msg = ferry_last_error();
  cr_expect(strstr(msg, "photo.png") && strstr(msg, "draft_size 100") && strstr(msg, ".jpg"), "%s", msg);
  ferry_loader_close(l);
  remove_folder(dir);
}
