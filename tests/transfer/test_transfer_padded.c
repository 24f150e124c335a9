/* ferry_transfer with pad_multiple: images of different sizes (a training recipe's)
 * become one batch tensor, each image at the top left of its row and zeros around it,
 * whatever the layout (u8 HWC, f32 CHW, normalised on the way); the other fields stay
 * per-sample records; pad_multiple 0 keeps one image record per sample. */
#include "../common/gate.h"

#include "fixtures.h"
#include "lib/transfer/normalize.h"

enum { B = 4 };
static const int64_t SIZES[B][2] = {{5, 7}, {9, 3}, {6, 6}, {1, 1}}; /* largest: 9 x 7 */
static const int64_t INSTANCES[B] = {2, 0, 1, 3};

/* Images sized per sample ([h,w,3] u8, or [3,h,w] f32 when chw) and masks [N,h,w], filled
 * with values that name their sample and position (never 0 for images). */
static ferry_batch *sized_batch(rig *r, int chw, const int64_t (*sizes)[2]) {
  ferry_field_spec f[2] = {
      chw ? (ferry_field_spec){"images", FERRY_F32, FERRY_FIELD_PER_SAMPLE, 3, {3, FERRY_DIM_SAMPLE_H, FERRY_DIM_SAMPLE_W}}
          : (ferry_field_spec){"images", FERRY_U8, FERRY_FIELD_PER_SAMPLE, 3, {FERRY_DIM_SAMPLE_H, FERRY_DIM_SAMPLE_W, 3}},
      {"masks", FERRY_U8, FERRY_FIELD_ROWS, 2, {FERRY_DIM_SAMPLE_H, FERRY_DIM_SAMPLE_W}}};
  int64_t rows[2 * B], hw[2 * B];
  for (int i = 0; i < B; i++) {
    rows[i] = 1, rows[B + i] = INSTANCES[i];
    hw[2 * i] = sizes[i][0], hw[2 * i + 1] = sizes[i][1];
  }
  ferry_batch *b;
  cr_assert_eq(ferry_batch_create_sized(r->pool, B, 2, f, rows, hw, &b), FERRY_OK, "%s", ferry_last_error());
  mark_images(b);
  for (size_t i = 0; i < B; i++)
    for (size_t k = 0; k < 2; k++) {
      ferry_tensor v;
      cr_assert_eq(ferry_batch_sample(b, k, i, &v), FERRY_OK);
      size_t n = v.nbytes / ferry_dtype_size(v.dtype);
      for (size_t e = 0; e < n; e++) {
        if (v.dtype == FERRY_F32) ((float *)v.data)[e] = 1.0f + (float)(i * 1000 + e);
        else ((uint8_t *)v.data)[e] = (uint8_t)(1 + (i * 37 + e) % 254);
      }
    }
  return b;
}

