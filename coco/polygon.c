/* coco/polygon.c - polygon and box rasterisation, bit-exact with maskApi.c's rleFrPoly.
 *
 * rleFrPoly snaps the vertices to a grid 5 times finer than the pixels, walks every
 * edge one grid step at a time (the long axis advances, the short one is rounded),
 * and keeps, wherever the walk changes grid column on a pixel centre, the pixel row the
 * boundary crosses there. Sorted, those crossings toggle the mask in column-major
 * order. Here the walk is streamed: the points are never stored, only the crossings,
 * so memory stays proportional to the outline inside the image; the arithmetic (the
 * rounding casts, the order of every floating-point operation) is kept exactly.
 *
 * Owns: nothing between calls. A call allocates the snapped vertices (freed before it
 * returns) and the crossings, which become the result's runs.
 * Callers: coco/segm.c (annToRLE: every part of a polygon segmentation, then merged
 * by union; the loader's targets and ferry-coco reach it there),
 * ferry_rle_from_bbox, and the tests; on the loader's worker threads, any number at
 * once (no state, no lock). coco/meson.build compiles this
 * file with -ffp-contract=off: a fused multiply-add in `ys + s * t` would round once
 * where maskApi.c rounds twice, and could move a boundary pixel.
 *
 * Invariants:
 *   - the crossings are exactly those rleFrPoly's y-boundary loop keeps, in another
 *     order: every point that can record one is visited, each compared with the
 *     point before it in the full walk. That comparison runs across edges (the
 *     walk's previous point carries over from one edge to the next), as maskApi.c
 *     compares consecutive entries of one array of all the points;
 *   - a crossing is the position x*h + y with x <= w-1 and y <= h (y == h is the
 *     start of column x+1), so it is <= h*w < 2^32; it is computed in 64 bits where
 *     maskApi.c's int product can overflow;
 *   - a walk of at most MAX_OUTLINE_STEPS points records at most that many crossings,
 *     so their number fits the radix sort's uint32 counters;
 *   - the runs of the result sum to h*w by construction (differences of sorted
 *     positions closed by h*w), so no check_sum is needed.
 * pycocotools behaviours kept on purpose, each where it is done: the truncating
 * (int)(5x + .5) snap (not a rounding, for negative coordinates), the edge flip that
 * makes an edge and its reverse walk the same points, the lower of the two columns
 * and the upper row at a crossing, the clamp of that row to [0, h], and crossings at
 * one position cancelling in pairs.
 * Not done here: k < 3 vertices give an empty mask (maskApi.c would rasterise the
 * degenerate outline, and pycocotools' frPyObjects takes a first part of 4 numbers for
 * a box: segm.c does neither); coordinates beyond +-1e8 and outlines past 2^30 steps
 * are FERRY_ELIMIT rather than undefined behaviour.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coco/rle.h"
#include "lib/alloc.h"
#include "lib/status.h"

/* rleFrPoly's `scale`: the grid is 5 times finer than the pixels */
#define GRID_SCALE 5.0
#define MAX_ABS_COORDINATE 1e8            /* x 5 stays far inside int */
#define MAX_OUTLINE_STEPS ((uint64_t)1 << 30)

typedef struct crossing_walk {
  uint32_t h, w;
  /* the walk's last point, kept from one edge to the next */
  int has_prev, prev_u, prev_v;
  uint32_t *crossings;  /* column-major pixel positions where the mask toggles */
  size_t n, cap;
} crossing_walk;

static ferry_status push_crossing(crossing_walk *wk, uint32_t position) {
  if (wk->n == wk->cap) {
    size_t cap = wk->cap ? wk->cap * 2 : 64;
    if (cap > SIZE_MAX / sizeof(uint32_t)) return ferry__fail(FERRY_ENOMEM, "polygon outline too long");
    uint32_t *grown = ferry__realloc(wk->crossings, cap * sizeof(uint32_t));
    if (!grown) return ferry__fail(FERRY_ENOMEM, "out of memory rasterising a polygon");
    wk->crossings = grown;
    wk->cap = cap;
  }
  wk->crossings[wk->n++] = position;
  return FERRY_OK;
}

/* x mod 5 in 0..4 for negative x too (C's % takes the sign of x). */
static int mod5(int x) { return (x % 5 + 5) % 5; }

