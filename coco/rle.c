/* coco/rle.c - RLE masks: validation, encode, the string codec, area, bbox,
 * merge and IoU, with pycocotools' maskApi.c semantics (see ferry/mask.h).
 *
 * Owns: nothing between calls. Each function reads the caller's ferry_rle values and
 * returns new ones whose counts it allocated (ferry__malloc; ferry_rle_free).
 * Callers: coco/segm.c (annToRLE, on the loader's worker threads, many at once),
 * polygon.c and rle_decode.c (the helpers of rle.h), ferry-coco and the
 * tests. Decoding runs to pixels is rle_decode.c's. No state and no lock: any number of
 * threads at once, each on its own outputs.
 *
 * Invariants:
 *   - every ferry_rle returned here is valid: its counts sum to exactly h*w and h*w
 *     <= UINT32_MAX (a size given as an argument passes ferry__rle_check_size; merge
 *     takes its size from masks that must already be valid); m is 0 only when h*w is;
 *   - an RLE handed in is not trusted (a caller may fill the struct by hand): decode,
 *     merge and IoU check its sum before walking it, which is what keeps every walk
 *     inside h*w (maskApi.c's rleDecode tests its bounds pixel by pixel, and its
 *     other functions trust the sum). Area and bbox read only the counts and check
 *     nothing;
 *   - counts are uint32 as in maskApi.c; sums over them are taken in 64 bits, so
 *     nothing wraps where maskApi.c's uint sums would, and on valid RLEs (all sums <=
 *     h*w < 2^32) the results are equal. The exception is bbox, which keeps
 *     rleToBbox's uint32 arithmetic on purpose.
 * Each function says which maskApi.c function it follows, where there is one, and
 * where it differs.
 * Where maskApi.c has undefined behaviour (rleFrString reads to a NUL and shifts an
 * int past its width; rleToString allocates 6 characters a value where a large count
 * takes 7), this file fails cleanly or sizes the buffer for the worst case.
 * Not done here: rleNms and bbNms, and rleDecode of n masks into one buffer;
 * pixel masks in and out are row-major (only the runs are column-major), and encode
 * takes any nonzero byte as foreground where rleEncode compares raw bytes (a mask
 * holding 0, 1 and 2 would get extra runs there).
 */
#include <math.h>
#include <string.h>

#include "coco/rle.h"
#include "lib/alloc.h"
#include "lib/status.h"

/* Longest run of characters one count may take: 7 x 5 bits hold any delta of two
 * uint32 counts with its sign, which is all rleToString ever writes. */
#define RLE_MAX_VALUE_CHARS 7

/* Resets the size too, so a second free (or a free of a zeroed struct) is harmless. */
void ferry_rle_free(ferry_rle *rle) {
  if (!rle) return;
  ferry__free(rle->counts);
  rle->counts = NULL;
  rle->m = 0;
  rle->h = rle->w = 0;
}

/* maskApi.c counts in uint: beyond 2^32-1 pixels one run could not span the mask and
 * the sum of the runs would wrap. */
ferry_status ferry__rle_check_size(uint32_t h, uint32_t w) {
  if ((uint64_t)h * w > UINT32_MAX)
    return ferry__fail(FERRY_ELIMIT, "mask size %ux%u exceeds 2^32-1 pixels", h, w);
  return FERRY_OK;
}

ferry_status ferry__rle_adopt(uint32_t *counts, size_t m, uint32_t h, uint32_t w, ferry_rle *out) {
  out->h = h;
  out->w = w;
  out->m = m;
  out->counts = counts;
  return FERRY_OK;
}

ferry_status ferry__rle_alloc_counts(size_t m, uint32_t **counts) {
  if (m > SIZE_MAX / sizeof(uint32_t))
    return ferry__fail(FERRY_ENOMEM, "RLE of %zu runs is too large", m);
  *counts = ferry__malloc(m * sizeof(uint32_t));
  if (!*counts) return ferry__fail(FERRY_ENOMEM, "out of memory for %zu RLE runs", m);
  return FERRY_OK;
}

