/* coco/rle_decode.c - RLE masks to pixels: at their own size, resized, or through any
 * nearest index map (an augmentation's resize/crop/resize/flip), never building the
 * full-size mask (rle_decode.h).
 *
 * Owns: nothing between calls but what a ferry__mask_map holds (its two tables, freed
 * by ferry__mask_map_free).
 * Callers: target.c (one map per image, every mask of it decoded through the map, on
 * the loader's worker threads, many at once), the public ferry_rle_decode,
 * ferry_rle_decode_resized and ferry_nearest_index_map (ferry-coco, the tests,
 * users). No state and no lock.
 * Invariants:
 *   - the index rule is torch's interpolate(mode="nearest"), float32 rounding and all
 *     (lib/nearest.h): a mask at R x R equals pycocotools' full mask resized by
 *     torchvision (tests/coco/check_masks_resized.py, check_nearest_torch.py);
 *   - a decode walks the runs once, in column order of the source, so the output
 *     columns are visited in the order of their source columns: forwards for a plain
 *     map, backwards for a flipped one. An RLE handed in is not trusted: its counts
 *     must sum to h*w (ferry__rle_check_sum) before anything is walked;
 *   - only foreground output pixels are written after one memset of the output: the
 *     cost is O(runs + foreground output pixels + the map's tables).
 */
#include <string.h>

#include "coco/rle_decode.h"
#include "coco/rle.h"
#include "lib/alloc.h"
#include "lib/nearest.h"
#include "lib/status.h"

/* ---- maps ----------------------------------------------------------------------- */

void ferry__mask_map_free(ferry__mask_map *map) {
  ferry__free(map->cols);
  ferry__free(map->first_row);
  map->cols = map->first_row = NULL;
}

static int inside_and_monotonic(const uint32_t *v, uint32_t n, uint32_t limit, int allow_reverse) {
  int up = 1, down = allow_reverse;
  for (uint32_t i = 0; i < n; i++) {
    if (v[i] >= limit) return 0;
    if (i && v[i] < v[i - 1]) up = 0;
    if (i && v[i] > v[i - 1]) down = 0;
  }
  return up || down;
}

ferry_status ferry__mask_map_init(ferry__mask_map *map, uint32_t src_h, uint32_t src_w, uint32_t dst_h,
                                 uint32_t dst_w, const uint32_t *rows, const uint32_t *cols) {
  *map = (ferry__mask_map){src_h, src_w, dst_h, dst_w, NULL, NULL};
  if (src_h == 0 || src_w == 0) return FERRY_OK; /* nothing to sample: all zero */
  if ((rows && !inside_and_monotonic(rows, dst_h, src_h, 0)) || (cols && !inside_and_monotonic(cols, dst_w, src_w, 1)))
    return ferry__fail(FERRY_EINVAL, "mask map %ux%u -> %ux%u: rows must be non-decreasing and columns monotonic, "
                       "inside the source", src_h, src_w, dst_h, dst_w);
  map->cols = ferry__malloc((dst_w ? dst_w : 1) * sizeof *map->cols);
  map->first_row = ferry__malloc(((size_t)src_h + 1) * sizeof *map->first_row);
  uint32_t *row_map = rows ? NULL : ferry__malloc((dst_h ? dst_h : 1) * sizeof *row_map);
  if (!map->cols || !map->first_row || (!rows && !row_map)) {
    ferry__free(row_map);
    ferry__mask_map_free(map);
    return ferry__fail(FERRY_ENOMEM, "mask map %ux%u -> %ux%u: out of memory", src_h, src_w, dst_h, dst_w);
  }
  if (cols) memcpy(map->cols, cols, dst_w * sizeof *cols);
  else ferry__nearest_map(src_w, dst_w, map->cols);
  if (!rows) ferry__nearest_map(src_h, dst_h, row_map);
  ferry__nearest_inverse(rows ? rows : row_map, dst_h, src_h, map->first_row);
  ferry__free(row_map);
  return FERRY_OK;
}

/* ---- decoding ------------------------------------------------------------------- */

/* Set the output rows of column j whose source rows lie in [a, b). */
static void fill_column_rows(uint8_t *out, const ferry__mask_map *map, uint32_t j, uint64_t a, uint64_t b) {
  for (uint64_t i = map->first_row[a], end = map->first_row[b]; i < end; i++) out[i * map->dst_w + j] = 1;
}

