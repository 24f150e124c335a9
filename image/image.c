/* image/image.c - the decoder object, format dispatch, files, and the
 * decode -> orient -> resize path the loader calls once per sample.
 *
 * Owns the ferry_decoder (a TurboJPEG handle and the scratch buffers every part
 * of a decode writes into) and the public calls of ferry/image.h but the resize
 * (resize.c): options, decode modes, probing a header, decoding, loading a file.
 * Callers: a decoder is used by one thread at a time (the loader gives each worker
 * its own, workers.c); the calls that take none (probe, options, mode names,
 * scale_box) may run on any threads at once.
 *
 * Invariants:
 *   - a decoder's scratch only grows (scratch.c), so a worker stops allocating once
 *     it has seen its largest image; what decode_rgb and load_rgb return points into
 *     d->pixels and stays valid until the next decode on the same decoder;
 *   - after a decode, d->pixels holds the image as it is returned: oriented when
 *     apply_exif asked for it (the buffers are swapped, not copied);
 *   - the format is chosen by the file's signature, never by its name;
 *   - every failure's message starts with the file name, or "(memory)" for bytes
 *     given without one.
 * Not done here: the codecs (jpeg.c, png.c), the pixel limit (limits.c, which the
 * codecs apply to the header before decoding), EXIF parsing and rotation (exif.c),
 * resampling (resize.c). No limit on a file's size: an image file is read whole,
 * and only its pixel count is bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "image/geometry.h"
#include "image/decoder.h"
#include "image/exif.h"
#include "image/jpeg.h"
#include "image/png_codec.h"
#include "image/scratch.h"
#include "image/jpeg_entropy.h"

void ferry_image_options_default(ferry_image_options *o) {
  memset(o, 0, sizeof *o);
  o->dct_scaling = 0;
  o->apply_exif = 0;
  o->max_pixels = FERRY_IMAGE_DEFAULT_MAX_PIXELS;
  o->decode = FERRY_DECODE_CPU;
}

/* Indexed by ferry_decode_mode (CPU 0, GPU 1, AUTO 2). */
static const char *const decode_mode_names[] = {"cpu", "gpu", "auto"};

ferry_status ferry_decode_mode_parse(const char *name, ferry_decode_mode *out) {
  for (int m = 0; name && m < 3; m++)
    if (strcmp(name, decode_mode_names[m]) == 0) {
      *out = (ferry_decode_mode)m;
      return FERRY_OK;
    }
  return ferry__fail(FERRY_EINVAL, "decode mode '%s' is not cpu, gpu or auto", name ? name : "(null)");
}

const char *ferry_decode_mode_name(ferry_decode_mode mode) {
  return mode >= 0 && mode < 3 ? decode_mode_names[mode] : "?";
}

/* Only the TurboJPEG handle and jpeg_entropy.c's decompressor are made here; the
 * buffers start empty and grow on first use. */
ferry_status ferry_decoder_open(ferry_decoder **out) {
  if (!out) return ferry__fail(FERRY_EINVAL, "ferry_decoder_open: out is NULL");
  *out = NULL;
  ferry_decoder *d = ferry__calloc(1, sizeof *d);
  if (!d) return ferry__fail(FERRY_ENOMEM, "ferry_decoder_open: out of memory");
  d->tj = ferry__jpeg_handle_open();
  if (!d->tj) {
    ferry__free(d);
    return ferry__fail(FERRY_ENOMEM, "ferry_decoder_open: cannot create a TurboJPEG handle");
  }
  d->entropy = ferry__jpeg_entropy_open();
  if (!d->entropy && ferry__jpeg_entropy_available()) {
    ferry_decoder_close(d);
    return ferry__fail(FERRY_ENOMEM, "ferry_decoder_open: cannot create a libjpeg decompressor");
  }
  *out = d;
  return FERRY_OK;
}

void ferry_decoder_close(ferry_decoder *d) {
  if (!d) return;
  ferry__jpeg_handle_close(d->tj);
  ferry__jpeg_entropy_close(d->entropy);
  ferry__scratch_free(&d->file);
  ferry__scratch_free(&d->pixels);
  ferry__scratch_free(&d->aux);
  ferry__scratch_free(&d->rows);
  ferry__scratch_free(&d->taps);
  ferry__scratch_free(&d->plan);
  ferry__scratch_free(&d->augment);
  ferry__free(d);
}

/* ---- header-only size ---- */

/* FERRY_EAGAIN while the header is incomplete in data[0..len). Fewer than 8 bytes
 * that match neither signature may still be the start of one, hence EAGAIN rather
 * than "not a JPEG or PNG file". */
static ferry_status probe_prefix(const uint8_t *data, size_t len, const char *name, int *width,
                                 int *height) {
  if (ferry__jpeg_signature(data, len)) {
    ferry__jpeg_info info;
    ferry_status st = ferry__jpeg_header(data, len, name, &info);
    *width = info.width;
    *height = info.height;
    return st;
  }
  if (ferry__png_signature(data, len)) return ferry__png_header(data, len, name, width, height);
  if (len < 8) return FERRY_EAGAIN;
  return ferry__fail(FERRY_EUNSUPPORTED, "%s: not a JPEG or PNG file", name);
}

