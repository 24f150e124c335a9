/* lib/transfer/normalize.h - the one normalisation formula, and u8 [H,W,3] ->
 * normalised [3,H,W] f32/bf16 in stream order (internal).
 *
 * ferry__normalize_value is torchvision.transforms.v2's ToDtype(float32, scale=True)
 * followed by Normalize, RF-DETR 1.11's pipeline, in its float32 steps:
 * ((float)v * (float)(1/255) - mean) / std, each operation rounded to float (v2 scales
 * by a product with the reciprocal, image.to(float32).mul_(1.0 / 255); v1's to_tensor
 * divided by 255, which differs in the last bit for about 110 of the 256 values of a
 * channel). IEEE arithmetic: no -ffast-math, nvcc without -use_fast_math.
 * Every normalised pixel ferry makes comes from it: the CPU loader's table
 * (image/normalize_table.c), the transfer's host loop and CUDA kernel (here), the GPU
 * resize's f32 output (image/gpu/resize_cuda.cu); the vector kernels compute the
 * same steps by fma only where a check at start-up shows that to be bit-exact. bf16
 * rounds that float to nearest even by one bit operation, on both backends. It lives
 * in lib/ because the public ferry_transfer applies it, and lib/ calls nothing above
 * it; image/ includes it from here. */
#ifndef FERRY_LIB_TRANSFER_NORMALIZE_H
#define FERRY_LIB_TRANSFER_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/device.h"

#ifdef __CUDACC__
#define FERRY_HOST_DEVICE __host__ __device__
#else
#define FERRY_HOST_DEVICE
#endif

/* The normalised value of byte v of a channel with this mean and std. */
static inline FERRY_HOST_DEVICE float ferry__normalize_value(uint8_t v, float mean, float std) {
  const float scale = 1.0f / 255.0f; /* == (float)(1.0 / 255): both round the same quotient */
  return ((float)v * scale - mean) / std;
}

/* A float to bf16, rounded to nearest even. Not NaN-safe (the carry can turn a NaN
 * into another value), which is fine for the finite values a valid mean and std
 * give. */
static inline FERRY_HOST_DEVICE uint16_t ferry__float_to_bf16(float f) {
  union {
    float f;
    uint32_t u;
  } bits = {f};
  uint32_t u = bits.u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry__norm_params {
  float mean[3];
  float std[3];
  int bf16; /* 0: f32 out, 1: bf16 out */
} ferry__norm_params;

/* mean/std in [0, 1] units; a std of all zeros means ImageNet's mean and std. */
void ferry__norm_params_init(ferry__norm_params *p, const float mean[3], const float std[3], int bf16);

/* One image's extent: h x w pixels of 3 bytes in; out, 3 planes of out_h x out_w
 * values (out_h >= h, out_w >= w), the image at the top left and zeros around it
 * (a padded batch's row: transfer.h, pad_multiple). */
typedef struct ferry__norm_shape {
  size_t h, w, out_h, out_w;
} ferry__norm_shape;

/* One image on the CPU. */
void ferry__normalize_cpu(const uint8_t *src, void *dst, const ferry__norm_shape *shape, const ferry__norm_params *p);

/* Queue the normalisation of one image on `stream`. src_on_host says whether src is
 * host memory; otherwise it is memory of the stream's device. */
ferry_status ferry__normalize_enqueue(ferry_stream *stream, const void *src, int src_on_host, void *dst,
                                      const ferry__norm_shape *shape, const ferry__norm_params *p);

/* The CUDA kernel's launcher (normalize_cuda.cu): returns a cudaError_t. */
int ferry__cuda_normalize_launch(void *cuda_stream, const uint8_t *src, void *dst, const ferry__norm_shape *shape,
                                 const ferry__norm_params *p);

#ifdef __cplusplus
}
#endif
#endif
