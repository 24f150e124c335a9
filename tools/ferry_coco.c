/* tools/ferry_coco.c - `ferry-coco`: inspect, check and benchmark COCO annotation files.
 *
 *   ferry-coco stats FILE
 *   ferry-coco rle FILE
 *   ferry-coco validate FILE [--images DIR [--decode] [--threads N]]
 *   ferry-coco bench FILE [--size R] [--repeat N] [--keep-crowd]
 *   ferry-coco masks FILE [--size R] [--keep-crowd]
 *   ferry-coco index FILE.json [--out FILE.ferryidx]
 *   ferry-coco index --verify FILE.ferryidx [--source FILE.json]
 *   ferry-coco pack FILE.json --images DIR --out DIR [--split NAME] [--max-shard-bytes N]
 *                   [--category-ids remap|raw]
 *
 * FILE may be a COCO JSON file or its binary index everywhere.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "decode_images.h"
#include "ferry/coco.h"
#include "ferry/mask.h"
#include "tools/pack.h"

typedef struct command {
  const char *name;
  const char *usage;
  const char *help;
  int (*run)(int argc, char **argv);
} command;

static int fail(const char *what) {
  fprintf(stderr, "ferry-coco: %s%s%s\n", what ? what : "", what ? ": " : "", ferry_last_error());
  return 1;
}

/* ---- stats --------------------------------------------------------------------------- */

static const size_t hist_edges[] = {0, 1, 2, 5, 10, 20, 50, 100};
#define HIST_BINS (sizeof hist_edges / sizeof hist_edges[0])

static size_t hist_bin(size_t n) {
  size_t b = 0;
  while (b + 1 < HIST_BINS && n >= hist_edges[b + 1]) b++;
  return b;
}

static int cmd_stats(int argc, char **argv) {
  if (argc != 1) return -1;
  ferry_coco *coco;
  if (ferry_coco_open(argv[0], NULL, &coco) < 0) return fail(NULL);
  size_t n = ferry_coco_num_annotations(coco), crowd = 0, kinds[4] = {0}, parts = 0;
  for (size_t i = 0; i < n; i++) {
    ferry_coco_annotation a;
    ferry_coco_annotation_at(coco, i, &a);
    crowd += a.iscrowd != 0;
    kinds[a.segm]++;
    parts += a.num_polygons;
  }
  size_t hist[HIST_BINS] = {0};
  for (size_t i = 0; i < ferry_coco_num_images(coco); i++) {
    ferry_coco_image img;
    ferry_coco_image_at(coco, i, &img);
    hist[hist_bin(img.num_annotations)]++;
  }
  printf("file: %s%s%s\n", argv[0], ferry_coco_is_result_list(coco) ? " (result list)" : "",
         ferry_coco_is_index(coco) ? " (binary index)" : "");
  printf("images: %zu\nannotations: %zu\ncrowd: %zu\ncategories: %zu\nkeypoints per instance: %zu\n",
         ferry_coco_num_images(coco), n, crowd, ferry_coco_num_categories(coco), ferry_coco_num_keypoints(coco));
  printf("segmentations: polygons %zu (%zu parts), compressed RLE %zu, uncompressed RLE %zu, none %zu\n",
         kinds[FERRY_SEGM_POLYGONS], parts, kinds[FERRY_SEGM_RLE], kinds[FERRY_SEGM_RLE_COUNTS], kinds[FERRY_SEGM_NONE]);
  printf("instances per image:\n");
  for (size_t b = 0; b < HIST_BINS; b++) {
    if (b + 1 < HIST_BINS && hist_edges[b + 1] - hist_edges[b] == 1) printf("  %zu: %zu\n", hist_edges[b], hist[b]);
    else if (b + 1 < HIST_BINS) printf("  %zu-%zu: %zu\n", hist_edges[b], hist_edges[b + 1] - 1, hist[b]);
    else printf("  %zu+: %zu\n", hist_edges[b], hist[b]);
  }
  ferry_coco_close(coco);
  return 0;
}

/* ---- rle ----------------------------------------------------------------------------- */

