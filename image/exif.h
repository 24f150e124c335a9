/* image/exif.h - what image/exif.c exports: the EXIF orientation, found and applied as
 * Pillow's exif_transpose does (internal to image/).
 *
 * Invariant: a malformed or absent tag is orientation 1 (nothing to do), never an error.
 */
#ifndef FERRY_IMAGE_EXIF_H
#define FERRY_IMAGE_EXIF_H

#include <stddef.h>
#include <stdint.h>

/* The Orientation tag (1..8) of a TIFF-structured EXIF block (starting at the
 * "II"/"MM" byte order mark); 1 when absent or malformed. */
int ferry__exif_orientation(const uint8_t *tiff, size_t len);
/* Width/height after applying orientation o. */
void ferry__exif_oriented_size(int o, int width, int height, int *out_w, int *out_h);
/* Write src (width x height RGB8) into dst as Pillow's exif_transpose would. */
void ferry__exif_transpose(int o, const uint8_t *src, int width, int height, uint8_t *dst);

#endif
