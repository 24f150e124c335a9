/* image/geometry.c - boxes through the geometry of a resize (geometry.h).
 *
 * Owns nothing; any thread, on its own boxes. Callers: the loader's fill of a sample
 * (loaders/fill.c) and ferry_image_scale_box (image.c). Invariant: each output value
 * is computed in double from the float inputs and rounded to float once, so the same
 * box and factors give the same bits whoever asks.
 */
#include "image/geometry.h"

void ferry__boxes_scale(float *boxes, int64_t n, double sx, double sy) {
  for (int64_t i = 0; i < n; i++) {
    float *b = boxes + 4 * i;
    b[0] = (float)(b[0] * sx);
    b[1] = (float)(b[1] * sy);
    b[2] = (float)(b[2] * sx);
    b[3] = (float)(b[3] * sy);
  }
}

void ferry__boxes_to_cxcywh_norm(float *boxes, int64_t n, double w, double h) {
  for (int64_t i = 0; i < n; i++) {
    float *b = boxes + 4 * i;
    double x0 = b[0], y0 = b[1], x1 = b[2], y1 = b[3];
    b[0] = (float)((x0 + x1) / 2 / w);
    b[1] = (float)((y0 + y1) / 2 / h);
    b[2] = (float)((x1 - x0) / w);
    b[3] = (float)((y1 - y0) / h);
  }
}
