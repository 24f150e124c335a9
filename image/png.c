/* image/png.c - PNG through libpng, every colour type and depth to RGB8.
 *
 * The conversions follow what Pillow's Image.open(...).convert("RGB") gives, the
 * reference the training pipelines use: alpha (and tRNS) is dropped, never
 * composited; palette and 1/2/4-bit gray expand to 0..255; 16-bit colour keeps the
 * high byte; 16-bit gray clamps to 255 (Pillow opens it as I;16, whose conversion
 * to 8 bits clips instead of scaling).
 *
 * Owns: one libpng read struct per decode, created and destroyed inside
 * ferry__png_decode; the RGB8 result goes to the decoder's scratch (d->pixels).
 * Callers: image.c, on the thread that owns the decoder; the IHDR parser also for the
 * header-only probe. libpng reports errors by longjmp, so everything between
 * png_read_info and the last row runs below one setjmp (run_decode), and nothing
 * allocated there may be lost by the jump: libpng's own memory is freed with its
 * struct, and the pixels live in the decoder's scratch, not on that stack.
 * Invariants: the size is checked against max_pixels right after png_read_info,
 * before the pixel buffer is reserved (limits.c); libpng allocates through
 * ferry__malloc (so tests can fail its allocations, and an out-of-memory is
 * FERRY_ENOMEM, not a format error); the input is read from memory and never past
 * `len`, and no chunk before IDAT claims more bytes than the file has left (checked
 * before libpng runs, which would reserve what it claims).
 * Not done here: gamma, ICC and colour chunks are ignored, as Pillow's convert
 * ignores them; chunks after the image data are never read (png_read_end is not
 * called), so only an eXIf chunk that precedes IDAT gives an orientation.
 */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "image/decoder.h"
#include "image/exif.h"
#include "image/pixel_limit.h"
#include "image/png_codec.h"
#include "image/scratch.h"

int ferry__png_signature(const uint8_t *data, size_t len) {
  return len >= 8 && png_sig_cmp((png_const_bytep)data, 0, 8) == 0;
}

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* IHDR from the bytes: the signature (8), the chunk length 13 (4) and "IHDR" (4), then
 * width and height (4 each). PNG limits both to 2^31-1, so they fit an int. */
ferry_status ferry__png_header(const uint8_t *data, size_t len, const char *name, int *width,
                              int *height) {
  if (len < 24) return FERRY_EAGAIN;
  if (be32(data + 8) != 13 || memcmp(data + 12, "IHDR", 4) != 0)
    return ferry__fail(FERRY_EFORMAT, "%s: PNG: the first chunk is not IHDR", name);
  uint32_t w = be32(data + 16), h = be32(data + 20);
  if (w == 0 || h == 0 || w > PNG_UINT_31_MAX || h > PNG_UINT_31_MAX)
    return ferry__fail(FERRY_EFORMAT, "%s: PNG: invalid size %ux%u in IHDR", name, w, h);
  *width = (int)w;
  *height = (int)h;
  return FERRY_OK;
}

/* State libpng's callbacks reach through their user pointers. */
typedef struct png_source {
  const uint8_t *data;
  size_t len, pos;
  int out_of_memory;
  char message[200];
} png_source;

/* libpng's read callback over the buffer: a file that ends early is libpng's error,
 * so it longjmps out like any other. */
