/* Packed batch layout: offset tables, alignment, views without copies. */
#include <string.h>

#include "backends.h"
#include "lib/batch_internal.h"
#include "ferry/advanced.h"

static const ferry_field_spec FIELDS[] = {
  {"images", FERRY_U8, FERRY_FIELD_PER_SAMPLE, 3, {3, 4, 4}},
  {"boxes", FERRY_F32, FERRY_FIELD_ROWS, 1, {4}},
  {"masks", FERRY_BOOL, FERRY_FIELD_ROWS, 2, {4, 4}},
  {"image_id", FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, {1}},
};
enum { NF = 4, B = 3 };
/* rows[f][i]; sample 1 has no instances. */
static const int64_t ROWS[NF * B] = {0, 0, 0, 2, 0, 5, 2, 0, 5, 0, 0, 0};

static ferry_pool *host_pool(ferry_device **d, size_t arenas) {
  *d = open_device("host");
  ferry_pool *p;
  cr_assert_eq(ferry_pool_open(*d, arenas, 0, &p), FERRY_OK);
  return p;
}

Test(batch, offset_tables_follow_the_row_counts) {
  ferry_device *d;
  ferry_pool *p = host_pool(&d, 1);
  ferry_batch *b;
  cr_assert_eq(ferry_batch_create(p, B, NF, FIELDS, ROWS, &b), FERRY_OK);
  cr_assert_eq(ferry_batch_size(b), B);
  cr_assert(ferry_batch_is_packed(b));
  const int64_t *boxes = ferry_batch_offsets(b, 1);
  const int64_t expect_boxes[] = {0, 2, 2, 7};
  for (int i = 0; i <= B; i++) cr_assert_eq(boxes[i], expect_boxes[i]);
  const int64_t *images = ferry_batch_offsets(b, 0);
  for (int i = 0; i <= B; i++) cr_assert_eq(images[i], i, "per-sample fields have a fixed stride");
  cr_assert_eq(ferry_batch_row_bytes(b, 2), 16);
  cr_assert_eq(ferry_batch_find_field(b, "masks"), 2);
  cr_assert_eq(ferry_batch_find_field(b, "keypoints"), -1);

  ferry_tensor whole, s0, s1, s2;
  cr_assert_eq(ferry_batch_field(b, 1, &whole), FERRY_OK);
  cr_assert_eq(whole.shape[0], 7);
  cr_assert_eq(ferry_batch_sample(b, 1, 0, &s0), FERRY_OK);
  cr_assert_eq(ferry_batch_sample(b, 1, 1, &s1), FERRY_OK);
  cr_assert_eq(ferry_batch_sample(b, 1, 2, &s2), FERRY_OK);
  cr_assert_eq(s0.data, whole.data, "sample 0 starts the field");
  cr_assert_eq((char *)s2.data, (char *)whole.data + 2 * 16);
  cr_assert_eq(s1.ndim, 2);
  cr_assert_eq(s1.shape[0], 0, "an empty sample is a [0,4] view");
  cr_assert_eq(s1.shape[1], 4);
  cr_assert_eq(s1.nbytes, 0);
  cr_assert_not(s0.owned, "sample slices are views");

  ferry_tensor img;
  cr_assert_eq(ferry_batch_sample(b, 0, 2, &img), FERRY_OK);
  cr_assert_eq(img.ndim, 3, "a per-sample field's view is its inner shape");
  cr_assert_eq(img.shape[0], 3);
  for (size_t f = 0; f < NF; f++) {
    ferry_tensor v;
    ferry_batch_field(b, f, &v);
    cr_assert_eq((uintptr_t)v.data % 256, 0, "field %zu is not aligned", f);
  }
  size_t bytes;
  cr_assert_eq(ferry_batch_layout_bytes(B, NF, FIELDS, ROWS, &bytes), FERRY_OK);
  cr_assert_leq(bytes, ferry_arena_capacity(b->arena));
  ferry_batch_release(b);
  ferry_pool_close(p);
  ferry_device_close(d);
}

Test(batch, fields_do_not_overlap) {
  ferry_device *d;
  ferry_pool *p = host_pool(&d, 1);
  ferry_batch *b;
  cr_assert_eq(ferry_batch_create(p, B, NF, FIELDS, ROWS, &b), FERRY_OK);
  for (size_t f = 0; f < NF; f++) {
    ferry_tensor v;
    ferry_batch_field(b, f, &v);
    memset(v.data, (int)f + 1, v.nbytes);
  }
  for (size_t f = 0; f < NF; f++) {
    ferry_tensor v;
    ferry_batch_field(b, f, &v);
    for (size_t i = 0; i < v.nbytes; i++) cr_assert_eq(((uint8_t *)v.data)[i], f + 1);
  }
  ferry_batch_release(b);
  ferry_pool_close(p);
  ferry_device_close(d);
}

