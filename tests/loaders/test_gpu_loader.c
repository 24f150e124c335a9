/* tests/loaders/test_gpu_loader.c - the GPU decoder's worker side, on the host backend
 * through a fake nvJPEG (tests/common/fake_nvjpeg.h), against the CPU decoder's loader.
 *
 * What is checked: a batch of the GPU decoder has no images field; each sample's file
 * bytes are in its jpeg rows (exactly the file), or, for one nvJPEG cannot take, its
 * u8 pixels are in one cpu_images row (exactly the CPU loader's); every other field is
 * the CPU loader's bit for bit; a sample found to need the CPU is laid out again once
 * and never skipped; the stats count samples per path and fallbacks by reason.
 */
#include "loader_fixture.h"
#include "lib/transfer/packed_copy.h"
#include "loaders/loader_internal.h"
#include "tests/common/fake_nvjpeg.h"

static uint8_t *read_whole(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(*len ? *len : 1);
  cr_assert_eq(fread(buf, 1, *len, f), *len);
  fclose(f);
  return buf;
}

/* The file of dataset index `index`. */
static uint8_t *file_of(const ferry_loader_config *c, ferry_coco *coco, int64_t index, size_t *len) {
  ferry_coco_image img;
  cr_assert_eq(ferry_coco_image_at(coco, (size_t)index, &img), FERRY_OK);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", c->images, img.file_name);
  return read_whole(path, len);
}

static void sample_view(const ferry_batch *b, const char *name, size_t i, ferry_tensor *v) {
  int f = ferry_batch_find_field(b, name);
  cr_assert_geq(f, 0, "no field %s", name);
  cr_assert_eq(ferry_batch_sample(b, (size_t)f, i, v), FERRY_OK);
}

static int64_t rows_of(const ferry_batch *b, const char *name, size_t i) {
  const int64_t *o = ferry_batch_offsets(b, (size_t)ferry_batch_find_field(b, name));
  return o[i + 1] - o[i];
}

static int is_pixels(const char *name) {
  return !strcmp(name, FERRY_FIELD_IMAGES) || !strcmp(name, FERRY_FIELD_JPEG) ||
         !strcmp(name, FERRY_FIELD_CPU_IMAGES);
}

/* Every field but the pixels: the same offsets and bytes in both batches. */
static void expect_same_targets(const ferry_batch *cpu, const ferry_batch *gpu) {
  for (size_t f = 0; f < ferry_batch_num_fields(cpu); f++) {
    const char *name = ferry_batch_field_spec(cpu, f)->name;
    if (is_pixels(name)) continue;
    int g = ferry_batch_find_field(gpu, name);
    cr_assert_geq(g, 0, "the GPU decoder's batch lacks %s", name);
    for (size_t i = 0; i < ferry_batch_size(cpu); i++) {
      ferry_tensor a, b;
      cr_assert_eq(ferry_batch_sample(cpu, f, i, &a), FERRY_OK);
      cr_assert_eq(ferry_batch_sample(gpu, (size_t)g, i, &b), FERRY_OK);
      cr_assert_eq(a.nbytes, b.nbytes, "%s sample %zu", name, i);
      cr_expect_eq(memcmp(a.data, b.data, a.nbytes), 0, "%s sample %zu differs", name, i);
    }
  }
}

typedef struct epoch_counts {
  size_t samples, fallbacks, batches;
} epoch_counts;

/* One epoch of both loaders side by side; every sample's pixels where they belong. */
static epoch_counts compare_epoch(const ferry_loader_config *c, ferry_loader *cpu, ferry_loader *gpu,
                                  ferry_coco *coco) {
  epoch_counts n = {0};
  for (;;) {
    ferry_batch *a, *b;
    ferry_status sa = ferry_loader_next(cpu, &a), sb = ferry_loader_next(gpu, &b);
    cr_assert_eq(sa, sb, "%d vs %d: %s", sa, sb, ferry_last_error());
    if (sa == FERRY_EEND) return n;
    cr_assert_eq(sa, FERRY_OK, "%s", ferry_last_error());
    cr_assert_eq(ferry_batch_size(a), ferry_batch_size(b));
    cr_expect_lt(ferry_batch_find_field(b, FERRY_FIELD_IMAGES), 0, "no images field with the GPU decoder");
    expect_same_targets(a, b);
    for (size_t i = 0; i < ferry_batch_size(b); i++) {
      int64_t index = sample_index(b, i);
      size_t len;
      uint8_t *file = file_of(c, coco, index, &len);
      ferry_tensor jpeg, pixels, want;
      sample_view(b, FERRY_FIELD_JPEG, i, &jpeg);
      if (fake_nv_is_fallback(file, len)) {
        n.fallbacks++;
        cr_expect_eq(rows_of(b, FERRY_FIELD_JPEG, i), 0);
        cr_assert_eq(rows_of(b, FERRY_FIELD_CPU_IMAGES, i), 1, "sample %lld: no CPU pixels", (long long)index);
        sample_view(b, FERRY_FIELD_CPU_IMAGES, i, &pixels);
        sample_view(a, FERRY_FIELD_IMAGES, i, &want);
        cr_assert_eq(pixels.nbytes, want.nbytes);
        cr_expect_eq(memcmp(pixels.data, want.data, want.nbytes), 0, "sample %lld: pixels differ", (long long)index);
      } else {
        cr_expect_eq(rows_of(b, FERRY_FIELD_CPU_IMAGES, i), 0);
        cr_assert_eq(jpeg.nbytes, len, "sample %lld: jpeg rows", (long long)index);
        cr_expect_eq(memcmp(jpeg.data, file, len), 0, "sample %lld: the bytes are not the file's", (long long)index);
      }
      free(file);
      n.samples++;
    }
    n.batches++;
    ferry_batch_release(a);
    ferry_batch_release(b);
  }
}

