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
#include "image/gpu/jpeg_stage.h"
#include "lib/device_internal.h"
#include "lib/transfer/packed_copy.h"
#include "loaders/gpu_route.h"
#include "loaders/gpu_fill.h"
#include "loaders/loader_internal.h"
#include "loaders/loader_open.h"
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
  ferry_loader_stats_init(&s);
  cr_assert_eq(ferry_loader_stats_get(l, &s), FERRY_OK);
  return s;
}

static ferry_memory_stats stats_of_device(ferry_device *d) {
  ferry_device_synchronize(d);
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  return s;
}

static uint64_t fallbacks(const ferry_loader_stats *s) {
  uint64_t n = 0;
  for (int r = 0; r < FERRY_LOADER_FALLBACK_SLOTS; r++) n += s->samples_cpu_fallback[r];
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

/* The test set's config, and a fresh fake that sends nothing to the CPU. */
static ferry_loader_config fresh_config(void) {
  fake_nvjpeg_reset(0);
  ferry_loader_config c;
  test_config(&c);
  return c;
}

/* The GPU decoder's loader over c, through the fake nvJPEG. */
static ferry_loader *open_fake_gpu(const ferry_loader_config *c) {
  ferry_loader *l = NULL;
  cr_assert_eq(ferry__loader_open_gpu(c, &fake_nvjpeg_api, &l), FERRY_OK, "%s", ferry_last_error());
  return l;
}

/* The first batch of the GPU decoder's loader (fake nvJPEG, nothing to the CPU), and
 * a host device to transfer it to. */
typedef struct gpu_batch {
  ferry_loader *loader;
  ferry_device *host;
  ferry_batch *batch;
} gpu_batch;

static gpu_batch first_gpu_batch(void) {
  ferry_loader_config c = fresh_config();
  gpu_batch g = {open_fake_gpu(&c), NULL, NULL};
  cr_assert_eq(ferry_device_open("host", &g.host), FERRY_OK);
  cr_assert_eq(ferry_loader_next(g.loader, &g.batch), FERRY_OK, "%s", ferry_last_error());
  return g;
}

static void gpu_batch_close(gpu_batch *g) {
  ferry_batch_release(g->batch);
  ferry_loader_close(g->loader);
  ferry_device_close(g->host);
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

static void stage_epochs(unsigned fallback_every, int fail_decode, int epochs) {
  fake_nvjpeg_reset(fallback_every);
  fake_nvjpeg.fail_decode = fail_decode;
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
  for (int e = 0; e < epochs; e++)
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
  if (!fail_decode)
    cr_expect_leq(fake_nvjpeg.decodes, (int)batches, "one batched decode per transfer at most");
  if (fail_decode) {
    /* Each image nvJPEG failed on is the CPU decoder's from then on (issue 25). */
    ferry_loader_stats s = stats_of(gpu);
    cr_expect_gt(s.samples_cpu_fallback[FERRY_FALLBACK_CORRUPT], 0);
    cr_expect_eq(s.samples_skipped, 0, "nothing was skipped: the CPU decoded every one");
  }
  ferry_loader_close(cpu);
  ferry_loader_close(gpu);
  ferry_device_close(host);
}

Test(jpeg_stage, the_device_images_are_the_cpu_paths_when_the_decoders_agree, .timeout = 120) {
  stage_epochs(0, 0, 1);
}

Test(jpeg_stage, fallbacks_pixels_join_the_same_tensor, .timeout = 120) {
  stage_epochs(3, 0, 1);
}

/* nvJPEG fails every batched decode (issue 25, item 8): each sample is decoded on the
 * CPU in the transfer instead, and laid out for the CPU decoder from then on; the
 * consumer sees the CPU path's images, and no failure. */
Test(jpeg_stage, images_nvjpeg_fails_on_are_decoded_on_the_cpu_not_failed, .timeout = 120) {
  stage_epochs(0, 1, 2);
}

/* nvJPEG out of its own memory is the transfer's FERRY_ENOMEM, as any device
 * allocation (issue 25, item 10): not a sample's failure, nothing rerouted or left
 * out, nothing left allocated, and the same batch transfers once memory is back. */
Test(jpeg_stage, nvjpeg_out_of_memory_fails_the_transfer_cleanly_for_a_retry, .timeout = 60) {
  gpu_batch g = first_gpu_batch();
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_F32};
  ferry_device_batch *db = NULL;
  fake_nvjpeg.decode_failure = NVJPEG_STATUS_ALLOCATOR_FAILURE;
  fake_nvjpeg.fail_decode = 1;
  cr_assert_eq(ferry_transfer(g.host, NULL, g.batch, &o, &db), FERRY_ENOMEM, "%s", ferry_last_error());
  cr_expect_null(db);
  cr_expect(strstr(ferry_last_error(), "ran out of memory") && strstr(ferry_last_error(), "batch of 4 samples"), "%s",
            ferry_last_error());
  cr_expect_eq(fake_nvjpeg.decodes, 1, "no sample is decoded again alone: memory is not a sample's fault");
  ferry_device_synchronize(g.host);
  ferry_memory_stats m;
  ferry_memory_stats_init(&m);
  cr_assert_eq(ferry_device_memory_stats(g.host, &m), FERRY_OK);
  cr_expect_eq(m.live_bytes, 0, "the failed transfer left device memory");
  fake_nvjpeg.fail_decode = 0;
  cr_assert_eq(ferry_transfer(g.host, NULL, g.batch, &o, &db), FERRY_OK, "the retry: %s", ferry_last_error());
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  cr_expect_eq(ferry_device_batch_size(db), ferry_batch_size(g.batch), "no sample left out");
  ferry_device_batch_free(db);
  cr_expect_eq(stats_of(g.loader).samples_cpu_fallback[FERRY_FALLBACK_CORRUPT], 0, "nothing rerouted");
  gpu_batch_close(&g);
}

/* The packed-then-clone baseline cannot carry the producer: refused rather than
 * handing out compressed bytes as images. */
Test(jpeg_stage, the_packed_then_clone_baseline_refuses_a_gpu_decoded_batch, .timeout = 60) {
  gpu_batch g = first_gpu_batch();
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_F32};
  ferry_device_batch *db = NULL;
  cr_expect_eq(ferry__transfer_packed_then_clone(g.host, NULL, g.batch, &o, &db), FERRY_EUNSUPPORTED);
  gpu_batch_close(&g);
}