/* JSON string body: the RLE alphabet '0'..'o' needs only the backslash escaped. */
static void print_json_counts(const char *s) {
  for (; *s; s++) {
    if (*s == '\\') fputs("\\\\", stdout);
    else putchar(*s);
  }
}

static int print_rle_line(const ferry_coco_annotation *a, const ferry_rle *rle) {
  char *s;
  if (ferry_rle_to_string(rle, &s) < 0) return -1;
  double bb[4];
  ferry_rle_to_bbox(rle, bb);
  printf("{\"index\": %zu, \"id\": ", a->json_index);
  if (a->has_id) printf("%lld", (long long)a->id);
  else printf("null");
  printf(", \"size\": [%u, %u], \"counts\": \"", rle->h, rle->w);
  print_json_counts(s);
  printf("\", \"area\": %llu, \"bbox\": [%.1f, %.1f, %.1f, %.1f]}\n", (unsigned long long)ferry_rle_area(rle),
         bb[0], bb[1], bb[2], bb[3]);
  ferry_rle_free_string(s);
  return 0;
}

static int cmd_rle(int argc, char **argv) {
  if (argc != 1) return -1;
  ferry_coco *coco;
  if (ferry_coco_open(argv[0], NULL, &coco) < 0) return fail(NULL);
  int rc = 0;
  for (size_t i = 0; i < ferry_coco_num_annotations(coco) && rc == 0; i++) {
    ferry_coco_annotation a;
    ferry_coco_annotation_at(coco, i, &a);
    if (a.segm == FERRY_SEGM_NONE) continue;
    ferry_rle rle = {0};
    if (ferry_coco_annotation_rle(coco, i, &rle) < 0 || print_rle_line(&a, &rle) < 0) rc = fail(NULL);
    ferry_rle_free(&rle);
  }
  ferry_coco_close(coco);
  return rc;
}

/* ---- validate ------------------------------------------------------------------------ */

static void report_problem(void *user, const char *message) {
  (*(size_t *)user)++;
  printf("%s\n", message);
}

static unsigned be16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }
static unsigned long be32(const unsigned char *p) { return (unsigned long)be16(p) << 16 | be16(p + 2); }

/* Width and height from a PNG IHDR or a JPEG SOF header; 0 when neither is found. */
static int image_header_size(FILE *f, unsigned long *w, unsigned long *h) {
  unsigned char b[24];
  if (fread(b, 1, 24, f) != 24) return 0;
  if (!memcmp(b, "\x89PNG\r\n\x1a\n", 8) && !memcmp(b + 12, "IHDR", 4)) {
    *w = be32(b + 16);
    *h = be32(b + 20);
    return 1;
  }
  if (b[0] != 0xFF || b[1] != 0xD8) return 0;
  long pos = 2;
  for (;;) {
    unsigned char seg[9];
    if (fseek(f, pos, SEEK_SET) != 0 || fread(seg, 1, 4, f) != 4 || seg[0] != 0xFF) return 0;
    unsigned marker = seg[1], len = be16(seg + 2);
    if (marker == 0xFF) { pos++; continue; }  /* fill byte */
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      if (fread(seg + 4, 1, 5, f) != 5) return 0;
      *h = be16(seg + 5);
      *w = be16(seg + 7);
      return 1;
    }
    if (len < 2) return 0;
    pos += 2 + len;
  }
}

/* 1 (and the problem printed) when the file's size is not the one the JSON gives. */
static size_t size_differs(const char *json, size_t i, const ferry_coco_image *img, const char *dir,
                           unsigned long w, unsigned long h) {
  if ((long long)w == img->width && (long long)h == img->height) return 0;
  printf("%s: images[%zu]: %s/%s is %lux%lu (width x height), the JSON says %lldx%lld\n", json, i, dir,
         img->file_name, w, h, (long long)img->width, (long long)img->height);
  return 1;
}

