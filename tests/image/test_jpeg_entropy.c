/* tests/image/test_jpeg_entropy.c - image/jpeg_entropy.c against TurboJPEG.
 *
 * The contract (jpeg_entropy.h): when the path says FERRY_OK, TurboJPEG decodes the
 * file without an error and gives the same bytes. Checked on every real JPEG beside
 * the repo, on files encoded here in every layout the path takes (libjpeg's encoder:
 * sizes, subsamplings, grey, quality 100, optimised tables), on what it must decline
 * (progressive, arithmetic, restart markers, truncation, 0xFF 0xFF in a scan), and on
 * thousands of corrupted scans, where it must either agree or decline. The real files
 * and the encoded layouts are also decoded at 1/2, 1/4 and 1/8 scale (the loader's
 * draft_size), against TurboJPEG at the same scale.
 */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <turbojpeg.h>

#include "image/image_config.h"
#include "image/jpeg_entropy.h"
#include "test_image_util.h"

/* ---- TurboJPEG, the reference ---- */

typedef struct reference {
  int ok; /* decoded, or only warned about corrupt data (what jpeg.c accepts) */
  int width, height;
  unsigned char *rgb;
} reference;

/* At 1/scale: TurboJPEG 2.x takes the largest of its factors that fits the size asked
 * for, which for ceil(side / scale) on both sides is 1/scale. */
static reference turbojpeg_decode(const unsigned char *data, size_t len, int scale) {
  reference r = {0};
  tjhandle tj = tjInitDecompress();
  int sub, cs;
  if (tjDecompressHeader3(tj, data, (unsigned long)len, &r.width, &r.height, &sub, &cs) == 0) {
    r.width = (r.width + scale - 1) / scale;
    r.height = (r.height + scale - 1) / scale;
    r.rgb = malloc((size_t)r.width * r.height * 3);
    int rc = tjDecompress2(tj, data, (unsigned long)len, r.rgb, r.width, 0, r.height, TJPF_RGB,
                           TJFLAG_ACCURATEDCT);
    r.ok = rc == 0 || (tjGetErrorCode(tj) == TJERR_WARNING &&
                       strncmp(tjGetErrorStr2(tj), "Corrupt JPEG data:", 18) == 0);
  }
  tjDestroy(tj);
  return r;
}

/* The path on data at 1/scale; when it says OK, TurboJPEG must agree byte for byte.
 * Returns the path's status (FERRY_OK or FERRY_EAGAIN). */
static ferry_status check_scaled(ferry__jpeg_entropy *e, const unsigned char *data, size_t len, const char *what,
                                 int scale) {
  reference r = turbojpeg_decode(data, len, scale);
  if (!r.rgb) return FERRY_EAGAIN; /* no header TurboJPEG can read: jpeg.c never gets here */
  size_t n = (size_t)r.width * r.height * 3;
  unsigned char *mine = malloc(n);
  ferry_status st = ferry__jpeg_entropy_decode(e, data, len, what, mine, r.width, r.height, scale);
  cr_assert(st == FERRY_OK || st == FERRY_EAGAIN, "%s at 1/%d: status %d", what, scale, st);
  if (st == FERRY_OK) {
    cr_assert(r.ok, "%s at 1/%d: taken, but TurboJPEG fails on it", what, scale);
    size_t i = 0;
    while (i < n && mine[i] == r.rgb[i]) i++;
    cr_assert_eq(i, n, "%s at 1/%d: byte %zu (row %zu) differs from TurboJPEG's", what, scale, i,
                 i / ((size_t)r.width * 3));
  }
  free(mine);
  free(r.rgb);
  return st;
}

static ferry_status check_against_turbojpeg(ferry__jpeg_entropy *e, const unsigned char *data, size_t len,
                                            const char *what) {
  return check_scaled(e, data, len, what, 1);
}

/* At full scale and at every draft scale: taken at all of them, or at none. */
static ferry_status check_every_scale(ferry__jpeg_entropy *e, const unsigned char *data, size_t len, const char *what) {
  ferry_status st = check_against_turbojpeg(e, data, len, what);
  for (int scale = 2; scale <= 8; scale *= 2)
    cr_assert_eq(check_scaled(e, data, len, what, scale), st, "%s: taken at full scale, not at 1/%d, or back",
                 what, scale);
  return st;
}