/* The one check that stands in for rleDecode's per-pixel bounds test: once the runs
 * sum to h*w, no walk over them can leave the mask. */
ferry_status ferry__rle_check_sum(const uint32_t *counts, size_t m, uint32_t h, uint32_t w) {
  /* in 64 bits: it cannot wrap below 2^32 counts (16 GiB of them) */
  uint64_t sum = 0;
  for (size_t i = 0; i < m; i++) sum += counts[i];
  uint64_t expected = (uint64_t)h * w;
  if (sum != expected)
    return ferry__fail(FERRY_EFORMAT, "RLE counts sum to %llu, expected h*w = %u*%u = %llu",
                      (unsigned long long)sum, h, w, (unsigned long long)expected);
  return FERRY_OK;
}

ferry_status ferry_rle_from_counts(const uint32_t *counts, size_t m, uint32_t h, uint32_t w,
                                   ferry_rle *out) {
  if (!out || (m > 0 && !counts)) return ferry__fail(FERRY_EINVAL, "ferry_rle_from_counts: NULL argument");
  ferry_status st = ferry__rle_check_size(h, w);
  if (st < 0) return st;
  if ((st = ferry__rle_check_sum(counts, m, h, w)) < 0) return st;
  /* Copied as given, zero-length runs included: pycocotools keeps an uncompressed
   * RLE's counts as they are, so what is computed from the runs (the string form
   * above all) is what it computes. */
  uint32_t *copy;
  if ((st = ferry__rle_alloc_counts(m, &copy)) < 0) return st;
  if (m) memcpy(copy, counts, m * sizeof(uint32_t));
  return ferry__rle_adopt(copy, m, h, w, out);
}

/* ---- encode ----------------------------------------------------------------- */

/* Visit the mask column-major; count runs when `counts` is NULL, else store them.
 * rleEncode reads a Fortran-ordered (column-major) array in memory order; reading a
 * row-major mask column by column visits the same pixels in the same order. The
 * first run is background (value starts at 0), so a mask whose first pixel is set
 * starts with a 0 count, as there. */
static size_t encode_runs(const uint8_t *mask, uint32_t h, uint32_t w, uint32_t *counts) {
  size_t m = 0;
  uint32_t run = 0;
  int value = 0;
  for (uint32_t x = 0; x < w; x++) {
    for (uint32_t y = 0; y < h; y++) {
      int pixel = mask[(size_t)y * w + x] != 0;
      if (pixel != value) {
        if (counts) counts[m] = run;
        m++;
        run = 0;
        value = pixel;
      }
      run++;
    }
  }
  /* the last run is closed by the end of the mask */
  if (counts) counts[m] = run;
  return m + 1;
}

ferry_status ferry_rle_encode(const uint8_t *mask, uint32_t h, uint32_t w, ferry_rle *out) {
  if (!out || (!mask && (uint64_t)h * w > 0)) return ferry__fail(FERRY_EINVAL, "ferry_rle_encode: NULL argument");
  ferry_status st = ferry__rle_check_size(h, w);
  if (st < 0) return st;
  /* Two passes, one to count the runs and one to store them: memory is the runs,
   * where rleEncode allocates h*w+1 counts up front. */
  size_t m = encode_runs(mask, h, w, NULL);
  uint32_t *counts;
  if ((st = ferry__rle_alloc_counts(m, &counts)) < 0) return st;
  encode_runs(mask, h, w, counts);
  return ferry__rle_adopt(counts, m, h, w, out);
}

ferry_status ferry__rle_check_arg(const ferry_rle *rle, const char *fn) {
  if (!rle) return ferry__fail(FERRY_EINVAL, "%s: NULL RLE", fn);
  if (rle->m > 0 && !rle->counts) return ferry__fail(FERRY_EINVAL, "%s: RLE without counts", fn);
  /* A hand-built RLE may claim any size; past 2^32-1 pixels merge's run lengths
   * would wrap and give a wrong mask with FERRY_OK. */
  ferry_status st = ferry__rle_check_size(rle->h, rle->w);
  return st < 0 ? ferry__error_prefix(st, "%s: ", fn) : FERRY_OK;
}

