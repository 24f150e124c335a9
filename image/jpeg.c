/* image/jpeg.c - JPEG through TurboJPEG (2.x tj* API, or tj3* when >= 3).
 *
 * Owns: the TurboJPEG handle's life (open/close, called by image.c for each
 * decoder), the header walk, and the decode into the decoder's scratch: RGB8 in
 * d->pixels, with d->aux for CMYK samples on the way. A grey or YCbCr file at full
 * scale or at a draft's 1/f goes to jpeg_entropy.c first (the same pixels, faster),
 * and to TurboJPEG when that declines it.
 * Callers: image.c, on the thread that owns the decoder (a TurboJPEG handle is not
 * shared between threads), and the header-only probe, on any thread (it needs no
 * handle).
 * Invariants: the size is read and checked against max_pixels before anything is
 * allocated for the pixels (limits.c); the output is as Pillow's convert("RGB") of
 * the same file (docs/images.md: accurate IDCT, fancy upsampling, Pillow's CMYK rule
 * and its tolerance of warnings), but for the DCT scaling a caller may ask for (under
 * draft_size Pillow's own: its draft's 1/f, decoded the same way); the header walk reads no byte past `len` and says FERRY_EAGAIN when it needs more.
 * Not done here: EXIF is located, not parsed (exif.c), nor applied (image.c); no ICC
 * colour management (Pillow's convert ignores it too).
 */
#include <string.h>
#include <turbojpeg.h>

#include "lib/status.h"
#include "image/image_config.h"
#include "image/decoder.h"
#include "image/exif.h"
#include "image/jpeg.h"
#include "image/pixel_limit.h"
#include "image/scratch.h"
#include "image/jpeg_entropy.h"

/* ---- a thin layer over the two TurboJPEG API generations ---- */

#if FERRY_HAVE_TJ3
void *ferry__jpeg_handle_open(void) { return tj3Init(TJINIT_DECOMPRESS); }
void ferry__jpeg_handle_close(void *tj) { tj3Destroy(tj); }
static const char *tj_message(void *tj) { return tj3GetErrorStr(tj); }
static int tj_error_code(void *tj) { return tj3GetErrorCode(tj); }
static const tjscalingfactor *tj_factors(int *count) { return tj3GetScalingFactors(count); }
/* The scale is set on the handle; rows are tight (pitch = width * pixel size). */
static int tj_decode(void *tj, const uint8_t *data, size_t len, tjscalingfactor sf, uint8_t *dst,
                     int width, int height, int pixel_format) {
  (void)height;
  if (tj3SetScalingFactor(tj, sf) != 0) return -1;
  return tj3Decompress8(tj, data, len, dst, width * tjPixelSize[pixel_format], pixel_format);
}
#else
void *ferry__jpeg_handle_open(void) { return tjInitDecompress(); }
void ferry__jpeg_handle_close(void *tj) { tjDestroy(tj); }
static const char *tj_message(void *tj) { return tjGetErrorStr2(tj); }
static int tj_error_code(void *tj) { return tjGetErrorCode(tj); }
static const tjscalingfactor *tj_factors(int *count) { return tjGetScalingFactors(count); }
/* Accurate DCT and fancy upsampling are the 2.x defaults, as in djpeg and Pillow. */
static int tj_decode(void *tj, const uint8_t *data, size_t len, tjscalingfactor sf, uint8_t *dst,
                     int width, int height, int pixel_format) {
  (void)sf; /* 2.x derives the scale from the requested width/height */
  return tjDecompress2(tj, data, (unsigned long)len, dst, width, 0, height, pixel_format,
                       TJFLAG_ACCURATEDCT);
}
#endif