static size_t check_image_files(const ferry_coco *coco, const char *json, const char *dir) {
  size_t problems = 0;
  for (size_t i = 0; i < ferry_coco_num_images(coco); i++) {
    ferry_coco_image img;
    ferry_coco_image_at(coco, i, &img);
    size_t n = strlen(dir) + strlen(img.file_name) + 2;
    char *path = malloc(n);
    if (!path) return problems + 1;
    snprintf(path, n, "%s/%s", dir, img.file_name);
    FILE *f = fopen(path, "rb");
    unsigned long w = 0, h = 0;
    if (!f) {
      printf("%s: images[%zu].file_name: %s: cannot open\n", json, i, path);
      problems++;
    } else if (!image_header_size(f, &w, &h)) {
      printf("%s: images[%zu].file_name: %s: no JPEG or PNG header with a size\n", json, i, path);
      problems++;
    } else {
      problems += size_differs(json, i, &img, dir, w, h);
    }
    if (f) fclose(f);
    free(path);
  }
  return problems;
}

/* --decode: every image decoded in full on `threads` threads; the problems are printed
 * in image order whatever the thread count. */
static size_t decode_image_files(const ferry_coco *coco, const char *json, const char *dir, size_t threads) {
  size_t n = ferry_coco_num_images(coco), problems = 0;
  decoded_image *results = calloc(n ? n : 1, sizeof *results);
  if (!results || decode_images(coco, dir, threads, results) != 0) {
    free(results);
    printf("%s: out of memory decoding the images\n", json);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    ferry_coco_image img;
    ferry_coco_image_at(coco, i, &img);
    if (results[i].error) {
      printf("%s: images[%zu] (id %lld): %s\n", json, i, (long long)img.id, results[i].error);
      problems++;
    } else {
      problems += size_differs(json, i, &img, dir, (unsigned long)results[i].width,
                               (unsigned long)results[i].height);
    }
  }
  decoded_images_free(results, n);
  free(results);
  return problems;
}

/* A few threads: decoding is the work, one per core up to 8. */
static size_t default_decode_threads(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores < 1 ? 1 : cores > 8 ? 8 : (size_t)cores;
}

static int cmd_validate(int argc, char **argv) {
  const char *images = NULL;
  int decode = 0;
  size_t threads = default_decode_threads();
  if (argc < 1) return -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--images") && i + 1 < argc) images = argv[++i];
    else if (!strcmp(argv[i], "--decode")) decode = 1;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      char *end;
      long n = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || n < 1 || n > 256) return -1;
      threads = (size_t)n;
    } else {
      return -1;
    }
  }
  if (decode && !images) return -1;
  size_t problems = 0;
  ferry_coco_options o;
  ferry_coco_options_default(&o);
  o.on_problem = report_problem;
  o.problem_user = &problems;
  ferry_coco *coco;
  if (ferry_coco_open(argv[0], &o, &coco) < 0) {
    printf("%s\n", ferry_last_error());
    return 1;
  }
  if (ferry_coco_is_index(coco) && ferry_coco_index_verify(argv[0]) < 0) report_problem(&problems, ferry_last_error());
  for (size_t i = 0; i < ferry_coco_num_annotations(coco); i++) {
    ferry_coco_annotation a;
    ferry_coco_annotation_at(coco, i, &a);
    ferry_rle rle = {0};
    if (a.segm != FERRY_SEGM_NONE && ferry_coco_annotation_rle(coco, i, &rle) < 0) report_problem(&problems, ferry_last_error());
    ferry_rle_free(&rle);
  }
  if (images) problems += decode ? decode_image_files(coco, argv[0], images, threads)
                                 : check_image_files(coco, argv[0], images);
  printf("%s: %zu images, %zu annotations, %zu problem%s\n", argv[0], ferry_coco_num_images(coco),
         ferry_coco_num_annotations(coco), problems, problems == 1 ? "" : "s");
  ferry_coco_close(coco);
  return problems ? 1 : 0;
}

/* ---- bench --------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Print one resized mask as `IMAGE INSTANCE COUNTS` (COUNTS: the R x R mask's
 * compressed RLE, pycocotools' string); -1 when out of memory. */
static int print_mask_line(size_t image, int64_t k, const uint8_t *mask, uint32_t h, uint32_t w) {
  ferry_rle rle = {0};
  char *s = NULL;
  if (ferry_rle_encode(mask, h, w, &rle) < 0 || ferry_rle_to_string(&rle, &s) < 0) {
    ferry_rle_free(&rle);
    return -1;
  }
  printf("%zu %lld %s\n", image, (long long)k, s);
  ferry_rle_free_string(s);
  ferry_rle_free(&rle);
  return 0;
}

