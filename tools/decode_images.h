/* tools/decode_images.h - every image of a COCO file decoded in full, on a few threads
 * (`ferry-coco validate --decode`). */
#ifndef FERRY_TOOLS_DECODE_IMAGES_H
#define FERRY_TOOLS_DECODE_IMAGES_H

#include <stddef.h>

#include "ferry/coco.h"

/* What decoding one image gave: its size, or the decoder's message (malloc'ed; it
 * names the file) when it failed. */
typedef struct decoded_image {
  int width, height;
  char *error;
} decoded_image;

/* Decode every image of `coco`, file_name relative to `dir`, on `threads` threads (at
 * least 1), with the loader's decoder and default options (so what fails here fails
 * the loader). results[i] is image i's outcome; free the errors with
 * decoded_images_free. Returns 0, or -1 when threads or memory ran out (a message on
 * stderr). */
int decode_images(const ferry_coco *coco, const char *dir, size_t threads, decoded_image *results);

void decoded_images_free(decoded_image *results, size_t n);

#endif
