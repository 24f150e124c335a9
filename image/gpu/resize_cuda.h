/* image/gpu/resize_cuda.h - the GPU resize of a decoded image (internal; issue 15).
 *
 * Pillow's BILINEAR as image/resize.c computes it, on the device: the filter
 * tables (per output: first input, tap count, offset into 22-bit fixed-point weights)
 * are built on the host, once per shape, by the same code as the CPU path
 * (ferry__resize_axis_build) and passed in; each pass rounds and clips to u8 as
 * Pillow does, in the same pass order; the f32 layout is torchvision's
 * ((float)v / 255 - mean) / std in float, IEEE operations only. So given the same
 * decoded pixels, the GPU writes the CPU's bytes. lib/ knows nothing of images'
 * files: this is arithmetic on arrays.
 *
 * ferry__resize_reference runs the very element functions of the kernels in host
 * loops (resize_cuda.cu compiles them for both), so the CPU-only tests check the
 * kernels' arithmetic against the CPU resize; the launch itself needs a GPU.
 */
#ifndef FERRY_LIB_RESIZE_CUDA_H
#define FERRY_LIB_RESIZE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One axis: output i sums count[i] inputs from first[i] with weights[offset[i] ...]. */
typedef struct ferry__resize_filter {
  const int *first, *count, *offset;
  const int32_t *weights;
} ferry__resize_filter;

typedef struct ferry__resize_job {
  const uint8_t *src;        /* RGB8, row stride 3 * width */
  int width, height, size;   /* size x size out */
  ferry__resize_filter h, v; /* width -> size, height -> size */
  int vertical_first;        /* the pass order resize.c picks for this shape */
  uint8_t *tmp;              /* the intermediate: height x size x 3, or size x width x 3 */
  int f32_chw;               /* 1: normalised f32 [3,size,size]; 0: u8 [size,size,3] */
  float mean[3], std[3];     /* for f32_chw */
  void *dst;
} ferry__resize_job;

/* Bytes of job->tmp for this shape and pass order. */
size_t ferry__resize_tmp_bytes(int width, int height, int size, int vertical_first);

/* Queue both passes on a cudaStream_t; every pointer in the job is device memory.
 * Returns the cudaError_t of the launches (0: queued). */
int ferry__cuda_resize_launch(void *cuda_stream, const ferry__resize_job *job);

/* The same arithmetic on the host, every pointer host memory. */
void ferry__resize_reference(const ferry__resize_job *job);

#ifdef __cplusplus
}
#endif
#endif
