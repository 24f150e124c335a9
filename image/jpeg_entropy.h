/* image/jpeg_entropy.h - baseline JPEGs decoded by libjpeg with ferry's own Huffman
 * decoder in place of libjpeg's (internal).
 *
 * Why: entropy decoding is three quarters of decoding a photo and most of a worker's
 * time (docs/benchmarks.md). The Huffman code is lossless, so a faster decoder of the
 * same bits gives the same coefficients, and libjpeg's own IDCT, upsampling and colour
 * conversion (the code TurboJPEG and Pillow run) turn them into the same pixels.
 *
 * The contract, which tests/image/test_jpeg_entropy.c checks against TurboJPEG on
 * every real JPEG in shared/realdata, on synthetic ones and on thousands of corrupted
 * ones: when ferry__jpeg_entropy_decode says FERRY_OK, the pixels are TurboJPEG's
 * (tjDecompress2, accurate DCT, RGB) byte for byte, and TurboJPEG would have decoded
 * the file without an error. Anything this path does not take as plainly valid, it
 * declines (FERRY_EAGAIN) before or after decoding, and jpeg.c decodes the file with
 * TurboJPEG as before: a progressive, arithmetic-coded, 12-bit, CMYK or restart-marked
 * file, a Huffman code libjpeg would warn about, data that runs into a marker, any
 * libjpeg warning or error. A decode at 1/2, 1/4 or 1/8 scale (the loader's draft_size)
 * is taken too: libjpeg's scaled IDCT reads the coefficients it needs from the same
 * blocks, so the pixels are TurboJPEG's at that scale.
 */
#ifndef FERRY_IMAGE_JPEG_ENTROPY_H
#define FERRY_IMAGE_JPEG_ENTROPY_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry__jpeg_entropy ferry__jpeg_entropy;

/* 1 when this build has the path (libjpeg-turbo's libjpeg API and its jpegint.h). */
int ferry__jpeg_entropy_available(void);

/* Its state for one decoder (one thread): libjpeg's decompressor, the Huffman tables,
 * the scan's bytes. NULL when out of memory or not built. */
ferry__jpeg_entropy *ferry__jpeg_entropy_open(void);
void ferry__jpeg_entropy_close(ferry__jpeg_entropy *e);

/* Decode data[0, len), a JPEG, at 1/scale_denom of its size (1, 2, 4 or 8; width x
 * height must be that size: ceil(side / scale_denom)) into rgb (3 * width * height bytes).
 * FERRY_OK: done, TurboJPEG's pixels. FERRY_EAGAIN: declined, rgb's contents are
 * undefined; decode with TurboJPEG. FERRY_ENOMEM (with a message naming `name`). */
ferry_status ferry__jpeg_entropy_decode(ferry__jpeg_entropy *e, const uint8_t *data, size_t len, const char *name,
                                        uint8_t *rgb, int width, int height, int scale_denom);

#endif
