/* image/png_codec.h - what image/png.c exports: PNG headers and decodes through libpng
 * (internal to image/). Not png.h: meson puts image/ on the include path, where that
 * name would shadow libpng's <png.h>.
 *
 * Invariant: as for JPEG, the header parser reports FERRY_EAGAIN when `len` bytes end
 * inside the header.
 */
#ifndef FERRY_IMAGE_PNG_CODEC_H
#define FERRY_IMAGE_PNG_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "image/decoder.h"

int ferry__png_signature(const uint8_t *data, size_t len);
ferry_status ferry__png_header(const uint8_t *data, size_t len, const char *name, int *width, int *height);
ferry_status ferry__png_decode(ferry_decoder *d, const uint8_t *data, size_t len, const char *name,
                               const ferry__decode_request *req, ferry__decoded *out);

#endif
