/* lib/transfer/normalize.h - u8 [H,W,3] -> normalised [3,H,W] f32/bf16 (internal).
 *
 * Both backends compute y = fmaf(x, scale[c], bias[c]) with scale = 1/(255 std) and
 * bias = -mean/std precomputed in float, and round to bf16 to nearest even by the
 * same bit operation, so the CPU and the CUDA kernel agree bit for bit. */
#ifndef FERRY_LIB_TRANSFER_NORMALIZE_H
#define FERRY_LIB_TRANSFER_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_norm_params {
  float scale[3];
  float bias[3];
  int bf16; /* 0: f32 out, 1: bf16 out */
} ferry_norm_params;

/* mean/std in [0, 1] units; a std of all zeros means ImageNet's mean and std. */
void ferry__norm_params_init(ferry_norm_params *p, const float mean[3], const float std[3],
                            int bf16);

/* One image on the CPU: `hw` pixels of 3 bytes in, 3 planes of hw values out. */
void ferry__normalize_cpu(const uint8_t *src, void *dst, size_t hw, const ferry_norm_params *p);

/* Queue the normalisation of one image on `stream`. src_on_host says whether src is
 * host memory; otherwise it is memory of the stream's device. */
ferry_status ferry__normalize_enqueue(ferry_stream *stream, const void *src, int src_on_host,
                                     void *dst, size_t hw, const ferry_norm_params *p);

/* The CUDA kernel's launcher (normalize_cuda.cu): returns a cudaError_t. */
int ferry__cuda_normalize_launch(void *cuda_stream, const uint8_t *src, void *dst, size_t hw,
                                const ferry_norm_params *p);

#ifdef __cplusplus
}
#endif
#endif
