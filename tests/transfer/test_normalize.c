/* tests/transfer/test_normalize.c - the host backend's normalisation
 * (lib/transfer/normalize.c: a table of each channel's 256 values, a row's three
 * channels in one pass) on its own: every value is ferry__normalize_value's, bit for
 * bit, in f32 and bf16, for every width from 1 to 40 and one to three rows, with
 * ImageNet's statistics and others, and the padding around the image is zeros. */
#include <criterion/criterion.h>
#include <string.h>

#include "lib/transfer/normalize.h"

/* Every byte value in each channel, in an order that changes with x, y and c. */
static uint8_t byte_at(size_t x, size_t y, int c) { return (uint8_t)(x * 37 + y * 101 + (size_t)c * 59 + 13); }

static void check(size_t h, size_t w, const ferry__norm_params *p) {
  size_t out_h = h + 1, out_w = w + 3, item = p->bf16 ? 2 : 4;
  uint8_t src[3 * 40 * 40];
  static uint8_t dst[3 * 41 * 43 * 4];
  for (size_t y = 0; y < h; y++)
    for (size_t x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) src[3 * (y * w + x) + (size_t)c] = byte_at(x, y, c);
  memset(dst, 0xAB, sizeof dst);
  ferry__normalize_cpu(src, dst, &(ferry__norm_shape){h, w, out_h, out_w}, p);
  for (int c = 0; c < 3; c++)
    for (size_t y = 0; y < out_h; y++)
      for (size_t x = 0; x < out_w; x++) {
        const uint8_t *got = dst + (((size_t)c * out_h + y) * out_w + x) * item;
        float f = y < h && x < w ? ferry__normalize_value(byte_at(x, y, c), p->mean[c], p->std[c]) : 0.0f;
        uint16_t b16 = y < h && x < w ? ferry__float_to_bf16(f) : 0;
        const void *want = p->bf16 ? (const void *)&b16 : (const void *)&f;
        cr_assert_eq(memcmp(got, want, item), 0, "%s %zux%zu: channel %d at (%zu, %zu)%s", p->bf16 ? "bf16" : "f32",
                     h, w, c, y, x, y < h && x < w ? "" : " (padding)");
      }
}

Test(normalize, every_value_is_the_formula_s_for_every_width) {
  const float odd_mean[3] = {0.5f, 0.25f, 0.125f}, odd_std[3] = {0.3f, 0.7f, 0.11f};
  for (int bf16 = 0; bf16 < 2; bf16++)
    for (int stats = 0; stats < 2; stats++) {
      ferry__norm_params p;
      ferry__norm_params_init(&p, odd_mean, stats ? odd_std : (const float[3]){0, 0, 0}, bf16);
      for (size_t w = 1; w <= 40; w++) check(w % 3 + 1, w, &p);
    }
}