static ferry_status truncated_header(const char *name, size_t len) {
  if (len == 0) return ferry__fail(FERRY_EFORMAT, "%s: empty file", name);
  return ferry__fail(FERRY_EFORMAT, "%s: truncated: the file ends inside the image header", name);
}

ferry_status ferry_image_probe(const void *data, size_t len, const char *name, int *width,
                               int *height) {
  if (!name) name = "(memory)";
  if ((!data && len) || !width || !height)
    return ferry__fail(FERRY_EINVAL, "%s: ferry_image_probe: NULL argument", name);
  ferry_status st = probe_prefix(data, len, name, width, height);
  return st == FERRY_EAGAIN ? truncated_header(name, len) : st;
}

/* O_NONBLOCK: a FIFO (or a device) named like an image must fail the S_ISREG check,
 * not block the worker in open() forever; it changes nothing for regular files. */
static ferry_status open_file(const char *path, int *fd) {
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (*fd >= 0) return FERRY_OK;
  return ferry__fail(errno == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO, "%s: cannot open: %s", path,
                    strerror(errno));
}

/* Append up to `want` bytes from fd to buf[*len..]; 0 bytes read means end of file.
 * A read interrupted by a signal is retried, so a signal the process handles does
 * not fail a sample. */
static ferry_status read_more(int fd, const char *path, uint8_t *buf, size_t *len, size_t want,
                              size_t *got) {
  ssize_t n;
  do n = read(fd, buf + *len, want);
  while (n < 0 && errno == EINTR);
  if (n < 0) return ferry__fail(FERRY_EIO, "%s: read failed: %s", path, strerror(errno));
  *len += (size_t)n;
  *got = (size_t)n;
  return FERRY_OK;
}

/* Grow the read until the header parses; headers are small, EXIF blocks < 64 KiB. */
static ferry_status probe_fd(int fd, const char *path, int *width, int *height) {
  size_t cap = 4096, len = 0, got = 0;
  uint8_t *buf = NULL;
  ferry_status st;
  for (;;) {
    uint8_t *grown = ferry__realloc(buf, cap);
    if (!grown) {
      st = ferry__fail(FERRY_ENOMEM, "%s: out of memory while probing", path);
      break;
    }
    buf = grown;
    /* A short read leaves room: the buffer doubles only once it is full. */
    st = read_more(fd, path, buf, &len, cap - len, &got);
    if (st < 0) break;
    st = probe_prefix(buf, len, path, width, height);
    if (st != FERRY_EAGAIN) break;
    if (got == 0) {
      st = truncated_header(path, len);
      break;
    }
    if (len == cap) cap *= 2;
  }
  ferry__free(buf);
  return st;
}

ferry_status ferry_image_probe_file(const char *path, int *width, int *height) {
  if (!path || !width || !height)
    return ferry__fail(FERRY_EINVAL, "ferry_image_probe_file: NULL argument");
  int fd;
  ferry_status st = open_file(path, &fd);
  if (st < 0) return st;
  st = probe_fd(fd, path, width, height);
  close(fd);
  return st;
}

/* ---- decode ---- */

/* Orientation 1 costs nothing. Otherwise the image is transposed into d->aux and the
 * two buffers swap roles, so no copy back is made and both stay with the decoder for
 * the next image. The full (header) size is oriented too: the loader compares it with
 * the annotations (fill.c). */
static ferry_status apply_orientation(ferry_decoder *d, const char *name, ferry__decoded *img) {
  if (img->orientation == 1) return FERRY_OK;
  ferry_status st = ferry__scratch_reserve(&d->aux, (size_t)img->width * img->height * 3, name);
  if (st < 0) return st;
  ferry__exif_transpose(img->orientation, img->rgb, img->width, img->height, d->aux.data);
  ferry__scratch swap = d->pixels; /* the oriented image becomes "the pixels" */
  d->pixels = d->aux;
  d->aux = swap;
  img->rgb = d->pixels.data;
  ferry__exif_oriented_size(img->orientation, img->width, img->height, &img->width, &img->height);
  ferry__exif_oriented_size(img->orientation, img->full_width, img->full_height, &img->full_width,
                           &img->full_height);
  return FERRY_OK;
}

/* A file cut inside its signature is truncated, not of an unknown kind. */
static int signature_prefix(const uint8_t *data, size_t len) {
  static const uint8_t jpeg[3] = {0xFF, 0xD8, 0xFF};
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return (len < sizeof jpeg && memcmp(data, jpeg, len) == 0) ||
         (len < sizeof png && memcmp(data, png, len) == 0);
}

/* Dispatch on the signature, then orient. An empty file and one cut inside a
 * signature are told apart from other bytes, so that they say "empty" or
 * "truncated", not "not a JPEG or PNG file". */