/* One pass: every image's masks at the target options' size; returns the number of
 * masks or -1. With `print`, each mask is printed (print_mask_line) as it is made. */
static long long masks_pass(const ferry_coco *coco, const ferry_target_options *t, uint8_t **buf, size_t *cap,
                            int print) {
  long long total = 0;
  size_t plane = (size_t)t->mask_height * t->mask_width;
  for (size_t i = 0; i < ferry_coco_num_images(coco); i++) {
    int64_t n;
    if (ferry_coco_target_count(coco, i, t, &n) < 0) return -1;
    if ((size_t)n * plane > *cap) {
      *cap = (size_t)n * plane;
      free(*buf);
      if (!(*buf = malloc(*cap))) return -1;
    }
    ferry_coco_target target = {.masks = *buf};
    if (ferry_coco_target_write(coco, i, t, &target) < 0) return -1;
    for (int64_t k = 0; print && k < n; k++)
      if (print_mask_line(i, k, *buf + (size_t)k * plane, (uint32_t)t->mask_height, (uint32_t)t->mask_width) < 0)
        return -1;
    total += n;
  }
  return total;
}

static int cmd_bench(int argc, char **argv) {
  if (argc < 1) return -1;
  long size = 312, repeat = 3;
  ferry_target_options t;
  ferry_target_options_default(&t);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--keep-crowd")) t.keep_crowd = 1;
    else return -1;
  }
  if (size <= 0 || repeat <= 0) return -1;
  t.mask_height = t.mask_width = size;
  double t0 = now_s();
  ferry_coco *coco;
  if (ferry_coco_open(argv[0], NULL, &coco) < 0) return fail(NULL);
  double open_s = now_s() - t0, best = 1e30;
  uint8_t *buf = NULL;
  size_t cap = 0;
  long long masks = 0;
  for (long r = 0; r < repeat; r++) {
    double s = now_s();
    if ((masks = masks_pass(coco, &t, &buf, &cap, 0)) < 0) {
      free(buf);
      ferry_coco_close(coco);
      return fail("bench");
    }
    double e = now_s() - s;
    if (e < best) best = e;
  }
  printf("ferry: %zu images, %lld masks at %ldx%ld: best of %ld passes %.3f s (%.0f masks/s, 1 thread); open %.3f s\n",
         ferry_coco_num_images(coco), masks, size, size, repeat, best, masks / best, open_s);
  free(buf);
  ferry_coco_close(coco);
  return 0;
}

/* ---- masks --------------------------------------------------------------------------- */

static int cmd_masks(int argc, char **argv) {
  if (argc < 1) return -1;
  long size = 312;
  ferry_target_options t;
  ferry_target_options_default(&t);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--keep-crowd")) t.keep_crowd = 1;
    else return -1;
  }
  if (size <= 0 || size > 65535) return -1;
  t.mask_height = t.mask_width = size;
  ferry_coco *coco;
  if (ferry_coco_open(argv[0], NULL, &coco) < 0) return fail(NULL);
  uint8_t *buf = NULL;
  size_t cap = 0;
  int rc = masks_pass(coco, &t, &buf, &cap, 1) < 0 ? fail("masks") : 0;
  free(buf);
  ferry_coco_close(coco);
  return rc;
}

/* ---- index --------------------------------------------------------------------------- */

static int index_verify(int argc, char **argv) {
  const char *source = NULL;
  if (argc == 3 && !strcmp(argv[1], "--source")) source = argv[2];
  else if (argc != 1) return -1;
  if (ferry_coco_index_verify(argv[0]) < 0) return fail(NULL);
  if (source && ferry_coco_index_check(argv[0], source) < 0) return fail(NULL);
  printf("%s: index intact%s%s\n", argv[0], source ? ", fresh for " : "", source ? source : "");
  return 0;
}