/* ---- a header that claims a huge image (issue 25, item 8) ---- */

/* Set a baseline/progressive JPEG's frame size (its SOFn segment) to w x h. */
static void set_frame_size(uint8_t *jpeg, size_t len, int w, int h) {
  for (size_t i = 2; i + 9 < len && jpeg[i] == 0xFF;) {
    uint8_t m = jpeg[i + 1];
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      jpeg[i + 5] = (uint8_t)(h >> 8), jpeg[i + 6] = (uint8_t)h;
      jpeg[i + 7] = (uint8_t)(w >> 8), jpeg[i + 8] = (uint8_t)w;
      return;
    }
    i += 2 + ((size_t)jpeg[i + 2] << 8 | jpeg[i + 3]);
  }
  cr_assert_fail("no frame header");
}

enum { BOMB_SIDE = 65000, BOMB_INDEX = 7 };

static void write_whole(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot write %s", path);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  fclose(f);
}

/* A fresh folder (dir) holding `images` (img: dir/images) as links, but for `victim`. */
static void linked_folder_without(const char *images, const char *victim, char *dir, size_t dsize, char *img,
                                  size_t isize) {
  snprintf(dir, dsize, "/tmp/ferry-gpu-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(img, isize, "%s/images", dir);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "mkdir '%s' && for f in '%s'/*; do ln -s \"$f\" '%s'/; done && rm '%s/%s'", img,
           images, img, img, victim);
  cr_assert_eq(system(cmd), 0);
}

/* The file name of dataset image `index`. */
static const char *file_name_at(const ferry_loader_config *c, size_t index) {
  static char name[256];
  ferry_coco *coco;
  cr_assert_eq(ferry_coco_open(c->annotations, NULL, &coco), FERRY_OK);
  ferry_coco_image im;
  cr_assert_eq(ferry_coco_image_at(coco, index, &im), FERRY_OK);
  snprintf(name, sizeof name, "%s", im.file_name);
  ferry_coco_close(coco);
  return name;
}

/* A copy of c's image folder (links) in a fresh folder `dir`, with dataset image
 * BOMB_INDEX's file edited by `edit` (which may shorten it). Sets c->images; returns
 * the victim's file name. */
static char victim_dir[256]; /* the last folder with_victim made, for remove_victim_folder */

/* The folder with_victim made, gone (the loader that read it is closed). */
static void remove_victim_folder(void) { remove_folder(victim_dir); }

static const char *with_victim(ferry_loader_config *c, void (*edit)(uint8_t *jpeg, size_t *len), char *dir,
                               size_t dsize) {
  static char img[512], victim[256];
  snprintf(victim, sizeof victim, "%s", file_name_at(c, BOMB_INDEX));
  linked_folder_without(c->images, victim, dir, dsize, img, sizeof img);
  snprintf(victim_dir, sizeof victim_dir, "%s", dir);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", c->images, victim);
  size_t len;
  uint8_t *jpeg = read_whole(path, &len);
  edit(jpeg, &len);
  snprintf(path, sizeof path, "%s/%s", img, victim);
  write_whole(path, jpeg, len);
  free(jpeg);
  c->images = img;
  return victim;
}

static void claim_bomb_size(uint8_t *jpeg, size_t *len) { set_frame_size(jpeg, *len, BOMB_SIDE, BOMB_SIDE); }
static void cut_in_half(uint8_t *jpeg, size_t *len) { *len /= 2; }

/* The test set with dataset image BOMB_INDEX made a decompression bomb: its file's
 * header, and its annotations, say 65,000 x 65,000 (12.7 GB of RGB), in a copy of
 * the folder as links and a copy of the annotations. Sets c's paths; returns the
 * victim's file name. */
static const char *with_bomb(ferry_loader_config *c) {
  static char dir[256], ann[512];
  const char *victim = with_victim(c, claim_bomb_size, dir, sizeof dir);
  /* The annotations agree with the header (else the size check alone would refuse it). */
  size_t jlen = 0;
  uint8_t *text = read_whole(c->annotations, &jlen);
  char *json = realloc(text, jlen + 1);
  cr_assert_not_null(json);
  json[jlen] = 0;
  char key[300];
  snprintf(key, sizeof key, "\"file_name\":\"%s\"", victim);
  char *at = strstr(json, key);
  cr_assert_not_null(at, "no %s in the annotations", key);
  char *h = strstr(at, "\"height\":"), *w = strstr(at, "\"width\":");
  cr_assert(h && w);
  size_t hn = strspn(h + 9, "0123456789"), wn = strspn(w + 8, "0123456789");
  FILE *f = fopen((snprintf(ann, sizeof ann, "%s/instances.json", dir), ann), "wb");
  cr_assert_not_null(f);
  char *first = h < w ? h : w, *second = h < w ? w : h;
  size_t first_skip = h < w ? 9 + hn : 8 + wn, second_skip = h < w ? 8 + wn : 9 + hn;
  fwrite(json, 1, (size_t)(first - json), f);
  fprintf(f, "%.*s%d", h < w ? 9 : 8, first, BOMB_SIDE);
  fwrite(first + first_skip, 1, (size_t)(second - first - first_skip), f);
  fprintf(f, "%.*s%d", h < w ? 8 : 9, second, BOMB_SIDE);
  fputs(second + second_skip, f);
  fclose(f);
  free(json);
  c->annotations = ann;
  return victim;
}

/* A host device whose "GPU" has 256 MB: the bomb would ask for 12.7 GB of it. */
static ferry_device *small_gpu(void) {
  ferry_device *d;
  cr_assert_eq(ferry_device_open("host", &d), FERRY_OK);
  ferry__device_cap_bytes(d, 256u << 20);
  return d;
}

Test(gpu_loader, a_header_past_max_pixels_is_skipped_by_the_workers_not_met_in_the_transfer, .timeout = 120) {
  ferry_loader_config c = fresh_config();
  const char *victim = with_bomb(&c);
  c.on_error = FERRY_ON_ERROR_SKIP;
  uint64_t skipped;
  watch_first_epoch_skips(&c, &skipped);
  ferry_loader *l = open_fake_gpu(&c);
  ferry_device *gpu = small_gpu();
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_F32};
  size_t total = 0;
  int seen_bomb = 0;
  ferry_batch *b;
  ferry_status st;
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
    for (size_t i = 0; i < ferry_batch_size(b); i++) seen_bomb |= sample_index(b, i) == BOMB_INDEX;
    total += ferry_batch_size(b);
    ferry_device_batch *db;
    cr_assert_eq(ferry_transfer(gpu, NULL, b, &o, &db), FERRY_OK, "the consumer's transfer failed: %s",
                 ferry_last_error());
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    ferry_device_batch_free(db);
    ferry_batch_release(b);
  }
  cr_assert_eq(st, FERRY_EEND, "%s", ferry_last_error());
  cr_expect_eq(seen_bomb, 0, "the bomb was handed to the consumer");
  cr_expect_eq(total, LOADER_TEST_IMAGES - 1);
  cr_expect_eq(skipped, 1);
  cr_expect_lt(stats_of_device(gpu).peak_bytes, 16u << 20, "no device memory was asked for the bomb");
  ferry_loader_close(l);
  /* Under the fail policy the epoch ends at it, naming the file and the limit. */
  c.on_error = FERRY_ON_ERROR_FAIL;
  l = open_fake_gpu(&c);
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) ferry_batch_release(b);
  cr_expect_eq(st, FERRY_ELIMIT, "%d: %s", st, ferry_last_error());
  cr_expect(strstr(ferry_last_error(), victim) && strstr(ferry_last_error(), "65000x65000") &&
            strstr(ferry_last_error(), "exceeds the limit"), "%s", ferry_last_error());
  ferry_loader_close(l);
  ferry_device_close(gpu);
  remove_victim_folder();
}

