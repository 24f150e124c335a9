/* image/jpeg_entropy.c - baseline JPEG scans entropy-decoded by ferry, inside libjpeg.
 *
 * Owns: per decoder, a libjpeg decompressor (made anew for every file), the
 * Huffman lookup tables of the scan at hand (one per table number, so Cb and Cr
 * share theirs) and an unstuffed copy of its bytes.
 * Callers: jpeg.c, on the thread that owns the decoder; nothing is shared between
 * decoders but the constant zig-zag table.
 *
 * How: libjpeg reads the headers and sets everything up (jpeg_start_decompress); for
 * a scan it can take, this file then puts its own function in libjpeg's entropy
 * decoder slot (cinfo->entropy->decode_mcu, declared by jpegint.h, which
 * libjpeg-turbo installs and whose layout is IJG's since 1995). libjpeg calls it once
 * per MCU with zeroed blocks, and runs its own IDCT, upsampling and colour conversion
 * on what it writes, as it would on its own decoder's output.
 *
 * Why faster than libjpeg's decoder (reading and decoding a file in 0.80x the time on
 * the synthetic val2017-sized set, 0.875x on val2017 photos; docs/benchmarks.md): the scan is first copied with its stuffed zero bytes removed
 * (the copy costs a memchr pass), so the bit reader refills 8 bytes at a time with no
 * per-byte marker test; one 10-bit lookup gives most coefficients whole, code and
 * value together.
 *
 * Invariants:
 *   - what is decoded equals what libjpeg would decode: the same canonical codes, the
 *     same DC prediction per component of the scan, the same zig-zag placement;
 *   - every departure from plainly valid data declines the whole file instead of
 *     imitating libjpeg's handling of it (jpeg_entropy.h): a code longer than 16
 *     bits, a run past coefficient 63, a DC outside +-2^20, bits read past the scan's
 *     last byte, 0xFF 0xFF inside the scan (libjpeg-turbo's two readers disagree on
 *     it), or any warning libjpeg emits; then jpeg.c asks TurboJPEG;
 *   - the reader never reads outside scan.data: the copy is followed by PAD zero
 *     bytes, more than one MCU can consume (10 blocks x 64 codes x 31 bits), and each
 *     MCU starts only while the bits consumed lie inside the scan.
 */
#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <string.h>

#include "image/image_config.h"
#include "image/decoder.h"
#include "image/scratch.h"
#include "image/jpeg_entropy.h"
#include "lib/alloc.h"
#include "lib/status.h"

#if FERRY_HAVE_JPEG_ENTROPY
#include <jpeglib.h>
#include <jpegint.h>

enum {
  PEEK_BITS = 10,       /* bits per table lookup (11 measured no faster) */
  PAD = 4096,           /* zero bytes after the scan's copy */
  ENTRY_FULL = 1 << 7,  /* entry flag: code and value decoded together */
  SCAN_COMPONENTS = 3   /* grey or YCbCr */
};

/* One Huffman table. fast[peek of PEEK_BITS bits]:
 *   0: the code is longer than PEEK_BITS (decode it from maxcode/valoff);
 *   ENTRY_FULL set: bits 0-4 the code and value lengths together, bits 8-15 the symbol,
 *     bits 16-31 the value (sign-extended);
 *   otherwise: bits 0-4 the code's length, bits 8-15 the symbol. */
typedef struct huff_table {
  int32_t fast[1 << PEEK_BITS];
  int32_t maxcode[17]; /* per length, the largest code (-1: none) */
  int32_t valoff[17];  /* per length, huffval index minus the first code */
  uint8_t huffval[256];
} huff_table;

/* The bit reader: acc holds n valid bits, most significant first. */
typedef struct bit_reader {
  uint64_t acc;
  int n;
  const uint8_t *p; /* next byte of scan.data to load */
} bit_reader;

typedef struct error_trap {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  int warnings;
} error_trap;

struct ferry__jpeg_entropy {
  struct jpeg_decompress_struct cinfo; /* made anew for every file */
  int created;                         /* cinfo holds a decompressor to destroy */
  error_trap err;
  ferry__scratch scan;     /* the scan's bytes, unstuffed, then PAD zeros */
  size_t scan_len;         /* bytes of data in scan */
  const uint8_t *resume;   /* where libjpeg reads on after the scan (its marker) */
  bit_reader br;
  int last_dc[SCAN_COMPONENTS];
  unsigned mcus_left;
  int failed;
  huff_table dc[NUM_HUFF_TBLS], ac[NUM_HUFF_TBLS]; /* by table number: shared by components */
  const huff_table *block_dc[D_MAX_BLOCKS_IN_MCU], *block_ac[D_MAX_BLOCKS_IN_MCU];
  int block_component[D_MAX_BLOCKS_IN_MCU];
};