/* ---- the compressed string codec ---------------------------------------------- */

/* rleToString: each count, from the fourth on (i > 2, not i >= 2: maskApi.c's
 * choice, which every COCO file's strings depend on), is stored as its difference
 * from the count two places back; each value is written 5 bits a character, low bits
 * first, bit 0x20 meaning "more follows" and bit 0x10 of the last character giving
 * the sign; adding 48 puts every character in '0'..'o'. */
ferry_status ferry_rle_to_string(const ferry_rle *rle, char **out) {
  ferry_status st = ferry__rle_check_arg(rle, "ferry_rle_to_string");
  if (st < 0) return st;
  if (!out) return ferry__fail(FERRY_EINVAL, "ferry_rle_to_string: NULL output");
  /* The worst case, 7 characters a value and the NUL (maskApi.c allocates 6 a value,
   * which values of magnitude 2^29 or more can overrun). */
  if (rle->m > (SIZE_MAX - 1) / RLE_MAX_VALUE_CHARS)
    return ferry__fail(FERRY_ENOMEM, "RLE of %zu runs is too large", rle->m);
  char *s = ferry__malloc(rle->m * RLE_MAX_VALUE_CHARS + 1);
  if (!s) return ferry__fail(FERRY_ENOMEM, "out of memory for an RLE string");
  size_t p = 0;
  for (size_t i = 0; i < rle->m; i++) {
    int64_t x = (int64_t)rle->counts[i] - (i > 2 ? (int64_t)rle->counts[i - 2] : 0);
    for (;;) {
      int c = (int)(x & 0x1f);
      x >>= 5;  /* arithmetic: x stays negative until it reaches -1 */
      /* done once what is left is the sign extension of this character's bit 0x10 */
      int more = (c & 0x10) ? x != -1 : x != 0;
      s[p++] = (char)(48 + (more ? c | 0x20 : c));
      if (!more) break;
    }
  }
  s[p] = '\0';
  *out = s;
  return FERRY_OK;
}

void ferry_rle_free_string(char *s) { ferry__free(s); }

/* Read one value starting at s[*pos]; advances *pos. rleFrString's loop, made strict:
 * it reads until a NUL and accumulates with an int shift that can overflow from the
 * seventh character on; here the buffer's end, a character outside '0'..'o' and a
 * value longer than 7 characters (35 bits, more than any difference of two uint32
 * counts needs) are errors naming the character. */
static ferry_status read_string_value(const char *s, size_t len, size_t *pos, int64_t *value) {
  size_t start = *pos;
  int64_t x = 0;
  for (int k = 0;; k++) {
    if (*pos >= len)
      return ferry__fail(FERRY_EFORMAT, "RLE string ends inside the value that starts at character %zu", start);
    if (k == RLE_MAX_VALUE_CHARS)
      return ferry__fail(FERRY_EFORMAT, "RLE string value at character %zu overflows (more than %d characters)",
                        start, RLE_MAX_VALUE_CHARS);
    unsigned char ch = (unsigned char)s[*pos];
    if (ch < 48 || ch > 111)
      return ferry__fail(FERRY_EFORMAT, "RLE string character %zu (0x%02x) is outside '0'..'o'", *pos, ch);
    int c = ch - 48;
    (*pos)++;
    x |= (int64_t)(c & 0x1f) << (5 * k);
    if (!(c & 0x20)) {
      /* x < 2^(5(k+1)) here, so subtracting that is rleFrString's
       * x |= -1 << 5*k (k already incremented there) */
      if (c & 0x10) x -= (int64_t)1 << (5 * (k + 1));  /* sign-extend */
      *value = x;
      return FERRY_OK;
    }
  }
}