static ferry__jpeg_entropy *open_path(void) {
  if (!ferry__jpeg_entropy_available()) cr_skip_test("built without libjpeg-turbo's jpegint.h");
  ferry__jpeg_entropy *e = ferry__jpeg_entropy_open();
  cr_assert_not_null(e);
  return e;
}

/* ---- files encoded here with libjpeg ---- */

typedef struct encoding {
  int width, height, components;
  int h_samp, v_samp; /* luma sampling factors (chroma 1x1) */
  int quality, optimize, progressive, arithmetic, restart_rows;
} encoding;

/* Noise over a gradient: every coefficient busy, 0xFF bytes (stuffing) in the scan. */
static unsigned char *encode(const encoding *enc, size_t *len) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char *out = NULL;
  unsigned long out_len = 0;
  jpeg_mem_dest(&c, &out, &out_len);
  c.image_width = (JDIMENSION)enc->width;
  c.image_height = (JDIMENSION)enc->height;
  c.input_components = enc->components;
  c.in_color_space = enc->components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, enc->quality, TRUE);
  c.optimize_coding = enc->optimize ? TRUE : FALSE;
  c.arith_code = enc->arithmetic ? TRUE : FALSE;
  c.restart_in_rows = enc->restart_rows;
  if (enc->components == 3) {
    c.comp_info[0].h_samp_factor = enc->h_samp;
    c.comp_info[0].v_samp_factor = enc->v_samp;
  }
  if (enc->progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  size_t stride = (size_t)enc->width * enc->components;
  unsigned char *row = malloc(stride);
  uint32_t seed = 12345u + (uint32_t)enc->width * 7u + (uint32_t)enc->quality;
  while (c.next_scanline < c.image_height) {
    for (size_t i = 0; i < stride; i++) {
      seed = seed * 1664525u + 1013904223u;
      row[i] = (unsigned char)((i * 3 + c.next_scanline * 2) / 4 + (seed >> 26));
    }
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  free(row);
  *len = out_len;
  return out;
}

Test(jpeg_entropy, every_baseline_layout_is_taken_and_equals_turbojpeg, .timeout = 120) {
  ferry__jpeg_entropy *e = open_path();
  static const int sizes[][2] = {{1, 1}, {7, 5}, {33, 17}, {640, 427}, {1001, 3}, {16, 16}, {250, 333}};
  static const int samplings[][3] = {{1, 1, 1}, {3, 1, 1}, {3, 2, 1}, {3, 2, 2}, {3, 1, 2}};
  static const int qualities[] = {50, 95, 100};
  int taken = 0, total = 0;
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (size_t m = 0; m < sizeof samplings / sizeof *samplings; m++)
      for (size_t q = 0; q < sizeof qualities / sizeof *qualities; q++)
        for (int opt = 0; opt < 2; opt++) {
          encoding enc = {sizes[s][0], sizes[s][1], samplings[m][0], samplings[m][1], samplings[m][2],
                          qualities[q], opt, 0, 0, 0};
          size_t len;
          unsigned char *data = encode(&enc, &len);
          char what[128];
          snprintf(what, sizeof what, "%dx%d, %d components %dx%d, quality %d, optimize %d", enc.width,
                   enc.height, enc.components, enc.h_samp, enc.v_samp, enc.quality, opt);
          ferry_status st = check_every_scale(e, data, len, what);
          cr_assert_eq(st, FERRY_OK, "%s: declined a plain baseline file", what);
          taken += st == FERRY_OK;
          total++;
          free(data);
        }
  cr_assert_eq(taken, total);
  ferry__jpeg_entropy_close(e);
}

Test(jpeg_entropy, what_it_does_not_reproduce_is_declined) {
  ferry__jpeg_entropy *e = open_path();
  const encoding progressive = {96, 64, 3, 2, 2, 90, 0, 1, 0, 0};
  const encoding arithmetic = {96, 64, 3, 2, 2, 90, 0, 0, 1, 0};
  const encoding restarts = {96, 64, 3, 2, 2, 90, 0, 0, 0, 1};
  const encoding *cases[] = {&progressive, &arithmetic, &restarts};
  const char *names[] = {"progressive", "arithmetic", "restart markers"};
  for (int i = 0; i < 3; i++) {
    size_t len;
    unsigned char *data = encode(cases[i], &len);
    cr_assert_eq(check_against_turbojpeg(e, data, len, names[i]), FERRY_EAGAIN, "%s taken", names[i]);
    free(data);
  }
  /* a plain file cut inside its scan, and one whose scan holds 0xFF 0xFF 0x00 */
  const encoding plain = {200, 120, 3, 2, 2, 95, 0, 0, 0, 0};
  size_t len;
  unsigned char *data = encode(&plain, &len);
  cr_assert_eq(check_against_turbojpeg(e, data, len, "plain"), FERRY_OK);
  cr_assert_eq(check_against_turbojpeg(e, data, len * 2 / 3, "cut at 2/3"), FERRY_EAGAIN);
  size_t at = len;
  for (size_t i = len / 2; i + 2 < len; i++)
    if (data[i] == 0xFF && data[i + 1] == 0x00) {
      at = i;
      break;
    }
  cr_assert_lt(at, len, "no stuffed byte in the scan to work on");
  unsigned char *odd = malloc(len + 1);
  memcpy(odd, data, at);
  odd[at] = 0xFF; /* 0xFF 0x00 becomes 0xFF 0xFF 0x00 */
  memcpy(odd + at + 1, data + at, len - at);
  cr_assert_eq(check_against_turbojpeg(e, odd, len + 1, "0xFF 0xFF 0x00"), FERRY_EAGAIN);
  free(odd);
  free(data);
  ferry__jpeg_entropy_close(e);
}

/* ---- the real JPEGs ---- */

static char *real_files[512];
static int n_real;

static int collect(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)ftw;
  const char *dot = strrchr(path, '.');
  if (type == FTW_F && dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0) && n_real < 512)
    real_files[n_real++] = strdup(path);
  return 0;
}