/* Zig-zag to natural order; the 16 entries past 63 keep a corrupt run inside the
 * block until the check after it declines the file. */
static const uint8_t natural_order[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

int ferry__jpeg_entropy_available(void) { return 1; }

/* ---- tables ---------------------------------------------------------------------- */

/* JPEG's sign rule: an s-bit value below 2^(s-1) is negative. */
static inline int extend(int v, int s) { return v < (1 << (s - 1)) ? v - (1 << s) + 1 : v; }

/* The entry for lookup index idx of a code of length len for symbol sym, whose value
 * has `size` bits (the symbol itself for DC, its low nibble for AC). */
static int32_t entry_for(int idx, int len, int sym, int size) {
  if (size == 0 || len + size > PEEK_BITS) return len | sym << 8;
  int v = extend((idx >> (PEEK_BITS - len - size)) & ((1 << size) - 1), size);
  return (len + size) | ENTRY_FULL | sym << 8 | (int32_t)((uint32_t)v << 16);
}

/* libjpeg has checked the table (jpeg_make_d_derived_tbl, at start_pass): the codes
 * are canonical and fit their lengths. */
static void build_table(huff_table *t, const JHUFF_TBL *h, int is_ac) {
  int code = 0, k = 0;
  memset(t->fast, 0, sizeof t->fast);
  t->maxcode[0] = -1;
  for (int len = 1; len <= 16; len++) {
    t->valoff[len] = k - code;
    for (int i = 0; i < h->bits[len]; i++, k++, code++) {
      int sym = h->huffval[k], size = is_ac ? sym & 15 : sym;
      if (len > PEEK_BITS) continue;
      for (int idx = code << (PEEK_BITS - len); idx < (code + 1) << (PEEK_BITS - len); idx++)
        t->fast[idx] = entry_for(idx, len, sym, size);
    }
    t->maxcode[len] = h->bits[len] ? code - 1 : -1;
    code <<= 1;
  }
  memcpy(t->huffval, h->huffval, sizeof t->huffval);
}

/* ---- the scan's bytes -------------------------------------------------------------- */

/* Copy the scan from `in` to out without its stuffed zeros (0xFF 0x00 is a 0xFF data
 * byte), up to the marker that ends it (or the end); *resume: that marker's 0xFF.
 * 0 when the scan holds 0xFF 0xFF: a sequence libjpeg-turbo's two readers treat
 * differently, so not ours to decide. */
static int unstuff(const uint8_t *in, const uint8_t *end, uint8_t *out, size_t *out_len,
                   const uint8_t **resume) {
  uint8_t *o = out;
  const uint8_t *q = in;
  while (q < end) {
    const uint8_t *ff = memchr(q, 0xFF, (size_t)(end - q));
    size_t run = (size_t)((ff ? ff : end) - q);
    memcpy(o, q, run);
    o += run;
    q += run;
    if (!ff) break;
    if (q + 1 < end && q[1] == 0x00) {
      *o++ = 0xFF;
      q += 2;
      continue;
    }
    if (q + 1 < end && q[1] == 0xFF) return 0;
    break; /* a marker at q */
  }
  *out_len = (size_t)(o - out);
  *resume = q;
  return 1;
}

/* ---- decoding one MCU ------------------------------------------------------------ */

/* At least 56 valid bits after it: 8 bytes loaded, the whole ones kept. */
#define REFILL()                                     \
  do {                                               \
    uint64_t w_;                                     \
    memcpy(&w_, p, 8);                               \
    acc |= __builtin_bswap64(w_) >> n;               \
    p += (63 - n) >> 3;                              \
    n |= 56;                                         \
  } while (0)
#define CONSUME(k)   \
  do {               \
    acc <<= (k);     \
    n -= (k);        \
  } while (0)

/* A code longer than PEEK_BITS bits (needs 16 valid bits); -1 when no code of up to
 * 16 bits matches. */
static inline int long_code(uint64_t *acc, int *n, const huff_table *t) {
  for (int len = PEEK_BITS + 1; len <= 16; len++) {
    int code = (int)(*acc >> (64 - len));
    if (code <= t->maxcode[len]) {
      *acc <<= len;
      *n -= len;
      return t->huffval[(t->valoff[len] + code) & 0xFF];
    }
  }
  return -1;
}

static inline size_t bits_consumed(const ferry__jpeg_entropy *e, const uint8_t *p, int n) {
  return (size_t)(p - (const uint8_t *)e->scan.data) * 8 - (size_t)n;
}

/* One block's coefficients into block (zeroed by libjpeg). 0 on data to decline. */
static inline int decode_block(ferry__jpeg_entropy *e, bit_reader *br, JCOEF *block, int b) {
  uint64_t acc = br->acc;
  int n = br->n;
  const uint8_t *p = br->p;
  const huff_table *dc = e->block_dc[b], *ac = e->block_ac[b];
  REFILL();
  int32_t t = dc->fast[acc >> (64 - PEEK_BITS)];
  int v;
  if (t & ENTRY_FULL) {
    v = t >> 16;
    CONSUME(t & 31);
  } else {
    int size;
    if (t & 31) {
      CONSUME(t & 31);
      size = (t >> 8) & 0xFF;
    } else {
      size = long_code(&acc, &n, dc);
    }
    if (size < 0 || size > 16) return 0;
    REFILL();
    v = size ? extend((int)(acc >> (64 - size)), size) : 0;
    if (size) CONSUME(size);
  }
  int c = e->block_component[b];
  v += e->last_dc[c];
  if (v > (1 << 20) || v < -(1 << 20)) return 0;
  e->last_dc[c] = v;
  block[0] = (JCOEF)v;
  int k = 1;
  for (; k < 64; k++) {
    if (n < PEEK_BITS) REFILL();
    t = ac->fast[acc >> (64 - PEEK_BITS)];
    if (t & ENTRY_FULL) { /* the common case: run, code and value in one entry */
      k += (t >> 12) & 15;
      CONSUME(t & 31);
      block[natural_order[k]] = (JCOEF)(t >> 16);
      continue;
    }
    if (n < 32) REFILL(); /* the bits under the peek stay as they were */
    int rs;
    if (t & 31) {
      CONSUME(t & 31);
      rs = (t >> 8) & 0xFF;
    } else if ((rs = long_code(&acc, &n, ac)) < 0) {
      return 0;
    }
    int run = rs >> 4, size = rs & 15;
    if (size) {
      k += run;
      block[natural_order[k]] = (JCOEF)extend((int)(acc >> (64 - size)), size);
      CONSUME(size);
    } else if (run == 15) {
      k += 15; /* ZRL: sixteen zeros */
    } else {
      break; /* EOB */
    }
  }
  br->acc = acc;
  br->n = n;
  br->p = p;
  return k <= 64; /* past 64: a run went beyond coefficient 63 */
}

/* After the last MCU: the bits used must lie inside the scan, and libjpeg reads on
 * from the marker that ended it. */
static void finish_scan(j_decompress_ptr cinfo, ferry__jpeg_entropy *e) {
  if (bits_consumed(e, e->br.p, e->br.n) > e->scan_len * 8) e->failed = 1;
  if (e->failed) return;
  cinfo->src->bytes_in_buffer -= (size_t)(e->resume - cinfo->src->next_input_byte);
  cinfo->src->next_input_byte = e->resume;
}

/* libjpeg's decode_mcu slot. Always TRUE (never "suspend"): after a failure the
 * remaining MCUs stay zero and the caller stops reading rows. */
static boolean decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
  ferry__jpeg_entropy *e = cinfo->client_data;
  if (!e->failed && bits_consumed(e, e->br.p, e->br.n) > e->scan_len * 8) e->failed = 1;
  for (int b = 0; b < cinfo->blocks_in_MCU && !e->failed; b++)
    if (!decode_block(e, &e->br, MCU_data[b][0], b)) e->failed = 1;
  if (--e->mcus_left == 0) finish_scan(cinfo, e);
  return TRUE;
}

