/* tests/image/test_resize_gpu.c - the GPU resize's arithmetic equals the CPU resize's.
 *
 * The kernels' element functions run on the host here (ferry__resize_reference), fed
 * the filter tables the CPU resize builds; every photo of ../shared/realdata/photos and
 * synthetic shapes covering both pass orders, up- and downscaling, in both layouts,
 * must give the CPU's bytes exactly. Where a CUDA device answers, the launched kernels
 * must give the same bytes (skipped without one; FERRY_REQUIRE_CUDA=1 makes it fail).
 */
#include <dirent.h>

#include "ferry_config.h"

#include "lib/device_internal.h"
#include "image/gpu/resize_cuda.h"
#include "image/resize_kernels.h"
#include "test_image_util.h"
#include "tests/common/require_cuda.h"

static const float MEAN[3] = FERRY_IMAGENET_MEAN, STD[3] = FERRY_IMAGENET_STD;

/* The host side of a job: filter tables built by the CPU resize's own code. */
typedef struct host_job {
  ferry__resize_job job;
  void *h_mem, *v_mem;
  size_t h_bytes, v_bytes;
} host_job;

static ferry__resize_filter filter_of(const ferry__resize_axis *a) {
  return (ferry__resize_filter){a->first, a->count, a->offset, a->weights};
}

static void job_init(host_job *hj, const uint8_t *src, int w, int h, int size, int f32) {
  memset(hj, 0, sizeof *hj);
  ferry__resize_job *j = &hj->job;
  hj->h_bytes = ferry__resize_axis_bytes(w, size);
  hj->v_bytes = ferry__resize_axis_bytes(h, size);
  hj->h_mem = malloc(hj->h_bytes);
  hj->v_mem = malloc(hj->v_bytes);
  ferry__resize_axis ha, va;
  ferry__resize_axis_build(&ha, w, size, hj->h_mem);
  ferry__resize_axis_build(&va, h, size, hj->v_mem);
  *j = (ferry__resize_job){.src = src,
                           .width = w,
                           .height = h,
                           .size = size,
                           .h = filter_of(&ha),
                           .v = filter_of(&va),
                           .vertical_first = ferry__resize_vertical_first(w, h, size),
                           .f32_chw = f32};
  for (int c = 0; c < 3; c++) j->mean[c] = MEAN[c], j->std[c] = STD[c];
  j->tmp = malloc(ferry__resize_tmp_bytes(w, h, size, j->vertical_first));
  j->dst = malloc((size_t)size * size * 3 * (f32 ? sizeof(float) : 1));
}

static void job_free(host_job *hj) {
  free(hj->h_mem);
  free(hj->v_mem);
  free(hj->job.tmp);
  free(hj->job.dst);
}

static size_t out_bytes(const ferry__resize_job *j) {
  return (size_t)j->size * j->size * 3 * (j->f32_chw ? sizeof(float) : 1);
}

/* The reference against ferry_image_resize, both layouts; returns the pass order. */
static int expect_same(ferry_decoder *d, const uint8_t *src, int w, int h, int size, const char *what) {
  int vfirst = 0;
  for (int f32 = 0; f32 <= 1; f32++) {
    host_job hj;
    job_init(&hj, src, w, h, size, f32);
    ferry__resize_reference(&hj.job);
    void *cpu = malloc(out_bytes(&hj.job));
    cr_assert_eq(ferry_image_resize(d, src, w, h, size, f32 ? FERRY_LAYOUT_F32_CHW : FERRY_LAYOUT_U8_HWC, cpu),
                 FERRY_OK, "%s", ferry_last_error());
    cr_expect_eq(memcmp(cpu, hj.job.dst, out_bytes(&hj.job)), 0, "%s %dx%d -> %d %s differs", what, w, h,
                 size, f32 ? "f32" : "u8");
    vfirst = hj.job.vertical_first;
    free(cpu);
    job_free(&hj);
  }
  return vfirst;
}

static uint8_t *noise(int w, int h, unsigned seed) {
  uint8_t *p = malloc((size_t)w * h * 3);
  for (size_t i = 0; i < (size_t)w * h * 3; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (uint8_t)(seed >> 16);
  }
  return p;
}

Test(resize_gpu, synthetic_shapes_in_both_pass_orders_match_the_cpu) {
  static const int shapes[][3] = {{640, 480, 312}, {480, 640, 312}, {100, 1000, 64}, {1000, 100, 64},
                                  {37, 23, 312},   {312, 500, 312}, {500, 312, 312}, {7, 5, 1},
                                  {333, 777, 101}, {64, 64, 64}};
  ferry_decoder *d = open_decoder();
  int orders[2] = {0, 0};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const int *s = shapes[i];
    uint8_t *src = noise(s[0], s[1], (unsigned)i + 1);
    orders[expect_same(d, src, s[0], s[1], s[2], "noise")]++;
    free(src);
  }
  cr_expect(orders[0] && orders[1], "both pass orders covered (%d, %d)", orders[0], orders[1]);
  ferry_decoder_close(d);
}