/* The stage's own check, for a batch that reached it without the workers' (made by
 * hand here): refused before any device allocation, naming the sample. */
Test(jpeg_stage, a_header_past_max_pixels_is_refused_before_any_device_allocation, .timeout = 60) {
  ferry_loader_config c = fresh_config();
  const char *victim = with_bomb(&c);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", c.images, victim);
  size_t len;
  uint8_t *bomb = read_whole(path, &len);
  ferry_device *gpu = small_gpu();
  ferry_pool *pool;
  cr_assert_eq(ferry_pool_open(gpu, 1, 0, &pool), FERRY_OK);
  enum { R = 32 };
  ferry_field_spec f[3] = {{FERRY_FIELD_JPEG, FERRY_U8, FERRY_FIELD_ROWS, 0, {0}},
                           {FERRY_FIELD_CPU_IMAGES, FERRY_U8, FERRY_FIELD_ROWS, 3, {R, R, 3}},
                           {FERRY_FIELD_SAMPLE_INDEX, FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, {1}}};
  int64_t rows[3] = {(int64_t)len, 0, 1};
  ferry_batch *b;
  cr_assert_eq(ferry_batch_create(pool, 1, 3, f, rows, &b), FERRY_OK, "%s", ferry_last_error());
  ferry_tensor v;
  cr_assert_eq(ferry_batch_sample(b, 0, 0, &v), FERRY_OK);
  memcpy(v.data, bomb, len);
  cr_assert_eq(ferry_batch_sample(b, 2, 0, &v), FERRY_OK);
  *(int64_t *)v.data = BOMB_INDEX;
  cr_assert_eq(ferry_batch_set_role(b, 2, FERRY_ROLE_SAMPLE_INDEX), FERRY_OK, "how the message names the sample");
  struct ferry__jpeg_stage *stage;
  const ferry__jpeg_stage_fields names = {FERRY_FIELD_IMAGES, FERRY_FIELD_JPEG, FERRY_FIELD_CPU_IMAGES};
  cr_assert_eq(ferry__jpeg_stage_open(&fake_nvjpeg_api, R, NULL, &names, NULL, &stage), FERRY_OK, "%s",
               ferry_last_error());
  ferry__batch_set_producer(b, ferry__jpeg_stage_producer(stage));
  uint64_t allocations = stats_of_device(gpu).allocations;
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_F32};
  ferry_device_batch *db;
  cr_assert_eq(ferry_transfer(gpu, NULL, b, &o, &db), FERRY_ELIMIT, "%s", ferry_last_error());
  cr_expect(strstr(ferry_last_error(), "sample 0 (dataset index 7)") && strstr(ferry_last_error(), "65000x65000"),
            "%s", ferry_last_error());
  cr_expect_eq(stats_of_device(gpu).allocations, allocations, "nothing allocated on the device");
  ferry_batch_release(b);
  ferry__jpeg_stage_close(stage);
  ferry_pool_close(pool);
  ferry_device_close(gpu);
  free(bomb);
  remove_victim_folder();
}