/* ---- the file ---------------------------------------------------------------------- */

/* What the header alone tells (jpeg_read_header stops at the first scan): a file this
 * path will not take is declined before jpeg_start_decompress, which for a multi-scan
 * file (progressive, or non-interleaved) entropy-decodes every scan into libjpeg's
 * coefficient buffer; declining after it made TurboJPEG decode the file a second time
 * (a progressive photo took 1.9x simplejpeg's time). */
static int header_is_plain(j_decompress_ptr c) {
  return !c->progressive_mode && !c->arith_code && !c->restart_interval && c->data_precision == 8 &&
         !c->inputctl->has_multiple_scans && (c->num_components == 1 || c->num_components == 3);
}

/* A single sequential Huffman scan of 8-bit grey or YCbCr, no restart markers, every
 * component needed, the output the size asked for (the only case the hook reproduces:
 * at any 1/f scale, libjpeg's scaled IDCT reads what it needs of the full blocks). */
static int scan_is_plain(j_decompress_ptr c, int width, int height) {
  if (c->progressive_mode || c->arith_code || c->restart_interval || c->data_precision != 8 ||
      c->inputctl->has_multiple_scans || c->comps_in_scan != c->num_components ||
      (c->num_components != 1 && c->num_components != 3) || c->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU ||
      (int)c->output_width != width || (int)c->output_height != height)
    return 0;
  for (int i = 0; i < c->comps_in_scan; i++)
    if (!c->cur_comp_info[i]->component_needed) return 0;
  return 1;
}