Test(batch, batch_of_one) {
  ferry_device *d;
  ferry_pool *p = host_pool(&d, 1);
  ferry_batch *b;
  const int64_t rows[NF] = {0, 3, 3, 0};
  cr_assert_eq(ferry_batch_create(p, 1, NF, FIELDS, rows, &b), FERRY_OK);
  cr_assert_eq(ferry_batch_offsets(b, 2)[1], 3);
  ferry_tensor m;
  cr_assert_eq(ferry_batch_sample(b, 2, 0, &m), FERRY_OK);
  cr_assert_eq(m.shape[0], 3);
  cr_assert_eq(m.nbytes, 48);
  cr_assert_eq(ferry_batch_sample(b, 2, 1, &m), FERRY_EINVAL, "sample 1 does not exist");
  ferry_batch_release(b);
  ferry_pool_close(p);
  ferry_device_close(d);
}

Test(batch, unpacked_batches_have_the_same_views) {
  ferry_device *d = open_device("host");
  ferry_batch *b;
  cr_assert_eq(ferry_batch_create_unpacked(d, B, NF, FIELDS, ROWS, &b), FERRY_OK);
  cr_assert_not(ferry_batch_is_packed(b));
  ferry_tensor v, w;
  cr_assert_eq(ferry_batch_sample(b, 2, 2, &v), FERRY_OK);
  cr_assert_eq(v.shape[0], 5);
  memset(v.data, 1, v.nbytes);
  cr_assert_eq(ferry_batch_sample(b, 2, 0, &w), FERRY_OK);
  cr_assert_neq(v.data, w.data);
  cr_assert_eq(ferry_batch_field(b, 2, &v), FERRY_EUNSUPPORTED);
  ferry_batch_release(b);
  ferry_device_close(d);
}

Test(batch, invalid_layouts_are_refused) {
  size_t bytes;
  ferry_field_spec dup[2] = {FIELDS[1], FIELDS[1]};
  const int64_t rows[2] = {1, 1};
  cr_assert_eq(ferry_batch_layout_bytes(1, 2, dup, rows, &bytes), FERRY_EINVAL);
  const int64_t negative[NF * B] = {0, 0, 0, 2, -1, 5, 2, 0, 5, 0, 0, 0};
  cr_assert_eq(ferry_batch_layout_bytes(B, NF, FIELDS, negative, &bytes), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "boxes"), "got %s", ferry_last_error());
  cr_assert_eq(ferry_batch_layout_bytes(0, NF, FIELDS, ROWS, &bytes), FERRY_EINVAL);
  ferry_field_spec deep = {"x", FERRY_U8, FERRY_FIELD_ROWS, 4, {1, 1, 1}};
  cr_assert_eq(ferry_batch_layout_bytes(1, 1, &deep, rows, &bytes), FERRY_EINVAL);
}

/* Roles (batch.h): none on a new batch, one field per role, and a checked table's roles
 * on every batch made of it. */
Test(batch, each_role_is_held_by_one_field_at_most) {
  ferry_device *d;
  ferry_pool *p = host_pool(&d, 2);
  ferry_batch *b;
  cr_assert_eq(ferry_batch_create(p, B, NF, FIELDS, ROWS, &b), FERRY_OK);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), -1, "a new batch's fields hold none");
  cr_assert_eq(ferry_batch_set_role(b, 0, FERRY_ROLE_IMAGES), FERRY_OK);
  cr_assert_eq(ferry_batch_set_role(b, 3, FERRY_ROLE_SAMPLE_INDEX), FERRY_OK);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), 0);
  cr_assert_eq(ferry_batch_set_role(b, 1, FERRY_ROLE_IMAGES), FERRY_OK);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), 1, "moved, not shared");
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_SAMPLE_INDEX), 3);
  cr_assert_eq(ferry_batch_set_role(b, 1, FERRY_ROLE_NONE), FERRY_OK);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), -1);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_NONE), -1);
  cr_assert_eq(ferry_batch_set_role(b, NF, FERRY_ROLE_IMAGES), FERRY_EINVAL);
  cr_assert_eq(ferry_batch_set_role(b, 0, FERRY_ROLE_COUNT), FERRY_EINVAL);
  ferry_batch_release(b);
  ferry__batch_fields checked;
  cr_assert_eq(ferry__batch_fields_check(NF, FIELDS, &checked), FERRY_OK);
  cr_assert_eq(ferry__batch_fields_set_role(&checked, 2, FERRY_ROLE_IMAGES), FERRY_OK);
  cr_assert_eq(ferry__batch_create_checked(p, d, B, &checked, ROWS, NULL, &b), FERRY_OK);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), 2, "the table's roles");
  ferry_batch_release(b);
  ferry_pool_close(p);
  ferry_device_close(d);
}

