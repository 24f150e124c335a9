/* Image decoding: real files, djpeg parity, every PNG kind, errors, limits, EXIF, CMYK. */
#include <ftw.h>
#include <png.h>
#include <pthread.h>
#include <turbojpeg.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/alloc.h"
#include "image/decoder.h"
#include "image/exif.h"
#include "image/jpeg.h"
#include "test_image_util.h"

/* ---- every real image ---- */

enum { MAX_FILES = 512 };
static char *found[MAX_FILES];
static int n_found;

static int has_suffix(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcasecmp(s + a - b, suffix) == 0;
}

static int collect(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb;
  (void)ftw;
  if (type == FTW_F && n_found < MAX_FILES &&
      (has_suffix(path, ".jpg") || has_suffix(path, ".jpeg") || has_suffix(path, ".png")))
    found[n_found++] = strdup(path);
  return 0;
}

static void collect_real_images(void) {
  char root[1024];
  n_found = 0;
  cr_assert_eq(nftw(realdata(root, sizeof root, ""), collect, 16, FTW_PHYS), 0);
}

static void free_found(void) {
  for (int i = 0; i < n_found; i++) free(found[i]);
  n_found = 0;
}

Test(image_decode, every_real_image_decodes_to_its_header_size, .timeout = 120) {
  collect_real_images();
  cr_assert_geq(n_found, 170, "found only %d images under realdata", n_found);
  ferry_decoder *d = open_decoder();
  int truncated_seen = 0;
  for (int i = 0; i < n_found; i++) {
    const char *path = found[i];
    size_t len;
    unsigned char *data = slurp(path, &len);
    int fw, fh, mw, mh, w, h;
    const uint8_t *rgb;
    ferry_status st = ferry_decode_rgb(d, data, len, path, NULL, &rgb, &w, &h);
    if (has_suffix(path, "photos/skimage/truncated.jpg")) {
      truncated_seen = 1;
      cr_assert_eq(st, FERRY_EFORMAT, "%s must fail", path);
      assert_error_names(path);
      free(data);
      continue;
    }
    cr_assert_eq(st, FERRY_OK, "%s", ferry_last_error());
    cr_assert_eq(ferry_image_probe_file(path, &fw, &fh), FERRY_OK, "%s", ferry_last_error());
    cr_assert_eq(ferry_image_probe(data, len, path, &mw, &mh), FERRY_OK, "%s", ferry_last_error());
    cr_assert(w == fw && h == fh && w == mw && h == mh, "%s: decoded %dx%d, header %dx%d", path,
              w, h, fw, fh);
    free(data);
  }
  cr_assert(truncated_seen, "photos/skimage/truncated.jpg not found");
  ferry_decoder_close(d);
  free_found();
}

/* ---- djpeg parity ---- */

/* Read djpeg's PNM output (P6, or P5 for grayscale expanded to RGB). */
static unsigned char *djpeg_rgb(const char *path, int *w, int *h) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "djpeg -ppm '%s'", path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char magic[3] = {0};
  int maxval;
  cr_assert_eq(fscanf(p, "%2s %d %d %d", magic, w, h, &maxval), 4, "djpeg output of %s", path);
  fgetc(p);
  int gray = strcmp(magic, "P5") == 0;
  cr_assert(gray || strcmp(magic, "P6") == 0);
  size_t n = (size_t)*w * *h;
  unsigned char *rgb = malloc(n * 3);
  cr_assert_eq(fread(rgb, gray ? 1 : 3, n, p), n);
  pclose(p);
  for (size_t i = n; gray && i-- > 0;) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = rgb[i];
  return rgb;
}