/* The CPU loader and the GPU decoder's (the fake sending one in `fallback_every` images
 * to the CPU) over the same set, and the annotations to find each sample's file. */
typedef struct pair {
  ferry_loader_config c;
  ferry_loader *cpu, *gpu;
  ferry_coco *coco;
} pair;

static void open_pair(pair *p, unsigned fallback_every) {
  fake_nvjpeg_reset(fallback_every);
  test_config(&p->c);
  p->c.layout = FERRY_LAYOUT_U8_HWC; /* the fallbacks' pixels are u8 */
  p->cpu = open_loader(&p->c);
  cr_assert_eq(ferry__loader_open_gpu(&p->c, &fake_nvjpeg_api, &p->gpu), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_coco_open(p->c.annotations, NULL, &p->coco), FERRY_OK, "%s", ferry_last_error());
}

static void close_pair(pair *p) {
  ferry_loader_close(p->cpu);
  ferry_loader_close(p->gpu);
  ferry_coco_close(p->coco);
}

static ferry_loader_stats stats_of(ferry_loader *l) {
  ferry_loader_stats s;
  cr_assert_eq(ferry_loader_stats_get(l, &s), FERRY_OK);
  return s;
}

static uint64_t fallbacks(const ferry_loader_stats *s) {
  uint64_t n = 0;
  for (int r = 0; r < FERRY_FALLBACK_REASONS; r++) n += s->samples_cpu_fallback[r];
  return n;
}

Test(gpu_loader, every_jpeg_goes_to_the_device_as_its_file_and_the_targets_are_the_cpus, .timeout = 120) {
  pair p;
  open_pair(&p, 0);
  epoch_counts n = compare_epoch(&p.c, p.cpu, p.gpu, p.coco);
  cr_assert_eq(n.samples, LOADER_TEST_IMAGES);
  cr_expect_eq(n.fallbacks, 0);
  ferry_loader_stats s = stats_of(p.gpu);
  cr_expect_eq(s.decoder, FERRY_DECODE_GPU);
  /* The workers fill ahead into the next epoch: at least this epoch is counted. */
  cr_expect_geq(s.samples_gpu_decode, LOADER_TEST_IMAGES);
  cr_expect_eq(s.samples_gpu_decode, s.samples_decoded);
  cr_expect_eq(fallbacks(&s), 0);
  cr_expect_eq(s.replans, 0);
  cr_expect_eq(stats_of(p.cpu).samples_gpu_decode, 0, "the CPU decoder counts nothing here");
  close_pair(&p);
}

Test(gpu_loader, a_fallback_is_laid_out_again_once_with_the_cpus_pixels, .timeout = 120) {
  pair p;
  open_pair(&p, 3);
  epoch_counts first = compare_epoch(&p.c, p.cpu, p.gpu, p.coco);
  cr_assert_gt(first.fallbacks, 0, "the fake sends about a third of the images to the CPU");
  cr_assert_lt(first.fallbacks, first.samples);
  ferry_loader_stats s = stats_of(p.gpu);
  /* Every filled sample is counted once, on one path (the workers fill ahead into the
   * next epoch, so the counts are at least this epoch's). */
  cr_expect_eq(s.samples_gpu_decode + fallbacks(&s), s.samples_decoded);
  cr_expect_eq(s.samples_cpu_fallback[FERRY_FALLBACK_COMPONENTS], fallbacks(&s), "only the components rule sends them");
  cr_expect_geq(fallbacks(&s), first.fallbacks);
  cr_expect_geq(s.samples_gpu_decode, first.samples - first.fallbacks);
  cr_expect_eq(s.samples_skipped, 0, "a fallback is never skipped");
  cr_expect_gt(s.replans, 0);
  cr_expect_leq(s.replans, first.fallbacks, "at most one re-layout per fallback");
  /* The routes are remembered: the next epoch lays every sample out right at once. */
  epoch_counts second = compare_epoch(&p.c, p.cpu, p.gpu, p.coco);
  ferry_loader_stats s2 = stats_of(p.gpu);
  cr_expect_eq(second.fallbacks, first.fallbacks);
  cr_expect_eq(s2.replans, s.replans, "no re-layout in the second epoch");
  cr_expect_geq(fallbacks(&s2), 2 * first.fallbacks);
  cr_expect_eq(s2.samples_gpu_decode + fallbacks(&s2), s2.samples_decoded);
  close_pair(&p);
}

