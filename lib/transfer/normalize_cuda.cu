/* lib/transfer/normalize_cuda.cu - the normalisation kernel: one thread per output
 * pixel reads its 3 bytes and writes one value to each channel plane, or zeros where
 * the output is larger than the image (a padded batch's row). The arithmetic is
 * ferry__normalize_value and ferry__float_to_bf16 (normalize.h), the host loop's, so
 * both backends agree bit for bit. */
#include <cstdint>

#include <cuda_runtime.h>

#include "lib/transfer/normalize.h"

namespace {

struct norm_args {
  float mean[3];
  float std[3];
};

/* Overloads rather than explicit template specialisations: nvcc gives the host stubs
 * of the latter external linkage, and they would leave libferry.so as symbols. */
__device__ inline void store(float *dst, float v) { *dst = v; }
__device__ inline void store(uint16_t *dst, float v) { *dst = ferry__float_to_bf16(v); }

template <typename Out>
__global__ void normalize_hwc_to_chw(const uint8_t *__restrict__ src, Out *__restrict__ dst, ferry__norm_shape s,
                                     norm_args a) {
  size_t stride = (size_t)gridDim.x * blockDim.x, plane = s.out_h * s.out_w;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += stride) {
    size_t y = i / s.out_w, x = i % s.out_w;
    int inside = y < s.h && x < s.w;
    const uint8_t *px = src + 3 * (y * s.w + x);
    for (int c = 0; c < 3; c++)
      if (inside) store(&dst[(size_t)c * plane + i], ferry__normalize_value(px[c], a.mean[c], a.std[c]));
      else store(&dst[(size_t)c * plane + i], 0.0f);
  }
}

}  // namespace

extern "C" int ferry__cuda_normalize_launch(void *cuda_stream, const uint8_t *src, void *dst,
                                            const ferry__norm_shape *shape, const ferry__norm_params *p) {
  size_t hw = shape->out_h * shape->out_w;
  norm_args a;
  for (int c = 0; c < 3; c++) {
    a.mean[c] = p->mean[c];
    a.std[c] = p->std[c];
  }
  const int threads = 256;
  size_t blocks = (hw + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535; /* the grid-stride loop covers the rest */
  cudaStream_t stream = (cudaStream_t)cuda_stream;
  if (p->bf16)
    normalize_hwc_to_chw<uint16_t><<<(unsigned)blocks, threads, 0, stream>>>(src, (uint16_t *)dst, *shape, a);
  else
    normalize_hwc_to_chw<float><<<(unsigned)blocks, threads, 0, stream>>>(src, (float *)dst, *shape, a);
  return (int)cudaGetLastError();
}