/* Take the scan over: tables, the unstuffed copy, libjpeg's decode_mcu slot. 0 when
 * declined, FERRY_ENOMEM when the copy cannot grow. */
static int take_scan(ferry__jpeg_entropy *e, const char *name, ferry_status *st) {
  j_decompress_ptr c = &e->cinfo;
  unsigned built = 0; /* bit t: dc table t; bit 4 + t: ac table t */
  for (int b = 0; b < c->blocks_in_MCU; b++) {
    int ci = c->MCU_membership[b];
    const jpeg_component_info *comp = c->cur_comp_info[ci];
    int dc = comp->dc_tbl_no, ac = comp->ac_tbl_no;
    if (dc < 0 || dc >= NUM_HUFF_TBLS || ac < 0 || ac >= NUM_HUFF_TBLS || !c->dc_huff_tbl_ptrs[dc] ||
        !c->ac_huff_tbl_ptrs[ac])
      return 0;
    if (!(built & 1u << dc)) build_table(&e->dc[dc], c->dc_huff_tbl_ptrs[dc], 0);
    if (!(built & 1u << (4 + ac))) build_table(&e->ac[ac], c->ac_huff_tbl_ptrs[ac], 1);
    built |= 1u << dc | 1u << (4 + ac);
    e->block_dc[b] = &e->dc[dc];
    e->block_ac[b] = &e->ac[ac];
    e->block_component[b] = ci;
  }
  size_t avail = c->src->bytes_in_buffer;
  if ((*st = ferry__scratch_reserve(&e->scan, avail + PAD, name)) < 0) return 0;
  const uint8_t *in = c->src->next_input_byte;
  if (!unstuff(in, in + avail, e->scan.data, &e->scan_len, &e->resume)) return 0;
  memset((uint8_t *)e->scan.data + e->scan_len, 0, PAD);
  e->br = (bit_reader){0, 0, e->scan.data};
  memset(e->last_dc, 0, sizeof e->last_dc);
  e->mcus_left = c->MCUs_per_row * c->MCU_rows_in_scan;
  e->failed = 0;
  c->client_data = e;
  c->entropy->decode_mcu = decode_mcu;
  return 1;
}

/* Rows into rgb until done or the scan fails; libjpeg longjmps out on an error. */
static void read_rows(ferry__jpeg_entropy *e, uint8_t *rgb, int width) {
  j_decompress_ptr c = &e->cinfo;
  JSAMPROW rows[32];
  while (c->output_scanline < c->output_height && !e->failed) {
    JDIMENSION y = c->output_scanline, count = c->output_height - y;
    if (count > 32) count = 32;
    for (JDIMENSION i = 0; i < count; i++) rows[i] = rgb + (size_t)(y + i) * (size_t)width * 3;
    jpeg_read_scanlines(c, rows, count);
  }
}

/* The decode, with libjpeg's errors landing in ferry__jpeg_entropy_decode's setjmp.
 * Not inlined there, so none of its locals lives in the frame that longjmp returns to. */
