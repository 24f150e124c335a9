/* synth/synth_scene.h - the annotations of one synthetic COCO image.
 *
 * A scene is the list of instances of one image, drawn so that its statistics look
 * like val2017's: instances per image 1 + geometric(mean 6.4) truncated at 60, with
 * 1% empty images (mean ~7.3, median 5); log-radii spread so that small, medium and
 * large objects appear in about COCO's proportions; instances that cluster and
 * overlap. Polygons are star-shaped around a centre (so they never self-intersect
 * before clipping to the image), 6-40 vertices per part, 1-3 parts, coordinates
 * rounded to 2 decimals like COCO's. About 1% of instances are crowds, stored as
 * uncompressed column-major RLE over the whole image.
 */
#ifndef FERRY_SYNTH_SCENE_H
#define FERRY_SYNTH_SCENE_H

#include <stddef.h>
#include <stdint.h>
#include "synth/synth_paint.h"
#include "synth/synth_rng.h"

#define SYNTH_MAX_PARTS 3
#define SYNTH_MAX_INSTANCES 60
#define SYNTH_CATEGORY_COUNT 80

typedef struct synth_category {
  int id;
  const char *name;
  const char *supercategory;
} synth_category;

/* COCO's 80 categories with their original ids (1..90 with gaps). */
extern const synth_category synth_categories[SYNTH_CATEGORY_COUNT];

typedef struct synth_instance {
  int category_id;
  int iscrowd;
  int parts;                           /* polygon parts; a crowd has 1 (its outline) */
  int part_vertices[SYNTH_MAX_PARTS];
  double *xy;                          /* all parts' (x, y) pairs, concatenated */
  uint32_t *counts;                    /* crowd only: RLE counts, background first */
  size_t count_len;
  double bbox[4];                      /* x, y, width, height */
  double area;                         /* polygon: shoelace area; crowd: foreground pixels */
} synth_instance;

typedef struct synth_scene {
  int w, h;
  int count;
  synth_instance instances[SYNTH_MAX_INSTANCES];
} synth_scene;

/* Draws the instances of a w x h image. Returns 0, or -1 when memory runs out
 * (the scene is then freed). */
int synth_scene_generate(synth_scene *s, int w, int h, synth_rng *r);

/* Paints the instances (largest first, so small ones stay visible) and a few
 * unannotated background shapes onto a canvas of the scene's size. */
void synth_scene_paint(const synth_scene *s, synth_canvas *c, synth_rng *r);

void synth_scene_free(synth_scene *s);

#endif
