/* tests/coco/mask_oracle.c - drives ferry's masks API from a line protocol, for the
 * differential test against pycocotools (tests/coco/diff_pycocotools.py).
 *
 * One command a line on stdin, one answer a line on stdout ("ERR <message>" on failure):
 *   P h w nparts k x y x y ... k x y ...   polygon parts, union -> "<string> <area> <bbox>"
 *   B h w x y bw bh                        box -> "<string> <area> <bbox>"
 *   S h w <string>                         parse -> "<string> <area> <bbox> | <row-major runs>"
 *   R h w dh dw <string>                   resized decode -> "<row-major runs>"
 *   M intersect h w n <string>...          merge -> "<string> <area> <bbox>"
 *   I m n crowd... (h w <string>)x(m+n)    IoU (dt first, then gt) -> n*m values
 *   E h w nruns run...                     row-major runs -> encode -> "<string>"
 *   C h w m count...                       uncompressed counts -> "<string> <area> <bbox>"
 * Row-major runs alternate starting with background, like RLE counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/mask.h"

static char *next_token(char **cursor) {
  char *s = *cursor;
  while (*s == ' ') s++;
  if (!*s) return NULL;
  char *e = s;
  while (*e && *e != ' ') e++;
  if (*e) *e++ = '\0';
  *cursor = e;
  return s;
}

static double next_number(char **cursor) {
  char *t = next_token(cursor);
  return t ? strtod(t, NULL) : 0;
}

static void print_summary(const ferry_rle *rle) {
  char *s = NULL;
  double bb[4];
  if (ferry_rle_to_string(rle, &s) < 0) { printf("ERR %s", ferry_last_error()); return; }
  ferry_rle_to_bbox(rle, bb);
  printf("%s %llu %.17g %.17g %.17g %.17g", s, (unsigned long long)ferry_rle_area(rle), bb[0], bb[1], bb[2], bb[3]);
  ferry_rle_free_string(s);
}

static void print_row_runs(const uint8_t *mask, size_t n) {
  uint8_t value = 0;
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    if (mask[i] != value) {
      printf("%zu ", run);
      run = 0;
      value = mask[i];
    }
    run++;
  }
  printf("%zu", run);
}

static ferry_status parse_string_rle(char **cursor, ferry_rle *out) {
  uint32_t h = (uint32_t)next_number(cursor), w = (uint32_t)next_number(cursor);
  char *s = next_token(cursor);
  if (!s) s = "";
  return ferry_rle_from_string(s, strlen(s), h, w, out);
}

static ferry_status cmd_polygon(char *cur) {
  uint32_t h = (uint32_t)next_number(&cur), w = (uint32_t)next_number(&cur);
  size_t nparts = (size_t)next_number(&cur);
  ferry_rle *parts = calloc(nparts ? nparts : 1, sizeof *parts);
  ferry_status st = FERRY_OK;
  for (size_t p = 0; p < nparts && st == FERRY_OK; p++) {
    size_t k = (size_t)next_number(&cur);
    double *xy = malloc((2 * k + 1) * sizeof *xy);
    for (size_t i = 0; i < 2 * k; i++) xy[i] = next_number(&cur);
    st = ferry_rle_from_polygon(xy, k, h, w, &parts[p]);
    free(xy);
  }
  ferry_rle merged = {0};
  if (st == FERRY_OK) st = ferry_rle_merge(parts, nparts, 0, &merged);
  if (st == FERRY_OK) print_summary(&merged);
  ferry_rle_free(&merged);
  for (size_t p = 0; p < nparts; p++) ferry_rle_free(&parts[p]);
  free(parts);
  return st;
}

static ferry_status cmd_box(char *cur) {
  uint32_t h = (uint32_t)next_number(&cur), w = (uint32_t)next_number(&cur);
  double bb[4];
  for (int i = 0; i < 4; i++) bb[i] = next_number(&cur);
  ferry_rle rle = {0};
  ferry_status st = ferry_rle_from_bbox(bb, h, w, &rle);
  if (st == FERRY_OK) print_summary(&rle);
  ferry_rle_free(&rle);
  return st;
}

static ferry_status cmd_string(char *cur) {
  ferry_rle rle = {0};
  ferry_status st = parse_string_rle(&cur, &rle);
  if (st == FERRY_OK) {
    size_t n = (size_t)rle.h * rle.w;
    uint8_t *mask = malloc(n ? n : 1);
    st = ferry_rle_decode(&rle, mask, n);
    if (st == FERRY_OK) {
      print_summary(&rle);
      printf(" | ");
      print_row_runs(mask, n);
    }
    free(mask);
  }
  ferry_rle_free(&rle);
  return st;
}

static ferry_status cmd_resized(char *cur) {
  uint32_t h = (uint32_t)next_number(&cur), w = (uint32_t)next_number(&cur);
  uint32_t dh = (uint32_t)next_number(&cur), dw = (uint32_t)next_number(&cur);
  char *s = next_token(&cur);
  if (!s) s = "";
  ferry_rle rle = {0};
  ferry_status st = ferry_rle_from_string(s, strlen(s), h, w, &rle);
  if (st == FERRY_OK) {
    size_t n = (size_t)dh * dw;
    uint8_t *mask = malloc(n ? n : 1);
    st = ferry_rle_decode_resized(&rle, mask, n, dh, dw);
    if (st == FERRY_OK) print_row_runs(mask, n);
    free(mask);
  }
  ferry_rle_free(&rle);
  return st;
}

static ferry_status cmd_merge(char *cur) {
  int intersect = (int)next_number(&cur);
  uint32_t h = (uint32_t)next_number(&cur), w = (uint32_t)next_number(&cur);
  size_t n = (size_t)next_number(&cur);
  ferry_rle *rles = calloc(n ? n : 1, sizeof *rles);
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < n && st == FERRY_OK; i++) {
    char *s = next_token(&cur);
    if (!s) s = "";
    st = ferry_rle_from_string(s, strlen(s), h, w, &rles[i]);
  }
  ferry_rle merged = {0};
  if (st == FERRY_OK) st = ferry_rle_merge(rles, n, intersect, &merged);
  if (st == FERRY_OK) print_summary(&merged);
  ferry_rle_free(&merged);
  for (size_t i = 0; i < n; i++) ferry_rle_free(&rles[i]);
  free(rles);
  return st;
}

static ferry_status cmd_iou(char *cur) {
  size_t m = (size_t)next_number(&cur), n = (size_t)next_number(&cur);
  uint8_t *crowd = calloc(n + 1, 1);
  ferry_rle *rles = calloc(m + n + 1, sizeof *rles);
  double *o = calloc(m * n + 1, sizeof *o);
  for (size_t g = 0; g < n; g++) crowd[g] = (uint8_t)next_number(&cur);
  ferry_status st = FERRY_OK;
  for (size_t i = 0; i < m + n && st == FERRY_OK; i++) st = parse_string_rle(&cur, &rles[i]);
  if (st == FERRY_OK) st = ferry_rle_iou(rles, m, rles + m, n, crowd, o);
  if (st == FERRY_OK)
    for (size_t i = 0; i < m * n; i++) printf(i ? " %.17g" : "%.17g", o[i]);
  for (size_t i = 0; i < m + n; i++) ferry_rle_free(&rles[i]);
  free(crowd);
  free(rles);
  free(o);
  return st;
}

static ferry_status cmd_encode(char *cur) {
  uint32_t h = (uint32_t)next_number(&cur), w = (uint32_t)next_number(&cur);
  size_t nruns = (size_t)next_number(&cur), n = (size_t)h * w, p = 0;
  uint8_t *mask = calloc(n ? n : 1, 1);
  for (size_t r = 0; r < nruns; r++) {
    size_t len = (size_t)next_number(&cur);
    for (size_t i = 0; i < len && p < n; i++) mask[p++] = (uint8_t)(r & 1);
  }
  ferry_rle rle = {0};
  ferry_status st = ferry_rle_encode(mask, h, w, &rle);
  char *s = NULL;
  if (st == FERRY_OK) st = ferry_rle_to_string(&rle, &s);
  if (st == FERRY_OK) printf("%s", s);
  ferry_rle_free_string(s);
  ferry_rle_free(&rle);
  free(mask);
  return st;
}

static ferry_status cmd_counts(char *cur) {
  uint32_t h = (uint32_t)next_number(&cur), w = (uint32_t)next_number(&cur);
  size_t m = (size_t)next_number(&cur);
  uint32_t *counts = malloc((m + 1) * sizeof *counts);
  for (size_t i = 0; i < m; i++) counts[i] = (uint32_t)next_number(&cur);
  ferry_rle rle = {0};
  ferry_status st = ferry_rle_from_counts(counts, m, h, w, &rle);
  if (st == FERRY_OK) print_summary(&rle);
  ferry_rle_free(&rle);
  free(counts);
  return st;
}

int main(void) {
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, stdin) > 0) {
    line[strcspn(line, "\n")] = '\0';
    char *cur = line;
    char *cmd = next_token(&cur);
    if (!cmd) continue;
    ferry_status st;
    switch (cmd[0]) {
      case 'P': st = cmd_polygon(cur); break;
      case 'B': st = cmd_box(cur); break;
      case 'S': st = cmd_string(cur); break;
      case 'R': st = cmd_resized(cur); break;
      case 'M': st = cmd_merge(cur); break;
      case 'I': st = cmd_iou(cur); break;
      case 'E': st = cmd_encode(cur); break;
      case 'C': st = cmd_counts(cur); break;
      default: printf("ERR unknown command %s", cmd); st = FERRY_OK; break;
    }
    if (st != FERRY_OK) printf("ERR %s", ferry_last_error());
    printf("\n");
  }
  free(line);
  return 0;
}