static __attribute__((noinline)) ferry_status decode_trapped(ferry__jpeg_entropy *e, const uint8_t *data, size_t len,
                                                             const char *name, uint8_t *rgb, int width, int height,
                                                             int scale_denom) {
  j_decompress_ptr c = &e->cinfo;
  ferry_status st = FERRY_EAGAIN;
  jpeg_mem_src(c, data, (unsigned long)len);
  if (jpeg_read_header(c, TRUE) != JPEG_HEADER_OK || !header_is_plain(c)) goto decline;
  c->out_color_space = JCS_EXT_RGB; /* as tjDecompress2 for TJPF_RGB */
  c->dct_method = JDCT_ISLOW;       /* TJFLAG_ACCURATEDCT */
  c->do_fancy_upsampling = TRUE;
  c->scale_num = 1;                 /* TurboJPEG's 1/f, and Pillow's draft's */
  c->scale_denom = (unsigned)scale_denom;
  jpeg_start_decompress(c);
  if (!scan_is_plain(c, width, height) || !take_scan(e, name, &st)) goto decline;
  read_rows(e, rgb, width);
  if (e->failed || e->err.warnings) goto decline;
  jpeg_finish_decompress(c);
  return e->err.warnings ? FERRY_EAGAIN : FERRY_OK;
decline:
  jpeg_abort_decompress(c);
  return st == FERRY_ENOMEM ? st : FERRY_EAGAIN;
}

/* A new decompressor for every file: libjpeg keeps the tables a file defines for the
 * next one (abbreviated streams), and a file without its own must fail as it does in
 * Pillow, not borrow the previous file's (jpeg.c renews TurboJPEG's handle alike). */
ferry_status ferry__jpeg_entropy_decode(ferry__jpeg_entropy *e, const uint8_t *data, size_t len, const char *name,
                                        uint8_t *rgb, int width, int height, int scale_denom) {
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) return FERRY_EAGAIN;
  e->err.warnings = 0;
  if (setjmp(e->err.jump)) { /* a libjpeg error: TurboJPEG will say what it is */
    if (e->created) jpeg_abort_decompress(&e->cinfo);
    return FERRY_EAGAIN;
  }
  if (e->created) jpeg_destroy_decompress(&e->cinfo);
  e->created = 0;
  jpeg_create_decompress(&e->cinfo); /* out of memory: longjmp above */
  e->created = 1;
  return decode_trapped(e, data, len, name, rgb, width, height, scale_denom);
}

/* ---- the decompressor ------------------------------------------------------------- */

static void trap_error(j_common_ptr c) { longjmp(((error_trap *)c->err)->jump, 1); }
/* Warnings are counted (any one declines the file), never printed. */
static void count_warning(j_common_ptr c, int level) {
  if (level < 0) ((error_trap *)c->err)->warnings++;
}
static void silent(j_common_ptr c) { (void)c; }

/* The decompressor itself is made per file (ferry__jpeg_entropy_decode). */
ferry__jpeg_entropy *ferry__jpeg_entropy_open(void) {
  ferry__jpeg_entropy *e = ferry__calloc(1, sizeof *e);
  if (!e) return NULL;
  e->cinfo.err = jpeg_std_error(&e->err.pub);
  e->err.pub.error_exit = trap_error;
  e->err.pub.emit_message = count_warning;
  e->err.pub.output_message = silent;
  return e;
}

void ferry__jpeg_entropy_close(ferry__jpeg_entropy *e) {
  if (!e) return;
  if (e->created) jpeg_destroy_decompress(&e->cinfo);
  ferry__scratch_free(&e->scan);
  ferry__free(e);
}

#else /* built without libjpeg's API: every file goes to TurboJPEG */

int ferry__jpeg_entropy_available(void) { return 0; }
ferry__jpeg_entropy *ferry__jpeg_entropy_open(void) { return NULL; }
void ferry__jpeg_entropy_close(ferry__jpeg_entropy *e) { (void)e; }
ferry_status ferry__jpeg_entropy_decode(ferry__jpeg_entropy *e, const uint8_t *data, size_t len, const char *name,
                                        uint8_t *rgb, int width, int height, int scale_denom) {
  (void)e, (void)data, (void)len, (void)name, (void)rgb, (void)width, (void)height, (void)scale_denom;
  return FERRY_EAGAIN;
}

#endif