ferry_status ferry_rle_from_string(const char *s, size_t len, uint32_t h, uint32_t w, ferry_rle *out) {
  if (!out || (!s && len)) return ferry__fail(FERRY_EINVAL, "ferry_rle_from_string: NULL argument");
  ferry_status st = ferry__rle_check_size(h, w);
  if (st < 0) return st;
  uint32_t *counts;
  /* every value takes at least one character: len counts always suffice */
  if ((st = ferry__rle_alloc_counts(len ? len : 1, &counts)) < 0) return st;
  size_t m = 0, pos = 0;
  while (pos < len) {
    size_t start = pos;
    int64_t x = 0;
    if ((st = read_string_value(s, len, &pos, &x)) < 0) goto fail;
    /* undo the delta, from the fourth count on */
    if (m > 2) x += counts[m - 2];
    /* rleFrString casts to uint, wrapping such a value silently */
    if (x < 0 || x > (int64_t)UINT32_MAX) {
      st = ferry__fail(FERRY_EFORMAT, "RLE string value at character %zu gives count %lld, outside 0..2^32-1",
                      start, (long long)x);
      goto fail;
    }
    counts[m++] = (uint32_t)x;
  }
  /* rleFrString does not check the sum; here such a string is refused, so that every
   * ferry_rle is valid */
  if ((st = ferry__rle_check_sum(counts, m, h, w)) < 0) goto fail;
  return ferry__rle_adopt(counts, m, h, w, out);
fail:
  ferry__free(counts);
  return st;
}

/* ---- measures ------------------------------------------------------------------ */

/* rleArea: the odd (foreground) runs. Summed in 64 bits where rleArea sums in uint;
 * equal for any valid RLE, whose area is <= h*w < 2^32. */
uint64_t ferry_rle_area(const ferry_rle *rle) {
  uint64_t area = 0;
  if (!rle || !rle->counts) return 0;
  for (size_t j = 1; j < rle->m; j += 2) area += rle->counts[j];
  return area;
}

/* pycocotools' current rleToBbox (2.0.11): uint32 arithmetic over the foreground runs,
 * zero-length ones skipped; a run that spans two columns widens the box to the full
 * height. A mask whose only foreground runs are empty keeps the initial extremes, so
 * width and height wrap around in uint32 as they do there. */
void ferry_rle_to_bbox(const ferry_rle *rle, double bbox[4]) {
  bbox[0] = bbox[1] = bbox[2] = bbox[3] = 0;
  if (!rle || !rle->counts) return;
  uint32_t h = rle->h, w = rle->w;
  /* as rleToBbox: this drops only a trailing background run */
  size_t m = rle->m / 2 * 2;
  if (m == 0) return;
  uint32_t xs = w, ys = h, xe = 0, ye = 0, cc = 0;
  for (size_t j = 0; j < m; j++) {
    uint32_t start = cc;
    cc += rle->counts[j];
    /* h == 0: an unchecked RLE may still have a nonempty foreground run there, and
     * maskApi.c would divide by zero */
    if (j % 2 == 0 || rle->counts[j] == 0 || h == 0) continue;
    uint32_t x0 = start / h, y0 = start % h, x1 = (cc - 1) / h, y1 = (cc - 1) % h;
    if (x0 < xs) xs = x0;
    if (x1 > xe) xe = x1;
    if (x0 < x1) {
      ys = 0;
      ye = h - 1;
    } else {
      if (y0 < ys) ys = y0;
      if (y1 > ye) ye = y1;
    }
  }
  bbox[0] = xs;
  bbox[1] = ys;
  /* uint32 arithmetic, as in rleToBbox: when no run widened the box (xs = w, xe = 0)
   * the width and height wrap around as they do there */
  bbox[2] = (uint32_t)(xe - xs + 1);
  bbox[3] = (uint32_t)(ye - ys + 1);
}

/* ---- merge --------------------------------------------------------------------- */

