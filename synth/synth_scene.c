/* synth/synth_scene.c - val2017-shaped instances for one synthetic image. */
#include "synth/synth_scene.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const synth_category synth_categories[SYNTH_CATEGORY_COUNT] = {
  {1, "person", "person"}, {2, "bicycle", "vehicle"}, {3, "car", "vehicle"},
  {4, "motorcycle", "vehicle"}, {5, "airplane", "vehicle"}, {6, "bus", "vehicle"},
  {7, "train", "vehicle"}, {8, "truck", "vehicle"}, {9, "boat", "vehicle"},
  {10, "traffic light", "outdoor"}, {11, "fire hydrant", "outdoor"},
  {13, "stop sign", "outdoor"}, {14, "parking meter", "outdoor"}, {15, "bench", "outdoor"},
  {16, "bird", "animal"}, {17, "cat", "animal"}, {18, "dog", "animal"},
  {19, "horse", "animal"}, {20, "sheep", "animal"}, {21, "cow", "animal"},
  {22, "elephant", "animal"}, {23, "bear", "animal"}, {24, "zebra", "animal"},
  {25, "giraffe", "animal"}, {27, "backpack", "accessory"}, {28, "umbrella", "accessory"},
  {31, "handbag", "accessory"}, {32, "tie", "accessory"}, {33, "suitcase", "accessory"},
  {34, "frisbee", "sports"}, {35, "skis", "sports"}, {36, "snowboard", "sports"},
  {37, "sports ball", "sports"}, {38, "kite", "sports"}, {39, "baseball bat", "sports"},
  {40, "baseball glove", "sports"}, {41, "skateboard", "sports"}, {42, "surfboard", "sports"},
  {43, "tennis racket", "sports"}, {44, "bottle", "kitchen"}, {46, "wine glass", "kitchen"},
  {47, "cup", "kitchen"}, {48, "fork", "kitchen"}, {49, "knife", "kitchen"},
  {50, "spoon", "kitchen"}, {51, "bowl", "kitchen"}, {52, "banana", "food"},
  {53, "apple", "food"}, {54, "sandwich", "food"}, {55, "orange", "food"},
  {56, "broccoli", "food"}, {57, "carrot", "food"}, {58, "hot dog", "food"},
  {59, "pizza", "food"}, {60, "donut", "food"}, {61, "cake", "food"},
  {62, "chair", "furniture"}, {63, "couch", "furniture"}, {64, "potted plant", "furniture"},
  {65, "bed", "furniture"}, {67, "dining table", "furniture"}, {70, "toilet", "furniture"},
  {72, "tv", "electronic"}, {73, "laptop", "electronic"}, {74, "mouse", "electronic"},
  {75, "remote", "electronic"}, {76, "keyboard", "electronic"},
  {77, "cell phone", "electronic"}, {78, "microwave", "appliance"},
  {79, "oven", "appliance"}, {80, "toaster", "appliance"}, {81, "sink", "appliance"},
  {82, "refrigerator", "appliance"}, {84, "book", "indoor"}, {85, "clock", "indoor"},
  {86, "vase", "indoor"}, {87, "scissors", "indoor"}, {88, "teddy bear", "indoor"},
  {89, "hair drier", "indoor"}, {90, "toothbrush", "indoor"},
};

#define EMPTY_FRACTION 0.01
#define EXTRA_INSTANCES_MEAN 6.4 /* tuned: mean ~7.3, median 5 after truncation */
#define CROWD_FRACTION 0.01
#define PERSON_FRACTION 0.25      /* like COCO, person is by far the commonest class */
#define MIN_RADIUS 3.0
#define MAX_RADIUS_FRACTION 0.45  /* of the image's shorter side */
#define MIN_VERTICES 6
#define MAX_VERTICES 40
#define CROWD_MIN_VERTICES 24
#define PART_TRIES 8              /* placements tried for a split-off part */
#define PI 3.14159265358979323846

/* ---- counts and choices ------------------------------------------------------------ */

static int instance_count(synth_rng *r) {
  if (synth_uniform(r) < EMPTY_FRACTION)
    return 0;
  double log_q = log(EXTRA_INSTANCES_MEAN / (1.0 + EXTRA_INSTANCES_MEAN));
  for (;;) { /* truncate by resampling so no spike forms at the maximum */
    int n = 1 + (int)floor(log(1.0 - synth_uniform(r)) / log_q);
    if (n <= SYNTH_MAX_INSTANCES)
      return n;
  }
}