static void read_bytes(png_structp png, png_bytep out, size_t n) {
  png_source *src = png_get_io_ptr(png);
  if (n > src->len - src->pos) png_error(png, "file is truncated");
  memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

/* The message is copied before the jump: libpng may have formatted it in a frame
 * that the jump unwinds (png_chunk_error does, on its stack). It is reported, with
 * the file's name, back at the setjmp. */
static void on_error(png_structp png, png_const_charp msg) {
  png_source *src = png_get_error_ptr(png);
  snprintf(src->message, sizeof src->message, "%s", msg);
  png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk, an unknown sRGB profile) do not stop Pillow either. */
static void on_warning(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

/* Inside libpng a NULL becomes a png_error (or a warning and a fallback); the flag
 * lets run_decode report an error after it as out of memory, not as bad data. */
static png_voidp on_malloc(png_structp png, png_alloc_size_t size) {
  void *p = ferry__malloc(size);
  if (!p) ((png_source *)png_get_mem_ptr(png))->out_of_memory = 1;
  return p;
}

static void on_free(png_structp png, png_voidp p) {
  (void)png;
  ferry__free(p);
}

/* Ask libpng for 8-bit RGB (or 16-bit RGB for 16-bit gray, clamped afterwards).
 * Palette expansion would turn a tRNS chunk into alpha; strip_alpha drops it, with
 * any alpha channel, uncomposited. libpng's strip_16 keeps the high byte, as
 * Pillow's RGB;16B unpacker does; only 16-bit gray cannot use it (Pillow clips). */
static int request_rgb(png_structp png, png_infop info) {
  int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  int gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !gray16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (!(color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  return gray16;
}

/* In place: 16-bit big-endian samples to 8 bits, clamping as Pillow's I;16 -> L.
 * Sample i is read from bytes 2i and 2i+1 and written to byte i <= 2i, so no write
 * lands on a byte still to be read. */
static void clamp16_to_8(uint8_t *buf, size_t samples) {
  for (size_t i = 0; i < samples; i++) buf[i] = buf[2 * i] ? 255 : buf[2 * i + 1];
}

static int exif_orientation_of(png_structp png, png_infop info) {
  png_uint_32 n = 0;
  png_bytep exif = NULL;
  if (!png_get_eXIf_1(png, info, &n, &exif) || !exif) return 1;
  return ferry__exif_orientation(exif, n);
}

/* Everything between png_read_info and the last row; runs under setjmp. */
static ferry_status decode_rows(ferry_decoder *d, png_structp png, png_infop info, const char *name,
                                const ferry__decode_request *req, ferry__decoded *out) {
  png_read_info(png, info);
  int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
  ferry_status st = ferry__image_check_limit(name, w, h, req->opts);
  if (st < 0) return st;
  int gray16 = request_rgb(png, info);
  int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  size_t row_bytes = png_get_rowbytes(png, info);
  size_t want = (size_t)w * 3 * (gray16 ? 2 : 1);
  /* What the transforms above promise for every valid colour type and depth; were
   * libpng to give anything else, rows would not fit the buffer below. */
  if (png_get_channels(png, info) != 3 || row_bytes != want)
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: PNG: cannot convert this colour type to RGB",
                      name);
  st = ferry__scratch_reserve(&d->pixels, row_bytes * (size_t)h, name);
  if (st < 0) return st;
  uint8_t *pixels = d->pixels.data;
  /* Every pass over the whole image in place: libpng fills in each pass's pixels of
   * a row and keeps what earlier passes wrote, so the last pass leaves the full
   * image. */
  for (int pass = 0; pass < passes; pass++)
    for (int y = 0; y < h; y++) png_read_row(png, pixels + (size_t)y * row_bytes, NULL);
  if (gray16) clamp16_to_8(pixels, (size_t)w * (size_t)h * 3);
  out->rgb = pixels;
  out->width = out->full_width = w;
  out->height = out->full_height = h;
  out->orientation = req->opts->apply_exif ? exif_orientation_of(png, info) : 1;
  return FERRY_OK;
}

static ferry_status run_decode(ferry_decoder *d, png_structp png, png_infop info, png_source *src, const char *name,
                               const ferry__decode_request *req, ferry__decoded *out) {
  /* Locals changed after setjmp are volatile so a longjmp cannot lose them. */
  volatile ferry_status st = FERRY_OK;
  if (setjmp(png_jmpbuf(png))) {
    if (src->out_of_memory) return ferry__fail(FERRY_ENOMEM, "%s: PNG: out of memory", name);
    return ferry__fail(FERRY_EFORMAT, "%s: PNG: %s", name, src->message);
  }
  st = decode_rows(d, png, info, name, req, out);
  return st;
}

/* Every chunk before the first IDAT (all that png_read_info reads), walked in the
 * bytes: none may claim more bytes than the file has left. libpng reserves an
 * ancillary chunk's claimed length before reading it, and neither Debian's build nor
 * a png_set_chunk_malloc_max cap stops it (its "chunk data is too large" is a benign
 * error, a warning when reading), so a file of a few hundred bytes claiming a 700 MB
 * eXIf asked for 700 MB (fuzz_png). A file that ends inside a chunk header is left to
 * libpng, which says it is truncated. */
static ferry_status check_chunk_lengths(const uint8_t *data, size_t len, const char *name) {
  for (size_t at = 8; at + 8 <= len;) {
    const uint8_t *type = data + at + 4;
    uint32_t claimed = be32(data + at);
    if (memcmp(type, "IDAT", 4) == 0) break; /* streamed through zlib, never reserved whole */
    if (claimed > len - at - 8 || len - at - 8 - claimed < 4) { /* its data, then its CRC */
      int letters = 1;
      for (int i = 0; i < 4; i++) letters &= (type[i] | 0x20) >= 'a' && (type[i] | 0x20) <= 'z';
      return ferry__fail(FERRY_EFORMAT, "%s: PNG: chunk '%.4s' at byte %zu claims %u bytes, past the end of the file",
                         name, letters ? (const char *)type : "????", at, claimed);
    }
    at += 12 + (size_t)claimed;
  }
  return FERRY_OK;
}

ferry_status ferry__png_decode(ferry_decoder *d, const uint8_t *data, size_t len, const char *name,
                               const ferry__decode_request *req, ferry__decoded *out) {
  ferry_status checked = check_chunk_lengths(data, len, name);
  if (checked < 0) return checked;
  /* src outlives every callback: it is on this frame, which the jump back into
   * run_decode leaves intact */
  png_source src = {.data = data, .len = len};
  png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning,
                                             &src, on_malloc, on_free);
  if (!png) return ferry__fail(FERRY_ENOMEM, "%s: PNG: out of memory", name);
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    return ferry__fail(FERRY_ENOMEM, "%s: PNG: out of memory", name);
  }
  png_set_read_fn(png, &src, read_bytes);
  ferry_status st = run_decode(d, png, info, &src, name, req, out);
  png_destroy_read_struct(&png, &info, NULL);
  return st;
}
