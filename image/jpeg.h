/* image/jpeg.h - what image/jpeg.c exports: JPEG headers and decodes, through
 * jpeg_entropy.c's Huffman decoder where it can, TurboJPEG otherwise (internal to
 * image/).
 *
 * Invariant: the header parser reports FERRY_EAGAIN when `len` bytes end inside the
 * header, so ferry_image_probe_file can read more and retry.
 */
#ifndef FERRY_IMAGE_JPEG_H
#define FERRY_IMAGE_JPEG_H

#include <stddef.h>
#include <stdint.h>

#include "image/decoder.h"

int ferry__jpeg_signature(const uint8_t *data, size_t len);
/* What the JPEG markers before the frame header say. */
typedef struct ferry__jpeg_info {
  int width, height, components;
  const uint8_t *exif; /* APP1 "Exif" payload (TIFF structure), NULL if none */
  size_t exif_len;
} ferry__jpeg_info;
ferry_status ferry__jpeg_header(const uint8_t *data, size_t len, const char *name, ferry__jpeg_info *info);
ferry_status ferry__jpeg_decode(ferry_decoder *d, const uint8_t *data, size_t len, const char *name,
                                const ferry__decode_request *req, ferry__decoded *out);
void *ferry__jpeg_handle_open(void);
void ferry__jpeg_handle_close(void *tj);

#endif