/* Pillow ignores libjpeg's warnings about corrupt but decodable data, so a decode
 * that only warned is a success, except when the file ends before its image does
 * (libjpeg's "Premature end of JPEG file"; it pads the rest with grey), which fails
 * as Pillow's "image file is truncated" does. TurboJPEG cannot tell "warned" from
 * "warned, then failed" (its error code says WARNING for both), but its message is
 * the fatal error's in the second case and the first warning's otherwise, so the
 * decision rests on the message being one of libjpeg's recoverable warnings
 * (jerror.h's JWRN_* texts; no fatal JERR_* text starts like these). Truncation after
 * an earlier warning goes unnoticed. */
static int decoded_despite_warning(void *tj) {
  static const char *const recoverable[] = {
      "Corrupt JPEG data:", "Unknown Adobe color transform code",
      "Inconsistent progression sequence", "Warning: unknown JFIF revision",
      "Invalid SOS parameters for sequential JPEG"};
  if (tj_error_code(tj) != TJERR_WARNING) return 0;
  const char *msg = tj_message(tj);
  for (size_t i = 0; i < sizeof recoverable / sizeof *recoverable; i++)
    if (strncmp(msg, recoverable[i], strlen(recoverable[i])) == 0) return 1;
  return 0;
}

/* ---- header walk ----
 * Markers up to the first frame header (SOFn), skipping each segment by its length
 * and noting the first APP1 "Exif" payload on the way. SOS, EOI or a second SOI
 * before any frame header is an error: that image has no frame to decode.
 * Our own parser rather than tjDecompressHeader3: it needs no handle, it can say
 * "need more bytes" (for probing files), and TurboJPEG 2.x refuses the header of
 * valid images whose subsampling it cannot name (4:1:0, 2x4) that it decodes fine. */

