/* synth/synth_paint.c - photograph-like pixels for synthetic COCO images. */
#include "synth/synth_paint.h"

#include <math.h>
#include <stdlib.h>

/* Strength of the noise texture and grain in 8-bit levels, and the share of objects
 * with stripes. Tuned so that quality-90 4:2:0 JPEGs come out at ~0.5 bytes per
 * pixel, the size of real val2017 files (docs/benchmarks.md, "Synthetic data"). */
#define TEXTURE_LEVELS 58.0f
#define GRAIN_LEVELS 25
#define STRIPE_FRACTION 0.5

/* ---- rasterisation ---------------------------------------------------------------- */

static void sort_small(double *v, int n) {
  for (int i = 1; i < n; i++) {
    double x = v[i];
    int j = i - 1;
    while (j >= 0 && v[j] > x) {
      v[j + 1] = v[j];
      j--;
    }
    v[j + 1] = x;
  }
}

static int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* x coordinates where the row centre yc crosses the polygon's edges, sorted. */
static int row_crossings(const double *xy, int n, double yc, double *out) {
  int count = 0;
  for (int i = 0, j = n - 1; i < n; j = i++) {
    double xi = xy[2 * i], yi = xy[2 * i + 1], xj = xy[2 * j], yj = xy[2 * j + 1];
    if ((yi <= yc && yc < yj) || (yj <= yc && yc < yi))
      out[count++] = xi + (yc - yi) * (xj - xi) / (yj - yi);
  }
  sort_small(out, count);
  return count;
}

void synth_raster_polygon(const double *xy, int n, int w, int h, synth_span_fn span, void *ctx) {
  if (n < 3 || n > SYNTH_MAX_VERTICES)
    return;
  double ymin = xy[1], ymax = xy[1];
  for (int i = 1; i < n; i++) {
    ymin = fmin(ymin, xy[2 * i + 1]);
    ymax = fmax(ymax, xy[2 * i + 1]);
  }
  int y0 = clamp_int((int)ceil(ymin - 0.5), 0, h);
  int y1 = clamp_int((int)ceil(ymax - 0.5), 0, h);
  double cross[SYNTH_MAX_VERTICES];
  for (int y = y0; y < y1; y++) {
    int count = row_crossings(xy, n, y + 0.5, cross);
    for (int k = 0; k + 1 < count; k += 2) {
      /* pixel x is inside when its centre x + 0.5 lies in [cross[k], cross[k+1]) */
      int x0 = clamp_int((int)ceil(cross[k] - 0.5), 0, w);
      int x1 = clamp_int((int)ceil(cross[k + 1] - 0.5), 0, w);
      if (x0 < x1)
        span(ctx, y, x0, x1);
    }
  }
}

/* ---- canvas ------------------------------------------------------------------------ */

int synth_canvas_reserve(synth_canvas *c, int w, int h) {
  size_t pixels = (size_t)w * h;
  /* the finest octave's cell is 2; one more lattice row for the blended rows */
  size_t lattice = (size_t)(w / 2 + 2) * (h / 2 + 3);
  if (pixels > c->pixel_capacity) {
    void *p;
    if ((p = realloc(c->rgb, pixels * 3)) == NULL) return -1;
    c->rgb = p;
    if ((p = realloc(c->texture, pixels * sizeof(float))) == NULL) return -1;
    c->texture = p;
    if ((p = realloc(c->tint, pixels * sizeof(float))) == NULL) return -1;
    c->tint = p;
    if ((p = realloc(c->detail, pixels * sizeof(float))) == NULL) return -1;
    c->detail = p;
    c->pixel_capacity = pixels;
  }
  if (lattice > c->lattice_capacity) {
    void *p;
    if ((p = realloc(c->lattice, lattice * sizeof(float))) == NULL) return -1;
    c->lattice = p;
    c->lattice_capacity = lattice;
  }
  if ((size_t)w > c->column_capacity) {
    void *p;
    if ((p = realloc(c->cell_x, (size_t)w * sizeof(int))) == NULL) return -1;
    c->cell_x = p;
    if ((p = realloc(c->weight_x, (size_t)w * sizeof(float))) == NULL) return -1;
    c->weight_x = p;
    c->column_capacity = (size_t)w;
  }
  for (int i = 0; i < 256; i++)
    c->sine[i] = sinf((float)i * (2.0f * 3.14159265f / 256.0f));
  c->w = w;
  c->h = h;
  return 0;
}