/* Fields checked once (the loader's path) give the same batch as ferry_batch_create,
 * packed and unpacked, and the names are the batch's own copies. */
Test(batch, checked_fields_lay_out_as_ferry_batch_create_does) {
  ferry_device *d;
  ferry_pool *p = host_pool(&d, 2);
  ferry__batch_fields checked;
  cr_assert_eq(ferry__batch_fields_check(NF, FIELDS, &checked), FERRY_OK);
  ferry_batch *plain, *fast, *unpacked;
  cr_assert_eq(ferry_batch_create(p, B, NF, FIELDS, ROWS, &plain), FERRY_OK);
  cr_assert_eq(ferry__batch_create_checked(p, d, B, &checked, ROWS, NULL, &fast), FERRY_OK);
  cr_assert_eq(ferry__batch_create_checked(NULL, d, B, &checked, ROWS, NULL, &unpacked), FERRY_OK);
  cr_assert(ferry_batch_is_packed(fast));
  cr_assert_not(ferry_batch_is_packed(unpacked));
  for (size_t f = 0; f < NF; f++) {
    const ferry_field_spec *a = ferry_batch_field_spec(plain, f), *b = ferry_batch_field_spec(fast, f);
    cr_assert_str_eq(b->name, FIELDS[f].name);
    cr_assert_neq(b->name, FIELDS[f].name, "the batch holds its own copy of the name");
    cr_assert_neq(b->name, checked.names[f], "...not the checked table's");
    cr_assert_eq(a->dtype, b->dtype);
    cr_assert_eq(ferry_batch_row_bytes(plain, f), ferry_batch_row_bytes(fast, f));
    for (size_t i = 0; i <= B; i++) {
      cr_assert_eq(ferry_batch_offsets(plain, f)[i], ferry_batch_offsets(fast, f)[i]);
      cr_assert_eq(ferry_batch_offsets(plain, f)[i], ferry_batch_offsets(unpacked, f)[i]);
    }
    ferry_tensor tp, tf, p0, f0;
    cr_assert_eq(ferry_batch_field(plain, f, &tp), FERRY_OK);
    cr_assert_eq(ferry_batch_field(fast, f, &tf), FERRY_OK);
    cr_assert_eq(ferry_batch_field(plain, 0, &p0), FERRY_OK);
    cr_assert_eq(ferry_batch_field(fast, 0, &f0), FERRY_OK);
    cr_assert_eq((char *)tp.data - (char *)p0.data, (char *)tf.data - (char *)f0.data,
                 "field %zu starts at the same byte", f);
  }
  ferry_batch_release(plain);
  ferry_batch_release(fast);
  ferry_batch_release(unpacked);
  ferry_pool_close(p);
  ferry_device_close(d);
}

/* What the check refuses it names; what is left for each batch (the row counts) is
 * still checked per batch. */
Test(batch, checked_fields_refuse_what_create_refuses) {
  ferry__batch_fields checked;
  ferry_field_spec twice[2] = {FIELDS[1], FIELDS[1]};
  cr_assert_eq(ferry__batch_fields_check(2, twice, &checked), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "'boxes' appears twice"), "%s", ferry_last_error());
  ferry_field_spec bad = FIELDS[0];
  bad.dtype = (ferry_dtype)999;
  cr_assert_eq(ferry__batch_fields_check(1, &bad, &checked), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "'images': unknown dtype"), "%s", ferry_last_error());
  cr_assert_eq(ferry__batch_fields_check(FERRY_MAX_FIELDS + 1, FIELDS, &checked), FERRY_EINVAL);

  ferry_device *d;
  ferry_pool *p = host_pool(&d, 1);
  cr_assert_eq(ferry__batch_fields_check(NF, FIELDS, &checked), FERRY_OK);
  ferry_batch *b;
  cr_assert_eq(ferry__batch_create_checked(p, d, B, &checked, NULL, NULL, &b), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "'boxes': row counts are required"), "%s", ferry_last_error());
  int64_t negative[NF * B];
  memcpy(negative, ROWS, sizeof negative);
  negative[1 * B + 2] = -1;
  cr_assert_eq(ferry__batch_create_checked(p, d, B, &checked, negative, NULL, &b), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "sample 2 has an invalid row count"), "%s", ferry_last_error());
  cr_assert_eq(ferry__batch_create_checked(p, d, 0, &checked, ROWS, NULL, &b), FERRY_EINVAL);
  ferry_pool_close(p);
  ferry_device_close(d);
}