/* ---- nvJPEG that loads but cannot start (issue 25, item 9) ---- */

static nvjpegStatus_t refusing_create(nvjpegBackend_t b, nvjpegDevAllocator_t *d, nvjpegPinnedAllocator_t *p,
                                      unsigned flags, nvjpegHandle_t *h) {
  return NVJPEG_STATUS_ARCH_MISMATCH;
}

/* The fake whose nvjpegCreateEx refuses every backend, as on a GPU nvJPEG does not run on. */
static ferry__nvjpeg_api refusing_api(void) {
  ferry__nvjpeg_api api = fake_nvjpeg_api;
  api.CreateEx = refusing_create;
  return api;
}

Test(gpu_loader, decode_auto_falls_back_to_the_cpu_when_nvjpeg_cannot_start_and_says_why, .timeout = 60) {
  fake_nvjpeg_reset(0);
  ferry__nvjpeg_api api = refusing_api();
  ferry_loader_config c;
  test_config(&c);
  c.image.decode = FERRY_DECODE_AUTO;
  ferry_loader *l = NULL;
  cr_assert_eq(ferry__loader_open_gpu(&c, &api, &l), FERRY_OK, "AUTO must fall back, not fail: %s",
               ferry_last_error());
  cr_expect_eq(stats_of(l).decoder, FERRY_DECODE_CPU);
  const char *note = ferry_loader_decoder_note(l);
  cr_expect(strstr(note, "decode = AUTO runs on the CPU") && strstr(note, "nvjpegCreateEx") &&
            strstr(note, "NVJPEG_STATUS_ARCH_MISMATCH"), "the note says why: %s", note);
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
  cr_expect_geq(ferry_batch_find_field(b, FERRY_FIELD_IMAGES), 0, "the CPU decoder's batches have images");
  ferry_batch_release(b);
  ferry_loader_close(l);
  /* GPU asked for explicitly: the open fails, naming the option and the reason. */
  c.image.decode = FERRY_DECODE_GPU;
  l = (ferry_loader *)&c;
  cr_assert_neq(ferry__loader_open_gpu(&c, &api, &l), FERRY_OK);
  cr_expect_null(l);
  cr_expect(strstr(ferry_last_error(), "config.image.decode = GPU") && strstr(ferry_last_error(), "nvjpegCreateEx") &&
            strstr(ferry_last_error(), "status 7 (NVJPEG_STATUS_ARCH_MISMATCH)"), "%s", ferry_last_error());
}