Test(image_decode, jpeg_pixels_equal_djpeg, .timeout = 120) {
  if (system("command -v djpeg > /dev/null 2>&1") != 0) {
    if (getenv("CI")) cr_assert_fail("CI is set but djpeg (libjpeg-turbo-progs) is missing");
    cr_skip_test("skipped: djpeg not installed");
  }
  static const char *files[] = {
      "photos/dali_jpeg_subsampling/410.jpg", "photos/dali_jpeg_subsampling/411.jpg",
      "photos/dali_jpeg_subsampling/411-non-multiple-4-width.jpg",
      "photos/dali_jpeg_subsampling/420-odd-both.jpg",
      "photos/dali_jpeg_subsampling/420-odd-height.jpg",
      "photos/dali_jpeg_subsampling/420-odd-width.jpg",
      "photos/dali_jpeg_subsampling/422-odd-width.jpg", "photos/dali_jpeg_subsampling/440.jpg",
      "photos/dali_jpeg_subsampling/444.jpg", "photos/dali_jpeg_subsampling/2x4.jpg",
      "photos/mmcv/grayscale.jpg", "photos/mmcv/color_exif.jpg",
      "dali_coco/coco/images/animal-3099035_1280.jpg",   /* progressive */
      "dali_coco/coco/images/banana-2449019_1280.jpg",   /* baseline */
      "datumaro_coco/coco/images/val/b.jpg",
  };
  ferry_decoder *d = open_decoder();
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[1024];
    realdata(path, sizeof path, files[i]);
    if (access(path, R_OK) != 0) cr_assert_fail("%s missing", path);
    int dw, dh, w, h;
    unsigned char *want = djpeg_rgb(path, &dw, &dh);
    size_t len;
    unsigned char *data = slurp(path, &len);
    const uint8_t *got;
    cr_assert_eq(ferry_decode_rgb(d, data, len, path, NULL, &got, &w, &h), FERRY_OK, "%s",
                 ferry_last_error());
    cr_assert(w == dw && h == dh, "%s: %dx%d vs djpeg %dx%d", path, w, h, dw, dh);
    cr_assert_eq(memcmp(got, want, (size_t)w * h * 3), 0, "%s: pixels differ from djpeg", path);
    free(want);
    free(data);
  }
  ferry_decoder_close(d);
}

/* ---- PNG kinds, written with libpng, expected values from the format's rules ---- */

typedef struct mem_png {
  unsigned char *data;
  size_t len, cap;
} mem_png;

static void mem_write(png_structp png, png_bytep bytes, size_t n) {
  mem_png *m = png_get_io_ptr(png);
  if (m->len + n > m->cap) {
    m->cap = (m->len + n) * 2;
    m->data = realloc(m->data, m->cap);
    cr_assert_not_null(m->data);
  }
  memcpy(m->data + m->len, bytes, n);
  m->len += n;
}
static void mem_flush(png_structp png) { (void)png; }

typedef struct png_kind {
  int color, depth, interlace;
} png_kind;

static int channels_of(int color) {
  switch (color) {
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;
  }
}

/* Deterministic sample for (x, y, channel) within the depth's range. */
static unsigned sample_at(int x, int y, int c, int depth) {
  unsigned v = (unsigned)(x * 7919 + y * 104729 + c * 31337) * 2654435761u >> 7;
  if (depth == 16 && c == 0 && (x + y) % 3 == 0) v &= 0xFF; /* some 16-bit values < 256 */
  return v & ((1u << depth) - 1);
}

static png_color palette_entry(int i) {
  png_color c = {(png_byte)(i * 37 + 11), (png_byte)(255 - i * 13), (png_byte)(i * i)};
  return c;
}