/* ceil(x / 5) for any sign (C's division truncates toward zero). */
static int64_t ceil_div5(int64_t x) { return x >= 0 ? (x + 4) / 5 : -(-x / 5); }

/* The next boundary point (u, v) on the fine grid: a change of grid column onto a
 * pixel centre inside the image records a crossing at the upper of the two rows.
 * maskApi.c maps a grid coordinate g to pixels as (g + .5) / 5 - .5 in doubles:
 * that is the integer (g - 2) / 5 exactly when g = 5k + 2, and otherwise lies at
 * least 1/5 away from any integer (|g| <= 5e8, far inside a double's precision),
 * so its "is it whole" test and its ceil are done here in integers, with the same
 * results and without two divisions and two roundings per point. */
static ferry_status walk_point(crossing_walk *wk, int u, int v) {
  int prev_u = wk->prev_u, prev_v = wk->prev_v, had_prev = wk->has_prev;
  wk->prev_u = u;
  wk->prev_v = v;
  wk->has_prev = 1;
  if (!had_prev || u == prev_u) return FERRY_OK;
  /* rleFrPoly: xd = u[j] < u[j-1] ? u[j] : u[j]-1, the lower of the two columns */
  int gx = u < prev_u ? u : u - 1;
  if (mod5(gx) != 2) return FERRY_OK;
  int64_t x = ((int64_t)gx - 2) / 5;
  /* rleFrPoly's xd < 0 || xd > w-1: a column outside the image */
  if (x < 0 || x > (int64_t)wk->w - 1) return FERRY_OK;
  /* the upper of the two rows, min(v[j], v[j-1]), mapped like xd and ceiled */
  int64_t y = ceil_div5((int64_t)(v < prev_v ? v : prev_v) - 2); /* clamping after ceil */
  if (y < 0) y = 0;                                                /* gives what clamping */
  else if (y > (int64_t)wk->h) y = wk->h;                          /* before it does */
  return push_crossing(wk, (uint32_t)((uint64_t)x * wk->h + (uint64_t)y));
}

/* One edge of the walk: point d (0..n, in the edge's own direction) is
 * edge_point(e, d). Along the long axis every step moves one grid unit; the short
 * one is rounded as maskApi.c rounds it. u never moves more than one unit a step and
 * is monotone in d. */
typedef struct edge {
  int xs, ys, n, flip, x_major;
  double s;
} edge;

/* Inlined: called for every point visited, and the call cost as much as the point.
 * The expressions are rleFrPoly's, operation for operation: (int)(ys + s*t + .5)
 * truncates toward zero as its cast does. n == 0 (a repeated vertex) gives ys without
 * touching s, where maskApi.c's s is 0/0 (see walk_edge). */
static inline __attribute__((always_inline)) void edge_point(const edge *e, int d, int *u, int *v) {
  int t = e->flip ? e->n - d : d;
  if (e->x_major) {
    *u = t + e->xs;
    *v = e->n == 0 ? e->ys : (int)(e->ys + e->s * t + .5);
  } else {
    *u = (int)(e->xs + e->s * t + .5);
    *v = t + e->ys;
  }
}

static int edge_u(const edge *e, int d) {
  int u, v;
  edge_point(e, d, &u, &v);
  return u;
}

static ferry_status emit(crossing_walk *wk, const edge *e, int d) {
  int u, v;
  edge_point(e, d, &u, &v);
  return walk_point(wk, u, v);
}

/* Smallest d in [lo, hi] with u(d) on the far side of `bound` (u >= bound when u
 * rises along the edge, u <= bound when it falls); hi + 1 when there is none. */
static int first_reaching(const edge *e, int lo, int hi, int64_t bound, int rising) {
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int64_t u = edge_u(e, mid);
    if (rising ? u >= bound : u <= bound) hi = mid - 1;
    else lo = mid + 1;
  }
  return lo;
}

/* first_reaching, probing lo, lo+1, lo+3, lo+7, ... first: the cost grows with the
 * log of the distance to the answer, so dense changes cost one probe each. */
static int next_reaching(const edge *e, int lo, int hi, int64_t bound, int rising) {
  int step = 1;
  while (lo <= hi) {
    int probe = hi - lo < step ? hi : lo + step - 1;
    int64_t u = edge_u(e, probe);
    if (rising ? u >= bound : u <= bound) return first_reaching(e, lo, probe, bound, rising);
    lo = probe + 1;
    /* capped so that lo + step - 1 stays inside int (n <= 1e9: coordinates <= 1e8) */
    if (step < (1 << 29)) step *= 2;
  }
  return hi + 1;
}

