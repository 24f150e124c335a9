/* Resize and normalise: hand-computed filter results, layouts, arguments, boxes.
 * (Agreement with Pillow on real photos is test_image_pillow.py's job.) */
#include <math.h>

#include "image/resize_kernels.h"
#include "test_image_util.h"

static const float MEAN[3] = FERRY_IMAGENET_MEAN, STD[3] = FERRY_IMAGENET_STD;

/* A gray image (R = G = B) of width w and height h from a row-major value table. */
static uint8_t *gray_image(const uint8_t *values, int w, int h) {
  uint8_t *rgb = malloc((size_t)w * h * 3);
  for (int i = 0; i < w * h; i++) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = values[i];
  return rgb;
}

Test(image_resize, a_constant_image_stays_constant_at_any_size) {
  ferry_decoder *d = open_decoder();
  enum { W = 37, H = 23 };
  uint8_t *src = malloc(W * H * 3);
  for (int i = 0; i < W * H; i++) src[3 * i] = 10, src[3 * i + 1] = 128, src[3 * i + 2] = 250;
  static const int sizes[] = {1, 5, 23, 37, 64, 200};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    int n = sizes[s];
    uint8_t *dst = malloc((size_t)n * n * 3);
    cr_assert_eq(ferry_image_resize(d, src, W, H, n, FERRY_LAYOUT_U8_HWC, dst), FERRY_OK);
    for (int i = 0; i < n * n; i++)
      cr_assert(dst[3 * i] == 10 && dst[3 * i + 1] == 128 && dst[3 * i + 2] == 250,
                "size %d pixel %d", n, i);
    free(dst);
  }
  free(src);
  ferry_decoder_close(d);
}

Test(image_resize, same_size_is_the_identity) {
  ferry_decoder *d = open_decoder();
  enum { N = 29 };
  uint8_t src[N * N * 3], dst[N * N * 3];
  for (int i = 0; i < N * N * 3; i++) src[i] = (uint8_t)(i * 37 + i / 7);
  cr_assert_eq(ferry_image_resize(d, src, N, N, N, FERRY_LAYOUT_U8_HWC, dst), FERRY_OK);
  cr_assert_eq(memcmp(src, dst, sizeof src), 0);
  ferry_decoder_close(d);
}

/* 4 -> 2 along x (rows constant): the triangle widened to support 2 gives taps
 * 3/4, 3/4, 1/4 at the left edge (renormalised by 7/4) and 1/4, 3/4, 3/4 at the
 * right: (0*.75 + 80*.75 + 160*.25) / 1.75 = 57.1 and (80*.25 + 160*.75 + 240*.75)
 * / 1.75 = 182.9. */
Test(image_resize, downscale_by_two_uses_the_widened_triangle) {
  ferry_decoder *d = open_decoder();
  static const uint8_t values[2 * 4] = {0, 80, 160, 240, 0, 80, 160, 240};
  uint8_t *src = gray_image(values, 4, 2);
  uint8_t dst[2 * 2 * 3];
  cr_assert_eq(ferry_image_resize(d, src, 4, 2, 2, FERRY_LAYOUT_U8_HWC, dst), FERRY_OK);
  for (int y = 0; y < 2; y++) {
    cr_assert_eq(dst[(y * 2 + 0) * 3], 57);
    cr_assert_eq(dst[(y * 2 + 1) * 3], 183);
  }
  free(src);
  ferry_decoder_close(d);
}

/* 2 -> 4 along y: plain linear interpolation between pixel centres, clamped at the
 * edges: output centres 0.25, 0.75, 1.25, 1.75 in input pixels give 0, 25, 75, 100. */
Test(image_resize, upscale_interpolates_between_centres) {
  ferry_decoder *d = open_decoder();
  static const uint8_t values[4 * 2] = {0, 0, 0, 0, 100, 100, 100, 100};
  uint8_t *src = gray_image(values, 4, 2);
  uint8_t dst[4 * 4 * 3];
  cr_assert_eq(ferry_image_resize(d, src, 4, 2, 4, FERRY_LAYOUT_U8_HWC, dst), FERRY_OK);
  static const uint8_t want[4] = {0, 25, 75, 100};
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++) cr_assert_eq(dst[(y * 4 + x) * 3 + 1], want[y], "(%d,%d)", x, y);
  free(src);
  ferry_decoder_close(d);
}