static ferry_status decode_any(ferry_decoder *d, const void *data, size_t len, const char *name,
                               const ferry__decode_request *req, ferry__decoded *img) {
  if (len == 0) return truncated_header(name, 0); /* "empty file" */
  ferry_status st;
  if (ferry__jpeg_signature(data, len))
    st = ferry__jpeg_decode(d, data, len, name, req, img);
  else if (ferry__png_signature(data, len))
    st = ferry__png_decode(d, data, len, name, req, img);
  else if (signature_prefix(data, len))
    return truncated_header(name, len);
  else
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: not a JPEG or PNG file", name);
  if (st < 0) return st;
  return apply_orientation(d, name, img);
}

static ferry_status check_decode_args(ferry_decoder *d, const void *data, size_t len,
                                      const char *name) {
  if (!d || (!data && len))
    return ferry__fail(FERRY_EINVAL, "%s: image decode: NULL decoder or data", name);
  return FERRY_OK;
}

ferry_status ferry_decode_rgb(ferry_decoder *d, const void *data, size_t len, const char *name,
                              const ferry_image_options *opts, const uint8_t **out, int *width,
                              int *height) {
  ferry_image_options defaults;
  if (!name) name = "(memory)";
  ferry_status st = check_decode_args(d, data, len, name);
  if (st < 0) return st;
  if (!out || !width || !height)
    return ferry__fail(FERRY_EINVAL, "%s: ferry_decode_rgb: NULL output", name);
  if (!opts) ferry_image_options_default(&defaults);
  /* target_size 0: the full image is asked for, so no DCT-scaled decode. */
  ferry__decode_request req = {.opts = opts ? opts : &defaults, .target_size = 0};
  ferry__decoded img;
  st = decode_any(d, data, len, name, &req, &img);
  if (st < 0) return st;
  *out = img.rgb;
  *width = img.width;
  *height = img.height;
  return FERRY_OK;
}

ferry_status ferry_image_decode_resized(ferry_decoder *d, const void *data, size_t len,
                                        const char *name, const ferry_image_options *opts,
                                        int size, ferry_image_layout layout, void *dst,
                                        int *orig_w, int *orig_h) {
  ferry_image_options defaults;
  if (!name) name = "(memory)";
  ferry_status st = check_decode_args(d, data, len, name);
  if (st < 0) return st;
  if (!opts) ferry_image_options_default(&defaults);
  /* The size the resize will make, so that with dct_scaling a JPEG may be decoded
   * smaller (jpeg.c picks the scale); the reported size stays the full one. */
  ferry__decode_request req = {.opts = opts ? opts : &defaults, .target_size = size};
  ferry__decoded img;
  st = decode_any(d, data, len, name, &req, &img);
  if (st < 0) return st;
  st = ferry_image_resize(d, img.rgb, img.width, img.height, size, layout, dst);
  if (st < 0) return ferry__error_prefix(st, "%s: ", name);
  if (orig_w) *orig_w = img.full_width;
  if (orig_h) *orig_h = img.full_height;
  return FERRY_OK;
}

/* The whole file into d->file. fstat on the open descriptor, not stat on the path,
 * so the size and the type are those of the file being read. A file that shrinks
 * meanwhile gives fewer bytes (*len < size), which the codecs report as truncated; one
 * that grows is read up to its size at fstat. */
static ferry_status read_file(ferry_decoder *d, const char *path, size_t *len) {
  int fd;
  *len = 0;
  ferry_status st = open_file(path, &fd);
  if (st < 0) return st;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return ferry__fail(FERRY_EIO, "%s: not a regular file", path);
  }
  size_t size = (size_t)sb.st_size, got = 1;
  st = ferry__scratch_reserve(&d->file, size ? size : 1, path);
  while (st == FERRY_OK && *len < size && got > 0)
    st = read_more(fd, path, d->file.data, len, size - *len, &got);
  close(fd);
  return st;
}

ferry_status ferry_image_load_rgb(ferry_decoder *d, const char *path,
                                  const ferry_image_options *opts, const uint8_t **out,
                                  int *width, int *height) {
  if (!d || !path) return ferry__fail(FERRY_EINVAL, "ferry_image_load_rgb: NULL argument");
  size_t len;
  ferry_status st = read_file(d, path, &len);
  if (st < 0) return st;
  return ferry_decode_rgb(d, d->file.data, len, path, opts, out, width, height);
}

ferry_status ferry_image_load_resized(ferry_decoder *d, const char *path,
                                      const ferry_image_options *opts, int size,
                                      ferry_image_layout layout, void *dst, int *orig_w,
                                      int *orig_h) {
  if (!d || !path) return ferry__fail(FERRY_EINVAL, "ferry_image_load_resized: NULL argument");
  size_t len;
  ferry_status st = read_file(d, path, &len);
  if (st < 0) return st;
  return ferry_image_decode_resized(d, d->file.data, len, path, opts, size, layout, dst, orig_w,
                                    orig_h);
}

void ferry_image_scale_box(const float in[4], int orig_w, int orig_h, int size, float out[4]) {
  for (int k = 0; k < 4; k++) out[k] = in[k];
  ferry__boxes_scale(out, 1, (double)size / orig_w, (double)size / orig_h);
}