/* Pack and write the image; libpng handles interlacing. */
static mem_png write_kind(png_kind k, int w, int h) {
  mem_png m = {0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  cr_assert(png && info);
  if (setjmp(png_jmpbuf(png))) cr_assert_fail("libpng write failed");
  png_set_write_fn(png, &m, mem_write, mem_flush);
  png_set_IHDR(png, info, w, h, k.depth, k.color,
               k.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (k.color == PNG_COLOR_TYPE_PALETTE) {
    png_color pal[256];
    png_byte trns[4] = {0, 64, 128, 255};
    for (int i = 0; i < 256; i++) pal[i] = palette_entry(i);
    png_set_PLTE(png, info, pal, 1 << k.depth);
    png_set_tRNS(png, info, trns, k.depth >= 2 ? 4 : 2, NULL); /* must be dropped, not applied */
  }
  png_write_info(png, info);
  int ch = channels_of(k.color), bits = ch * k.depth;
  size_t row_bytes = ((size_t)w * bits + 7) / 8;
  png_bytep *rows = calloc((size_t)h, sizeof *rows);
  for (int y = 0; y < h; y++) {
    rows[y] = calloc(row_bytes, 1);
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++) {
        unsigned v = sample_at(x, y, c, k.depth);
        size_t bit = ((size_t)x * ch + c) * k.depth;
        if (k.depth == 16) {
          rows[y][bit / 8] = (png_byte)(v >> 8);
          rows[y][bit / 8 + 1] = (png_byte)v;
        } else {
          rows[y][bit / 8] |= (png_byte)(v << (8 - k.depth - bit % 8));
        }
      }
  }
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  for (int y = 0; y < h; y++) free(rows[y]);
  free(rows);
  return m;
}

/* One channel of the sample to 8 bits, as Pillow's convert("RGB") does. */
static unsigned to8(unsigned v, int depth, int gray_only) {
  if (depth == 16) return gray_only ? (v > 255 ? 255 : v) : v >> 8;
  return v * 255 / ((1u << depth) - 1);
}

static void expected_pixel(png_kind k, int x, int y, unsigned char out[3]) {
  if (k.color == PNG_COLOR_TYPE_PALETTE) {
    png_color c = palette_entry((int)sample_at(x, y, 0, k.depth));
    out[0] = c.red, out[1] = c.green, out[2] = c.blue;
    return;
  }
  int gray = !(k.color & PNG_COLOR_MASK_COLOR);
  int gray_only = k.color == PNG_COLOR_TYPE_GRAY;
  for (int c = 0; c < 3; c++)
    out[c] = (unsigned char)to8(sample_at(x, y, gray ? 0 : c, k.depth), k.depth, gray_only);
}

Test(image_decode, every_png_kind_decodes_to_rgb8_like_pillow) {
  static const png_kind kinds[] = {
      {PNG_COLOR_TYPE_GRAY, 1, 0},       {PNG_COLOR_TYPE_GRAY, 2, 0},
      {PNG_COLOR_TYPE_GRAY, 4, 0},       {PNG_COLOR_TYPE_GRAY, 8, 0},
      {PNG_COLOR_TYPE_GRAY, 16, 0},      {PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0},
      {PNG_COLOR_TYPE_GRAY_ALPHA, 16, 0}, {PNG_COLOR_TYPE_PALETTE, 1, 0},
      {PNG_COLOR_TYPE_PALETTE, 2, 0},    {PNG_COLOR_TYPE_PALETTE, 4, 0},
      {PNG_COLOR_TYPE_PALETTE, 8, 0},    {PNG_COLOR_TYPE_RGB, 8, 0},
      {PNG_COLOR_TYPE_RGB, 16, 0},       {PNG_COLOR_TYPE_RGB_ALPHA, 8, 0},
      {PNG_COLOR_TYPE_RGB_ALPHA, 16, 0},
  };
  ferry_decoder *d = open_decoder();
  const int w = 19, h = 13; /* odd sizes exercise partial bytes and Adam7's short passes */
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
    for (int interlace = 0; interlace < 2; interlace++) {
      png_kind k = kinds[i];
      k.interlace = interlace;
      mem_png m = write_kind(k, w, h);
      const uint8_t *rgb;
      int gw, gh;
      cr_assert_eq(ferry_decode_rgb(d, m.data, m.len, "kind.png", NULL, &rgb, &gw, &gh), FERRY_OK,
                   "color %d depth %d: %s", k.color, k.depth, ferry_last_error());
      cr_assert(gw == w && gh == h);
      for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
          unsigned char want[3];
          expected_pixel(k, x, y, want);
          const uint8_t *got = rgb + ((size_t)y * w + x) * 3;
          cr_assert(memcmp(got, want, 3) == 0,
                    "color %d depth %d interlace %d at (%d,%d): got %u,%u,%u want %u,%u,%u",
                    k.color, k.depth, interlace, x, y, got[0], got[1], got[2], want[0], want[1],
                    want[2]);
        }
      free(m.data);
    }
  }
  ferry_decoder_close(d);
}