int ferry__jpeg_signature(const uint8_t *data, size_t len) {
  return len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* SOF0..SOF15, but not C4 (DHT), C8 (JPG, reserved) or CC (DAC), which share the
 * range. */
static int is_frame_marker(unsigned m) {
  return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

/* TEM and RST0..7 carry no length field. */
static int is_standalone_marker(unsigned m) {
  return m == 0x01 || (m >= 0xD0 && m <= 0xD7);
}

/* The first APP1 that starts "Exif\0\0" wins; the TIFF structure follows the six
 * bytes. Other APP1 segments (XMP) are not EXIF. */
static void note_exif(const uint8_t *seg, size_t seg_len, ferry__jpeg_info *info) {
  if (info->exif || seg_len < 6 || memcmp(seg, "Exif\0\0", 6) != 0) return;
  info->exif = seg + 6;
  info->exif_len = seg_len - 6;
}

ferry_status ferry__jpeg_header(const uint8_t *data, size_t len, const char *name, ferry__jpeg_info *info) {
  memset(info, 0, sizeof *info);
  /* past SOI (the caller checked the signature) */
  size_t pos = 2;
  for (;;) {
    if (pos + 2 > len) return FERRY_EAGAIN;
    if (data[pos] != 0xFF)
      return ferry__fail(FERRY_EFORMAT, "%s: JPEG: expected a marker at byte %zu", name, pos);
    unsigned marker = data[pos + 1];
    pos += 2;
    if (marker == 0xFF) { /* fill byte */
      pos -= 1;
      continue;
    }
    if (is_standalone_marker(marker)) continue;
    if (marker == 0xD8 || marker == 0xD9 || marker == 0xDA)
      return ferry__fail(FERRY_EFORMAT, "%s: JPEG: no frame header before marker 0x%02X", name,
                        marker);
    if (pos + 2 > len) return FERRY_EAGAIN;
    size_t seg_len = be16(data + pos);
    if (seg_len < 2)
      return ferry__fail(FERRY_EFORMAT, "%s: JPEG: bad segment length at byte %zu", name, pos);
    if (is_frame_marker(marker)) {
      /* length(2), precision(1), height(2), width(2), components(1) */
      if (pos + 8 > len) return FERRY_EAGAIN;
      info->height = (int)be16(data + pos + 3);
      info->width = (int)be16(data + pos + 5);
      info->components = data[pos + 7];
      if (info->width == 0 || info->height == 0)
        return ferry__fail(FERRY_EUNSUPPORTED, "%s: JPEG: zero width or height in the frame header",
                          name);
      return FERRY_OK;
    }
    /* only a segment wholly inside the buffer: a probe's partial read may cut one
     * (the probe does not need EXIF; a decode has the whole file) */
    if (marker == 0xE1 && pos + seg_len <= len)
      note_exif(data + pos + 2, seg_len - 2, info);
    pos += seg_len;
  }
}

/* ---- decode ---- */

/* The smallest TurboJPEG scale below 1 that keeps both sides >= target; 1/1 if none.
 * Both sides, so the choice does not depend on an EXIF rotation applied afterwards
 * (the target is square). The resize that follows then still downscales, from a
 * smaller source: a deliberate difference from Pillow, taken only with dct_scaling. */
static tjscalingfactor pick_scale(int width, int height, int target) {
  tjscalingfactor best = {1, 1};
  int count = 0;
  const tjscalingfactor *sf = tj_factors(&count);
  for (int i = 0; sf && i < count; i++) {
    if (sf[i].num >= sf[i].denom) continue;
    if (TJSCALED(width, sf[i]) < target || TJSCALED(height, sf[i]) < target) continue;
    if ((long)sf[i].num * best.denom < (long)best.num * sf[i].denom) best = sf[i];
  }
  return best;
}

int ferry_image_draft_factor(int width, int height, int draft_size) {
  if (draft_size <= 0 || width <= 0 || height <= 0) return 1;
  int fits = width / draft_size < height / draft_size ? width / draft_size : height / draft_size;
  return fits >= 8 ? 8 : fits >= 4 ? 4 : fits >= 2 ? 2 : 1;
}

/* The scale of this decode: draft_size's 1/f (Pillow's draft: libjpeg's scale_num = 1,
 * scale_denom = f, which TurboJPEG's 1/f is), else dct_scaling's pick, else 1/1. */
static tjscalingfactor decode_scale(const ferry__jpeg_info *hdr, const ferry__decode_request *req) {
  tjscalingfactor sf = {1, 1};
  if (req->opts->draft_size > 0) sf.denom = ferry_image_draft_factor(hdr->width, hdr->height, req->opts->draft_size);
  else if (req->opts->dct_scaling && req->target_size > 0) sf = pick_scale(hdr->width, hdr->height, req->target_size);
  return sf;
}

/* Pillow reads every CMYK JPEG as Adobe-inverted ("CMYK;I") and converts with
 * R = (255-K) - (C*(255-K))/255 (rounded division); in stored samples s that is
 * nk = s_k, C = 255 - s_c. */
static uint8_t muldiv255(int a, int b) {
  int t = a * b + 128;
  return (uint8_t)(((t >> 8) + t) >> 8);
}

static void cmyk_to_rgb(const uint8_t *cmyk, size_t pixels, uint8_t *rgb) {
  for (size_t i = 0; i < pixels; i++, cmyk += 4, rgb += 3) {
    int nk = cmyk[3];
    for (int c = 0; c < 3; c++) rgb[c] = (uint8_t)(nk - muldiv255(255 - cmyk[c], nk));
  }
}

/* A new TurboJPEG handle for every file it decodes (jpeg_entropy.c makes its own
 * decompressor per file for those it takes). libjpeg keeps the quantisation and
 * Huffman tables a file defines in its decompressor for the next one (for
 * "abbreviated" streams that leave them out), so a reused handle would decode a file
 * that lacks its tables with the previous file's, where Pillow, which makes a
 * decompressor per image, fails ("Quantization table 0x00 was not defined"). Costs
 * about 0.1 us. */
static ferry_status renew_handle(ferry_decoder *d, const char *name) {
  ferry__jpeg_handle_close(d->tj);
  d->tj = ferry__jpeg_handle_open();
  return d->tj ? FERRY_OK : ferry__fail(FERRY_ENOMEM, "%s: JPEG: cannot create a TurboJPEG handle", name);
}

static ferry_status decode_cmyk(ferry_decoder *d, const uint8_t *data, size_t len,
                                const char *name, tjscalingfactor sf, int w, int h) {
  size_t pixels = (size_t)w * (size_t)h;
  ferry_status st = ferry__scratch_reserve(&d->aux, pixels * 4, name);
  if (st < 0) return st;
  st = ferry__scratch_reserve(&d->pixels, pixels * 3, name);
  if (st < 0) return st;
  if ((st = renew_handle(d, name)) < 0) return st;
  if (tj_decode(d->tj, data, len, sf, d->aux.data, w, h, TJPF_CMYK) != 0 &&
      !decoded_despite_warning(d->tj))
    return ferry__fail(FERRY_EFORMAT, "%s: JPEG: %s", name, tj_message(d->tj));
  cmyk_to_rgb(d->aux.data, pixels, d->pixels.data);
  return FERRY_OK;
}

/* jpeg_entropy.c's decoder first, at full scale or 1/f (it gives TurboJPEG's pixels
 * or declines the file), TurboJPEG for what it declines. */
static ferry_status decode_rgb(ferry_decoder *d, const uint8_t *data, size_t len,
                               const char *name, tjscalingfactor sf, int w, int h) {
  ferry_status st = ferry__scratch_reserve(&d->pixels, (size_t)w * (size_t)h * 3, name);
  if (st < 0) return st;
  if (d->entropy && sf.num == 1) { /* full scale, or a draft's 1/f */
    st = ferry__jpeg_entropy_decode(d->entropy, data, len, name, d->pixels.data, w, h, sf.denom);
    if (st != FERRY_EAGAIN) return st;
  }
  if ((st = renew_handle(d, name)) < 0) return st;
  if (tj_decode(d->tj, data, len, sf, d->pixels.data, w, h, TJPF_RGB) != 0 &&
      !decoded_despite_warning(d->tj))
    return ferry__fail(FERRY_EFORMAT, "%s: JPEG: %s", name, tj_message(d->tj));
  return FERRY_OK;
}

ferry_status ferry__jpeg_decode(ferry_decoder *d, const uint8_t *data, size_t len, const char *name,
                                const ferry__decode_request *req, ferry__decoded *out) {
  ferry__jpeg_info hdr;
  ferry_status st = ferry__jpeg_header(data, len, name, &hdr);
  if (st == FERRY_EAGAIN)
    return ferry__fail(FERRY_EFORMAT, "%s: JPEG: truncated before the frame header", name);
  if (st < 0) return st;
  if (hdr.components != 1 && hdr.components != 3 && hdr.components != 4)
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: JPEG with %d components", name, hdr.components);
  st = ferry__image_check_limit(name, hdr.width, hdr.height, req->opts);
  if (st < 0) return st;
  tjscalingfactor sf = decode_scale(&hdr, req);
  /* TurboJPEG 2.x derives the same scale from these sizes (tj_decode): the largest of
   * its factors that fits them, which for ceil(side / f) on both sides is 1/f */
  int w = TJSCALED(hdr.width, sf), h = TJSCALED(hdr.height, sf);
  if (hdr.components == 4) /* CMYK or YCCK: libjpeg gives CMYK for both */
    st = decode_cmyk(d, data, len, name, sf, w, h);
  else
    st = decode_rgb(d, data, len, name, sf, w, h);
  if (st < 0) return st;
  out->rgb = d->pixels.data;
  out->width = w;
  out->height = h;
  /* the stored size, not w x h: what *orig_w and *orig_h report (the loader checks
   * it against the annotations) */
  out->full_width = hdr.width;
  out->full_height = hdr.height;
  out->orientation =
      req->opts->apply_exif && hdr.exif ? ferry__exif_orientation(hdr.exif, hdr.exif_len) : 1;
  return FERRY_OK;
}