Test(jpeg_entropy, every_real_jpeg_agrees_with_turbojpeg, .timeout = 120) {
  ferry__jpeg_entropy *e = open_path();
  cr_assert_eq(nftw(realdata_path(""), collect, 16, FTW_PHYS), 0);
  cr_assert_geq(n_real, 150, "found only %d JPEGs under realdata", n_real);
  int taken = 0;
  for (int i = 0; i < n_real; i++) {
    size_t len;
    unsigned char *data = slurp(real_files[i], &len);
    taken += check_every_scale(e, data, len, real_files[i]) == FERRY_OK;
    free(data);
    free(real_files[i]);
  }
  /* the baseline photos (COCO's among them) are most of them; progressive ones,
   * restart-marked ones and CMYK ones are declined */
  cr_assert_geq(taken, n_real / 2, "took only %d of %d real JPEGs", taken, n_real);
  ferry__jpeg_entropy_close(e);
}

/* ---- corrupted scans ---- */

static uint32_t next_random(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

/* The first byte after the SOS segment. */
static size_t scan_start(const unsigned char *d, size_t len) {
  for (size_t i = 2; i + 3 < len; i++)
    if (d[i] == 0xFF && d[i + 1] == 0xDA) return i + 2 + ((size_t)d[i + 2] << 8 | d[i + 3]);
  return len;
}

Test(jpeg_entropy, corrupted_scans_agree_with_turbojpeg_or_are_declined, .timeout = 300) {
  ferry__jpeg_entropy *e = open_path();
  const encoding sources[] = {{160, 120, 3, 2, 2, 95, 0, 0, 0, 0}, {97, 61, 1, 1, 1, 100, 1, 0, 0, 0},
                              {128, 96, 3, 2, 1, 75, 1, 0, 0, 0}};
  uint32_t seed = 0x5eed;
  int taken = 0, declined = 0;
  for (size_t f = 0; f < sizeof sources / sizeof *sources; f++) {
    size_t len;
    unsigned char *orig = encode(&sources[f], &len);
    size_t sos = scan_start(orig, len);
    cr_assert_lt(sos + 16, len);
    unsigned char *d = malloc(len);
    for (int it = 0; it < 700; it++) {
      memcpy(d, orig, len);
      size_t use = len, span = len - sos;
      switch (next_random(&seed) % 4) {
        case 0: /* flip a few bits */
          for (int k = 1 + (int)(next_random(&seed) % 4); k > 0; k--)
            d[sos + next_random(&seed) % span] ^= (unsigned char)(1u << (next_random(&seed) % 8));
          break;
        case 1: /* cut the file */
          use = sos + next_random(&seed) % span;
          break;
        case 2: { /* a marker inside the scan */
          size_t at = sos + next_random(&seed) % (span - 2);
          d[at] = 0xFF;
          d[at + 1] = (unsigned char)next_random(&seed);
          break;
        }
        default: /* one random byte */
          d[sos + next_random(&seed) % span] = (unsigned char)next_random(&seed);
      }
      char what[96];
      snprintf(what, sizeof what, "source %zu, corruption %d", f, it);
      if (check_against_turbojpeg(e, d, use, what) == FERRY_OK) taken++;
      else declined++;
    }
    free(d);
    free(orig);
  }
  /* both outcomes happen, or the test proves little */
  cr_assert_geq(taken, 100, "only %d corrupted files taken", taken);
  cr_assert_geq(declined, 100, "only %d corrupted files declined", declined);
  ferry__jpeg_entropy_close(e);
}

/* ---- tables are per file ---- */

/* data without its DQT segments (an "abbreviated" stream): malloc'ed, *out_len set. */
static unsigned char *without_quant_tables(const unsigned char *d, size_t len, size_t *out_len) {
  unsigned char *out = malloc(len);
  size_t o = 0, i = 2;
  memcpy(out, d, 2);
  while (i + 4 <= len && d[i] == 0xFF && d[i + 1] != 0xDA) {
    size_t seg = 2 + ((size_t)d[i + 2] << 8 | d[i + 3]);
    if (d[i + 1] != 0xDB) {
      memcpy(out + 2 + o, d + i, seg);
      o += seg;
    }
    i += seg;
  }
  memcpy(out + 2 + o, d + i, len - i); /* SOS onwards */
  *out_len = 2 + o + len - i;
  return out;
}

/* libjpeg keeps a file's tables in its decompressor for the next file. A file that
 * lacks them must fail, as in Pillow (a decompressor per image), whatever the same
 * decoder decoded before: before this was found (by fuzz_jpeg_entropy), ferry's
 * reused TurboJPEG handle decoded it with the previous file's tables. */
Test(jpeg_entropy, a_file_without_its_tables_does_not_borrow_the_previous_files) {
  const encoding plain = {64, 48, 3, 2, 2, 90, 0, 0, 0, 0};
  size_t len, short_len;
  unsigned char *data = encode(&plain, &len);
  unsigned char *abbreviated = without_quant_tables(data, len, &short_len);
  cr_assert_lt(short_len, len, "no DQT segment removed");
  /* first a progressive file, which TurboJPEG decodes (so its handle has seen
   * tables), and the plain one, which ferry's Huffman decoder takes */
  const encoding progressive = {64, 48, 3, 2, 2, 90, 0, 1, 0, 0};
  size_t prog_len;
  unsigned char *prog = encode(&progressive, &prog_len);
  ferry_decoder *d = open_decoder();
  const uint8_t *rgb;
  int w, h;
  cr_assert_eq(ferry_decode_rgb(d, prog, prog_len, "progressive.jpg", NULL, &rgb, &w, &h), FERRY_OK, "%s",
               ferry_last_error());
  cr_assert_eq(ferry_decode_rgb(d, data, len, "whole.jpg", NULL, &rgb, &w, &h), FERRY_OK, "%s",
               ferry_last_error());
  cr_assert_eq(ferry_decode_rgb(d, abbreviated, short_len, "abbreviated.jpg", NULL, &rgb, &w, &h),
               FERRY_EFORMAT, "a JPEG without quantisation tables decoded");
  assert_error_names("abbreviated.jpg");
  cr_assert(strstr(ferry_last_error(), "Quantization table"), "%s", ferry_last_error());
  ferry_decoder_close(d);
  if (ferry__jpeg_entropy_available()) {
    ferry__jpeg_entropy *e = ferry__jpeg_entropy_open();
    unsigned char *out = malloc((size_t)w * h * 3);
    cr_assert_eq(ferry__jpeg_entropy_decode(e, data, len, "whole.jpg", out, w, h, 1), FERRY_OK);
    cr_assert_eq(ferry__jpeg_entropy_decode(e, abbreviated, short_len, "abbreviated.jpg", out, w, h, 1),
                 FERRY_EAGAIN);
    free(out);
    ferry__jpeg_entropy_close(e);
  }
  free(abbreviated);
  free(prog);
  free(data);
}