Test(image_decode, real_png_kinds_are_covered) {
  /* palette, 1-bit, 16-bit, RGBA, gray: the kinds the realdata README lists */
  static const char *files[] = {"photos/skimage/palette_color.png",
                                "photos/skimage/checker_bilevel.png",
                                "photos/skimage/chessboard_RGB.png", "photos/skimage/horse.png",
                                "photos/skimage/camera.png", "photos/skimage/foo3x5x4indexed.png"};
  ferry_decoder *d = open_decoder();
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[1024];
    size_t len;
    unsigned char *data = slurp(realdata(path, sizeof path, files[i]), &len);
    const uint8_t *rgb;
    int w, h;
    cr_assert_eq(ferry_decode_rgb(d, data, len, path, NULL, &rgb, &w, &h), FERRY_OK, "%s",
                 ferry_last_error());
    if (strstr(path, "checker_bilevel") || strstr(path, "camera"))
      for (size_t p = 0; p < (size_t)w * h; p++) {
        cr_assert(rgb[3 * p] == rgb[3 * p + 1] && rgb[3 * p] == rgb[3 * p + 2], "%s: gray", path);
        if (strstr(path, "checker_bilevel")) cr_assert(rgb[3 * p] == 0 || rgb[3 * p] == 255);
      }
    free(data);
  }
  ferry_decoder_close(d);
}

/* ---- errors ---- */

static void assert_decode_fails(ferry_decoder *d, const void *data, size_t len, const char *name,
                                ferry_status want) {
  const uint8_t *rgb;
  int w, h;
  ferry_status st = ferry_decode_rgb(d, data, len, name, NULL, &rgb, &w, &h);
  cr_assert_eq(st, want, "%s: got %d (%s), want %d", name, st, ferry_last_error(), want);
  assert_error_names(name);
}

Test(image_decode, truncated_files_fail_naming_the_file) {
  static const char *files[] = {"photos/mmcv/color.jpg",
                                "dali_coco/coco/images/animal-3099035_1280.jpg",
                                "photos/skimage/coffee.png", "photos/skimage/palette_color.png"};
  ferry_decoder *d = open_decoder();
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[1024];
    size_t len;
    unsigned char *data = slurp(realdata(path, sizeof path, files[i]), &len);
    /* cut in the header, in the middle of the data, and just before the end marker */
    size_t cuts[] = {1, 5, 30, len / 3, len / 2, len - 20};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
      char name[1100];
      snprintf(name, sizeof name, "%s[:%zu]", path, cuts[c]);
      assert_decode_fails(d, data, cuts[c], name, FERRY_EFORMAT);
    }
    free(data);
  }
  ferry_decoder_close(d);
}

/* The file's bytes with a chunk header spliced in after IHDR, claiming `claimed` bytes
 * that the file does not have. */
static mem_png with_chunk_claiming(const mem_png *m, const char type[4], uint32_t claimed) {
  const size_t at = 8 + 4 + 4 + 13 + 4; /* the signature, then IHDR's length, type, data, CRC */
  mem_png out = {malloc(m->len + 12), m->len + 12, m->len + 12};
  cr_assert(out.data);
  unsigned char header[12] = {(unsigned char)(claimed >> 24), (unsigned char)(claimed >> 16),
                              (unsigned char)(claimed >> 8), (unsigned char)claimed,
                              type[0], type[1], type[2], type[3], 'M', 'M', 0, 42};
  memcpy(out.data, m->data, at);
  memcpy(out.data + at, header, sizeof header);
  memcpy(out.data + at + sizeof header, m->data + at, m->len - at);
  return out;
}

/* Address space now, from /proc/self/status's VmSize. */
static size_t address_space_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