Test(resize_gpu, every_shared_photo_matches_the_cpu, .timeout = 300) {
  static const char *const folders[] = {"photos/dali_jpeg_subsampling", "photos/mmcv", "photos/skimage"};
  static const int sizes[] = {312, 64, 640};
  ferry_decoder *d = open_decoder();
  int photos = 0;
  for (size_t f = 0; f < 3; f++) {
    char dir[4096], path[8192];
    realdata(dir, sizeof dir, folders[f]);
    DIR *dp = opendir(dir);
    cr_assert_not_null(dp, "cannot open %s", dir);
    for (struct dirent *e; (e = readdir(dp));) {
      const char *ext = strrchr(e->d_name, '.');
      if (!ext || (strcmp(ext, ".jpg") && strcmp(ext, ".png"))) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      const uint8_t *rgb;
      int w, h;
      if (ferry_image_load_rgb(d, path, NULL, &rgb, &w, &h) != FERRY_OK) continue; /* not decodable */
      size_t n = (size_t)w * h * 3;
      uint8_t *copy = malloc(n); /* the decoder's scratch is reused by the resize */
      memcpy(copy, rgb, n);
      for (size_t s = 0; s < 3; s++) expect_same(d, copy, w, h, sizes[s], path);
      free(copy);
      photos++;
    }
    closedir(dp);
  }
  cr_expect_gt(photos, 20, "only %d photos", photos);
  ferry_decoder_close(d);
}

#if FERRY_HAVE_CUDA
/* A host block copied to the device; the filter's pointers rebased into it. */
static void *to_device(ferry_device *dev, ferry_stream *s, const void *src, size_t n) {
  void *p = NULL;
  cr_assert_eq(ferry_device_malloc(dev, s, n, &p), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_memcpy(s, p, src, n, FERRY_COPY_H2D), FERRY_OK, "%s", ferry_last_error());
  return p;
}

static ferry__resize_filter rebase(ferry__resize_filter f, const void *host, void *device) {
#define REBASE(ptr) (void *)((char *)device + ((const char *)(ptr) - (const char *)host))
  return (ferry__resize_filter){REBASE(f.first), REBASE(f.count), REBASE(f.offset), REBASE(f.weights)};
#undef REBASE
}

Test(resize_gpu, the_launched_kernels_write_the_references_bytes, .timeout = 120) {
  ferry_device *dev = open_device("cuda:0");
  ferry_stream *s;
  cr_assert_eq(ferry_stream_open(dev, &s), FERRY_OK, "%s", ferry_last_error());
  static const int shapes[][3] = {{640, 480, 312}, {100, 1000, 64}, {37, 23, 312}};
  for (size_t i = 0; i < 3; i++)
    for (int f32 = 0; f32 <= 1; f32++) {
      const int *sh = shapes[i];
      uint8_t *src = noise(sh[0], sh[1], 7 + (unsigned)i);
      host_job hj;
      job_init(&hj, src, sh[0], sh[1], sh[2], f32);
      ferry__resize_reference(&hj.job);
      ferry__resize_job dj = hj.job;
      void *h_dev = to_device(dev, s, hj.h_mem, hj.h_bytes), *v_dev = to_device(dev, s, hj.v_mem, hj.v_bytes);
      dj.h = rebase(hj.job.h, hj.h_mem, h_dev);
      dj.v = rebase(hj.job.v, hj.v_mem, v_dev);
      dj.src = to_device(dev, s, src, (size_t)sh[0] * sh[1] * 3);
      size_t tmp_bytes = ferry__resize_tmp_bytes(sh[0], sh[1], sh[2], dj.vertical_first);
      cr_assert_eq(ferry_device_malloc(dev, s, tmp_bytes, (void **)&dj.tmp), FERRY_OK);
      cr_assert_eq(ferry_device_malloc(dev, s, out_bytes(&dj), &dj.dst), FERRY_OK);
      cr_assert_eq(ferry__cuda_resize_launch(s->impl, &dj), 0, "launch");
      void *back = malloc(out_bytes(&dj));
      cr_assert_eq(ferry_memcpy(s, back, dj.dst, out_bytes(&dj), FERRY_COPY_D2H), FERRY_OK, "%s", ferry_last_error());
      cr_expect_eq(memcmp(back, hj.job.dst, out_bytes(&dj)), 0, "shape %zu %s", i, f32 ? "f32" : "u8");
      void *frees[] = {h_dev, v_dev, (void *)dj.src, dj.tmp, dj.dst};
      for (size_t k = 0; k < 5; k++) ferry_device_free(dev, s, frees[k]);
      free(back);
      free(src);
      job_free(&hj);
    }
  ferry_stream_close(s);
  ferry_device_close(dev);
}
#endif