Test(image_resize, f32_chw_is_the_normalised_u8_hwc) {
  ferry_decoder *d = open_decoder();
  enum { W = 50, H = 31, N = 17 };
  uint8_t *src = malloc(W * H * 3);
  for (int i = 0; i < W * H * 3; i++) src[i] = (uint8_t)((i * 2654435761u) >> 24);
  uint8_t u8[N * N * 3];
  float f32[3 * N * N];
  cr_assert_eq(ferry_image_resize(d, src, W, H, N, FERRY_LAYOUT_U8_HWC, u8), FERRY_OK);
  cr_assert_eq(ferry_image_resize(d, src, W, H, N, FERRY_LAYOUT_F32_CHW, f32), FERRY_OK);
  for (int y = 0; y < N; y++)
    for (int x = 0; x < N; x++)
      for (int c = 0; c < 3; c++) {
        float want = ((float)u8[(y * N + x) * 3 + c] * (float)(1.0 / 255) - MEAN[c]) / STD[c];
        cr_assert_eq(f32[(c * N + y) * N + x], want, "(%d,%d,%d)", x, y, c);
      }
  /* the extremes land where ImageNet's statistics put them */
  cr_assert_float_eq(-MEAN[0] / STD[0], -2.1179039f, 1e-6f);
  free(src);
  ferry_decoder_close(d);
}

Test(image_resize, load_resized_reports_the_original_size) {
  char path[1024];
  realdata(path, sizeof path, "photos/skimage/coffee.png"); /* 600 x 400 */
  ferry_decoder *d = open_decoder();
  static float dst[3 * 64 * 64];
  int w = 0, h = 0;
  cr_assert_eq(ferry_image_load_resized(d, path, NULL, 64, FERRY_LAYOUT_F32_CHW, dst, &w, &h),
               FERRY_OK, "%s", ferry_last_error());
  cr_assert(w == 600 && h == 400);
  for (int i = 0; i < 3 * 64 * 64; i++) cr_assert(isfinite(dst[i]) && fabsf(dst[i]) < 2.7f);
  ferry_decoder_close(d);
}

Test(image_resize, bad_arguments_are_einval) {
  ferry_decoder *d = open_decoder();
  uint8_t src[3 * 4], dst[3 * 4];
  memset(src, 1, sizeof src);
  cr_assert_eq(ferry_image_resize(d, src, 2, 2, 0, FERRY_LAYOUT_U8_HWC, dst), FERRY_EINVAL);
  cr_assert_eq(ferry_image_resize(d, src, 2, 2, -3, FERRY_LAYOUT_U8_HWC, dst), FERRY_EINVAL);
  cr_assert_eq(ferry_image_resize(d, src, 0, 2, 2, FERRY_LAYOUT_U8_HWC, dst), FERRY_EINVAL);
  cr_assert_eq(ferry_image_resize(d, src, 2, 2, 2, (ferry_image_layout)7, dst), FERRY_EINVAL);
  cr_assert_eq(ferry_image_resize(d, src, 2, 2, 2, FERRY_LAYOUT_U8_HWC, NULL), FERRY_EINVAL);
  cr_assert_eq(ferry_image_decode_resized(NULL, src, 4, "x", NULL, 2, FERRY_LAYOUT_U8_HWC, dst,
                                          NULL, NULL),
               FERRY_EINVAL);
  cr_assert_eq(ferry_decoder_open(NULL), FERRY_EINVAL);
  ferry_decoder_close(NULL);
  ferry_decoder_close(d);
}

Test(image_resize, boxes_scale_with_the_image) {
  const float box[4] = {64, 48, 320, 96};
  float out[4];
  ferry_image_scale_box(box, 640, 480, 320, out);
  cr_assert(out[0] == 32 && out[1] == 32 && out[2] == 160 && out[3] == 64);
}

/* The AVX2 kernels against the portable ones, byte for byte, over shapes that
 * exercise every path: upscales and downscales of each axis, both pass orders,
 * widths that leave vector tails, outputs near the image's last bytes (src is
 * allocated exactly, so an over-read is an ASan error), and both layouts. */
static void compare_kernel_sets(ferry_decoder *d, const ferry__resize_kernels *fast, int w, int h, int size,
                                unsigned seed) {
  size_t n = (size_t)w * h * 3, out_px = (size_t)size * size * 3;
  uint8_t *src = malloc(n);
  for (size_t i = 0; i < n; i++) src[i] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
  if (seed % 5 == 0) /* saturated runs: the clipping of over- and undershoot */
    for (size_t i = 0; i < n; i++) src[i] = (i / 3) % 7 < 3 ? 255 : 0;
  for (int layout = 0; layout < 3; layout++) {
    /* F32 twice: planes 32-byte aligned (streaming stores) and shifted by one float */
    ferry_image_layout l = layout ? FERRY_LAYOUT_F32_CHW : FERRY_LAYOUT_U8_HWC;
    size_t bytes = out_px * (layout ? sizeof(float) : 1), shift = layout == 2 ? sizeof(float) : 0;
    uint8_t *a = malloc(bytes), *b = aligned_alloc(64, (bytes + shift + 63) / 64 * 64);
    cr_assert_eq(ferry__image_resize_with(&ferry__resize_portable, d, src, w, h, size, l, a), FERRY_OK);
    cr_assert_eq(ferry__image_resize_with(fast, d, src, w, h, size, l, b + shift), FERRY_OK);
    cr_assert_eq(memcmp(a, b + shift, bytes), 0, "%dx%d -> %d, layout %d%s: the kernel sets differ",
                 w, h, size, (int)l, shift ? " (unaligned)" : "");
    free(a);
    free(b);
  }
  free(src);
}

