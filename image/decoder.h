/* image/decoder.h - the decoder's state and what a format decoder hands back, which
 * image.c owns and jpeg.c / png.c fill (internal to image/).
 *
 * image.c owns the decoder and the public calls; jpeg.c and png.c decode one format
 * into the decoder's scratch (jpeg.c through jpeg_entropy.c's Huffman decoder where it
 * can, TurboJPEG otherwise); exif.c finds and applies the orientation; resize.c is the
 * Pillow-compatible resampler writing the output layouts, its inner loops in kernel
 * sets (resize_kernels.h: portable, resize_avx2.c, resize_avx512.c, resize_vbmi.c);
 * normalize_table.c holds the f32 normalisation table; augment.c the recipes' chains
 * and geometry.c the boxes' geometry; scratch.c the growable buffers and limits.c the
 * pixel limit, which every other file uses and which call nothing back.
 * Invariant: a decoder is used by one thread at a time; what a decode returns points
 * into its scratch and lives until the decoder's next call.
 */
#ifndef FERRY_IMAGE_DECODER_H
#define FERRY_IMAGE_DECODER_H

#include <stdint.h>

#include "ferry/image.h"
#include "image/scratch.h"

struct ferry__jpeg_entropy;
struct ferry_decoder {
  void *tj;                            /* TurboJPEG decompressor handle */
  struct ferry__jpeg_entropy *entropy; /* jpeg_entropy.c's state (NULL: not built) */
  ferry__scratch file;                 /* the bytes of the file being decoded */
  ferry__scratch pixels;               /* the decoded RGB8 image */
  ferry__scratch aux;                  /* CMYK samples; the EXIF-rotated image */
  ferry__scratch rows;                 /* resize: horizontally resampled rows */
  ferry__scratch taps;                 /* resize: filter bounds and weights */
  int taps_shape[9];        /* width, height and the view (resize_kernels.h) the filters in taps are for (0: none) */
  ferry__scratch plan;      /* resize: the horizontal kernel's plan (resize_kernels.h) */
  ferry__scratch augment;   /* augment.c: branch B's resized image, before its crop */
  int plan_shape[5];        /* width, full_w, x, w, mirror: the columns the plan is for */
  const void *plan_kernels; /* the kernel set that laid it out (NULL: none) */
};

/* One decoded image, RGB8 with row stride 3*width, in the decoder's scratch. */
typedef struct ferry__decoded {
  const uint8_t *rgb;
  int width, height;           /* as decoded (smaller than the header when DCT-scaled) */
  int full_width, full_height; /* as stored in the header */
  int orientation;             /* EXIF Orientation 1..8 (1 when absent or invalid) */
} ferry__decoded;

/* Size requested by the resize that follows the decode (0: none), so the JPEG
 * decoder may pick a DCT scale. */
typedef struct ferry__decode_request {
  const ferry_image_options *opts;
  int target_size;
} ferry__decode_request;

#endif