static int cmd_index(int argc, char **argv) {
  if (argc >= 1 && !strcmp(argv[0], "--verify")) return index_verify(argc - 1, argv + 1);
  const char *out = NULL;
  if (argc == 3 && !strcmp(argv[1], "--out")) out = argv[2];
  else if (argc != 1) return -1;
  double t0 = now_s();
  if (ferry_coco_index_build(argv[0], out) < 0) return fail(NULL);
  printf("%s: indexed%s%s in %.2f s\n", argv[0], out ? " to " : "", out ? out : "", now_s() - t0);
  return 0;
}

/* ---- main ---------------------------------------------------------------------------- */

static const command commands[] = {
    {"stats", "stats FILE",
     "Counts: images, annotations, crowd, categories, instances per image (histogram), and\n"
     "segmentations by kind (polygons, compressed RLE, uncompressed RLE).",
     cmd_stats},
    {"rle", "rle FILE",
     "One JSON line per annotation with a segmentation, in file order:\n"
     "{\"index\", \"id\", \"size\": [h, w], \"counts\", \"area\", \"bbox\"} (pycocotools' masks).\n"
     "Needs no image files; a polygon whose image has no height/width is an error.",
     cmd_rle},
    {"validate", "validate FILE [--images DIR [--decode] [--threads N]]",
     "Every problem with its JSON path, every segmentation decoded; with --images, also that\n"
     "each image file exists under DIR and its JPEG/PNG header size matches. --decode decodes\n"
     "every image in full instead (on N threads, default one per core up to 8), as the\n"
     "loader would: a file cut short or corrupt past its header is reported, naming it.\n"
     "Exit 1 on problems.",
     cmd_validate},
    {"bench", "bench FILE [--size R] [--repeat N] [--keep-crowd]",
     "Time producing every image's instance masks at RxR (default 312) by nearest, one thread,\n"
     "best of N passes (default 3). tests/coco/bench_masks.py compares it with pycocotools.",
     cmd_bench},
    {"masks", "masks FILE [--size R] [--keep-crowd]",
     "Every image's kept instance masks at RxR (default 312), as the loader makes them, one\n"
     "line each: IMAGE INSTANCE COUNTS, with COUNTS the RxR mask's compressed RLE\n"
     "(pycocotools' string). tests/coco/check_masks_resized.py compares them with\n"
     "pycocotools' full masks resized by torch's nearest rule.",
     cmd_masks},
    {"index", "index FILE.json [--out FILE.ferryidx] | index --verify FILE.ferryidx [--source FILE.json]",
     "Parse FILE.json once and write its binary index (default FILE.json.ferryidx, where\n"
     "ferry_coco_open looks for it), atomically. Every command, the loader and coco_parity\n"
     "accept the index in place of the JSON and open it in milliseconds.\n"
     "--verify checks an index completely (every checksum); with --source, also that it\n"
     "was built from FILE.json as that file is now.",
     cmd_index},
    {"pack", "pack FILE.json --images DIR --out DIR [--split NAME] [--max-shard-bytes N] [--category-ids remap|raw]",
     "Write the split as WebDataset tar shards and RF-DETR's shard index (OUT/SPLIT-index.json),\n"
     "the format of RF-DETR's pack_coco_to_shards: per image, its file byte for byte and a .json\n"
     "sidecar (image_id, file_name, annotations). Shards close near --max-shard-bytes (100 MiB);\n"
     "--split names them (train); --category-ids (remap) is the labels' policy the index states.\n"
     "A loader given the index as its annotations reads the shards (docs/shards.md).",
     ferry_coco_pack},
};
#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
  fprintf(out, "usage: ferry-coco COMMAND [ARGS] (COMMAND --help for details)\n");
  for (size_t i = 0; i < NUM_COMMANDS; i++) fprintf(out, "  ferry-coco %s\n", commands[i].usage);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < NUM_COMMANDS; i++) {
    const command *c = &commands[i];
    if (strcmp(argv[1], c->name)) continue;
    if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
      printf("usage: ferry-coco %s\n\n%s\n", c->usage, c->help);
      return 0;
    }
    int rc = c->run(argc - 2, argv + 2);
    if (rc < 0) {
      fprintf(stderr, "usage: ferry-coco %s\n", c->usage);
      return 2;
    }
    return rc;
  }
  fprintf(stderr, "ferry-coco: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