/* Output column j (its source column's runs start at run `*run`, at pixel *run_start):
 * the foreground runs clipped to the column, mapped to output rows. */
static void decode_column(const ferry_rle *rle, uint8_t *out, const ferry__mask_map *map, uint32_t j,
                          size_t *run, uint64_t *run_start) {
  uint64_t col_start = (uint64_t)map->cols[j] * map->src_h, col_end = col_start + map->src_h;
  while (*run < rle->m && *run_start + rle->counts[*run] <= col_start) *run_start += rle->counts[(*run)++];
  uint64_t p = *run_start;
  for (size_t q = *run; q < rle->m && p < col_end; q++) {
    uint64_t e = p + rle->counts[q];
    if (q & 1) { /* odd runs are foreground; clip [p, e) to this column */
      uint64_t a = (p > col_start ? p : col_start) - col_start;
      uint64_t b = (e < col_end ? e : col_end) - col_start;
      if (b > a) fill_column_rows(out, map, j, a, b);
    }
    p = e;
  }
}

ferry_status ferry__rle_decode_mapped(const ferry_rle *rle, uint8_t *out, const ferry__mask_map *map) {
  size_t n = (size_t)map->dst_h * map->dst_w;
  if (n) memset(out, 0, n);
  /* Nothing to write, or a zero-sized source with no pixel to sample: all zero
   * (mask.h). The counts are never read then, so not checked either. */
  if (n == 0 || map->src_h == 0 || map->src_w == 0) return FERRY_OK;
  if (rle->h != map->src_h || rle->w != map->src_w)
    return ferry__fail(FERRY_EINVAL, "mask %ux%u decoded through a map made for %ux%u", rle->h, rle->w,
                       map->src_h, map->src_w);
  ferry_status st = ferry__rle_check_sum(rle->counts, rle->m, rle->h, rle->w);
  if (st < 0) return st;
  /* Columns in the order of their source columns, so `run` only moves forward: the
   * runs are walked once, plus those that straddle a column. A column whose source
   * is the one before's (upsampling) is a copy of it. */
  int reverse = map->dst_w > 1 && map->cols[0] > map->cols[map->dst_w - 1];
  size_t run = 0;
  uint64_t run_start = 0;
  for (uint32_t k = 0; k < map->dst_w; k++) {
    uint32_t j = reverse ? map->dst_w - 1 - k : k;
    if (k && map->cols[j] == map->cols[reverse ? j + 1 : j - 1]) {
      uint32_t from = reverse ? j + 1 : j - 1;
      for (uint32_t i = 0; i < map->dst_h; i++) out[(size_t)i * map->dst_w + j] = out[(size_t)i * map->dst_w + from];
      continue;
    }
    decode_column(rle, out, map, j, &run, &run_start);
  }
  return FERRY_OK;
}

/* ---- the public decodes --------------------------------------------------------- */

ferry_status ferry_rle_decode_resized(const ferry_rle *rle, uint8_t *out, size_t out_size,
                                      uint32_t dst_h, uint32_t dst_w) {
  ferry_status st = ferry__rle_check_arg(rle, "ferry_rle_decode_resized");
  if (st < 0) return st;
  uint64_t need = (uint64_t)dst_h * dst_w;
  if (need > out_size || (need > 0 && !out))
    return ferry__fail(FERRY_EINVAL, "ferry_rle_decode_resized: output of %zu bytes, need %llu",
                      out_size, (unsigned long long)need);
  ferry__mask_map map;
  if ((st = ferry__mask_map_init(&map, rle->h, rle->w, dst_h, dst_w, NULL, NULL)) < 0) return st;
  st = ferry__rle_decode_mapped(rle, out, &map);
  ferry__mask_map_free(&map);
  return st;
}

ferry_status ferry_rle_decode(const ferry_rle *rle, uint8_t *out, size_t out_size) {
  ferry_status st = ferry__rle_check_arg(rle, "ferry_rle_decode");
  if (st < 0) return st;
  return ferry_rle_decode_resized(rle, out, out_size, rle->h, rle->w);
}

ferry_status ferry_nearest_index_map(uint32_t in, uint32_t out, uint32_t *map) {
  if (in == 0 || (out > 0 && !map))
    return ferry__fail(FERRY_EINVAL, "ferry_nearest_index_map: %s", in == 0 ? "input size 0" : "NULL map");
  ferry__nearest_map(in, out, map);
  return FERRY_OK;
}