static int random_category(synth_rng *r) {
  if (synth_uniform(r) < PERSON_FRACTION)
    return synth_categories[0].id;
  return synth_categories[1 + synth_below(r, SYNTH_CATEGORY_COUNT - 1)].id;
}

static int part_count(synth_rng *r, double radius) {
  double u = synth_uniform(r);
  if (radius < 6.0 || u < 0.86)
    return 1;
  return u < 0.96 ? 2 : 3;
}

static int vertex_count(synth_rng *r, double radius) {
  int most = (int)fmin(MAX_VERTICES, MIN_VERTICES + 0.6 * radius); /* small: few vertices */
  return MIN_VERTICES + synth_below(r, most - MIN_VERTICES + 1);
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

static double round2(double v) { return round(v * 100.0) / 100.0; }

/* ---- geometry ---------------------------------------------------------------------- */

/* n vertices at increasing angles around (cx, cy), radius modulated smoothly, then
 * stretched and rotated; clipped to the image and rounded to 2 decimals. */
static void star_polygon(synth_rng *r, double cx, double cy, double radius, int n, int w, int h,
                         double *xy) {
  double aspect = synth_range(r, 0.55, 1.7), rot = synth_range(r, 0.0, 2.0 * PI);
  double ph1 = synth_range(r, 0.0, 2.0 * PI), ph2 = synth_range(r, 0.0, 2.0 * PI);
  double cr = cos(rot), sr = sin(rot), step = 2.0 * PI / n;
  for (int i = 0; i < n; i++) {
    double a = step * (i + synth_range(r, -0.4, 0.4));
    double rr = radius * (1.0 + 0.22 * sin(2.0 * a + ph1) + 0.12 * sin(5.0 * a + ph2)) *
                synth_range(r, 0.85, 1.0);
    double px = rr * cos(a) * aspect, py = rr * sin(a) / aspect;
    xy[2 * i] = round2(clampd(cx + px * cr - py * sr, 0.0, w));
    xy[2 * i + 1] = round2(clampd(cy + px * sr + py * cr, 0.0, h));
  }
}

static double shoelace(const double *xy, int n) {
  double sum = 0.0;
  for (int i = 0, j = n - 1; i < n; j = i++)
    sum += xy[2 * j] * xy[2 * i + 1] - xy[2 * i] * xy[2 * j + 1];
  return fabs(0.5 * sum);
}

static void polygon_bbox(const double *xy, int n, double bbox[4]) {
  double x0 = xy[0], y0 = xy[1], x1 = xy[0], y1 = xy[1];
  for (int i = 1; i < n; i++) {
    x0 = fmin(x0, xy[2 * i]);
    x1 = fmax(x1, xy[2 * i]);
    y0 = fmin(y0, xy[2 * i + 1]);
    y1 = fmax(y1, xy[2 * i + 1]);
  }
  bbox[0] = x0;
  bbox[1] = y0;
  bbox[2] = round2(x1 - x0);
  bbox[3] = round2(y1 - y0);
}

/* ---- crowd masks ------------------------------------------------------------------- */

typedef struct mask_ctx {
  uint8_t *mask; /* column-major, h per column */
  int h;
} mask_ctx;

static void mask_span(void *ctx, int y, int x0, int x1) {
  mask_ctx *m = ctx;
  for (int x = x0; x < x1; x++)
    m->mask[(size_t)x * m->h + y] = 1;
}

/* Uncompressed COCO RLE of a column-major mask: run lengths alternating background,
 * foreground, starting with background (a possibly empty first run). Also returns
 * the foreground pixel count and its bounding box. */
static int mask_to_rle(const uint8_t *mask, int w, int h, synth_instance *inst) {
  size_t n = (size_t)w * h, runs = 1;
  for (size_t i = 0; i < n; i++)
    runs += (mask[i] != (i ? mask[i - 1] : 0));
  inst->counts = malloc(runs * sizeof(uint32_t));
  if (!inst->counts)
    return -1;
  size_t k = 0, run = 0, area = 0;
  int x0 = w, y0 = h, x1 = -1, y1 = -1;
  uint8_t current = 0;
  for (size_t i = 0; i < n; i++) {
    if (mask[i] != current) {
      inst->counts[k++] = (uint32_t)run;
      run = 0;
      current = mask[i];
    }
    run++;
    if (mask[i]) {
      int x = (int)(i / h), y = (int)(i % h);
      area++;
      x0 = x < x0 ? x : x0;
      x1 = x > x1 ? x : x1;
      y0 = y < y0 ? y : y0;
      y1 = y > y1 ? y : y1;
    }
  }
  inst->counts[k++] = (uint32_t)run;
  inst->count_len = k;
  inst->area = (double)area;
  inst->bbox[0] = x0;
  inst->bbox[1] = y0;
  inst->bbox[2] = area ? x1 - x0 + 1 : 0;
  inst->bbox[3] = area ? y1 - y0 + 1 : 0;
  return 0;
}

/* A crowd region: one large blob, its outline kept (in xy) only for painting. */
static int make_crowd(synth_rng *r, int w, int h, double cx, double cy, double radius,
                      synth_instance *inst) {
  int n = CROWD_MIN_VERTICES + synth_below(r, SYNTH_MAX_VERTICES - CROWD_MIN_VERTICES + 1);
  radius = fmax(radius, synth_range(r, 0.12, 0.35) * fmin(w, h));
  inst->xy = malloc(2 * (size_t)n * sizeof(double));
  uint8_t *mask = calloc((size_t)w * h, 1);
  if (!inst->xy || !mask) {
    free(mask);
    return -1;
  }
  inst->parts = 1;
  inst->part_vertices[0] = n;
  star_polygon(r, cx, cy, radius, n, w, h, inst->xy);
  mask_ctx m = {mask, h};
  synth_raster_polygon(inst->xy, n, w, h, mask_span, &m);
  int st = mask_to_rle(mask, w, h, inst);
  free(mask);
  return st;
}

/* ---- polygons ---------------------------------------------------------------------- */

static int boxes_overlap(const double a[4], const double b[4]) {
  return a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3];
}