/* A chunk claiming more than the whole file (an eXIf of 704 MB ahead of IDAT in a file
 * of a few hundred bytes: fuzz_png found it) is refused from its header, before libpng
 * reserves its length. Decoded in a child whose address space is capped 256 MB above
 * what it has, it must be a format error naming the file, not an out-of-memory (which
 * it was: libpng asked for the 704 MB). Sanitizer builds reserve terabytes of address
 * space for their shadow, so the cap cannot be set there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif
Test(image_decode, a_chunk_longer_than_the_file_is_refused_before_it_is_reserved) {
  if (UNDER_SANITIZER) {
    cr_skip_test("an address-space cap cannot be set under a sanitizer");
    return;
  }
  mem_png m = write_kind((png_kind){PNG_COLOR_TYPE_RGB, 8, 0}, 19, 13);
  mem_png bad = with_chunk_claiming(&m, "eXIf", 0x2A000000u);
  ferry_decoder *d = open_decoder();
  fflush(NULL);
  pid_t child = fork();
  cr_assert(child >= 0);
  if (child == 0) {
    struct rlimit cap = {address_space_bytes() + ((size_t)256 << 20), RLIM_INFINITY};
    cap.rlim_max = cap.rlim_cur;
    if (setrlimit(RLIMIT_AS, &cap) != 0) _exit(4);
    const uint8_t *rgb;
    int w, h;
    ferry_status st = ferry_decode_rgb(d, bad.data, bad.len, "claims.png", NULL, &rgb, &w, &h);
    int named = strstr(ferry_last_error(), "claims.png") != NULL;
    _exit(st == FERRY_EFORMAT && named ? 0 : st == FERRY_ENOMEM ? 2 : 3);
  }
  int status = 0;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "exit %d (2: out of memory, the chunk's length was reserved; 3: another error; 4: no cap)",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  ferry_decoder_close(d);
  free(bad.data);
  free(m.data);
}

Test(image_decode, corrupt_and_unsupported_bytes_fail) {
  ferry_decoder *d = open_decoder();
  assert_decode_fails(d, "GIF89a......", 12, "anim.gif", FERRY_EUNSUPPORTED);
  assert_decode_fails(d, "", 0, "empty.jpg", FERRY_EFORMAT);
  char path[1024];
  size_t len;
  unsigned char *data = slurp(realdata(path, sizeof path, "photos/skimage/coffee.png"), &len);
  data[len / 2] ^= 0x55; /* inside IDAT: the CRC (or zlib) catches it */
  assert_decode_fails(d, data, len, "flipped.png", FERRY_EFORMAT);
  free(data);
  data = slurp(realdata(path, sizeof path, "photos/mmcv/color.jpg"), &len);
  for (size_t i = 2; i + 9 < len; i++)
    if (data[i] == 0xFF && data[i + 1] == 0xC0) {
      data[i + 9] = 2; /* a 2-component frame */
      break;
    }
  assert_decode_fails(d, data, len, "two-components.jpg", FERRY_EUNSUPPORTED);
  free(data);
  ferry_decoder_close(d);
}

/* Pillow decodes JPEGs that libjpeg only warns about (here "Corrupt JPEG data: 3
 * extraneous bytes before marker 0xd9"); so do we, to the same pixels. */
Test(image_decode, recoverable_jpeg_warnings_are_not_errors) {
  char path[1024];
  size_t len;
  unsigned char *data = slurp(realdata(path, sizeof path, "photos/mmcv/color.jpg"), &len);
  cr_assert(len > 4 && data[len - 2] == 0xFF && data[len - 1] == 0xD9);
  unsigned char *noisy = malloc(len + 3);
  memcpy(noisy, data, len - 2);
  memcpy(noisy + len - 2, "\x01\x02\x03\xFF\xD9", 5);
  ferry_decoder *a = open_decoder(), *b = open_decoder();
  const uint8_t *clean, *got;
  int w, h, w2, h2;
  cr_assert_eq(ferry_decode_rgb(a, data, len, path, NULL, &clean, &w, &h), FERRY_OK);
  cr_assert_eq(ferry_decode_rgb(b, noisy, len + 3, "noisy.jpg", NULL, &got, &w2, &h2), FERRY_OK,
               "%s", ferry_last_error());
  cr_assert(w == w2 && h == h2);
  cr_assert_eq(memcmp(clean, got, (size_t)w * h * 3), 0);
  free(noisy);
  free(data);
  ferry_decoder_close(a);
  ferry_decoder_close(b);
}