/* ---- an image neither decoder can read, met in the transfer (issue 25, item 8) ---- */

/* The test set with dataset image 7 cut to its first half (its header intact, so the
 * workers' parser routes it to nvJPEG; its scan cut, so no decoder can finish it).
 * Sets c->images; returns the victim's file name. */
static const char *with_truncated(ferry_loader_config *c) {
  static char dir[256];
  return with_victim(c, cut_in_half, dir, sizeof dir);
}

/* Each sample's image row of a device batch on the host device, by dataset index:
 * recorded (want[index] NULL) or compared with what was recorded; counts in seen. */
static void by_dataset_index(ferry_device_batch *db, int *seen, uint8_t **want) {
  ferry_tensor *images = ferry_device_batch_images(db);
  cr_assert_not_null(images);
  size_t n = ferry_device_batch_size(db);
  cr_assert_eq(images->shape[0], (int64_t)n, "the images tensor has a row per sample");
  size_t row = n ? images->nbytes / n : 0;
  for (size_t i = 0; i < n; i++) {
    ferry_tensor *t = ferry_device_batch_sample_field(db, i, FERRY_FIELD_SAMPLE_INDEX);
    cr_assert_not_null(t);
    int64_t index = *(const int64_t *)t->data;
    const uint8_t *got = (const uint8_t *)images->data + i * row;
    seen[index]++;
    if (!want[index]) {
      want[index] = malloc(row);
      memcpy(want[index], got, row);
    } else {
      cr_expect_eq(memcmp(want[index], got, row), 0, "dataset index %lld: its row holds another image",
                   (long long)index);
    }
  }
}

