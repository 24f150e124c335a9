/* tests/fuzz/fuzz_jpeg_entropy.c - image/jpeg_entropy.c against TurboJPEG.
 *
 * Input: the bytes of a JPEG file. The invariant is jpeg_entropy.h's contract: when
 * ferry's Huffman decoder says FERRY_OK, TurboJPEG decodes the same bytes without an
 * error (a warning about corrupt data is what jpeg.c accepts) and gives the same
 * pixels. Declining (FERRY_EAGAIN) is always allowed; nothing else is. The pixel limit
 * keeps a header that claims a huge image from becoming a fuzzer out-of-memory.
 */
#include <string.h>
#include <turbojpeg.h>

#include "ferry/error.h"
#include "ferry/image.h"
#include "image/jpeg_entropy.h"
#include "tests/fuzz/fuzz_check.h"

#define MAX_PIXELS (1u << 22)

static int turbojpeg_accepts(tjhandle tj, int rc) {
  return rc == 0 || (tjGetErrorCode(tj) == TJERR_WARNING &&
                     strncmp(tjGetErrorStr2(tj), "Corrupt JPEG data:", 18) == 0);
}

int FUZZ_ENTRY(const uint8_t *data, size_t size) {
  static ferry__jpeg_entropy *path;
  static unsigned char *mine, *theirs;
  if (!mine) {
    path = ferry__jpeg_entropy_open();
    mine = malloc(3u * MAX_PIXELS);
    theirs = malloc(3u * MAX_PIXELS);
    FUZZ_CHECK(mine && theirs);
  }
  if (!path) return 0; /* built without the path */
  /* ferry's own header walk: it reads no Huffman table, so the path sees every file
   * that has a frame header, including those whose tables libjpeg will refuse */
  int w, h;
  if (ferry_image_probe(data, size, "fuzz", &w, &h) != FERRY_OK) return 0;
  if (w <= 0 || h <= 0 || (uint64_t)w * (uint64_t)h > MAX_PIXELS) return 0;
  /* the scale from the input's last byte: full, or a draft's 1/2, 1/4, 1/8 */
  int scale = 1 << (data[size - 1] & 3);
  w = (w + scale - 1) / scale, h = (h + scale - 1) / scale;
  ferry_status st = ferry__jpeg_entropy_decode(path, data, size, "fuzz", mine, w, h, scale);
  FUZZ_CHECK(st == FERRY_OK || st == FERRY_EAGAIN);
  if (st != FERRY_OK) return 0;
  /* a handle per file, as jpeg.c: a reused one keeps the last file's tables */
  tjhandle tj = tjInitDecompress();
  FUZZ_CHECK(tj);
  int rc = tjDecompress2(tj, data, (unsigned long)size, theirs, w, 0, h, TJPF_RGB, TJFLAG_ACCURATEDCT);
  FUZZ_CHECK(turbojpeg_accepts(tj, rc));
  tjDestroy(tj);
  FUZZ_CHECK(memcmp(mine, theirs, (size_t)w * (size_t)h * 3) == 0);
  return 0;
}
