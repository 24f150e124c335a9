/* image/limits.c - the pixel limit, checked from a header before decoding.
 *
 * Both decoders (jpeg.c after its header walk, png.c right after png_read_info) check
 * width x height against ferry_image_options.max_pixels BEFORE they allocate for the
 * pixels or decode, so a small file that declares a huge image (a decompression bomb)
 * costs nothing. The header-only probe in image.c decodes nothing and does not check:
 * it reports the size as stored. The product is taken in 64 bits: two int dimensions
 * cannot overflow it.
 */
#include "lib/status.h"
#include "image/pixel_limit.h"

ferry_status ferry__image_check_limit(const char *name, int width, int height,
                                     const ferry_image_options *opts) {
  uint64_t pixels = (uint64_t)width * (uint64_t)height;
  if (opts->max_pixels && pixels > opts->max_pixels)
    return ferry__fail(FERRY_ELIMIT,
                      "%s: %dx%d = %llu pixels exceeds the limit of %llu (decompression bomb?)",
                      name, width, height, (unsigned long long)pixels,
                      (unsigned long long)opts->max_pixels);
  return FERRY_OK;
}