/* Make point d the walk's previous point without visiting it: for points that
 * cannot record a crossing. */
static void skip_to(crossing_walk *wk, const edge *e, int d) {
  edge_point(e, d, &wk->prev_u, &wk->prev_v);
  wk->has_prev = 1;
}

/* Points a..b of an x-major edge (point a visited first). There u moves one
 * column every step, and a step records a crossing only when the lower of its
 * two columns is a pixel centre, 5k+2 (walk_point): one step in five. Those
 * steps are visited, each with the point before it; the points between are
 * skipped over, which changes nothing, as none of them could record one. */
static ferry_status walk_x_major(crossing_walk *wk, const edge *e, int a, int b) {
  ferry_status st = emit(wk, e, a);
  /* step d's lower column: xs + d - 1 rising, xs + n - d falling */
  int phase = e->flip ? e->xs + e->n - 2 : 3 - e->xs;
  int last = a;
  for (int d = a + 1 + mod5(phase - (a + 1)); d <= b && st == FERRY_OK; d += 5) {
    if (d - 1 > last) skip_to(wk, e, d - 1);
    st = emit(wk, e, d);
    last = d;
  }
  if (st == FERRY_OK && last < b) skip_to(wk, e, b);
  return st;
}

/* Only a step between two grid columns in [1, 5w-1] can record a crossing (the
 * column it reads, the lower of the two, must be a pixel centre 5k+2 with k < w), and
 * u moves one unit a step, so the points before and after that band, and the points
 * of the y-major stretches where u stays put, are walked over without being visited:
 * the crossings, and the previous point each visited point is compared with, are
 * those of the full walk, at a cost bounded by the image width rather than by how
 * far the vertices lie outside it. x-major edges visit one step in five. */
static ferry_status walk_band(crossing_walk *wk, const edge *e) {
  int u0 = edge_u(e, 0), un = edge_u(e, e->n), rising = un >= u0;
  int64_t lo_u = 1, hi_u = (int64_t)GRID_SCALE * wk->w - 1;
  int a = 0, b = e->n;
  /* u is monotone along the edge: with both ends in the band, all of it is (the
   * searches below would find exactly 0 and n), which is most edges. */
  if (u0 < lo_u || u0 > hi_u || un < lo_u || un > hi_u) {
    a = first_reaching(e, 0, e->n, rising ? lo_u : hi_u, rising);
    b = first_reaching(e, a, e->n, rising ? hi_u + 1 : lo_u - 1, rising) - 1;
  }
  if (a > b) {  /* the edge never enters the band: no crossing */
    ferry_status st = emit(wk, e, 0);
    return st == FERRY_OK && e->n > 0 ? emit(wk, e, e->n) : st;
  }
  a = a > 0 ? a - 1 : 0;
  b = b < e->n ? b + 1 : e->n;
  ferry_status st = a > 0 ? emit(wk, e, 0) : FERRY_OK;
  if (e->x_major) {
    if (st == FERRY_OK) st = walk_x_major(wk, e, a, b);
    return st == FERRY_OK && b < e->n ? emit(wk, e, e->n) : st;
  }
  for (int d = a; d <= b && st == FERRY_OK;) {
    st = emit(wk, e, d);
    if (st != FERRY_OK || d == b) break;
    /* jump to the step where u changes, visiting the point before it */
    int u = edge_u(e, d);
    int next = next_reaching(e, d + 1, b, rising ? (int64_t)u + 1 : (int64_t)u - 1, rising);
    if (next > b) next = b;
    else if (next - 1 > d && (st = emit(wk, e, next - 1)) != FERRY_OK) break;
    d = next;
  }
  if (st == FERRY_OK && b < e->n) st = emit(wk, e, e->n);
  return st;
}

/* Walk the edge (xs,ys)->(xe,ye) as rleFrPoly does: always in increasing order of the
 * long axis (so an edge and its reverse give the same points), then emitted in the
 * edge's own direction. */