Test(image_decode, empty_and_missing_files_fail_naming_the_path) {
  char tmpl[] = "/tmp/ferry_image_emptyXXXXXX";
  int fd = mkstemp(tmpl);
  cr_assert_geq(fd, 0);
  close(fd);
  ferry_decoder *d = open_decoder();
  uint8_t dst[3 * 8 * 8];
  int w, h;
  cr_assert_eq(ferry_image_load_resized(d, tmpl, NULL, 8, FERRY_LAYOUT_U8_HWC, dst, &w, &h),
               FERRY_EFORMAT);
  assert_error_names(tmpl);
  cr_assert_eq(ferry_image_probe_file(tmpl, &w, &h), FERRY_EFORMAT);
  assert_error_names(tmpl);
  unlink(tmpl);
  cr_assert_eq(ferry_image_load_resized(d, tmpl, NULL, 8, FERRY_LAYOUT_U8_HWC, dst, &w, &h),
               FERRY_ENOTFOUND);
  assert_error_names(tmpl);
  cr_assert_eq(ferry_image_probe_file(tmpl, &w, &h), FERRY_ENOTFOUND);
  cr_assert_eq(ferry_image_load_resized(d, "/tmp", NULL, 8, FERRY_LAYOUT_U8_HWC, dst, &w, &h),
               FERRY_EIO);
  ferry_decoder_close(d);
}

/* ---- decompression bombs ---- */

Test(image_decode, pixel_limit_is_checked_before_decoding) {
  char path[1024];
  size_t len;
  unsigned char *data = slurp(realdata(path, sizeof path, "photos/mmcv/color.jpg"), &len);
  ferry_decoder *d = open_decoder();
  ferry_image_options o;
  ferry_image_options_default(&o);
  cr_assert_eq(o.max_pixels, 89478485u);
  const uint8_t *rgb;
  int w, h;
  o.max_pixels = 400 * 300 - 1;
  cr_assert_eq(ferry_decode_rgb(d, data, len, path, &o, &rgb, &w, &h), FERRY_ELIMIT);
  assert_error_names(path);
  o.max_pixels = 400 * 300;
  cr_assert_eq(ferry_decode_rgb(d, data, len, path, &o, &rgb, &w, &h), FERRY_OK);
  /* a frame header claiming 65535 x 65535 fails under the default limit */
  for (size_t i = 2; i + 9 < len; i++)
    if (data[i] == 0xFF && data[i + 1] == 0xC0) {
      memset(data + i + 5, 0xFF, 4);
      break;
    }
  cr_assert_eq(ferry_decode_rgb(d, data, len, "bomb.jpg", NULL, &rgb, &w, &h), FERRY_ELIMIT);
  free(data);

  /* a PNG header of 100000 x 100000 followed by the start of an IDAT chunk */
  mem_png m = {0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) cr_assert_fail("libpng write failed");
  png_set_write_fn(png, &m, mem_write, mem_flush);
  png_set_IHDR(png, info, 100000, 100000, 8, PNG_COLOR_TYPE_RGB, 0, 0, 0);
  png_write_info(png, info);
  png_destroy_write_struct(&png, &info);
  static const unsigned char idat[8] = {0, 0, 0, 0, 'I', 'D', 'A', 'T'};
  m.data = realloc(m.data, m.len + 8);
  memcpy(m.data + m.len, idat, 8);
  cr_assert_eq(ferry_decode_rgb(d, m.data, m.len + 8, "bomb.png", NULL, &rgb, &w, &h),
               FERRY_ELIMIT, "%s", ferry_last_error());
  free(m.data);
  ferry_decoder_close(d);
}

/* ---- EXIF ---- */

Test(image_decode, exif_orientation_is_parsed_defensively) {
  /* TIFF header + IFD0 with one entry: Orientation (0x0112), SHORT, count 1, value 6 */
  static const uint8_t mm[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3,
                               0,   0,   0, 1,  0, 6, 0, 0, 0, 0, 0,    0};
  static const uint8_t ii[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0,
                               1,   0,   0,  0, 8, 0, 0, 0, 0, 0, 0,    0};
  cr_assert_eq(ferry__exif_orientation(mm, sizeof mm), 6);
  cr_assert_eq(ferry__exif_orientation(ii, sizeof ii), 8);
  cr_assert_eq(ferry__exif_orientation(mm, 16), 1, "entry cut off");
  uint8_t bad[sizeof mm];
  memcpy(bad, mm, sizeof mm);
  bad[7] = 200; /* IFD offset past the end */
  cr_assert_eq(ferry__exif_orientation(bad, sizeof bad), 1);
  memcpy(bad, mm, sizeof mm);
  bad[19] = 9; /* not an orientation */
  cr_assert_eq(ferry__exif_orientation(bad, sizeof bad), 1);
  memcpy(bad, mm, sizeof mm);
  bad[13] = 4; /* LONG instead of SHORT */
  cr_assert_eq(ferry__exif_orientation(bad, sizeof bad), 1);
  cr_assert_eq(ferry__exif_orientation(mm, 3), 1);
}