Test(gpu_loader, the_pinned_batch_holds_compressed_bytes_not_pixels, .timeout = 60) {
  fake_nvjpeg_reset(0);
  ferry_loader_config c;
  test_config(&c);
  c.layout = FERRY_LAYOUT_F32_CHW;
  c.resolution = 312;
  ferry_loader *cpu = open_loader(&c), *gpu;
  cr_assert_eq(ferry__loader_open_gpu(&c, &fake_nvjpeg_api, &gpu), FERRY_OK, "%s", ferry_last_error());
  ferry_batch *a, *b;
  cr_assert_eq(ferry_loader_next(cpu, &a), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_loader_next(gpu, &b), FERRY_OK, "%s", ferry_last_error());
  ferry_tensor pixels, jpeg, none;
  cr_assert_eq(ferry_batch_field(a, (size_t)ferry_batch_find_field(a, FERRY_FIELD_IMAGES), &pixels), FERRY_OK);
  cr_assert_eq(ferry_batch_field(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_JPEG), &jpeg), FERRY_OK);
  cr_assert_eq(ferry_batch_field(b, (size_t)ferry_batch_find_field(b, FERRY_FIELD_CPU_IMAGES), &none), FERRY_OK);
  cr_expect_eq(none.nbytes, 0);
  cr_expect_gt(jpeg.nbytes, 0);
  cr_expect_lt(jpeg.nbytes * 4, pixels.nbytes, "%zu compressed bytes against %zu f32 pixel bytes",
               jpeg.nbytes, pixels.nbytes);
  ferry_batch_release(a);
  ferry_batch_release(b);
  ferry_loader_close(cpu);
  ferry_loader_close(gpu);
}

/* ---- the transfer stage, on the host backend ---- */

/* Both loaders' batches through ferry_transfer onto the host device: the GPU
 * decoder's images tensor (the fake's decode, the resize kernels' arithmetic, the
 * normalisation) must be the CPU path's u8 images normalised by the same transfer,
 * byte for byte, and the records the same fields with the same bytes. */
static void expect_same_device_batches(ferry_device *host, ferry_batch *a, ferry_batch *b, ferry_normalize norm) {
  ferry_transfer_options o = {.normalize = norm};
  ferry_device_batch *da, *db;
  cr_assert_eq(ferry_transfer(host, NULL, a, &o, &da), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_transfer(host, NULL, b, &o, &db), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_device_batch_wait(da), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK, "%s", ferry_last_error());
  ferry_tensor *ia = ferry_device_batch_images(da), *ib = ferry_device_batch_images(db);
  cr_assert_not_null(ib, "the stage made no images tensor");
  cr_assert_eq(ia->dtype, ib->dtype);
  cr_assert_eq(ia->ndim, ib->ndim);
  for (int d = 0; d < ia->ndim; d++) cr_expect_eq(ia->shape[d], ib->shape[d], "dim %d", d);
  cr_assert_eq(ia->nbytes, ib->nbytes);
  cr_expect_eq(memcmp(ia->data, ib->data, ia->nbytes), 0, "images differ (normalize %d)", (int)norm);
  cr_assert_eq(ferry_device_batch_num_fields(da), ferry_device_batch_num_fields(db),
               "the compressed and fallback fields are no records");
  for (size_t k = 0; k < ferry_device_batch_num_fields(da); k++) {
    cr_assert_str_eq(ferry_device_batch_field_name(da, k), ferry_device_batch_field_name(db, k));
    for (size_t i = 0; i < ferry_device_batch_size(da); i++) {
      ferry_tensor *ta = ferry_device_batch_sample_field(da, i, ferry_device_batch_field_name(da, k));
      ferry_tensor *tb = ferry_device_batch_sample_field(db, i, ferry_device_batch_field_name(db, k));
      cr_assert(ta && tb);
      cr_assert_eq(ta->nbytes, tb->nbytes);
      cr_expect(ta->nbytes == 0 || memcmp(ta->data, tb->data, ta->nbytes) == 0, "%s sample %zu",
                ferry_device_batch_field_name(da, k), i);
    }
  }
  ferry_device_batch_free(da);
  ferry_device_batch_free(db);
}

