/* synth/synth_paint.h - pixels for the synthetic COCO images.
 *
 * A JPEG of flat colour compresses to almost nothing, so a loader benchmark on such
 * images measures too little decode work. The canvas is painted like a photograph in
 * layers: a graded sky/ground backdrop, several octaves of value noise whose strength
 * varies by region, textured and shaded objects with sharp edges (the annotated
 * instances themselves), and per-pixel grain. The result compresses at quality 90
 * to about the bytes per pixel of real COCO photographs.
 */
#ifndef FERRY_SYNTH_PAINT_H
#define FERRY_SYNTH_PAINT_H

#include <stddef.h>
#include <stdint.h>
#include "synth/synth_rng.h"

/* The most vertices one polygon passed to synth_raster_polygon may have. */
#define SYNTH_MAX_VERTICES 64

/* Called for each covered run of pixels [x0, x1) on row y. */
typedef void (*synth_span_fn)(void *ctx, int y, int x0, int x1);

/* Calls `span` for every pixel of a w x h grid whose centre lies inside the polygon
 * (even-odd rule), clipped to the grid. `xy` holds n (x, y) pairs, 3 <= n <=
 * SYNTH_MAX_VERTICES. The same rule rasterises the crowd masks and paints objects,
 * so a crowd's RLE matches the painted pixels exactly. */
void synth_raster_polygon(const double *xy, int n, int w, int h, synth_span_fn span, void *ctx);

typedef struct synth_canvas {
  int w, h;
  uint8_t *rgb;     /* w*h*3, interleaved RGB: what gets compressed */
  float *texture;   /* w*h, multi-octave value noise, roughly in [-1, 1] */
  float *tint;      /* w*h, coarse noise that shifts the backdrop's colour */
  float *detail;    /* w*h, coarse noise that makes some regions smooth, others busy */
  float *lattice;   /* scratch: one octave's random lattice */
  int *cell_x;      /* scratch: per column, lattice index */
  float *weight_x;  /* scratch: per column, smoothed interpolation weight */
  float sine[256];  /* one period, for the stripe patterns */
  size_t pixel_capacity, lattice_capacity, column_capacity;
} synth_canvas;

/* How an object is painted: base colour shaded from top to bottom of its extent,
 * plus the texture (mirrored when `mirror`, so objects do not repeat the backdrop),
 * plus for some a fine stripe pattern (fabric, fur, brick) of `stripe_amp` levels. */
typedef struct synth_material {
  float rgb[3];
  float texture_gain;
  float shade;          /* relative brightness change from top (+) to bottom (-) */
  float top, height;    /* vertical extent the shading spans */
  int mirror;
  float stripe_amp;
  float stripe_fx, stripe_fy; /* stripe periods per pixel along x and y */
} synth_material;

/* Makes room for a w x h image; returns 0, or -1 when memory runs out. */
int synth_canvas_reserve(synth_canvas *c, int w, int h);
void synth_canvas_free(synth_canvas *c);

/* Paints the backdrop (graded sky and ground with textured regions) over the whole
 * canvas; call first. */
void synth_paint_backdrop(synth_canvas *c, synth_rng *r);

/* Draws a random material for an object on the canvas spanning rows [top, top+height). */
synth_material synth_random_material(synth_rng *r, double top, double height);

/* Paints one polygon (n points) with a material. */
void synth_paint_polygon(synth_canvas *c, const double *xy, int n, const synth_material *m);

/* Adds luminance grain to every pixel; call last. */
void synth_paint_grain(synth_canvas *c, synth_rng *r);

#endif
