/* image/pixel_limit.h - what image/limits.c exports: the pixel limit every decoder
 * checks before it allocates (internal to image/). Not limits.h: meson puts image/ on
 * the include path, where that name would shadow <limits.h>.
 */
#ifndef FERRY_IMAGE_PIXEL_LIMIT_H
#define FERRY_IMAGE_PIXEL_LIMIT_H

#include "ferry/image.h"

/* FERRY_ELIMIT when width*height exceeds opts->max_pixels (0: no limit). */
ferry_status ferry__image_check_limit(const char *name, int width, int height, const ferry_image_options *opts);

#endif
