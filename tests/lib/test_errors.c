#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "ferry/ferry.h"

Test(errors, every_status_has_its_own_description) {
  for (int a = 0; a >= FERRY_EEND; a--) {
    const char *da = ferry_strerror((ferry_status)a);
    cr_assert(da && *da);
    for (int b = a - 1; b >= FERRY_EEND; b--)
      cr_assert_str_neq(da, ferry_strerror((ferry_status)b), "statuses %d and %d share a text", a, b);
  }
}

Test(errors, a_failing_call_explains_itself) {
  ferry_device *d = NULL;
  ferry_clear_error();
  cr_assert_eq(ferry_device_open("tpu:0", &d), FERRY_EINVAL);
  cr_assert_null(d);
  cr_assert(strstr(ferry_last_error(), "unknown device 'tpu:0'"), "got: %s", ferry_last_error());
  cr_assert_eq(ferry_device_open("cuda:x", &d), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "cuda:x"), "got: %s", ferry_last_error());
}

static void *fail_on_other_thread(void *arg) {
  ferry_device *d = NULL;
  ferry_device_open("nowhere", &d);
  strcpy(arg, ferry_last_error());
  return NULL;
}

Test(errors, messages_are_per_thread) {
  char other[1024] = "";
  ferry_clear_error();
  pthread_t t;
  pthread_create(&t, NULL, fail_on_other_thread, other);
  pthread_join(t, NULL);
  cr_assert(strstr(other, "nowhere"));
  cr_assert_str_empty(ferry_last_error(), "another thread's error leaked here");
}

Test(errors, cuda_without_a_device_is_enodev) {
  ferry_device *d = NULL;
  ferry_status st = ferry_device_open("cuda", &d);
  if (st == FERRY_OK) {
    ferry_device_close(d);
    cr_skip_test("a CUDA device is present: the no-device path cannot be shown here");
  }
  cr_assert_eq(st, FERRY_ENODEV, "%s", ferry_last_error());
  cr_assert(strstr(ferry_last_error(), "no CUDA device"), "got: %s", ferry_last_error());
  /* It says what is missing and where to go, not only the runtime's own words. */
  cr_assert(strstr(ferry_last_error(), "no usable NVIDIA GPU and driver") ||
                strstr(ferry_last_error(), "the driver sees 0 GPUs") ||
                strstr(ferry_last_error(), "built without the CUDA toolkit"),
            "got: %s", ferry_last_error());
  cr_assert(strstr(ferry_last_error(), "--device host"), "got: %s", ferry_last_error());
  cr_assert_eq(ferry_device_open("cuda:3", &d), FERRY_ENODEV);
  cr_assert(strstr(ferry_last_error(), "--device host"), "got: %s", ferry_last_error());
}
