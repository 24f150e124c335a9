/* tests/fuzz/fuzz_image.c - JPEG and PNG decoding through ferry_image_decode_resized.
 *
 * Input: the bytes of an image file (the same target runs on a JPEG corpus and on a
 * PNG corpus). The input's length picks the options, so one corpus covers them all:
 * bit 0 EXIF orientation, bit 1 DCT scaling, bit 2 the u8 layout instead of f32.
 * The pixel limit is lowered to MAX_PIXELS so a header claiming a huge image is a
 * quick FERRY_ELIMIT rather than a fuzzer out-of-memory. A decoded image must have
 * the size the header-only probe reports (turned by EXIF) and finite pixels.
 */
#include <math.h>

#include "ferry/error.h"
#include "ferry/image.h"
#include "tests/fuzz/fuzz_check.h"

#define SIZE 16
#define MAX_PIXELS (1u << 22)

static ferry_decoder *decoder(void) {
  static ferry_decoder *d;
  if (!d) FUZZ_CHECK(ferry_decoder_open(&d) == FERRY_OK);
  return d;
}

static void check_probe(const uint8_t *data, size_t size, int apply_exif, int w, int h) {
  int pw = 0, ph = 0;
  FUZZ_CHECK(ferry_image_probe(data, size, "fuzz", &pw, &ph) == FERRY_OK);
  FUZZ_CHECK((pw == w && ph == h) || (apply_exif && pw == h && ph == w));
}

int FUZZ_ENTRY(const uint8_t *data, size_t size) {
  ferry_image_options opts;
  ferry_image_options_default(&opts);
  opts.apply_exif = (int)(size & 1);
  opts.dct_scaling = (int)((size >> 1) & 1);
  opts.max_pixels = MAX_PIXELS;
  ferry_image_layout layout = (size & 4) ? FERRY_LAYOUT_U8_HWC : FERRY_LAYOUT_F32_CHW;
  static float out[3 * SIZE * SIZE];
  int w = 0, h = 0;
  ferry_status st = ferry_image_decode_resized(decoder(), data, size, "fuzz", &opts, SIZE,
                                               layout, out, &w, &h);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
    return 0;
  }
  FUZZ_CHECK(w > 0 && h > 0 && (uint64_t)w * (uint64_t)h <= MAX_PIXELS);
  check_probe(data, size, opts.apply_exif, w, h);
  if (layout == FERRY_LAYOUT_F32_CHW)
    for (size_t i = 0; i < 3 * SIZE * SIZE; i++) FUZZ_CHECK(isfinite(out[i]));
  return 0;
}