static ferry_status walk_edge(crossing_walk *wk, int xs, int ys, int xe, int ye) {
  /* |differences| of snapped coordinates: at most 2 x 5e8, inside int */
  int dx = abs(xe - xs), dy = abs(ys - ye);
  int flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
  if (flip) {
    int t = xs; xs = xe; xe = t;
    t = ys; ys = ye; ye = t;
  }
  edge e = {.xs = xs, .ys = ys, .flip = flip, .x_major = dx >= dy};
  if (e.x_major) {
    /* dx == dy == 0 (a repeated vertex): maskApi.c computes 0/0 here; the single point
     * it emits shares its column with its neighbours, so its row is never read. */
    e.n = dx;
    e.s = dx == 0 ? 0 : (double)(ye - ys) / dx;
  } else {
    e.n = dy;
    e.s = (double)(xe - xs) / dy;
  }
  return walk_band(wk, &e);
}

/* Below this many crossings an insertion sort is cheaper than clearing and
 * scanning the radix sort's 4 x 256 counters (small polygons, small images). */
enum { INSERTION_SORT_MAX = 48 };

static void insertion_sort(uint32_t *a, size_t k) {
  for (size_t j = 1; j < k; j++) {
    uint32_t key = a[j];
    size_t i = j;
    for (; i > 0 && a[i - 1] > key; i--) a[i] = a[i - 1];
    a[i] = key;
  }
}

/* Sort the crossings: an LSD radix sort a byte at a time, skipping the bytes all
 * keys share. (qsort's comparison calls cost more than the walk that found them.) */
static ferry_status sort_crossings(uint32_t *a, size_t k) {
  if (k <= INSERTION_SORT_MAX) {
    insertion_sort(a, k);
    return FERRY_OK;
  }
  /* One histogram per byte, all from the unsorted keys: a pass permutes the keys,
   * which leaves every byte's histogram unchanged. k <= 2^30 + 1 (the invariant
   * above), so uint32 counters cannot overflow. */
  uint32_t count[4][256] = {{0}};
  for (size_t j = 0; j < k; j++)
    for (int b = 0; b < 4; b++) count[b][a[j] >> (8 * b) & 255]++;
  uint32_t *tmp = NULL, *src = a;
  for (int b = 0; b < 4; b++) {
    /* every key has src[0]'s byte here: this pass would not move anything */
    if (count[b][src[0] >> (8 * b) & 255] == k) continue;
    if (!tmp && !(tmp = ferry__malloc(k * sizeof *tmp)))
      return ferry__fail(FERRY_ENOMEM, "out of memory rasterising a polygon");
    uint32_t *dst = src == a ? tmp : a, pos = 0;
    for (int d = 0; d < 256; d++) {
      uint32_t c = count[b][d];
      count[b][d] = pos;
      pos += c;
    }
    for (size_t j = 0; j < k; j++) dst[count[b][src[j] >> (8 * b) & 255]++] = src[j];
    src = dst;
  }
  if (src != a) memcpy(a, src, k * sizeof *a);
  ferry__free(tmp);
  return FERRY_OK;
}

/* Sorted crossings (with h*w appended) -> runs. Crossings at one position cancel in
 * pairs: a zero gap drops that toggle and folds the following gap into the last run.
 * This is rleFrPoly's last loop (a[] differenced, then b[] built), done in place. The
 * first run is kept even when it is 0 (the mask starts with a set pixel). */
static ferry_status crossings_to_rle(crossing_walk *wk, ferry_rle *out) {
  ferry_status st = push_crossing(wk, (uint32_t)((uint64_t)wk->h * wk->w));
  if (st < 0) return st;
  uint32_t *a = wk->crossings;
  size_t k = wk->n;
  st = sort_crossings(a, k);
  if (st < 0) return st;
  uint32_t prev = 0;
  for (size_t j = 0; j < k; j++) {
    uint32_t t = a[j];
    a[j] -= prev;
    prev = t;
  }
  size_t m = 0, j = 0;
  a[m++] = a[j++];  /* in place: m never passes j */
  while (j < k) {
    if (a[j] > 0) {
      a[m++] = a[j++];
    } else {
      j++;
      if (j < k) a[m - 1] += a[j++];
    }
  }
  /* the buffer now belongs to *out (not shrunk to m) */
  wk->crossings = NULL;
  return ferry__rle_adopt(a, m, wk->h, wk->w, out);
}

