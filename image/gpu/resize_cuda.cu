/* image/gpu/resize_cuda.cu - the resize kernels: one thread per output byte of a pass.
 *
 * Owns the two separable passes and what the last one writes (u8 HWC, or normalised
 * f32 CHW). Invariant: every output value is a function of the job alone, computed by
 * the __host__ __device__ element functions below, which ferry__resize_reference runs
 * in plain loops; the kernels add only the indexing from thread to element.
 */
#include <cstdint>

#include <cuda_runtime.h>

#include "image/gpu/resize_cuda.h"
#include "lib/transfer/normalize.h"

namespace {

constexpr int kWeightBits = 22; /* image/resize_kernels.h: FERRY_RESIZE_WEIGHT_BITS */

__host__ __device__ inline uint8_t clip8(int32_t acc) {
  int32_t v = acc >> kWeightBits;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Output o of an axis, reading inputs `step` bytes apart from p. */
__host__ __device__ inline uint8_t tap(const uint8_t *p, size_t step, const ferry__resize_filter &f, int o) {
  const int32_t *k = f.weights + f.offset[o];
  p += (size_t)f.first[o] * step;
  int32_t acc = 1 << (kWeightBits - 1);
  for (int i = 0; i < f.count[o]; i++) acc += p[(size_t)i * step] * k[i];
  return clip8(acc);
}

/* Horizontal: row y of `rows` rows `in_w` wide, output column x, channel c. */
__host__ __device__ inline uint8_t h_value(const uint8_t *src, int in_w, const ferry__resize_filter &h, int y, int x,
                                           int c) {
  return tap(src + (size_t)y * in_w * 3 + c, 3, h, x);
}

/* Vertical: column x of an image `cols` wide, output row y, channel c. */
__host__ __device__ inline uint8_t v_value(const uint8_t *src, int cols, const ferry__resize_filter &v, int y, int x,
                                           int c) {
  return tap(src + (size_t)x * 3 + c, (size_t)cols * 3, v, y);
}

/* Where a pass' value goes: u8 HWC rows `cols` wide, or f32 CHW planes. */
__host__ __device__ inline void emit(const ferry__resize_job &j, uint8_t *u8, int cols, int last, int y, int x, int c,
                                     uint8_t value) {
  if (!last || !j.f32_chw) {
    u8[((size_t)y * cols + x) * 3 + c] = value;
    return;
  }
  size_t plane = (size_t)j.size * j.size;
  ((float *)j.dst)[c * plane + (size_t)y * j.size + x] = ferry__normalize_value(value, j.mean[c], j.std[c]);
}

/* The two passes as (rows, cols) grids of RGB outputs. */
struct pass {
  int horizontal; /* 1: h_value over src `in_cols` wide; 0: v_value over src `in_cols` wide */
  const uint8_t *src;
  int in_cols;
  int rows, cols; /* outputs */
  uint8_t *out;   /* u8 target (tmp, or dst when the last pass writes u8) */
  int last;
};

__host__ __device__ inline void pass_element(const ferry__resize_job &j, const pass &p, size_t i) {
  int c = (int)(i % 3);
  size_t px = i / 3;
  int x = (int)(px % (size_t)p.cols), y = (int)(px / (size_t)p.cols);
  uint8_t value = p.horizontal ? h_value(p.src, p.in_cols, j.h, y, x, c)
                               : v_value(p.src, p.in_cols, j.v, y, x, c);
  emit(j, p.out, p.cols, p.last, y, x, c, value);
}

/* Horizontal first: all rows to the output width, then vertical; else the other way. */
void plan_passes(const ferry__resize_job &j, pass out[2]) {
  uint8_t *u8_dst = j.f32_chw ? nullptr : (uint8_t *)j.dst;
  if (j.vertical_first) {
    out[0] = {0, j.src, j.width, j.size, j.width, j.tmp, 0};
    out[1] = {1, j.tmp, j.width, j.size, j.size, u8_dst, 1};
  } else {
    out[0] = {1, j.src, j.width, j.height, j.size, j.tmp, 0};
    out[1] = {0, j.tmp, j.size, j.size, j.size, u8_dst, 1};
  }
}

__global__ void run_pass(ferry__resize_job j, pass p) {
  size_t n = (size_t)p.rows * p.cols * 3;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    pass_element(j, p, i);
}

}  // namespace

extern "C" size_t ferry__resize_tmp_bytes(int width, int height, int size, int vertical_first) {
  return (size_t)3 * size * (vertical_first ? width : height);
}

extern "C" int ferry__cuda_resize_launch(void *cuda_stream, const ferry__resize_job *job) {
  pass passes[2];
  plan_passes(*job, passes);
  const int threads = 256;
  for (int k = 0; k < 2; k++) {
    size_t n = (size_t)passes[k].rows * passes[k].cols * 3;
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535; /* the grid-stride loop covers the rest */
    run_pass<<<(unsigned)blocks, threads, 0, (cudaStream_t)cuda_stream>>>(*job, passes[k]);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return (int)err;
  }
  return 0;
}

extern "C" void ferry__resize_reference(const ferry__resize_job *job) {
  pass passes[2];
  plan_passes(*job, passes);
  for (int k = 0; k < 2; k++) {
    size_t n = (size_t)passes[k].rows * passes[k].cols * 3;
    for (size_t i = 0; i < n; i++) pass_element(*job, passes[k], i);
  }
}