/* Part 0 is the object; later parts are pieces split off by an occluder, smaller and
 * beside it. */
static void place_part(synth_rng *r, int part, double cx, double cy, double radius, int w, int h,
                       double *px, double *py, double *pr) {
  *px = cx;
  *py = cy;
  *pr = radius;
  if (part == 0)
    return;
  double a = synth_range(r, 0.0, 2.0 * PI), d = radius * synth_range(r, 1.0, 2.2);
  *px = clampd(cx + d * cos(a), 1.0, w - 1.0);
  *py = clampd(cy + d * sin(a), 1.0, h - 1.0);
  *pr = radius * synth_range(r, 0.25, 0.6);
}

/* Parts never overlap (their extents are disjoint; a piece that cannot be placed so is
 * left out), so the instance's area is the sum of its parts' shoelace areas, as the
 * area of the union of their pixels would be. */
static int make_polygon(synth_rng *r, int w, int h, double cx, double cy, double radius,
                        synth_instance *inst) {
  int wanted = part_count(r, radius), total = 0;
  int counts[SYNTH_MAX_PARTS];
  for (int p = 0; p < wanted; p++)
    total += counts[p] = vertex_count(r, p ? 0.5 * radius : radius);
  inst->xy = malloc(2 * (size_t)total * sizeof(double));
  if (!inst->xy)
    return -1;
  double boxes[SYNTH_MAX_PARTS][4], *xy = inst->xy;
  inst->parts = 0;
  inst->area = 0.0;
  for (int p = 0; p < wanted; p++) {
    for (int attempt = 0; attempt < (p ? PART_TRIES : 1); attempt++) {
      double px, py, pr, *box = boxes[inst->parts];
      place_part(r, p, cx, cy, radius, w, h, &px, &py, &pr);
      star_polygon(r, px, py, pr, counts[p], w, h, xy);
      polygon_bbox(xy, counts[p], box);
      int clear = 1;
      for (int q = 0; q < inst->parts; q++)
        clear = clear && !boxes_overlap(box, boxes[q]);
      if (clear) {
        inst->part_vertices[inst->parts++] = counts[p];
        inst->area += shoelace(xy, counts[p]);
        xy += 2 * counts[p];
        break;
      }
    }
  }
  polygon_bbox(inst->xy, (int)((xy - inst->xy) / 2), inst->bbox);
  return 0;
}

/* ---- scene ------------------------------------------------------------------------- */

/* Log-radius between MIN_RADIUS and MAX_RADIUS_FRACTION of the shorter side: half
 * uniform, half triangular (mass in the middle), which gives COCO's mix of small,
 * medium and large objects (~41%, 34%, 24% by the 32^2 and 96^2 area limits). */