Test(image_decode, exif_rotation_is_off_by_default_and_applied_on_request) {
  char path[1024];
  realdata(path, sizeof path, "photos/mmcv/color_exif.jpg"); /* Orientation 6 (per Pillow) */
  size_t len;
  unsigned char *data = slurp(path, &len);
  ferry_decoder *d = open_decoder();
  const uint8_t *rgb;
  int w, h;
  cr_assert_eq(ferry_decode_rgb(d, data, len, path, NULL, &rgb, &w, &h), FERRY_OK);
  cr_assert(w == 400 && h == 300);
  unsigned char first[3];
  memcpy(first, rgb, 3); /* stored top-left ends up top-right after a clockwise turn */
  unsigned char *plain = malloc((size_t)w * h * 3);
  memcpy(plain, rgb, (size_t)w * h * 3);
  ferry_image_options o;
  ferry_image_options_default(&o);
  o.apply_exif = 1;
  cr_assert_eq(ferry_decode_rgb(d, data, len, path, &o, &rgb, &w, &h), FERRY_OK);
  cr_assert(w == 300 && h == 400, "got %dx%d", w, h);
  cr_assert_eq(memcmp(rgb + (size_t)(w - 1) * 3, first, 3), 0);
  /* bottom-left of the stored image -> top-left */
  cr_assert_eq(memcmp(rgb, plain + (size_t)299 * 400 * 3, 3), 0);
  uint8_t dst[3 * 16 * 16];
  int ow, oh;
  cr_assert_eq(ferry_image_load_resized(d, path, &o, 16, FERRY_LAYOUT_U8_HWC, dst, &ow, &oh),
               FERRY_OK);
  cr_assert(ow == 300 && oh == 400, "orig size after rotation: %dx%d", ow, oh);
  free(plain);
  free(data);
  ferry_decoder_close(d);
}

/* ---- CMYK / YCCK ---- */

Test(image_decode, ycck_jpeg_converts_to_rgb) {
  enum { W = 24, H = 16 };
  unsigned char cmyk[W * H * 4];
  for (int i = 0; i < W * H; i++) {
    int x = i % W, y = i / W;
    cmyk[4 * i] = (unsigned char)(x * 10);
    cmyk[4 * i + 1] = (unsigned char)(y * 15);
    cmyk[4 * i + 2] = 128;
    cmyk[4 * i + 3] = (unsigned char)(255 - x * 5);
  }
  tjhandle tj = tjInitCompress();
  unsigned char *jpeg = NULL;
  unsigned long jpeg_len = 0;
  cr_assert_eq(tjCompress2(tj, cmyk, W, 0, H, TJPF_CMYK, &jpeg, &jpeg_len, TJSAMP_444, 100,
                           TJFLAG_ACCURATEDCT),
               0, "%s", tjGetErrorStr2(tj));
  ferry_decoder *d = open_decoder();
  const uint8_t *rgb;
  int w, h;
  cr_assert_eq(ferry_decode_rgb(d, jpeg, jpeg_len, "ycck.jpg", NULL, &rgb, &w, &h), FERRY_OK,
               "%s", ferry_last_error());
  cr_assert(w == W && h == H);
  /* stored samples s are Adobe-inverted ink: RGB = s_c * s_k / 255 (lossy q100: +-6) */
  for (int i = 0; i < W * H; i++)
    for (int c = 0; c < 3; c++) {
      int want = cmyk[4 * i + c] * cmyk[4 * i + 3] / 255;
      cr_assert_leq(abs(rgb[3 * i + c] - want), 6, "pixel %d channel %d: %d vs %d", i, c,
                    rgb[3 * i + c], want);
    }
  tjFree(jpeg);
  tjDestroy(tj);
  ferry_decoder_close(d);
}

/* ---- DCT scaling ---- */