static ferry_device_batch *transfer(rig *r, ferry_batch *b, size_t pad, ferry_normalize normalize) {
  ferry_transfer_options o = {.pad_multiple = pad, .normalize = normalize};
  ferry_device_batch *db = NULL;
  cr_assert_eq(ferry_transfer(r->device, r->stream, b, &o, &db), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  return db;
}

/* Row i of the padded tensor `got` (shape [B, ...]) holds sample i's unpadded image
 * `want` (its own tensor's bytes) at the top left, zeros elsewhere. hwc: [Hp,Wp,C]. */
static void expect_padded_row(const uint8_t *got, const int64_t *shape, int hwc, size_t item,
                              const uint8_t *want, int64_t h, int64_t w, size_t i) {
  int64_t c_n = hwc ? shape[3] : shape[1], hp = hwc ? shape[1] : shape[2], wp = hwc ? shape[2] : shape[3];
  const uint8_t *row = got + (size_t)i * (size_t)(c_n * hp * wp) * item;
  static const uint8_t zero[8];
  for (int64_t c = 0; c < c_n; c++)
    for (int64_t y = 0; y < hp; y++)
      for (int64_t x = 0; x < wp; x++) {
        size_t at = hwc ? (size_t)((y * wp + x) * c_n + c) : (size_t)((c * hp + y) * wp + x);
        size_t from = hwc ? (size_t)((y * w + x) * c_n + c) : (size_t)((c * h + y) * w + x);
        const void *expect = y < h && x < w ? want + from * item : zero;
        cr_assert_eq(memcmp(row + at * item, expect, item), 0, "sample %zu channel %lld at (%lld, %lld)%s", i,
                     (long long)c, (long long)y, (long long)x, y < h && x < w ? "" : " (padding)");
      }
}

/* Every layout: the padded tensor against the same batch transferred with one image
 * record per sample, and the masks, records both ways, equal. */
static void check_layout(const char *name, int chw, ferry_normalize normalize, size_t pad, int64_t hp, int64_t wp) {
  rig r = rig_open(name, 2);
  ferry_batch *b = sized_batch(&r, chw, SIZES);
  ferry_device_batch *own = transfer(&r, b, 0, normalize), *padded = transfer(&r, b, pad, normalize);
  cr_assert_null(ferry_device_batch_images(own), "pad_multiple 0: one image record per sample");
  ferry_tensor *t = ferry_device_batch_images(padded);
  cr_assert_not_null(t, "pad_multiple %zu: one batch tensor", pad);
  int hwc = !chw && normalize == FERRY_NORMALIZE_NONE;
  int64_t want_shape[4] = {B, hwc ? hp : 3, hwc ? wp : hp, hwc ? 3 : wp};
  cr_assert_eq(t->ndim, 4);
  for (int d = 0; d < 4; d++)
    cr_assert_eq(t->shape[d], want_shape[d], "dimension %d: %lld, not %lld", d, (long long)t->shape[d],
                 (long long)want_shape[d]);
  uint8_t *got = read_back(r.stream, t);
  for (size_t i = 0; i < B; i++) {
    ferry_tensor *one = ferry_device_batch_sample_field(own, i, "images");
    cr_assert_not_null(one);
    uint8_t *want = read_back(r.stream, one);
    expect_padded_row(got, t->shape, hwc, ferry_dtype_size(t->dtype), want, SIZES[i][0], SIZES[i][1], i);
    free(want);
    ferry_tensor *ma = ferry_device_batch_sample_field(own, i, "masks"), *mb = ferry_device_batch_sample_field(padded, i, "masks");
    cr_assert(ma && mb && same_shape(ma, mb), "sample %zu: masks stay records of the sample's size", i);
    cr_assert_eq(mb->shape[1], SIZES[i][0]);
    uint8_t *xa = read_back(r.stream, ma), *xb = read_back(r.stream, mb);
    cr_assert(ma->nbytes == 0 || memcmp(xa, xb, ma->nbytes) == 0, "sample %zu: masks", i);
    free(xa);
    free(xb);
  }
  free(got);
  ferry_device_batch_free(own);
  ferry_device_batch_free(padded);
  ferry_batch_release(b);
  rig_close(&r);
}

static void u8_hwc(const char *name) { check_layout(name, 0, FERRY_NORMALIZE_NONE, 1, 9, 7); }
static void u8_hwc_multiple_of_4(const char *name) { check_layout(name, 0, FERRY_NORMALIZE_NONE, 4, 12, 8); }
static void f32_chw(const char *name) { check_layout(name, 1, FERRY_NORMALIZE_NONE, 1, 9, 7); }
static void normalised(const char *name) { check_layout(name, 0, FERRY_NORMALIZE_F32, 32, 32, 32); }
static void normalised_bf16(const char *name) { check_layout(name, 0, FERRY_NORMALIZE_BF16, 2, 10, 8); }

ON_EVERY_BACKEND(transfer_padded, u8_hwc_images_pad_to_the_largest, u8_hwc)
ON_EVERY_BACKEND(transfer_padded, sizes_round_up_to_the_multiple, u8_hwc_multiple_of_4)
ON_EVERY_BACKEND(transfer_padded, f32_chw_images_pad_per_plane, f32_chw)
ON_EVERY_BACKEND(transfer_padded, normalised_images_pad_with_zero_not_a_normalised_black, normalised)
ON_EVERY_BACKEND(transfer_padded, bf16_images_pad_with_zero, normalised_bf16)

/* Same-size images: left as they are when the multiple divides them, padded when not. */
static void same_sizes(const char *name) {
  static const int64_t same[B][2] = {{6, 8}, {6, 8}, {6, 8}, {6, 8}};
  rig r = rig_open(name, 2);
  ferry_batch *b = sized_batch(&r, 0, same);
  ferry_device_batch *dense = transfer(&r, b, 2, FERRY_NORMALIZE_NONE), *padded = transfer(&r, b, 4, FERRY_NORMALIZE_NONE);
  ferry_tensor *d = ferry_device_batch_images(dense), *p = ferry_device_batch_images(padded);
  cr_assert(d && d->shape[1] == 6 && d->shape[2] == 8, "multiple 2 divides 6 x 8: the batch as it is");
  cr_assert(p && p->shape[1] == 8 && p->shape[2] == 8, "multiple 4: 6 rounds up to 8");
  uint8_t *got = read_back(r.stream, p), *want = read_back(r.stream, d);
  for (size_t i = 0; i < B; i++)
    expect_padded_row(got, p->shape, 1, 1, want + i * 6 * 8 * 3, 6, 8, i);
  free(got);
  free(want);
  ferry_device_batch_free(dense);
  ferry_device_batch_free(padded);
  ferry_batch_release(b);
  rig_close(&r);
}

ON_EVERY_BACKEND(transfer_padded, same_size_images_pad_only_to_reach_the_multiple, same_sizes)

/* A dense image field of another shape ([H,W]): nothing to pad at multiple 1, and a
 * larger multiple, which it cannot apply, refused naming the field. */
static void other_shapes(const char *name) {
  rig r = rig_open(name, 2);
  ferry_field_spec f = {"images", FERRY_U8, FERRY_FIELD_PER_SAMPLE, 2, {5, 7}};
  int64_t rows[B] = {1, 1, 1, 1};
  ferry_batch *b;
  cr_assert_eq(ferry_batch_create(r.pool, B, 1, &f, rows, &b), FERRY_OK, "%s", ferry_last_error());
  mark_images(b);
  ferry_device_batch *db = transfer(&r, b, 1, FERRY_NORMALIZE_NONE);
  cr_assert(ferry_device_batch_images(db) && ferry_device_batch_images(db)->shape[1] == 5, "multiple 1: as it is");
  ferry_device_batch_free(db);
  ferry_transfer_options o = {.pad_multiple = 4};
  db = NULL;
  cr_assert_eq(ferry_transfer(r.device, r.stream, b, &o, &db), FERRY_EINVAL);
  cr_assert_null(db);
  cr_assert(strstr(ferry_last_error(), "pad_multiple 4") && strstr(ferry_last_error(), "'images'"), "%s",
            ferry_last_error());
  ferry_batch_release(b);
  rig_close(&r);
}

ON_EVERY_BACKEND(transfer_padded, a_multiple_it_cannot_apply_is_refused, other_shapes)