static void stage_epoch(unsigned fallback_every) {
  fake_nvjpeg_reset(fallback_every);
  ferry_loader_config c;
  test_config(&c);
  c.layout = FERRY_LAYOUT_U8_HWC;
  c.resolution = 48;
  c.image.dct_scaling = 0; /* the fake decodes at full size, as nvJPEG does */
  ferry_loader *cpu = open_loader(&c), *gpu;
  cr_assert_eq(ferry__loader_open_gpu(&c, &fake_nvjpeg_api, &gpu), FERRY_OK, "%s", ferry_last_error());
  ferry_device *host;
  cr_assert_eq(ferry_device_open("host", &host), FERRY_OK);
  static const ferry_normalize modes[] = {FERRY_NORMALIZE_F32, FERRY_NORMALIZE_NONE, FERRY_NORMALIZE_BF16};
  size_t batches = 0;
  for (;; batches++) {
    ferry_batch *a, *b;
    ferry_status sa = ferry_loader_next(cpu, &a), sb = ferry_loader_next(gpu, &b);
    cr_assert_eq(sa, sb, "%s", ferry_last_error());
    if (sa == FERRY_EEND) break;
    cr_assert_eq(sa, FERRY_OK, "%s", ferry_last_error());
    expect_same_device_batches(host, a, b, modes[batches % 3]);
    ferry_batch_release(a);
    ferry_batch_release(b);
  }
  cr_expect_gt(batches, 3);
  cr_expect_gt(fake_nvjpeg.decodes, 0, "nvJPEG's batched decode ran");
  cr_expect_leq(fake_nvjpeg.decodes, (int)batches, "one batched decode per transfer at most");
  ferry_loader_close(cpu);
  ferry_loader_close(gpu);
  ferry_device_close(host);
}

Test(jpeg_stage, the_device_images_are_the_cpu_paths_when_the_decoders_agree, .timeout = 120) {
  stage_epoch(0);
}

Test(jpeg_stage, fallbacks_pixels_join_the_same_tensor, .timeout = 120) {
  stage_epoch(3);
}

Test(jpeg_stage, a_failed_batched_decode_fails_the_transfer_naming_nvjpeg, .timeout = 60) {
  fake_nvjpeg_reset(0);
  fake_nvjpeg.fail_decode = 1;
  ferry_loader_config c;
  test_config(&c);
  ferry_loader *gpu;
  cr_assert_eq(ferry__loader_open_gpu(&c, &fake_nvjpeg_api, &gpu), FERRY_OK, "%s", ferry_last_error());
  ferry_device *host;
  cr_assert_eq(ferry_device_open("host", &host), FERRY_OK);
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(gpu, &b), FERRY_OK, "%s", ferry_last_error());
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_F32};
  ferry_device_batch *db = (ferry_device_batch *)&o;
  cr_assert_eq(ferry_transfer(host, NULL, b, &o, &db), FERRY_EDEVICE);
  cr_expect_null(db);
  cr_expect(strstr(ferry_last_error(), "nvjpegDecodeBatched"), "%s", ferry_last_error());
  /* The packed-then-clone baseline cannot carry the producer: refused rather than
   * handing out compressed bytes as images. */
  cr_expect_eq(ferry__transfer_packed_then_clone(host, NULL, b, &o, &db), FERRY_EUNSUPPORTED);
  ferry_batch_release(b);
  ferry_loader_close(gpu);
  ferry_device_close(host);
}

/* Tar shards (issue 26) are read by the CPU decoder only: the GPU decoder is refused
 * before the shards are walked (the pattern names no file). */
Test(gpu_loader, shards_are_refused_before_their_walk, .timeout = 60) {
  fake_nvjpeg_reset(0);
  ferry_loader_config c;
  test_config(&c);
  c.annotations = "never-read-{000000..000001}.tar";
  ferry_loader *gpu = NULL;
  cr_assert_eq(ferry__loader_open_gpu(&c, &fake_nvjpeg_api, &gpu), FERRY_EUNSUPPORTED, "%s", ferry_last_error());
  cr_assert_not_null(strstr(ferry_last_error(), "the GPU decoder reads image files, not shards"), "%s",
                     ferry_last_error());
  cr_assert_null(gpu);
}
