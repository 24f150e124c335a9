/* tests/image/test_image_tool.c - command-line access to the image decoder, so
 * test_image_pillow.py can compare its output with Pillow's.
 *
 *   test_image_tool [--exif] [--dct] decode FILE OUT        RGB8 HWC, prints "W H"
 *   test_image_tool [--exif] [--dct] u8 FILE SIZE OUT       resized u8 HWC, prints "W H" (original)
 *   test_image_tool [--exif] [--dct] f32 FILE SIZE OUT      resized normalised f32 CHW
 *   test_image_tool probe FILE                              prints "W H" from the header
 * Exits 1 with ferry's message on stderr when the call fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/image.h"

static int fail(const char *what) {
  fprintf(stderr, "%s: %s\n", what, ferry_last_error());
  return 1;
}

static int write_all(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n) {
    perror(path);
    if (f) fclose(f);
    return 1;
  }
  return fclose(f) != 0;
}

static int read_all(const char *path, unsigned char **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = malloc(n > 0 ? (size_t)n : 1);
  *len = *data ? fread(*data, 1, (size_t)n, f) : 0;
  fclose(f);
  return !*data;
}

static int decode(ferry_decoder *d, const ferry_image_options *o, const char *file,
                  const char *out) {
  unsigned char *data;
  size_t len;
  if (read_all(file, &data, &len)) return fail(file);
  const uint8_t *rgb;
  int w, h;
  ferry_status st = ferry_decode_rgb(d, data, len, file, o, &rgb, &w, &h);
  free(data);
  if (st < 0) return fail("decode");
  printf("%d %d\n", w, h);
  return write_all(out, rgb, (size_t)w * h * 3);
}

static int resize(ferry_decoder *d, const ferry_image_options *o, ferry_image_layout layout,
                  const char *file, int size, const char *out) {
  size_t n = (size_t)size * size * 3 * (layout == FERRY_LAYOUT_F32_CHW ? sizeof(float) : 1);
  void *dst = malloc(n);
  int w, h;
  if (!dst) return 1;
  ferry_status st = ferry_image_load_resized(d, file, o, size, layout, dst, &w, &h);
  int rc = st < 0 ? fail("resize") : (printf("%d %d\n", w, h), write_all(out, dst, n));
  free(dst);
  return rc;
}

int main(int argc, char **argv) {
  ferry_image_options o;
  ferry_image_options_default(&o);
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    if (strcmp(argv[i], "--exif") == 0) o.apply_exif = 1;
    if (strcmp(argv[i], "--dct") == 0) o.dct_scaling = 1;
  }
  if (i + 1 >= argc) {
    fprintf(stderr, "usage: see the comment at the top of test_image_tool.c\n");
    return 2;
  }
  const char *cmd = argv[i];
  if (strcmp(cmd, "probe") == 0) {
    int w, h;
    if (ferry_image_probe_file(argv[i + 1], &w, &h) < 0) return fail("probe");
    printf("%d %d\n", w, h);
    return 0;
  }
  ferry_decoder *d;
  if (ferry_decoder_open(&d) < 0) return fail("open");
  int rc = 2;
  if (strcmp(cmd, "decode") == 0 && i + 2 < argc)
    rc = decode(d, &o, argv[i + 1], argv[i + 2]);
  else if ((strcmp(cmd, "u8") == 0 || strcmp(cmd, "f32") == 0) && i + 3 < argc)
    rc = resize(d, &o, strcmp(cmd, "u8") == 0 ? FERRY_LAYOUT_U8_HWC : FERRY_LAYOUT_F32_CHW,
                argv[i + 1], atoi(argv[i + 2]), argv[i + 3]);
  ferry_decoder_close(d);
  return rc;
}
