/* tests/fuzz/fuzz_rle.c - the compressed RLE string decoder (ferry_rle_from_string).
 *
 * Input: height and width as two little-endian uint16, then the string's bytes (not
 * NUL-terminated, so ASan sees any read past the end). An accepted string must give
 * runs that sum to h*w, survive to_string/from_string unchanged, and decode to a mask
 * whose re-encoding has the same area.
 */
#include <string.h>

#include "ferry/error.h"
#include "ferry/mask.h"
#include "tests/fuzz/fuzz_check.h"

#define MAX_FULL_DECODE (1u << 18)
#define SMALL 9

static void check_round_trip(const ferry_rle *rle) {
  char *text = NULL;
  FUZZ_CHECK(ferry_rle_to_string(rle, &text) == FERRY_OK);
  ferry_rle back = {0};
  FUZZ_CHECK(ferry_rle_from_string(text, strlen(text), rle->h, rle->w, &back) == FERRY_OK);
  FUZZ_CHECK(back.m == rle->m);
  FUZZ_CHECK(memcmp(back.counts, rle->counts, rle->m * sizeof *rle->counts) == 0);
  ferry_rle_free(&back);
  ferry_rle_free_string(text);
}

static void check_decode(const ferry_rle *rle) {
  uint8_t small[SMALL * SMALL];
  FUZZ_CHECK(ferry_rle_decode_resized(rle, small, sizeof small, SMALL, SMALL) == FERRY_OK);
  size_t n = (size_t)rle->h * rle->w;
  if (n == 0 || n > MAX_FULL_DECODE) return;
  uint8_t *mask = malloc(n);
  FUZZ_CHECK(mask != NULL);
  FUZZ_CHECK(ferry_rle_decode(rle, mask, n) == FERRY_OK);
  ferry_rle again = {0};
  FUZZ_CHECK(ferry_rle_encode(mask, rle->h, rle->w, &again) == FERRY_OK);
  FUZZ_CHECK(ferry_rle_area(&again) == ferry_rle_area(rle));
  ferry_rle_free(&again);
  free(mask);
}

int FUZZ_ENTRY(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  uint32_t h = (uint32_t)data[0] | (uint32_t)data[1] << 8;
  uint32_t w = (uint32_t)data[2] | (uint32_t)data[3] << 8;
  ferry_rle rle = {0};
  ferry_status st = ferry_rle_from_string((const char *)data + 4, size - 4, h, w, &rle);
  if (st != FERRY_OK) {
    FUZZ_CHECK_FAILURE(st);
    FUZZ_CHECK(rle.counts == NULL);
    return 0;
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < rle.m; i++) sum += rle.counts[i];
  FUZZ_CHECK(sum == (uint64_t)h * w);
  FUZZ_CHECK(ferry_rle_area(&rle) <= sum);
  double box[4];
  ferry_rle_to_bbox(&rle, box);
  check_round_trip(&rle);
  check_decode(&rle);
  ferry_rle merged = {0};
  ferry_rle pair[2] = {rle, rle};
  FUZZ_CHECK(ferry_rle_merge(pair, 2, 0, &merged) == FERRY_OK);
  FUZZ_CHECK(ferry_rle_area(&merged) == ferry_rle_area(&rle));
  ferry_rle_free(&merged);
  ferry_rle_free(&rle);
  return 0;
}
