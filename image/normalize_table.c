/* image/normalize_table.c - the normalisation table and its portable kernel.
 *
 * F32_CHW images are torchvision v2's ToDtype(scale=True) then Normalize, in float32
 * steps: ferry__normalize_value (lib/transfer/normalize.h, the one formula). 256
 * values per channel, so a table; the vector kernels compute the same operations
 * instead (resize_kernels.h).
 *
 * Owns: the one table, for FERRY_IMAGENET_MEAN and _STD, built once per process
 * (pthread_once) and read-only after that.
 * Callers: resize.c, for every F32_CHW resize, on any worker thread: the first
 * caller builds the table and the others wait for it in pthread_once, so no thread
 * ever sees it half built. The portable kernel looks values up; the AVX2 one (also
 * the AVX-512 sets') computes them, by fma where fma_exact says that is exact.
 * Invariants: lut[c][v] is the float32 result of torchvision's steps, each
 * operation rounded to float as its float32 tensors round it (no -ffast-math here);
 * fma_exact is 1 only if the fma division by std gives all 768 entries bit for bit.
 * Not done here: any mean and std other than ImageNet's (the F32_CHW layout is
 * defined with those).
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "image/resize_kernels.h"
#include "lib/transfer/normalize.h"

/* a / b as the AVX2 kernel may compute it: a product by the reciprocal, then one
 * correction with the exact remainder fma gives. fmaf here must be a true fused
 * multiply-add (C requires one rounding), or the check below would test something
 * other than what the vector code runs. */
static float divide_by_fma(float a, float b, float recip) {
  float q = a * recip;
  return fmaf(fmaf(-q, b, a), recip, q);
}

static ferry__resize_norm imagenet;
static pthread_once_t imagenet_once = PTHREAD_ONCE_INIT;

/* The table, and whether the fma division reproduces every entry bit for bit
 * (it does for ImageNet's constants; checked, not assumed, so that the fast path
 * can never change a value). */
static void init_imagenet(void) {
  static const float mean[3] = FERRY_IMAGENET_MEAN, std[3] = FERRY_IMAGENET_STD;
  ferry__resize_norm *n = &imagenet;
  n->recip255 = 1.0f / 255.0f;
  n->fma_exact = 1;
  for (int c = 0; c < 3; c++) {
    n->mean[c] = mean[c];
    n->std[c] = std[c];
    n->recip_std[c] = 1.0f / std[c];
    for (int v = 0; v < 256; v++) {
      /* the reference: torchvision's three float32 steps */
      n->lut[c][v] = ferry__normalize_value((uint8_t)v, mean[c], std[c]);
      /* the same value as the AVX2 kernel would compute it: the scaling is one
       * product in both, the division by std by fma */
      float q = (float)v * n->recip255;
      float f = divide_by_fma(q - mean[c], std[c], n->recip_std[c]);
      if (memcmp(&f, &n->lut[c][v], sizeof f) != 0) n->fma_exact = 0;
    }
  }
}

const ferry__resize_norm *ferry__resize_imagenet_norm(void) {
  pthread_once(&imagenet_once, init_imagenet);
  return &imagenet;
}

/* HWC bytes in, three CHW planes out: plane c starts plane_stride floats after
 * plane c-1 (R*R for an image, the planes of one output row at a time). */
void ferry__resize_normalize_portable(const uint8_t *rgb, size_t n, const ferry__resize_norm *norm, float *dst,
                                      size_t plane_stride) {
  for (int c = 0; c < 3; c++)
    for (size_t x = 0; x < n; x++) dst[c * plane_stride + x] = norm->lut[c][rgb[3 * x + c]];
}
