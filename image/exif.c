/* image/exif.c - the EXIF Orientation tag, and applying it like Pillow.
 *
 * Only IFD0's tag 0x0112 matters here. Every offset is checked against the
 * block's length: EXIF comes from arbitrary files, and a bad block means
 * "no orientation", never an error (Pillow's exif_transpose ignores it too).
 *
 * Callers: jpeg.c (the APP1 "Exif" payload) and png.c (the eXIf chunk) read the tag
 * when ferry_image_options.apply_exif is set; image.c's apply_orientation sizes the
 * result and transposes into the decoder's scratch. All three run on the thread that
 * owns the decoder; nothing here keeps state, so any number of threads at once.
 * Invariants: ferry__exif_orientation returns 1..8 whatever the bytes; every read is
 * bounds-checked before it is made, so a block can be cut anywhere; the transpose
 * reads each source pixel and writes each output pixel exactly once (a bijection),
 * and never works in place.
 * Not done here: any other tag (no thumbnail, no resolution, no colour space), EXIF
 * in PNG text chunks, writing EXIF back.
 */
#include <string.h>

#include "image/exif.h"

static unsigned read16(const uint8_t *p, int big_endian) {
  return big_endian ? (unsigned)p[0] << 8 | p[1] : (unsigned)p[1] << 8 | p[0];
}

static uint32_t read32(const uint8_t *p, int big_endian) {
  return big_endian ? (uint32_t)read16(p, 1) << 16 | read16(p + 2, 1)
                    : (uint32_t)read16(p + 2, 0) << 16 | read16(p, 0);
}

int ferry__exif_orientation(const uint8_t *tiff, size_t len) {
  /* the TIFF header: byte order mark, 42, offset of IFD0 */
  if (len < 8) return 1;
  int big_endian;
  if (memcmp(tiff, "MM", 2) == 0)
    big_endian = 1;
  else if (memcmp(tiff, "II", 2) == 0)
    big_endian = 0;
  else
    return 1;
  if (read16(tiff + 2, big_endian) != 42) return 1;
  uint32_t ifd = read32(tiff + 4, big_endian);
  /* len >= 8: no underflow; room for the entry count */
  if (ifd > len - 2) return 1;
  unsigned entries = read16(tiff + ifd, big_endian);
  /* 12-byte entries: tag, type, count, value or offset. The first 0x0112 decides. */
  for (unsigned i = 0; i < entries; i++) {
    size_t at = (size_t)ifd + 2 + (size_t)i * 12;
    if (at + 12 > len) return 1;
    if (read16(tiff + at, big_endian) != 0x0112) continue;
    /* type SHORT (3), count 1: the value sits in the entry's first two value bytes */
    if (read16(tiff + at + 2, big_endian) != 3) return 1;
    unsigned o = read16(tiff + at + 8, big_endian);
    return o >= 1 && o <= 8 ? (int)o : 1;
  }
  return 1;
}

/* Orientations 5..8 swap the axes (transposes and quarter turns). */
static int swaps_axes(int o) { return o >= 5 && o <= 8; }

void ferry__exif_oriented_size(int o, int width, int height, int *out_w, int *out_h) {
  *out_w = swaps_axes(o) ? height : width;
  *out_h = swaps_axes(o) ? width : height;
}

/* The source pixel shown at (x, y) of the oriented image (ow x oh), for the
 * transposes Pillow's exif_transpose applies: 2 mirror, 3 rotate 180, 4 flip,
 * 5 transpose, 6 rotate 270 (clockwise 90), 7 transverse, 8 rotate 90. */
static void source_of(int o, int x, int y, int ow, int oh, int *sx, int *sy) {
  switch (o) {
    case 2: *sx = ow - 1 - x; *sy = y; break;
    case 3: *sx = ow - 1 - x; *sy = oh - 1 - y; break;
    case 4: *sx = x; *sy = oh - 1 - y; break;
    case 5: *sx = y; *sy = x; break;
    case 6: *sx = y; *sy = ow - 1 - x; break;
    case 7: *sx = oh - 1 - y; *sy = ow - 1 - x; break;
    case 8: *sx = oh - 1 - y; *sy = x; break;
    default: *sx = x; *sy = y; break;
  }
}

/* One pixel at a time through source_of: simple rather than fast, and it runs only
 * for photos that carry an orientation other than 1 with apply_exif set. */
void ferry__exif_transpose(int o, const uint8_t *src, int width, int height, uint8_t *dst) {
  int ow, oh;
  ferry__exif_oriented_size(o, width, height, &ow, &oh);
  for (int y = 0; y < oh; y++) {
    for (int x = 0; x < ow; x++) {
      int sx, sy;
      source_of(o, x, y, ow, oh, &sx, &sy);
      memcpy(dst + ((size_t)y * ow + x) * 3, src + ((size_t)sy * width + sx) * 3, 3);
    }
  }
}
