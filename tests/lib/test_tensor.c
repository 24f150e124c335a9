/* Tensor ownership: owned tensors free their memory, views never do. */
#include <string.h>

#include "backends.h"

static uint64_t live(ferry_device *d) {
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  ferry_device_memory_stats(d, &s);
  return s.live_bytes;
}

static void owned_and_views(ferry_device *d) {
  ferry_tensor t;
  int64_t shape[3] = {2, 3, 5};
  cr_assert_eq(ferry_tensor_alloc(&t, d, NULL, FERRY_F32, 3, shape), FERRY_OK);
  cr_assert_eq(t.nbytes, 2 * 3 * 5 * 4);
  cr_assert_eq(ferry_tensor_numel(&t), 30);
  cr_assert(t.owned);
  cr_assert_eq(live(d), 120);

  ferry_tensor v;
  cr_assert_eq(ferry_tensor_view(&v, d, t.data, FERRY_U8, 1, (int64_t[]){120}), FERRY_OK);
  cr_assert_not(v.owned);
  ferry_tensor_free(&v);
  cr_assert_null(v.data);
  cr_assert_eq(live(d), 120, "freeing a view released its memory");

  ferry_tensor_free(&t);
  cr_assert_null(t.data);
  cr_assert_eq(live(d), 0);
  ferry_tensor_free(&t); /* a cleared tensor is safe to free again */

  cr_assert_eq(ferry_tensor_alloc(&t, d, NULL, FERRY_I64, 2, (int64_t[]){0, 4}), FERRY_OK);
  cr_assert_eq(t.nbytes, 0);
  cr_assert_eq(t.shape[0], 0);
  cr_assert_eq(t.shape[1], 4);
  ferry_tensor_free(&t);
  ferry_device_close(d);
}
BACKEND_TESTS(tensor, owned_and_views, owned_and_views)

Test(tensor, host_view_of_caller_memory_is_untouched) {
  ferry_device *d = open_device("host");
  uint8_t buf[16];
  memset(buf, 9, sizeof buf);
  ferry_tensor v;
  cr_assert_eq(ferry_tensor_view(&v, d, buf, FERRY_U8, 2, (int64_t[]){4, 4}), FERRY_OK);
  ferry_tensor_free(&v);
  for (int i = 0; i < 16; i++) cr_assert_eq(buf[i], 9);
  ferry_device_close(d);
}

Test(tensor, bad_shapes_are_refused) {
  ferry_tensor t;
  cr_assert_eq(ferry_tensor_describe(&t, FERRY_F32, 5, (int64_t[]){1, 1, 1, 1, 1}), FERRY_EINVAL);
  cr_assert_eq(ferry_tensor_describe(&t, FERRY_F32, 2, (int64_t[]){3, -1}), FERRY_EINVAL);
  cr_assert_eq(ferry_tensor_describe(&t, FERRY_F32, 2, (int64_t[]){INT64_MAX / 2, 8}), FERRY_EINVAL);
  cr_assert_eq(ferry_tensor_describe(&t, (ferry_dtype)99, 0, NULL), FERRY_EINVAL);
  cr_assert_eq(ferry_tensor_describe(&t, FERRY_BF16, 0, NULL), FERRY_OK);
  cr_assert_eq(t.nbytes, 2, "rank 0 is one element");
}

Test(tensor, dtype_sizes_and_names) {
  const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4};
  const char *names[] = {"u8", "bool", "i32", "i64", "f16", "bf16", "f32"};
  for (int i = 0; i <= FERRY_F32; i++) {
    cr_assert_eq(ferry_dtype_size((ferry_dtype)i), sizes[i]);
    cr_assert_str_eq(ferry_dtype_name((ferry_dtype)i), names[i]);
  }
}