void synth_canvas_free(synth_canvas *c) {
  free(c->rgb);
  free(c->texture);
  free(c->tint);
  free(c->detail);
  free(c->lattice);
  free(c->cell_x);
  free(c->weight_x);
  *c = (synth_canvas){0};
}

/* ---- noise ------------------------------------------------------------------------- */

static float smoothstep(float t) { return t * t * (3.0f - 2.0f * t); }

/* Adds one octave of value noise (random lattice every `cell` pixels, smoothly
 * interpolated, amplitude `amp`) to a plane. */
static void add_octave(synth_canvas *c, float *plane, int cell, float amp, synth_rng *r) {
  int w = c->w, h = c->h, lw = w / cell + 2, lh = h / cell + 2;
  float *g = c->lattice;
  for (int i = 0; i < lw * lh; i++)
    g[i] = amp * (float)(2.0 * synth_uniform(r) - 1.0);
  for (int x = 0; x < w; x++) {
    c->cell_x[x] = x / cell;
    c->weight_x[x] = smoothstep(((float)(x % cell) + 0.5f) / (float)cell);
  }
  float *blend = g + (size_t)lw * lh; /* the two lattice rows around y, blended */
  for (int y = 0; y < h; y++) {
    const float *row0 = g + (size_t)(y / cell) * lw, *row1 = row0 + lw;
    float ty = smoothstep(((float)(y % cell) + 0.5f) / (float)cell);
    for (int i = 0; i < lw; i++)
      blend[i] = row0[i] + (row1[i] - row0[i]) * ty;
    float *out = plane + (size_t)y * w;
    for (int x = 0; x < w; x++) {
      int i = c->cell_x[x];
      out[x] += blend[i] + (blend[i + 1] - blend[i]) * c->weight_x[x];
    }
  }
}

static void clear_plane(float *plane, size_t n) {
  for (size_t i = 0; i < n; i++)
    plane[i] = 0.0f;
}

/* Texture: octaves from 128 down to 2 pixels, all of the same amplitude: natural
 * images have roughly equal energy per octave (amplitude falling as 1/frequency). */
static void make_texture(synth_canvas *c, synth_rng *r) {
  static const int cells[] = {128, 64, 32, 16, 8, 4, 2};
  clear_plane(c->texture, (size_t)c->w * c->h);
  for (size_t k = 0; k < sizeof cells / sizeof cells[0]; k++)
    add_octave(c, c->texture, cells[k], 0.5f, r);
}

/* ---- painting ---------------------------------------------------------------------- */

