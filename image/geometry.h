/* image/geometry.h - what a resize, crop or flip of an image does to the boxes drawn
 * on it (internal).
 *
 * The pixels move in resize.c; the targets that describe them move here, so the two
 * cannot disagree about a geometry. Boxes are float32 xyxy rows, in pixels of the
 * image they are drawn on. Masks follow the same geometry through nearest index maps
 * (lib/nearest.h, coco/rle_decode.h), not here.
 */
#ifndef FERRY_IMAGE_GEOMETRY_H
#define FERRY_IMAGE_GEOMETRY_H

#include <stdint.h>

/* Scale n xyxy boxes by (sx, sy) per axis: each coordinate times the factor in
 * double, rounded once to float (the loader's square resize). */
void ferry__boxes_scale(float *boxes, int64_t n, double sx, double sy);

/* n xyxy boxes of a w x h image to centre and size over the image's size (DETR's
 * normalised cxcywh), in double, rounded once to float. */
void ferry__boxes_to_cxcywh_norm(float *boxes, int64_t n, double w, double h);

#endif