/* A cursor over runs that steps over zero-length runs, flipping the value each run,
 * so merge and IoU see each input as the mask it denotes. maskApi.c's rleMerge and
 * rleIou loops instead stop as soon as both inputs sit on a zero-length run at once
 * (their ct == 0): on RLEs with zero-length runs after the first, that is the one
 * place ferry's results differ, deliberately (mask.h). */
typedef struct run_cursor {
  const uint32_t *counts;
  size_t m, next;
  uint64_t left;  /* pixels left in the current run */
  int value;
} run_cursor;

static void cursor_settle(run_cursor *c) {
  while (c->left == 0 && c->next < c->m) {
    c->left = c->counts[c->next++];
    c->value = !c->value;
  }
}

static void cursor_start(run_cursor *c, const ferry_rle *rle) {
  c->counts = rle->counts;
  c->m = rle->m;
  c->left = rle->m ? rle->counts[0] : 0;
  c->next = 1;
  c->value = 0;
  cursor_settle(c);
}

static void cursor_advance(run_cursor *c, uint64_t n) {
  c->left -= n;
  cursor_settle(c);
}

/* Canonical runs of a OP b into out (capacity a->m + b->m + 1); returns the run count.
 * Both must have the same size and valid sums. A run is closed only where the value
 * changes, so no run after the first is empty (the first is 0 when the first pixel is
 * set): rleMerge's output, for inputs without inner zero-length runs. Each step ends
 * a run of a or of b, so the loop closes at most a->m + b->m runs, and one more
 * follows it: the capacity. */
static size_t merge_pair(const ferry_rle *a, const ferry_rle *b, int intersect, uint32_t *out) {
  run_cursor ca, cb;
  cursor_start(&ca, a);
  cursor_start(&cb, b);
  size_t m = 0;
  int value = 0;
  uint64_t len = 0;
  /* both sum to h*w, so both cursors run out together */
  while (ca.left > 0 && cb.left > 0) {
    uint64_t c = ca.left < cb.left ? ca.left : cb.left;
    int v = intersect ? (ca.value && cb.value) : (ca.value || cb.value);
    if (v != value) {
      out[m++] = (uint32_t)len;
      len = 0;
      value = v;
    }
    len += c;
    cursor_advance(&ca, c);
    cursor_advance(&cb, c);
  }
  /* the cast is exact: len <= h*w < 2^32 */
  out[m++] = (uint32_t)len;
  return m;
}

ferry_status ferry_rle_merge(const ferry_rle *rles, size_t n, int intersect, ferry_rle *out) {
  if (!rles || !out || n == 0) return ferry__fail(FERRY_EINVAL, "ferry_rle_merge: need at least one RLE");
  uint32_t h = rles[0].h, w = rles[0].w;
  for (size_t i = 0; i < n; i++) {
    ferry_status st = ferry__rle_check_arg(&rles[i], "ferry_rle_merge");
    if (st < 0) return st;
    if (rles[i].h != h || rles[i].w != w)
      return ferry__fail(FERRY_EINVAL, "ferry_rle_merge: mask %zu is %ux%u, mask 0 is %ux%u",
                        i, rles[i].h, rles[i].w, h, w);
    if ((st = ferry__rle_check_sum(rles[i].counts, rles[i].m, h, w)) < 0) return st;
  }
  /* maskApi.c returns an empty 0x0 RLE for masks of different sizes; here that is
   * FERRY_EINVAL, checked above. A single mask is copied as is (zero runs included),
   * as rleMerge's n == 1 case does. */
  if (n == 1) return ferry_rle_from_counts(rles[0].counts, rles[0].m, h, w, out);
  /* Folded left to right as rleMerge does; `owned` is the previous step's result,
   * freed once the next one is made (acc starts as the caller's first mask). */
  ferry_rle acc = rles[0];
  uint32_t *owned = NULL;
  for (size_t i = 1; i < n; i++) {
    uint32_t *runs = NULL;
    size_t cap = acc.m + rles[i].m + 1;
    ferry_status st = cap < acc.m ? ferry__fail(FERRY_ENOMEM, "RLE merge too large") : ferry__rle_alloc_counts(cap, &runs);
    if (st < 0) {
      ferry__free(owned);
      return st;
    }
    size_t m = merge_pair(&acc, &rles[i], intersect, runs);
    ferry__free(owned);
    owned = runs;
    acc.counts = runs;
    acc.m = m;
  }
  return ferry__rle_adopt(owned, acc.m, h, w, out);
}