static ferry_status empty_mask(uint32_t h, uint32_t w, ferry_rle *out) {
  uint32_t *counts;
  ferry_status st = ferry__rle_alloc_counts(1, &counts);
  if (st < 0) return st;
  counts[0] = (uint32_t)((uint64_t)h * w);
  return ferry__rle_adopt(counts, 1, h, w, out);
}

/* Snap vertex coordinates to the fine grid (truncating, as maskApi.c's int cast),
 * closing the outline with vertex k = vertex 0 as rleFrPoly does, and count the walk's
 * points as it sizes its u/v arrays: max(dx, dy) + 1 per edge. The bound check comes
 * first: (int) of a double outside int's range is undefined behaviour, and !(<=)
 * also catches NaN. */
static ferry_status snap_vertices(const double *xy, size_t k, int *gx, int *gy, uint64_t *steps) {
  for (size_t j = 0; j < k; j++) {
    double x = xy[2 * j], y = xy[2 * j + 1];
    if (!(fabs(x) <= MAX_ABS_COORDINATE) || !(fabs(y) <= MAX_ABS_COORDINATE))
      return ferry__fail(FERRY_ELIMIT, "polygon vertex %zu (%g, %g) is not finite or beyond +-%g",
                        j, x, y, MAX_ABS_COORDINATE);
    gx[j] = (int)(GRID_SCALE * x + .5);
    gy[j] = (int)(GRID_SCALE * y + .5);
  }
  gx[k] = gx[0];
  gy[k] = gy[0];
  *steps = 0;
  for (size_t j = 0; j < k; j++) {
    uint64_t dx = (uint64_t)llabs((long long)gx[j + 1] - gx[j]);
    uint64_t dy = (uint64_t)llabs((long long)gy[j + 1] - gy[j]);
    *steps += (dx > dy ? dx : dy) + 1;
  }
  if (*steps > MAX_OUTLINE_STEPS)
    return ferry__fail(FERRY_ELIMIT, "polygon outline of %llu grid steps exceeds the limit of %llu",
                      (unsigned long long)*steps, (unsigned long long)MAX_OUTLINE_STEPS);
  return FERRY_OK;
}

ferry_status ferry_rle_from_polygon(const double *xy, size_t k, uint32_t h, uint32_t w, ferry_rle *out) {
  if (!out || (k && !xy)) return ferry__fail(FERRY_EINVAL, "ferry_rle_from_polygon: NULL argument");
  ferry_status st = ferry__rle_check_size(h, w);
  if (st < 0) return st;
  /* k < 3: see the top of the file. A 0-pixel image has no crossing to find. */
  if (k < 3 || h == 0 || w == 0) return empty_mask(h, w, out);
  if (k > SIZE_MAX / sizeof(int) - 1) return ferry__fail(FERRY_ENOMEM, "polygon of %zu vertices is too large", k);
  int *gx = ferry__malloc((k + 1) * sizeof(int)), *gy = ferry__malloc((k + 1) * sizeof(int));
  crossing_walk wk = {.h = h, .w = w};
  uint64_t steps;
  if (!gx || !gy) st = ferry__fail(FERRY_ENOMEM, "out of memory rasterising a polygon");
  else st = snap_vertices(xy, k, gx, gy, &steps);
  /* edges in vertex order, the last one back to vertex 0: the walk's previous point
   * must carry from each edge to the next */
  for (size_t j = 0; j < k && st == FERRY_OK; j++) st = walk_edge(&wk, gx[j], gy[j], gx[j + 1], gy[j + 1]);
  ferry__free(gx);
  ferry__free(gy);
  if (st == FERRY_OK) st = crossings_to_rle(&wk, out);
  ferry__free(wk.crossings);
  return st;
}

/* rleFrBbox: the box as the polygon (xs,ys) (xs,ye) (xe,ye) (xe,ys), with xe = x + w
 * computed in doubles as there. */
ferry_status ferry_rle_from_bbox(const double bbox[4], uint32_t h, uint32_t w, ferry_rle *out) {
  if (!bbox) return ferry__fail(FERRY_EINVAL, "ferry_rle_from_bbox: NULL box");
  double xs = bbox[0], xe = xs + bbox[2], ys = bbox[1], ye = ys + bbox[3];
  double xy[8] = {xs, ys, xs, ye, xe, ye, xe, ys};
  return ferry_rle_from_polygon(xy, 4, h, w, out);
}