Test(image_decode, dct_scaling_picks_the_smallest_scale_still_covering_the_target) {
  char path[1024];
  size_t len;
  unsigned char *data =
      slurp(realdata(path, sizeof path, "panopticapi_sample/sample_data/input_images/000000142238.jpg"), &len);
  ferry_decoder *d = open_decoder();
  ferry_image_options o;
  ferry_image_options_default(&o);
  o.dct_scaling = 1;
  ferry__decoded img;
  /* 640x427 to 100: 1/8 gives 80x54 (too small), 2/8 gives 160x107 */
  ferry__decode_request req = {.opts = &o, .target_size = 100};
  cr_assert_eq(ferry__jpeg_decode(d, data, len, path, &req, &img), FERRY_OK);
  cr_assert(img.width == 160 && img.height == 107, "%dx%d", img.width, img.height);
  cr_assert(img.full_width == 640 && img.full_height == 427);
  /* 427 * 7/8 = 373.6 < 384: nothing below 1/1 covers 384 */
  req.target_size = 384;
  cr_assert_eq(ferry__jpeg_decode(d, data, len, path, &req, &img), FERRY_OK);
  cr_assert(img.width == 640 && img.height == 427);
  o.dct_scaling = 0;
  req.target_size = 100;
  cr_assert_eq(ferry__jpeg_decode(d, data, len, path, &req, &img), FERRY_OK);
  cr_assert(img.width == 640, "off means full size");
  free(data);
  ferry_decoder_close(d);
}

/* ---- allocation failures ---- */

Test(image_decode, allocation_failures_return_enomem_without_leaks) {
  if (!ferry__alloc_injection_available())
    cr_skip_test("skipped: build with -Dalloc_failure_injection=true");
  static const char *files[] = {"photos/skimage/horse.png", "photos/mmcv/color.jpg"};
  for (size_t i = 0; i < 2; i++) {
    char path[1024];
    realdata(path, sizeof path, files[i]);
    uint8_t *dst = malloc(3 * 64 * 64 * sizeof(float));
    int completed = 0;
    for (long n = 0; n < 200 && !completed; n++) {
      ferry_decoder *d = NULL;
      ferry__alloc_fail_after(n);
      ferry_status st = ferry_decoder_open(&d);
      if (st == FERRY_OK)
        st = ferry_image_load_resized(d, path, NULL, 64, FERRY_LAYOUT_F32_CHW, dst, NULL, NULL);
      ferry__alloc_fail_after(-1);
      cr_assert(st == FERRY_OK || st == FERRY_ENOMEM, "%s after %ld: %s", path, n,
                ferry_last_error());
      completed = st == FERRY_OK;
      ferry_decoder_close(d);
    }
    cr_assert(completed, "%s never succeeded", path);
    free(dst);
  }
}

/* ---- one decoder per thread ---- */

typedef struct worker {
  int first, step, size;
  uint8_t *out; /* n_found * size*size*3 */
  int failures;
} worker;

static void *decode_share(void *arg) {
  worker *wk = arg;
  ferry_decoder *d;
  if (ferry_decoder_open(&d) != FERRY_OK) {
    wk->failures++;
    return NULL;
  }
  size_t per = (size_t)wk->size * wk->size * 3;
  for (int i = wk->first; i < n_found; i += wk->step) {
    if (has_suffix(found[i], "truncated.jpg")) continue;
    if (ferry_image_load_resized(d, found[i], NULL, wk->size, FERRY_LAYOUT_U8_HWC,
                                 wk->out + per * i, NULL, NULL) != FERRY_OK)
      wk->failures++;
  }
  ferry_decoder_close(d);
  return NULL;
}

Test(image_decode, decoders_on_two_threads_agree_with_one, .timeout = 120) {
  collect_real_images();
  enum { SIZE = 48 };
  size_t total = (size_t)n_found * SIZE * SIZE * 3;
  uint8_t *serial = calloc(total, 1), *parallel = calloc(total, 1);
  worker one = {0, 1, SIZE, serial, 0};
  decode_share(&one);
  worker two[2] = {{0, 2, SIZE, parallel, 0}, {1, 2, SIZE, parallel, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, decode_share, &two[i]);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  cr_assert(one.failures == 0 && two[0].failures == 0 && two[1].failures == 0);
  cr_assert_eq(memcmp(serial, parallel, total), 0);
  free(serial);
  free(parallel);
  free_found();
}