/* Written so that compilers emit min/max instructions rather than branches. */
static inline float clampf(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

static inline float clamp01(float v) { return clampf(v, 0.0f, 1.0f); }

static inline uint8_t to_byte(float v) { return (uint8_t)(clampf(v, 0.0f, 255.0f) + 0.5f); }

/* A natural-looking colour: mostly muted, sometimes saturated. */
static void random_colour(synth_rng *r, float rgb[3]) {
  float base = (float)synth_range(r, 40.0, 215.0);
  float spread = (float)(synth_uniform(r) < 0.2 ? synth_range(r, 50.0, 110.0) : synth_range(r, 5.0, 45.0));
  for (int k = 0; k < 3; k++)
    rgb[k] = base + spread * (float)(2.0 * synth_uniform(r) - 1.0);
}

void synth_paint_backdrop(synth_canvas *c, synth_rng *r) {
  int w = c->w, h = c->h;
  size_t n = (size_t)w * h;
  make_texture(c, r);
  clear_plane(c->tint, n);
  add_octave(c, c->tint, 96, 1.0f, r);
  clear_plane(c->detail, n);
  add_octave(c, c->detail, 80, 1.0f, r);
  float sky[3], ground[3], accent[3];
  random_colour(r, sky);
  random_colour(r, ground);
  random_colour(r, accent);
  float angle = (float)synth_range(r, 1.2, 1.95); /* mostly top-to-bottom */
  float dx = cosf(angle), dy = sinf(angle), half = 0.5f * sqrtf((float)w * w + (float)h * h);
  float step = 0.5f * dx / half;
  for (int y = 0; y < h; y++) {
    float t0 = 0.5f + 0.5f * ((-0.5f * w) * dx + ((float)y - 0.5f * h) * dy) / half;
    for (int x = 0; x < w; x++) {
      size_t i = (size_t)y * w + x;
      float t = clamp01(t0 + step * (float)x);
      float s = 0.6f * clamp01(0.5f + 0.7f * c->tint[i]);
      float lift = TEXTURE_LEVELS * (0.15f + clamp01(0.6f + c->detail[i])) * c->texture[i];
      uint8_t *out = c->rgb + 3 * i;
      for (int k = 0; k < 3; k++) {
        float v = sky[k] + (ground[k] - sky[k]) * t;
        out[k] = to_byte(v + (accent[k] - v) * s + lift);
      }
    }
  }
}

synth_material synth_random_material(synth_rng *r, double top, double height) {
  synth_material m;
  random_colour(r, m.rgb);
  m.texture_gain = TEXTURE_LEVELS * (float)synth_range(r, 0.3, 1.5);
  m.shade = (float)synth_range(r, 0.0, 0.35);
  m.top = (float)top;
  m.height = height > 1.0 ? (float)height : 1.0f;
  m.mirror = synth_uniform(r) < 0.5;
  m.stripe_amp = 0.0f;
  m.stripe_fx = m.stripe_fy = 0.0f;
  if (synth_uniform(r) < STRIPE_FRACTION) {
    float period = (float)synth_range(r, 2.5, 9.0), angle = (float)synth_range(r, 0.0, 3.14159265);
    m.stripe_amp = (float)synth_range(r, 8.0, 36.0);
    m.stripe_fx = cosf(angle) / period;
    m.stripe_fy = sinf(angle) / period;
  }
  return m;
}

typedef struct paint_ctx {
  synth_canvas *c;
  const synth_material *m;
} paint_ctx;

static void paint_span(void *ctx, int y, int x0, int x1) {
  paint_ctx *p = ctx;
  const synth_material *m = p->m;
  synth_canvas *c = p->c;
  float shade = 1.0f + m->shade * (0.5f - ((float)y - m->top) / m->height);
  const float *tex = c->texture + (size_t)y * c->w;
  uint8_t *out = c->rgb + ((size_t)y * c->w) * 3;
  float phase = m->stripe_fy * (float)y + 4096.0f; /* kept positive for the table index */
  for (int x = x0; x < x1; x++) {
    float t = m->texture_gain * tex[m->mirror ? c->w - 1 - x : x];
    if (m->stripe_amp != 0.0f)
      t += m->stripe_amp * c->sine[(unsigned)((phase + m->stripe_fx * (float)x) * 256.0f) & 255u];
    for (int k = 0; k < 3; k++)
      out[3 * x + k] = to_byte(m->rgb[k] * shade + t);
  }
}

void synth_paint_polygon(synth_canvas *c, const double *xy, int n, const synth_material *m) {
  paint_ctx p = {c, m};
  synth_raster_polygon(xy, n, c->w, c->h, paint_span, &p);
}

void synth_paint_grain(synth_canvas *c, synth_rng *r) {
  size_t n = (size_t)c->w * c->h;
  uint64_t bits = 0;
  for (size_t i = 0; i < n; i++) {
    if ((i & 7) == 0)
      bits = synth_next(r);
    /* busy regions (high detail) are grainier, as foliage is next to sky */
    float busy = 0.5f + clamp01(0.6f + c->detail[i]);
    int g = (int)(busy * (float)((int)(bits & 0xff) * (2 * GRAIN_LEVELS + 1) / 256 - GRAIN_LEVELS));
    bits >>= 8;
    for (int k = 0; k < 3; k++) {
      int v = c->rgb[3 * i + k] + g;
      c->rgb[3 * i + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}