/* ---- IoU ----------------------------------------------------------------------- */

/* maskApi.c's bbIou for one pair: 0 unless the boxes overlap. rleIou uses only its
 * sign: boxes that do not overlap leave the masks uncompared, with IoU 0. */
static double box_iou(const double d[4], const double g[4], int crowd) {
  double da = d[2] * d[3], ga = g[2] * g[3];
  double w = fmin(d[2] + d[0], g[2] + g[0]) - fmax(d[0], g[0]);
  if (w <= 0) return 0;
  double h = fmin(d[3] + d[1], g[3] + g[1]) - fmax(d[1], g[1]);
  if (h <= 0) return 0;
  double i = w * h, u = crowd ? da : da + ga - i;
  return i / u;
}

/* rleIou's inner loop, over the canonical view the cursors give. */
static void intersection_union(const ferry_rle *a, const ferry_rle *b, uint64_t *inter, uint64_t *uni) {
  run_cursor ca, cb;
  cursor_start(&ca, a);
  cursor_start(&cb, b);
  *inter = *uni = 0;
  while (ca.left > 0 && cb.left > 0) {
    uint64_t c = ca.left < cb.left ? ca.left : cb.left;
    if (ca.value || cb.value) *uni += c;
    if (ca.value && cb.value) *inter += c;
    cursor_advance(&ca, c);
    cursor_advance(&cb, c);
  }
}

/* Every input is checked before anything is written to out. */
static ferry_status check_rles(const ferry_rle *rles, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ferry_status st = ferry__rle_check_arg(&rles[i], "ferry_rle_iou");
    if (st < 0) return st;
    if ((st = ferry__rle_check_sum(rles[i].counts, rles[i].m, rles[i].h, rles[i].w)) < 0) return st;
  }
  return FERRY_OK;
}

ferry_status ferry_rle_iou(const ferry_rle *dt, size_t m, const ferry_rle *gt, size_t n,
                           const uint8_t *iscrowd, double *out) {
  if ((m && !dt) || (n && !gt) || (m && n && !out)) return ferry__fail(FERRY_EINVAL, "ferry_rle_iou: NULL argument");
  ferry_status st;
  if ((st = check_rles(dt, m)) < 0 || (st = check_rles(gt, n)) < 0) return st;
  /* out[g*m + d], ground truths outer, as rleIou lays it out */
  for (size_t g = 0; g < n; g++) {
    int crowd = iscrowd && iscrowd[g];
    double gb[4];
    ferry_rle_to_bbox(&gt[g], gb);
    for (size_t d = 0; d < m; d++) {
      double db[4];
      ferry_rle_to_bbox(&dt[d], db);
      double o = box_iou(db, gb, crowd);
      if (o > 0) {
        /* rleIou's rules in its order: -1 for masks of different sizes (only once
         * the boxes overlap), 0 without dividing when nothing intersects, and for
         * a crowd ground truth the union is the detection's area */
        if (dt[d].h != gt[g].h || dt[d].w != gt[g].w) {
          o = -1;
        } else {
          uint64_t i, u;
          intersection_union(&dt[d], &gt[g], &i, &u);
          if (i == 0) u = 1;
          else if (crowd) u = ferry_rle_area(&dt[d]);
          o = (double)i / (double)u;
        }
      }
      out[g * m + d] = o;
    }
  }
  return FERRY_OK;
}
