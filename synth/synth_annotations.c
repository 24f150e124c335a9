/* synth/synth_annotations.c - synth_coco --annotations-only: the shape of COCO
 * train2017's instances file (118,287 images, 860,001 annotations, ~450 MB) without
 * painting a pixel, for the binary index and JSON-open benchmarks (docs/benchmarks.md).
 *
 * Every annotation is one polygon of 8 to 48 vertices (two decimals, as COCO writes
 * them) inside its image, with its bbox, shoelace area and one of the 80 categories.
 * The text is formatted by hand and streamed (no JSON tree), so the file takes
 * seconds and little memory to make. Each image draws from its own random stream
 * keyed by (seed, image index): same arguments, same bytes.
 */
#include "synth/synth_annotations.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "synth/synth_rng.h"
#include "synth/synth_scene.h"

enum { SYNTH_STREAM_ANNOTATIONS = 4, MIN_VERTICES = 8, MAX_VERTICES = 48 };

typedef struct writer {
  FILE *f;
  synth_rng rng;
} writer;

/* x in hundredths, as "123.45". */
static void put_hundredths(FILE *f, uint32_t x) { fprintf(f, "%u.%02u", x / 100, x % 100); }

static uint32_t draw(synth_rng *r, uint32_t lo, uint32_t hi) {
  return lo + (uint32_t)(synth_next(r) % (uint64_t)(hi - lo + 1));
}

static void write_image(FILE *f, uint64_t i, uint32_t w, uint32_t h) {
  fprintf(f, "%s{\"license\":%u,\"file_name\":\"%012llu.jpg\",\"height\":%u,\"width\":%u,\"id\":%llu}",
          i ? "," : "", (unsigned)(i % 8) + 1, (unsigned long long)(i + 1), h, w, (unsigned long long)(i + 1));
}

/* One polygon annotation inside a w x h image (coordinates in hundredths of a pixel). */
static void write_annotation(writer *wr, uint64_t id, uint64_t image_id, uint32_t w, uint32_t h, int first) {
  synth_rng *r = &wr->rng;
  uint32_t n = draw(r, MIN_VERTICES, MAX_VERTICES), xs[MAX_VERTICES], ys[MAX_VERTICES];
  uint32_t cx = draw(r, 0, w * 100), cy = draw(r, 0, h * 100), rx = draw(r, 200, w * 25), ry = draw(r, 200, h * 25);
  uint32_t x0 = UINT32_MAX, y0 = UINT32_MAX, x1 = 0, y1 = 0;
  for (uint32_t k = 0; k < n; k++) {
    /* a star-shaped outline: vertex k at its angle, a random radius, clipped to the image */
    double t = 6.283185307179586 * k / n, s = synth_range(r, 0.5, 1.0);
    double x = cx + s * rx * cos(t), y = cy + s * ry * sin(t);
    xs[k] = x < 0 ? 0 : x > w * 100.0 ? w * 100 : (uint32_t)x;
    ys[k] = y < 0 ? 0 : y > h * 100.0 ? h * 100 : (uint32_t)y;
    x0 = xs[k] < x0 ? xs[k] : x0, x1 = xs[k] > x1 ? xs[k] : x1;
    y0 = ys[k] < y0 ? ys[k] : y0, y1 = ys[k] > y1 ? ys[k] : y1;
  }
  double area2 = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t j = (k + 1) % n;
    area2 += (double)xs[k] * ys[j] - (double)xs[j] * ys[k];
  }
  FILE *f = wr->f;
  fputs(first ? "{\"segmentation\":[[" : ",{\"segmentation\":[[", f);
  for (uint32_t k = 0; k < n; k++) {
    if (k) fputc(',', f);
    put_hundredths(f, xs[k]);
    fputc(',', f);
    put_hundredths(f, ys[k]);
  }
  fprintf(f, "]],\"area\":%.4f,\"iscrowd\":0,\"image_id\":%llu,\"bbox\":[", (area2 < 0 ? -area2 : area2) / 2e4,
          (unsigned long long)image_id);
  put_hundredths(f, x0);
  fputc(',', f);
  put_hundredths(f, y0);
  fputc(',', f);
  put_hundredths(f, x1 - x0);
  fputc(',', f);
  put_hundredths(f, y1 - y0);
  fprintf(f, "],\"category_id\":%d,\"id\":%llu}", synth_categories[synth_next(r) % SYNTH_CATEGORY_COUNT].id,
          (unsigned long long)id);
}

