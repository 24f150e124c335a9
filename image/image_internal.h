/* image/image_internal.h - what the image decoder's parts share (internal).
 *
 * image.c owns the decoder and the public calls; jpeg.c and png.c decode one
 * format into the decoder's scratch (jpeg.c through jpeg_entropy.c's Huffman decoder
 * where it can, TurboJPEG otherwise); exif.c finds and applies the orientation;
 * resize.c is the Pillow-compatible resampler writing the output layouts, its
 * inner loops in kernel sets (resize_kernels.h: portable, resize_avx2.c,
 * resize_avx512.c, resize_vbmi.c); normalize_table.c holds the f32 normalisation
 * table; augment.c the recipes' chains and geometry.c the boxes' geometry; scratch.c
 * the growable buffers and limits.c the pixel limit, which every other file uses and
 * which call nothing back.
 */
#ifndef FERRY_LOADERS_IMAGE_INTERNAL_H
#define FERRY_LOADERS_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/image.h"

/* A heap buffer that only grows, so a worker stops allocating once it has seen
 * its largest image. */
typedef struct ferry_scratch {
  void *data;
  size_t cap;
} ferry_scratch;

/* Make b hold at least n bytes (contents not kept). FERRY_ENOMEM names `what`. */
ferry_status ferry__scratch_reserve(ferry_scratch *b, size_t n, const char *what);
void ferry__scratch_free(ferry_scratch *b);

struct ferry_jpeg_entropy;
struct ferry_decoder {
  void *tj;               /* TurboJPEG decompressor handle */
  struct ferry_jpeg_entropy *entropy; /* jpeg_entropy.c's state (NULL: not built) */
  ferry_scratch file;     /* the bytes of the file being decoded */
  ferry_scratch pixels;   /* the decoded RGB8 image */
  ferry_scratch aux;      /* CMYK samples; the EXIF-rotated image */
  ferry_scratch rows;     /* resize: horizontally resampled rows */
  ferry_scratch taps;     /* resize: filter bounds and weights */
  int taps_shape[9];      /* width, height and the view (resize_kernels.h) the filters in taps are for (0: none) */
  ferry_scratch plan;     /* resize: the horizontal kernel's plan (resize_kernels.h) */
  ferry_scratch augment;  /* augment.c: branch B's resized image, before its crop */
  int plan_shape[5];      /* width, full_w, x, w, mirror: the columns the plan is for */
  const void *plan_kernels; /* the kernel set that laid it out (NULL: none) */
};

/* One decoded image, RGB8 with row stride 3*width, in the decoder's scratch. */
typedef struct ferry_decoded {
  const uint8_t *rgb;
  int width, height;           /* as decoded (smaller than the header when DCT-scaled) */
  int full_width, full_height; /* as stored in the header */
  int orientation;             /* EXIF Orientation 1..8 (1 when absent or invalid) */
} ferry_decoded;

/* Size requested by the resize that follows the decode (0: none), so the JPEG
 * decoder may pick a DCT scale. */
typedef struct ferry_decode_request {
  const ferry_image_options *opts;
  int target_size;
} ferry_decode_request;

/* The header parsers report FERRY_EAGAIN when `len` bytes end inside the header,
 * so ferry_image_probe_file can read more and retry. */
int ferry__jpeg_signature(const uint8_t *data, size_t len);
/* What the JPEG markers before the frame header say. */
typedef struct ferry_jpeg_info {
  int width, height, components;
  const uint8_t *exif; /* APP1 "Exif" payload (TIFF structure), NULL if none */
  size_t exif_len;
} ferry_jpeg_info;
ferry_status ferry__jpeg_header(const uint8_t *data, size_t len, const char *name,
                               ferry_jpeg_info *info);
ferry_status ferry__jpeg_decode(ferry_decoder *d, const uint8_t *data, size_t len, const char *name,
                               const ferry_decode_request *req, ferry_decoded *out);
void *ferry__jpeg_handle_open(void);
void ferry__jpeg_handle_close(void *tj);

int ferry__png_signature(const uint8_t *data, size_t len);
ferry_status ferry__png_header(const uint8_t *data, size_t len, const char *name, int *width,
                              int *height);
ferry_status ferry__png_decode(ferry_decoder *d, const uint8_t *data, size_t len, const char *name,
                              const ferry_decode_request *req, ferry_decoded *out);

/* FERRY_ELIMIT when width*height exceeds opts->max_pixels (0: no limit). */
ferry_status ferry__image_check_limit(const char *name, int width, int height,
                                     const ferry_image_options *opts);

/* The Orientation tag (1..8) of a TIFF-structured EXIF block (starting at the
 * "II"/"MM" byte order mark); 1 when absent or malformed. */
int ferry__exif_orientation(const uint8_t *tiff, size_t len);
/* Width/height after applying orientation o. */
void ferry__exif_oriented_size(int o, int width, int height, int *out_w, int *out_h);
/* Write src (width x height RGB8) into dst as Pillow's exif_transpose would. */
void ferry__exif_transpose(int o, const uint8_t *src, int width, int height, uint8_t *dst);

#endif