/* Every shape through `fast` and the portable kernels. */
static void compare_on_shapes(const ferry__resize_kernels *fast) {
  ferry_decoder *d = open_decoder();
  static const int shapes[][3] = {{640, 480, 312}, {480, 640, 312}, {427, 640, 312},
                                  {500, 375, 312}, {1, 1, 1},       {1, 1, 7},
                                  {3, 2, 1},       {5, 900, 40},    {900, 5, 40},
                                  {33, 17, 64},    {640, 480, 640}, {641, 479, 33}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    compare_kernel_sets(d, fast, shapes[i][0], shapes[i][1], shapes[i][2], (unsigned)i);
  unsigned r = 99;
  for (int i = 0; i < 300; i++) {
    int w = 1 + (int)((r = r * 1664525u + 1013904223u) >> 23) % 300;
    int h = 1 + (int)((r = r * 1664525u + 1013904223u) >> 23) % 300;
    int size = 1 + (int)((r = r * 1664525u + 1013904223u) >> 23) % 200;
    compare_kernel_sets(d, fast, w, h, size, r);
  }
  ferry_decoder_close(d);
}

Test(image_resize, avx2_kernels_equal_the_portable_ones) {
#if FERRY_HAVE_AVX2_KERNELS
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    cr_skip_test("this CPU has no AVX2 and FMA");
  compare_on_shapes(&ferry__resize_avx2);
#else
  cr_skip_test("no AVX2 kernels in this build");
#endif
}

Test(image_resize, avx512_kernels_equal_the_portable_ones) {
#if FERRY_HAVE_AVX512_KERNELS
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
      !__builtin_cpu_supports("fma"))
    cr_skip_test("this CPU has no AVX-512F");
  compare_on_shapes(&ferry__resize_avx512);
#else
  cr_skip_test("no AVX-512 kernels in this build");
#endif
}

Test(image_resize, vbmi_kernels_equal_the_portable_ones) {
#if FERRY_HAVE_VBMI_KERNELS
  if (!__builtin_cpu_supports("avx512vbmi") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx2") ||
      !__builtin_cpu_supports("fma"))
    cr_skip_test("this CPU has no AVX-512 VBMI");
  compare_on_shapes(&ferry__resize_vbmi);
#else
  cr_skip_test("no VBMI kernels in this build");
#endif
}

/* Both ways the AVX2 kernel normalises (fma division, plain division) against the
 * table, for every byte value in every channel and rows that leave vector tails. */
Test(image_resize, avx2_normalisation_equals_the_table) {
#if FERRY_HAVE_AVX2_KERNELS
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    cr_skip_test("this CPU has no AVX2 and FMA");
  ferry__resize_norm norm = *ferry__resize_imagenet_norm();
  cr_assert(norm.fma_exact, "the fma division should reproduce ImageNet's table");
  enum { N = 263 }; /* 3*N covers every byte value; N % 8 != 0 leaves a tail */
  uint8_t rgb[3 * N + FERRY_RESIZE_ROW_SLACK];
  for (int i = 0; i < 3 * N + FERRY_RESIZE_ROW_SLACK; i++) rgb[i] = (uint8_t)(i * 7 + i / 256);
  for (int exact = 1; exact >= 0; exact--) {
    norm.fma_exact = exact;
    float want[3 * N], got[3 * N];
    ferry__resize_portable.normalize(rgb, N, &norm, want, N);
    ferry__resize_avx2.normalize(rgb, N, &norm, got, N);
    cr_assert_eq(memcmp(want, got, sizeof want), 0, "fma_exact %d: planes differ", exact);
  }
#else
  cr_skip_test("no AVX2 kernels in this build");
#endif
}

/* A view (resize_kernels.h) against the full resize, cropped and mirrored by hand:
 * byte for byte in u8 and f32, with the portable kernels and the fastest set this
 * CPU has, over random shapes in both pass orders, views of any rectangle (a single
 * pixel, a full axis), mirrored or not, and widths the full resize never resamples. */