/* One epoch through ferry_transfer onto `host`: every sample's image by dataset index. */
static void transfer_epoch(ferry_loader *l, ferry_device *host, int *seen, uint8_t **want) {
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_F32};
  ferry_batch *b;
  ferry_status st;
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
    ferry_device_batch *db;
    cr_assert_eq(ferry_transfer(host, NULL, b, &o, &db), FERRY_OK, "the consumer's transfer failed: %s",
                 ferry_last_error());
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    by_dataset_index(db, seen, want);
    ferry_device_batch_free(db);
    ferry_batch_release(b);
  }
  cr_assert_eq(st, FERRY_EEND, "%s", ferry_last_error());
}

/* Under skip, against the CPU loader over the same files (which skips the image at
 * layout): the same samples, each with the CPU path's image in its own row.
 * batch_size 1: the victim's device batch keeps no sample at all. */
static void left_out_under_skip(size_t batch_size) {
  ferry_loader_config c = fresh_config();
  with_truncated(&c);
  c.on_error = FERRY_ON_ERROR_SKIP;
  c.batch_size = batch_size;
  c.layout = FERRY_LAYOUT_U8_HWC;
  c.image.dct_scaling = 0; /* the fake decodes at full size, as nvJPEG does */
  ferry_device *host = small_gpu();
  uint8_t *cpu_images[LOADER_TEST_IMAGES] = {0};
  int cpu_seen[LOADER_TEST_IMAGES] = {0};
  ferry_loader *cpu = open_loader(&c);
  transfer_epoch(cpu, host, cpu_seen, cpu_images);
  ferry_loader_close(cpu);
  ferry_loader *l = open_fake_gpu(&c);
  for (int epoch = 0; epoch < 2; epoch++) {
    int seen[LOADER_TEST_IMAGES] = {0};
    transfer_epoch(l, host, seen, cpu_images);
    cr_expect_eq(seen[BOMB_INDEX], 0, "epoch %d: the unreadable image reached the consumer", epoch);
    for (int i = 0; i < LOADER_TEST_IMAGES; i++)
      cr_expect_eq(seen[i], cpu_seen[i], "epoch %d, image %d", epoch, i);
  }
  cr_expect_eq(cpu_seen[BOMB_INDEX], 0);
  for (int i = 0; i < LOADER_TEST_IMAGES; i++) {
    if (i != BOMB_INDEX) cr_expect_eq(cpu_seen[i], 1, "image %d", i);
    free(cpu_images[i]);
  }
  /* Once per epoch: in the transfer the first time, by the workers after. */
  cr_expect_geq(stats_of(l).samples_skipped, 2);
  ferry_loader_close(l);
  ferry_device_close(host);
  remove_victim_folder();
}

Test(gpu_loader, an_image_no_decoder_reads_is_left_out_of_its_device_batch_under_skip, .timeout = 120) {
  left_out_under_skip(4);
}

Test(gpu_loader, a_device_batch_of_only_an_unreadable_image_has_no_sample, .timeout = 120) {
  left_out_under_skip(1);
}