static double random_radius(synth_rng *r, int w, int h) {
  double most = MAX_RADIUS_FRACTION * fmin(w, h), b = synth_uniform(r);
  if (synth_uniform(r) < 0.5)
    b = 0.5 * (b + synth_uniform(r));
  return MIN_RADIUS * exp(b * log(most / MIN_RADIUS));
}

/* Objects gather (a group of people, a table setting): a third sit beside an earlier
 * one; the rest spread over the frame, more towards the lower part as on the ground. */
static void random_centre(synth_rng *r, const double (*centres)[3], int k, int w, int h,
                          double *cx, double *cy) {
  if (k > 0 && synth_uniform(r) < 0.35) {
    const double *c = centres[synth_below(r, k)];
    *cx = c[0] + c[2] * synth_range(r, -1.5, 1.5);
    *cy = c[1] + c[2] * synth_range(r, -0.8, 0.8);
  } else {
    *cx = w * synth_range(r, 0.03, 0.97);
    *cy = h * (0.12 + 0.85 * pow(synth_uniform(r), 0.8));
  }
  *cx = clampd(*cx, 1.0, w - 1.0);
  *cy = clampd(*cy, 1.0, h - 1.0);
}

int synth_scene_generate(synth_scene *s, int w, int h, synth_rng *r) {
  memset(s, 0, sizeof *s);
  s->w = w;
  s->h = h;
  int n = instance_count(r);
  double centres[SYNTH_MAX_INSTANCES][3];
  for (int k = 0; k < n; k++) {
    synth_instance *inst = &s->instances[k];
    s->count = k + 1;
    inst->category_id = random_category(r);
    double radius = random_radius(r, w, h), cx, cy;
    random_centre(r, (const double (*)[3])centres, k, w, h, &cx, &cy);
    centres[k][0] = cx;
    centres[k][1] = cy;
    centres[k][2] = radius;
    inst->iscrowd = synth_uniform(r) < CROWD_FRACTION;
    int st = inst->iscrowd ? make_crowd(r, w, h, cx, cy, radius, inst)
                           : make_polygon(r, w, h, cx, cy, radius, inst);
    if (st < 0) {
      synth_scene_free(s);
      return -1;
    }
  }
  return 0;
}

/* Unannotated scenery between backdrop and objects: a few large shapes (buildings,
 * trees, furniture) and clutter of small ones, whose edges real photos are full of. */
static void paint_scenery(synth_canvas *c, synth_rng *r) {
  double xy[2 * 16];
  int large = 2 + synth_below(r, 5), small = 10 + synth_below(r, 31);
  for (int i = 0; i < large + small; i++) {
    double radius = i < large ? synth_range(r, 0.1, 0.4) * fmin(c->w, c->h) : synth_range(r, 2.0, 14.0);
    double cx = synth_range(r, 0.0, c->w), cy = synth_range(r, 0.2 * c->h, c->h);
    int n = 8 + synth_below(r, 9);
    star_polygon(r, cx, cy, radius, n, c->w, c->h, xy);
    synth_material m = synth_random_material(r, cy - radius, 2.0 * radius);
    synth_paint_polygon(c, xy, n, &m);
  }
}

static int by_area_descending(const void *a, const void *b) {
  const synth_instance *x = *(const synth_instance *const *)a, *y = *(const synth_instance *const *)b;
  if (x->area != y->area)
    return x->area < y->area ? 1 : -1;
  return (x > y) - (x < y); /* equal areas: generation order, so the sort is deterministic */
}

void synth_scene_paint(const synth_scene *s, synth_canvas *c, synth_rng *r) {
  paint_scenery(c, r);
  const synth_instance *order[SYNTH_MAX_INSTANCES];
  for (int k = 0; k < s->count; k++)
    order[k] = &s->instances[k];
  qsort(order, (size_t)s->count, sizeof order[0], by_area_descending);
  for (int k = 0; k < s->count; k++) {
    const synth_instance *inst = order[k];
    synth_material m = synth_random_material(r, inst->bbox[1], inst->bbox[3]);
    const double *xy = inst->xy;
    for (int p = 0; p < inst->parts; p++) {
      synth_paint_polygon(c, xy, inst->part_vertices[p], &m);
      xy += 2 * inst->part_vertices[p];
    }
  }
}

void synth_scene_free(synth_scene *s) {
  for (int k = 0; k < s->count; k++) {
    free(s->instances[k].xy);
    free(s->instances[k].counts);
  }
  s->count = 0;
}