static void expect_view(ferry_decoder *d, const ferry__resize_kernels *k, const uint8_t *src, int w, int h,
                        const ferry__resize_view *v, ferry_image_layout l) {
  size_t px = l == FERRY_LAYOUT_F32_CHW ? sizeof(float) : 1;
  size_t full_n = (size_t)v->full_w * v->full_h * 3, n = (size_t)v->w * v->h * 3;
  uint8_t *full = malloc(full_n * px), *got = malloc(n * px), *want = malloc(n * px);
  cr_assert_eq(ferry__image_resize_rect(&ferry__resize_portable, d, src, (size_t)w * 3, w, h, v->full_w,
                                        v->full_h, l, full), FERRY_OK);
  cr_assert_eq(ferry__image_resize_view(k, d, src, (size_t)w * 3, w, h, v, l, got), FERRY_OK);
  for (int y = 0; y < v->h; y++)
    for (int x = 0; x < v->w; x++)
      for (int c = 0; c < 3; c++) {
        int fx = v->x + (v->mirror ? v->w - 1 - x : x), fy = v->y + y;
        size_t from = l == FERRY_LAYOUT_F32_CHW ? ((size_t)c * v->full_h + fy) * v->full_w + fx
                                                : ((size_t)fy * v->full_w + fx) * 3 + c;
        size_t to = l == FERRY_LAYOUT_F32_CHW ? ((size_t)c * v->h + y) * v->w + x : ((size_t)y * v->w + x) * 3 + c;
        memcpy(want + to * px, full + from * px, px);
      }
  cr_assert_eq(memcmp(got, want, n * px), 0,
               "%dx%d -> %dx%d, view %dx%d at (%d, %d)%s, layout %d: not the full resize's pixels", w, h,
               v->full_w, v->full_h, v->w, v->h, v->x, v->y, v->mirror ? " mirrored" : "", (int)l);
  free(full);
  free(got);
  free(want);
}

Test(image_resize, a_view_is_the_full_resize_cropped_and_mirrored) {
  ferry_decoder *d = open_decoder();
  const ferry__resize_kernels *sets[2] = {&ferry__resize_portable, ferry__resize_best_kernels()};
  unsigned r = 7;
#define NEXT(m) (1 + (int)((r = r * 1664525u + 1013904223u) >> 20) % (m))
  for (int i = 0; i < 400; i++) {
    int w = NEXT(200), h = NEXT(200), fw = i % 7 == 0 ? w : NEXT(220), fh = i % 5 == 0 ? h : NEXT(220);
    int vw = NEXT(fw), vh = NEXT(fh);
    ferry__resize_view v = {fw, fh, NEXT(fw - vw + 1) - 1, NEXT(fh - vh + 1) - 1, vw, vh, i % 2};
    uint8_t *src = malloc((size_t)w * h * 3);
    for (size_t b = 0; b < (size_t)w * h * 3; b++) src[b] = (uint8_t)((r = r * 1103515245u + 12345u) >> 16);
    for (int s = 0; s < 2; s++) {
      expect_view(d, sets[s], src, w, h, &v, FERRY_LAYOUT_U8_HWC);
      expect_view(d, sets[s], src, w, h, &v, FERRY_LAYOUT_F32_CHW);
    }
    free(src);
  }
#undef NEXT
  /* views as wide (or as tall) as the source, of resizes that change that side */
  static const int coincide[][8] = {{50, 40, 60, 40, 0, 0, 50, 40}, {50, 40, 60, 30, 0, 2, 50, 20},
                                    {40, 50, 40, 60, 0, 0, 40, 50}, {30, 30, 20, 20, 0, 0, 20, 20}};
  for (size_t i = 0; i < sizeof coincide / sizeof *coincide; i++) {
    const int *c = coincide[i];
    ferry__resize_view v = {c[2], c[3], c[4], c[5], c[6], c[7], 0};
    uint8_t *src = malloc((size_t)c[0] * c[1] * 3);
    for (size_t b = 0; b < (size_t)c[0] * c[1] * 3; b++) src[b] = (uint8_t)((r = r * 1103515245u + 12345u) >> 16);
    for (int s = 0; s < 2; s++) expect_view(d, sets[s], src, c[0], c[1], &v, FERRY_LAYOUT_U8_HWC);
    free(src);
  }
  ferry__resize_view outside = {10, 10, 5, 0, 6, 10, 0};
  uint8_t px[12] = {0}, out[600];
  cr_assert_eq(ferry__image_resize_view(&ferry__resize_portable, d, px, 6, 2, 2, &outside, FERRY_LAYOUT_U8_HWC,
                                        out), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "not inside"), "%s", ferry_last_error());
  ferry_decoder_close(d);
}
