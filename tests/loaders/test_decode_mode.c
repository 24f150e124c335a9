/* tests/loaders/test_decode_mode.c - config.image.decode at ferry_loader_open (issue 15).
 *
 * On the host device: GPU fails before anything is read, saying what GPU decoding
 * needs; AUTO falls back to the CPU decoder and gives the CPU's batches byte for byte;
 * the stats say which decoder runs. */
#include "loader_fixture.h"

static ferry_status try_open(ferry_decode_mode mode, ferry_loader **out) {
  ferry_loader_config c;
  test_config(&c);
  c.image.decode = mode;
  *out = NULL;
  return ferry_loader_open(&c, out);
}

Test(decode_mode, the_default_is_the_cpu) {
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  cr_expect_eq(c.image.decode, FERRY_DECODE_CPU);
  ferry_image_options o;
  memset(&o, 0xff, sizeof o);
  ferry_image_options_default(&o);
  cr_expect_eq(o.decode, FERRY_DECODE_CPU);
}

Test(decode_mode, gpu_on_the_host_fails_naming_what_is_missing) {
  ferry_loader *l;
  ferry_status st = try_open(FERRY_DECODE_GPU, &l);
  cr_assert_eq(st, FERRY_EUNSUPPORTED, "status %d: %s", st, ferry_last_error());
  cr_expect_null(l);
  const char *msg = ferry_last_error();
  cr_expect(strstr(msg, "CUDA device") && strstr(msg, "nvJPEG") && strstr(msg, "host"), "%s", msg);
}

Test(decode_mode, gpu_fails_before_the_annotations_are_read) {
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  c.annotations = "/nonexistent/instances.json";
  c.images = "/"; /* a folder that exists: open checks it before the decoder */
  c.image.decode = FERRY_DECODE_GPU;
  ferry_loader *l = NULL;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EUNSUPPORTED, "%s", ferry_last_error());
  cr_expect(strstr(ferry_last_error(), "nvJPEG"), "%s", ferry_last_error());
}

Test(decode_mode, an_unknown_mode_is_refused) {
  ferry_loader *l;
  cr_assert_eq(try_open((ferry_decode_mode)7, &l), FERRY_EINVAL, "%s", ferry_last_error());
  cr_expect(strstr(ferry_last_error(), "decode"), "%s", ferry_last_error());
}

static void expect_decoder(ferry_loader *l, ferry_decode_mode want) {
  ferry_loader_stats s;
  ferry_loader_stats_init(&s);
  cr_assert_eq(ferry_loader_stats_get(l, &s), FERRY_OK);
  cr_expect_eq(s.decoder, want);
}

Test(decode_mode, auto_on_the_host_is_the_cpu_byte_for_byte, .timeout = 120) {
  enum { MAX = 64 };
  uint64_t cpu[MAX], autod[MAX];
  ferry_loader *l;
  cr_assert_eq(try_open(FERRY_DECODE_CPU, &l), FERRY_OK, "%s", ferry_last_error());
  expect_decoder(l, FERRY_DECODE_CPU);
  cr_expect_str_empty(ferry_loader_decoder_note(l), "CPU was asked for: nothing to explain");
  size_t n_cpu = epoch_digests(l, cpu, MAX);
  ferry_loader_close(l);
  cr_assert_eq(try_open(FERRY_DECODE_AUTO, &l), FERRY_OK, "%s", ferry_last_error());
  expect_decoder(l, FERRY_DECODE_CPU);
  const char *note = ferry_loader_decoder_note(l);
  cr_expect(strstr(note, "decode = AUTO runs on the CPU") && strstr(note, "the device is host"), "%s", note);
  size_t n_auto = epoch_digests(l, autod, MAX);
  ferry_loader_close(l);
  cr_assert_gt(n_cpu, 0);
  cr_assert_eq(n_auto, n_cpu);
  for (size_t i = 0; i < n_cpu; i++) cr_expect_eq(autod[i], cpu[i], "batch %zu", i);
}