Test(gpu_loader, an_image_no_decoder_reads_fails_the_transfer_naming_it_under_fail, .timeout = 120) {
  ferry_loader_config c = fresh_config();
  const char *victim = with_truncated(&c);
  ferry_loader *l = open_fake_gpu(&c);
  ferry_device *host = small_gpu();
  ferry_transfer_options o = {.normalize = FERRY_NORMALIZE_F32};
  ferry_batch *b;
  ferry_status st = FERRY_OK;
  while (st == FERRY_OK && ferry_loader_next(l, &b) == FERRY_OK) {
    ferry_device_batch *db = NULL;
    st = ferry_transfer(host, NULL, b, &o, &db);
    if (st == FERRY_OK) ferry_device_batch_free(db);
    ferry_batch_release(b);
  }
  cr_assert_eq(st, FERRY_EFORMAT, "%d: %s", st, ferry_last_error());
  cr_expect(strstr(ferry_last_error(), victim) && strstr(ferry_last_error(), "dataset index 7"), "%s",
            ferry_last_error());
  ferry_loader_close(l);
  ferry_device_close(host);
  remove_victim_folder();
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

/* ---- the loader's own tables for image/'s reasons and routes (issue 37) ---- */

Test(gpu_loader, every_fallback_reason_has_its_own_stats_slot_the_one_loader_h_promises) {
  int used[FERRY_LOADER_FALLBACK_SLOTS] = {0};
  for (int r = 0; r < FERRY_FALLBACK_REASONS; r++) {
    size_t slot = ferry__loader_fallback_slot(r);
    cr_assert_lt(slot, FERRY_LOADER_FALLBACK_SLOTS, "reason %d has no slot", r);
    cr_expect_eq(slot, (size_t)r, "samples_cpu_fallback[FERRY_FALLBACK_X] counts X (the stats' meaning)");
    cr_expect_eq(used[slot]++, 0, "slot %zu counts two reasons", slot);
  }
  cr_expect_eq(ferry__loader_fallback_slot(-1), FERRY_LOADER_FALLBACK_SLOTS, "no reason: no slot");
  for (int route = FERRY_NVJPEG_ROUTE_GPU + 1; route < FERRY_NVJPEG_ROUTES; route++)
    cr_expect_lt(ferry__loader_fallback_slot(ferry__nvjpeg_route_reason((ferry__nvjpeg_route_kind)route)),
                 FERRY_LOADER_FALLBACK_SLOTS, "CPU route %d is counted", route);
  cr_expect_eq(ferry__nvjpeg_route_reason(FERRY_NVJPEG_ROUTE_GPU), -1);
}

Test(gpu_loader, a_route_goes_from_gpu_to_one_cpu_route_and_stays) {
  ferry_loader_config c = fresh_config();
  ferry_coco *coco;
  cr_assert_eq(ferry_coco_open(c.annotations, NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  ferry__gpu_routes *routes;
  cr_assert_eq(ferry__gpu_routes_open(coco, 0, &routes), FERRY_OK);
  cr_expect_eq(ferry__gpu_route(routes, 3), FERRY_NVJPEG_ROUTE_GPU, "every image starts on the GPU");
  cr_expect_eq(ferry__gpu_route_to_cpu(routes, 3, FERRY_NVJPEG_ROUTE_GPU), 0, "GPU is no CPU route");
  cr_expect_eq(ferry__gpu_route_to_cpu(routes, 3, FERRY_NVJPEG_ROUTE_ORIENTED), 1);
  cr_expect_eq(ferry__gpu_route_to_cpu(routes, 3, FERRY_NVJPEG_ROUTE_COMPONENTS), 0, "the first report wins");
  ferry__jpeg_stage_hooks hooks = ferry__gpu_routes_stage_hooks(routes);
  hooks.gpu_failed(hooks.ctx, 3);
  cr_expect_eq(ferry__gpu_route(routes, 3), FERRY_NVJPEG_ROUTE_ORIENTED, "kept through the stage's report too");
  hooks.gpu_failed(hooks.ctx, 4);
  cr_expect_eq(ferry__gpu_route(routes, 4), FERRY_NVJPEG_ROUTE_CORRUPT, "the loader routes what nvJPEG failed on");
  size_t n = ferry_coco_num_images(coco);
  cr_expect_eq(ferry__gpu_route_to_cpu(routes, n, FERRY_NVJPEG_ROUTE_CORRUPT), 0, "out of range");
  cr_expect_eq(ferry__gpu_route(routes, n), FERRY_NVJPEG_ROUTE_GPU);
  char name[64] = "";
  cr_expect_eq(hooks.unreadable(hooks.ctx, 4, name, sizeof name), 0, "fail policy: not skipped");
  cr_expect(strstr(name, "image id") != NULL, "%s", name);
  cr_expect_eq(ferry__gpu_routes_skipped(routes), 0);
  ferry__gpu_routes_close(routes);
  ferry_coco_close(coco);
}