/* The image's size from its own stream (COCO's are mostly 640 on the longer side). */
static void image_size(uint64_t seed, uint64_t i, uint32_t *w, uint32_t *h) {
  synth_rng r;
  synth_rng_seed(&r, seed, SYNTH_STREAM_ANNOTATIONS, i);
  *w = 640;
  *h = draw(&r, 320, 640);
  if (synth_next(&r) & 1) {
    uint32_t t = *w;
    *w = *h;
    *h = t;
  }
}

static void write_body(FILE *f, uint64_t images, uint64_t instances, uint64_t seed) {
  /* "repro/": where synth_coco lived when these bytes were fixed; same arguments, same bytes. */
  fputs("{\"info\":{\"description\":\"Synthetic COCO train2017-shaped annotations\",\"contributor\":\"ferry "
        "repro/synth_coco --annotations-only\"},\"licenses\":[],\"images\":[", f);
  for (uint64_t i = 0; i < images; i++) {
    uint32_t w, h;
    image_size(seed, i, &w, &h);
    write_image(f, i, w, h);
  }
  fputs("],\"annotations\":[", f);
  writer wr = {.f = f};
  uint64_t id = 1;
  for (uint64_t i = 0; i < images; i++) {
    uint32_t w, h;
    image_size(seed, i, &w, &h);
    synth_rng_seed(&wr.rng, seed, SYNTH_STREAM_ANNOTATIONS, images + i);
    uint64_t count = (i + 1) * instances / images - i * instances / images;  /* spread evenly */
    for (uint64_t k = 0; k < count; k++, id++) write_annotation(&wr, id, i + 1, w, h, id == 1);
  }
  fputs("],\"categories\":[", f);
  for (int c = 0; c < SYNTH_CATEGORY_COUNT; c++)
    fprintf(f, "%s{\"supercategory\":\"%s\",\"id\":%d,\"name\":\"%s\"}", c ? "," : "",
            synth_categories[c].supercategory, synth_categories[c].id, synth_categories[c].name);
  fputs("]}\n", f);
}

int synth_annotations_only(const char *dir, uint64_t images, uint64_t instances, uint64_t seed) {
  size_t n = strlen(dir) + 64;
  char *ann_dir = malloc(n), *path = malloc(n), *tmp = malloc(n);
  int st = -1;
  if (!ann_dir || !path || !tmp) {
    fprintf(stderr, "synth_coco: out of memory\n");
    goto done;
  }
  snprintf(ann_dir, n, "%s/annotations", dir);
  snprintf(path, n, "%s/instances_train2017.json", ann_dir);
  snprintf(tmp, n, "%s/.instances_train2017.json.tmp", ann_dir);
  if ((mkdir(dir, 0755) != 0 && errno != EEXIST) || (mkdir(ann_dir, 0755) != 0 && errno != EEXIST)) {
    fprintf(stderr, "synth_coco: cannot create '%s': %s\n", ann_dir, strerror(errno));
    goto done;
  }
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    fprintf(stderr, "synth_coco: cannot write '%s': %s\n", tmp, strerror(errno));
    goto done;
  }
  static char buf[1 << 20];
  setvbuf(f, buf, _IOFBF, sizeof buf);
  write_body(f, images, instances, seed);
  if (ferror(f) | (fclose(f) != 0))
    fprintf(stderr, "synth_coco: write error on '%s'\n", tmp);
  else if (rename(tmp, path) != 0)
    fprintf(stderr, "synth_coco: cannot rename '%s' to '%s': %s\n", tmp, path, strerror(errno));
  else
    st = 0;
  if (st == 0) printf("synth_coco: %s: %llu images, %llu annotations\n", path, (unsigned long long)images,
                      (unsigned long long)instances);
done:
  free(ann_dir);
  free(path);
  free(tmp);
  return st;
}
