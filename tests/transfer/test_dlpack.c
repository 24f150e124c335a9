/* ferry_tensor_to_dlpack: fields as DLPack 0.6 expects, ownership moves, the deleter frees. */
#include "ferry/advanced.h"
#include "ferry/dlpack.h"
#include "fixtures.h"

static uint64_t live_bytes(ferry_device *d) {
  ferry_device_synchronize(d);
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  return s.live_bytes;
}

static void owned_tensor_moves_into_dlpack(const char *name) {
  ferry_device *d = open_device(name);
  int cuda = ferry_device_get_kind(d) == FERRY_DEVICE_CUDA;
  struct {
    ferry_dtype dtype;
    uint8_t code, bits;
  } types[] = {{FERRY_U8, kDLUInt, 8},   {FERRY_BOOL, kDLUInt, 8}, {FERRY_I32, kDLInt, 32},
               {FERRY_I64, kDLInt, 64},  {FERRY_F16, kDLFloat, 16}, {FERRY_BF16, kDLBfloat, 16},
               {FERRY_F32, kDLFloat, 32}};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
    int64_t shape[3] = {2, 3, 5};
    ferry_tensor t;
    cr_assert_eq(ferry_tensor_alloc(&t, d, NULL, types[k].dtype, 3, shape), FERRY_OK);
    void *data = t.data;
    DLManagedTensor *dl = NULL;
    cr_assert_eq(ferry_tensor_to_dlpack(&t, &dl), FERRY_OK);
    cr_assert_null(t.data, "ownership moved out of the ferry tensor");
    cr_assert_eq(dl->dl_tensor.data, data);
    cr_assert_eq(dl->dl_tensor.ndim, 3);
    for (int i = 0; i < 3; i++) cr_assert_eq(dl->dl_tensor.shape[i], shape[i]);
    cr_assert_null(dl->dl_tensor.strides, "compact row-major");
    cr_assert_eq(dl->dl_tensor.byte_offset, 0);
    cr_assert_eq(dl->dl_tensor.dtype.code, types[k].code, "%s", ferry_dtype_name(types[k].dtype));
    cr_assert_eq(dl->dl_tensor.dtype.bits, types[k].bits);
    cr_assert_eq(dl->dl_tensor.dtype.lanes, 1);
    cr_assert_eq(dl->dl_tensor.device.device_type, cuda ? kDLCUDA : kDLCPU);
    cr_assert_eq(dl->dl_tensor.device.device_id, 0);
    cr_assert_gt(live_bytes(d), 0);
    dl->deleter(dl);
    cr_assert_eq(live_bytes(d), 0, "the deleter frees the allocation");
  }
  ferry_device_close(d);
}
ON_EVERY_BACKEND(dlpack, owned_tensor_moves_into_dlpack, owned_tensor_moves_into_dlpack)

Test(dlpack, views_and_empty_tensors) {
  ferry_device *d = open_device("host");
  float values[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  ferry_tensor view;
  cr_assert_eq(ferry_tensor_view(&view, d, values, FERRY_F32, 2, shape), FERRY_OK);
  DLManagedTensor *dl = NULL;
  cr_assert_eq(ferry_tensor_to_dlpack(&view, &dl), FERRY_OK);
  cr_assert_eq(((float *)dl->dl_tensor.data)[5], 6.0f);
  dl->deleter(dl); /* frees the wrapper only: values is still ours */
  cr_assert_eq(values[0], 1.0f);
  int64_t empty_shape[2] = {0, 4};
  ferry_tensor empty;
  cr_assert_eq(ferry_tensor_alloc(&empty, d, NULL, FERRY_F32, 2, empty_shape), FERRY_OK);
  cr_assert_eq(ferry_tensor_to_dlpack(&empty, &dl), FERRY_OK);
  cr_assert_null(dl->dl_tensor.data);
  cr_assert_eq(dl->dl_tensor.shape[0], 0);
  cr_assert_eq(dl->dl_tensor.shape[1], 4);
  dl->deleter(dl);
  ferry_tensor cleared = {0};
  cr_assert_eq(ferry_tensor_to_dlpack(&cleared, &dl), FERRY_EINVAL, "a cleared tensor has no device");
  cr_assert_eq(ferry_tensor_to_dlpack(NULL, &dl), FERRY_EINVAL);
  ferry_device_close(d);
}

/* A device-batch output handed over whole: the usual way into a training framework. */
Test(dlpack, device_batch_outputs_hand_over) {
  ferry_device *d = open_device("host");
  ferry_pool *pool = NULL;
  cr_assert_eq(ferry_pool_open(d, 1, 0, &pool), FERRY_OK);
  ferry_batch *b = make_packed(pool, 5, default_instances, 2);
  ferry_device_batch *db = NULL;
  cr_assert_eq(ferry_transfer(d, NULL, b, NULL, &db), FERRY_OK);
  ferry_batch_release(b);
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  ferry_tensor masks;
  cr_assert_eq(ferry_device_batch_take(db, 4, "masks", &masks), FERRY_OK);
  DLManagedTensor *dl = NULL;
  cr_assert_eq(ferry_tensor_to_dlpack(&masks, &dl), FERRY_OK);
  ferry_device_batch_free(db); /* the handed-over tensor lives on */
  cr_assert_eq(dl->dl_tensor.shape[0], 12);
  uint8_t *m = dl->dl_tensor.data;
  size_t ones = 0;
  for (int64_t k = 0; k < 12 * MASK_H * MASK_W; k++) {
    cr_assert_leq(m[k], 1);
    ones += m[k];
  }
  cr_assert_gt(ones, 0);
  dl->deleter(dl);
  cr_assert_eq(live_bytes(d), 0);
  ferry_pool_close(pool);
  ferry_device_close(d);
}
