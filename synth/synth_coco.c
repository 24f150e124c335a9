/* synth/synth_coco.c - a synthetic, deterministic, COCO val2017-shaped data set.
 *
 *   synth_coco --out DIR [--images N] [--seed S] [--threads T] [--max-side M]
 *   synth_coco --out DIR --annotations-only [--images N] [--instances N] [--seed S]
 *
 * writes DIR/val2017/000000xxxxxx.jpg (quality 90, 4:2:0) and
 * DIR/annotations/instances_val2017.json. Benchmarks and parity checks need a full
 * 5,000-image set with val2017's shape (sizes, instances per image, polygons, crowd
 * RLE, category gaps, sparse ids) that any machine can make without downloading
 * COCO. Every image is drawn from random streams keyed by (seed, image index), so
 * the bytes do not depend on the thread count: same seed and options, identical files.
 *
 * --max-side M makes a tiny set (for benchmarks of the loader's per-batch overhead
 * rather than of decoding): each planned val2017 size is shrunk, aspect kept, to a
 * longer side of at most M before anything is drawn, so the scene, its polygons,
 * boxes, areas and crowd RLE are made, painted and encoded at the small size and
 * match the pixels exactly. Object radii keep their pixel floor (MIN_RADIUS in
 * synth_scene.c), so tiny images hold relatively larger objects than val2017. Without
 * the option the plan, hence every byte, is what it was before the option existed.
 *
 * --annotations-only writes only DIR/annotations/instances_train2017.json, a
 * train2017-sized file (synth/synth_annotations.c): --images 118287 --instances 860001.
 *
 * --no-images writes the val2017-shaped annotations alone, byte for byte those of the
 * same run with images: the scene (hence every polygon, box and crowd RLE) is drawn
 * from its own stream (SYNTH_STREAM_SCENE), never from the pixels' one, so skipping
 * the painting and the JPEGs changes nothing else. Mask tests need no pixels.
 */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>

#include "synth/synth_annotations.h"
#include "synth/synth_paint.h"
#include "synth/synth_rng.h"
#include "synth/synth_scene.h"

#define JPEG_QUALITY 90
#define MAX_IMAGES 1000000
#define MAX_THREADS 256
#define MIN_MAX_SIDE 16 /* shorter side >= 8 (aspects within 2:1): above 3 / 0.45, where
                           synth_scene.c's smallest object radius passes its largest */
#define MAX_MAX_SIDE 4096
#define CROWD_ID_BASE 900000000000ll /* COCO's crowd ids are also large, past 32 bits */

static const char usage_text[] =
  "usage: synth_coco --out DIR [--images N] [--seed S] [--threads T] [--max-side M]\n"
  "\n"
  "Writes a synthetic COCO val2017-shaped data set, identical byte for byte for the\n"
  "same seed and options (whatever the thread count):\n"
  "  DIR/val2017/000000xxxxxx.jpg            N JPEGs, quality 90, 4:2:0, COCO's sizes\n"
  "  DIR/annotations/instances_val2017.json  images, polygon and crowd-RLE instances,\n"
  "                                          COCO's 80 categories (ids 1-90 with gaps)\n"
  "\n"
  "options:\n"
  "  --out DIR      output folder, created with its parents if missing (required);\n"
  "                 files of an earlier run are overwritten, extra ones left alone\n"
  "  --images N     number of images, 1 to 1000000 (default 5000)\n"
  "  --seed S       unsigned 64-bit seed (default 1)\n"
  "  --threads T    worker threads, 1 to 256 (default 2); does not change the output\n"
  "  --max-side M   tiny images: each val2017 size is shrunk, aspect ratio kept, to a\n"
  "                 longer side of at most M pixels, 16 to 4096 (640x480 becomes 80x60\n"
  "                 with 80); the annotations are drawn at that size (default: none,\n"
  "                 val2017's sizes)\n"
  "  --no-images    the same annotations file, without painting or writing the JPEGs\n"
  "                 (mask tests need no pixels; the JSON is identical byte for byte)\n"
  "  --annotations-only  no images: a train2017-shaped instances file of polygons,\n"
  "                 DIR/annotations/instances_train2017.json (images default 118287)\n"
  "  --instances N  with --annotations-only: annotations (default 860001)\n"
  "  --help         this text\n"
  "\n"
  "Prints a summary: images, annotations, crowd, instances per image (mean, median,\n"
  "max), empty images, object sizes, JPEG bytes per pixel, wall and CPU seconds.\n"
  "Exit status 0 on success, 1 when the set cannot be written, 2 for bad arguments.\n";

typedef struct options {
  const char *out;
  uint64_t images, seed, threads;
  uint64_t max_side; /* 0: val2017's sizes */
  int annotations_only;
  int no_images;
  uint64_t instances;
  int images_given;
} options;

/* What the main thread decides for each image before the workers start. */
typedef struct image_plan {
  long long id;
  int w, h, license;
  char date[32];
} image_plan;

/* What a worker leaves for the main thread: the instances and the JPEG's size. */
typedef struct image_result {
  synth_instance *instances;
  int count;
  size_t jpeg_bytes;
} image_result;

typedef struct job {
  const options *opt;
  const image_plan *plans;
  image_result *results;
  char *image_dir;
  atomic_size_t next;
  atomic_int failed;
  pthread_mutex_t lock;
  char error[512]; /* the first failure's message */
} job;

/* ---- arguments --------------------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (!s || !*s || *s == '-' || *s == '+')
    return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* Returns 0 to run, 1 after --help, 2 on a bad argument (message printed). */
static int parse_args(int argc, char **argv, options *opt) {
  *opt = (options){.images = 5000, .seed = 1, .threads = 2, .instances = 860001};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage_text, stdout);
      return 1;
    }
    if (!strcmp(a, "--annotations-only")) {
      opt->annotations_only = 1;
      continue;
    }
    if (!strcmp(a, "--no-images")) {
      opt->no_images = 1;
      continue;
    }
    int known = !strcmp(a, "--out") || !strcmp(a, "--images") || !strcmp(a, "--seed") ||
                !strcmp(a, "--threads") || !strcmp(a, "--max-side") || !strcmp(a, "--instances");
    if (!known) {
      fprintf(stderr, "synth_coco: unknown argument '%s' (see --help)\n", a);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "synth_coco: %s needs a value (see --help)\n", a);
      return 2;
    }
    const char *v = argv[++i];
    int bad = 0;
    if (!strcmp(a, "--out"))
      opt->out = v;
    else if (!strcmp(a, "--images"))
      bad = parse_u64(v, 1, MAX_IMAGES, &opt->images), opt->images_given = 1;
    else if (!strcmp(a, "--instances"))
      bad = parse_u64(v, 0, 100 * (uint64_t)MAX_IMAGES, &opt->instances);
    else if (!strcmp(a, "--seed"))
      bad = parse_u64(v, 0, UINT64_MAX, &opt->seed);
    else if (!strcmp(a, "--threads"))
      bad = parse_u64(v, 1, MAX_THREADS, &opt->threads);
    else
      bad = parse_u64(v, MIN_MAX_SIDE, MAX_MAX_SIDE, &opt->max_side);
    if (bad) {
      fprintf(stderr, "synth_coco: %s: invalid value '%s' (see --help)\n", a, v);
      return 2;
    }
  }
  if (!opt->out || !*opt->out) {
    fprintf(stderr, "synth_coco: --out DIR is required (see --help)\n");
    return 2;
  }
  return 0;
}

/* ---- folders and files ------------------------------------------------------------- */

static char *join_path(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", a, b);
  return p;
}

static int make_one_dir(const char *path) {
  struct stat st;
  if (mkdir(path, 0777) == 0 || (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode)))
    return 0;
  if (errno == EEXIST)
    errno = ENOTDIR;
  return -1;
}

/* mkdir -p; prints why on failure. */
static int make_dirs(const char *path) {
  char *p = strdup(path);
  if (!p) {
    fprintf(stderr, "synth_coco: out of memory\n");
    return -1;
  }
  int st = 0;
  for (char *s = p + 1; *s && st == 0; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    st = make_one_dir(p);
    *s = '/';
  }
  if (st == 0)
    st = make_one_dir(p);
  if (st < 0)
    fprintf(stderr, "synth_coco: cannot create directory '%s': %s\n", p, strerror(errno));
  free(p);
  return st;
}

static int write_file(const char *path, const void *data, size_t size, char *err, size_t errlen) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    snprintf(err, errlen, "cannot create '%s': %s", path, strerror(errno));
    return -1;
  }
  size_t written = fwrite(data, 1, size, f);
  int saved = errno;
  if (fclose(f) != 0 || written != size) {
    snprintf(err, errlen, "cannot write '%s': %s", path, strerror(written != size ? saved : errno));
    return -1;
  }
  return 0;
}

/* ---- plan: ids and sizes ----------------------------------------------------------- */

typedef struct image_size {
  int w, h;
  double weight; /* percent of images, after val2017's common sizes */
} image_size;

static const image_size common_sizes[] = {
  {640, 480, 30}, {640, 427, 21}, {480, 640, 9}, {427, 640, 6}, {640, 426, 4},
  {640, 428, 3},  {640, 425, 3},  {640, 424, 1.5}, {640, 429, 1.5}, {500, 375, 2},
  {375, 500, 1.5}, {640, 640, 2}, {612, 612, 1.5}, {640, 360, 2}, {640, 512, 1},
  {424, 640, 1},  {426, 640, 1},
};
#define OTHER_SIZES_PERCENT 9.0 /* the long tail: any aspect, odd sizes included */

static void random_size(synth_rng *r, int *w, int *h) {
  double u = synth_range(r, 0.0, 100.0);
  for (size_t i = 0; i < sizeof common_sizes / sizeof common_sizes[0]; i++) {
    if (u < common_sizes[i].weight) {
      *w = common_sizes[i].w;
      *h = common_sizes[i].h;
      return;
    }
    u -= common_sizes[i].weight;
  }
  int longer = synth_uniform(r) < 0.85 ? 640 : 500;
  int shorter = (int)(longer * synth_range(r, 0.5, 1.0));
  int landscape = synth_uniform(r) < 0.7;
  *w = landscape ? longer : shorter;
  *h = landscape ? shorter : longer;
}

/* Shrinks w x h so that its longer side is max_side (0: no limit), rounding the
 * shorter side to the nearest pixel. Never enlarges: a limit past 640 leaves val2017's
 * sizes, and a tiny set's sizes are the full set's scaled, which the tests predict. */
static void fit_max_side(int *w, int *h, uint64_t max_side) {
  long long longer = *w > *h ? *w : *h, side = (long long)max_side;
  if (max_side == 0 || longer <= side)
    return;
  *w = (int)((*w * side + longer / 2) / longer); /* >= side / 2: aspects stay within 2:1 */
  *h = (int)((*h * side + longer / 2) / longer);
}

/* Sparse increasing ids like val2017's (139, 285, 632, ... up to ~580,000). */
static void make_plans(const options *opt, image_plan *plans) {
  long long id = 0;
  for (uint64_t i = 0; i < opt->images; i++) {
    synth_rng r;
    synth_rng_seed(&r, opt->seed, SYNTH_STREAM_PLAN, i);
    image_plan *p = &plans[i];
    id += 1 + synth_below(&r, 230);
    p->id = id;
    random_size(&r, &p->w, &p->h);
    fit_max_side(&p->w, &p->h, opt->max_side);
    p->license = 1 + synth_below(&r, 8);
    int field[5]; /* drawn in order: argument evaluation order is unspecified */
    static const int span[5] = {12, 28, 24, 60, 60}, first[5] = {1, 1, 0, 0, 0};
    for (int k = 0; k < 5; k++)
      field[k] = first[k] + synth_below(&r, span[k]);
    snprintf(p->date, sizeof p->date, "2013-%02d-%02d %02d:%02d:%02d", field[0], field[1],
             field[2], field[3], field[4]);
  }
}

/* ---- workers ----------------------------------------------------------------------- */

typedef struct worker {
  job *job;
  tjhandle tj;
  synth_canvas canvas;
  char error[512];
} worker;

static int encode_and_write(worker *wk, const image_plan *p, size_t *bytes) {
  unsigned char *jpeg = NULL;
  unsigned long size = 0;
  if (tjCompress2(wk->tj, wk->canvas.rgb, p->w, 0, p->h, TJPF_RGB, &jpeg, &size, TJSAMP_420,
                  JPEG_QUALITY, 0) != 0) {
    snprintf(wk->error, sizeof wk->error, "image %lld: JPEG compression failed: %s", p->id,
             tjGetErrorStr2(wk->tj));
    tjFree(jpeg);
    return -1;
  }
  char name[32];
  snprintf(name, sizeof name, "%012lld.jpg", p->id);
  char *path = join_path(wk->job->image_dir, name);
  int st = path ? write_file(path, jpeg, size, wk->error, sizeof wk->error) : -1;
  if (!path)
    snprintf(wk->error, sizeof wk->error, "out of memory");
  free(path);
  tjFree(jpeg);
  *bytes = size;
  return st;
}

static int make_image(worker *wk, size_t i) {
  const job *jb = wk->job;
  const image_plan *p = &jb->plans[i];
  synth_rng scene_rng, pixel_rng;
  synth_rng_seed(&scene_rng, jb->opt->seed, SYNTH_STREAM_SCENE, i);
  synth_rng_seed(&pixel_rng, jb->opt->seed, SYNTH_STREAM_PIXELS, i);
  synth_scene scene;
  if (synth_scene_generate(&scene, p->w, p->h, &scene_rng) < 0 ||
      synth_canvas_reserve(&wk->canvas, p->w, p->h) < 0) {
    synth_scene_free(&scene);
    snprintf(wk->error, sizeof wk->error, "image %lld: out of memory", p->id);
    return -1;
  }
  image_result *res = &jb->results[i];
  if (!jb->opt->no_images) {
    synth_paint_backdrop(&wk->canvas, &pixel_rng);
    synth_scene_paint(&scene, &wk->canvas, &pixel_rng);
    synth_paint_grain(&wk->canvas, &pixel_rng);
  }
  if (!jb->opt->no_images && encode_and_write(wk, p, &res->jpeg_bytes) < 0) {
    synth_scene_free(&scene);
    return -1;
  }
  if (scene.count == 0)
    return 0;
  res->instances = malloc((size_t)scene.count * sizeof *res->instances);
  if (!res->instances) {
    synth_scene_free(&scene);
    snprintf(wk->error, sizeof wk->error, "image %lld: out of memory", p->id);
    return -1;
  }
  memcpy(res->instances, scene.instances, (size_t)scene.count * sizeof *res->instances);
  res->count = scene.count; /* the result owns the instances' arrays now */
  return 0;
}

static void report_failure(job *jb, const char *message) {
  pthread_mutex_lock(&jb->lock);
  if (!atomic_exchange(&jb->failed, 1))
    snprintf(jb->error, sizeof jb->error, "%s", message);
  pthread_mutex_unlock(&jb->lock);
}

static void *worker_main(void *arg) {
  worker *wk = arg;
  job *jb = wk->job;
  for (;;) {
    size_t i = atomic_fetch_add(&jb->next, 1);
    if (i >= jb->opt->images || atomic_load(&jb->failed))
      break;
    if (make_image(wk, i) < 0) {
      report_failure(jb, wk->error);
      break;
    }
  }
  return NULL;
}

static int run_workers(job *jb) {
  size_t n = jb->opt->threads;
  worker *workers = calloc(n, sizeof *workers);
  pthread_t *tids = calloc(n, sizeof *tids);
  size_t started = 0;
  if (!workers || !tids)
    report_failure(jb, "out of memory");
  for (; started < n && !atomic_load(&jb->failed); started++) {
    workers[started].job = jb;
    workers[started].tj = tjInitCompress();
    if (!workers[started].tj) {
      report_failure(jb, "cannot initialise TurboJPEG");
      break;
    }
    int err = pthread_create(&tids[started], NULL, worker_main, &workers[started]);
    if (err) {
      tjDestroy(workers[started].tj);
      report_failure(jb, strerror(err));
      break;
    }
  }
  for (size_t t = 0; t < started; t++) {
    pthread_join(tids[t], NULL);
    tjDestroy(workers[t].tj);
    synth_canvas_free(&workers[t].canvas);
  }
  free(workers);
  free(tids);
  return atomic_load(&jb->failed) ? -1 : 0;
}

/* ---- annotations JSON -------------------------------------------------------------- */

static json_t *real_array(const double *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++) {
    if (json_array_append_new(a, json_real(v[i])) < 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return a;
}

static json_t *segmentation_json(const synth_instance *inst, const image_plan *p) {
  if (inst->iscrowd) {
    json_t *counts = json_array();
    for (size_t i = 0; counts && i < inst->count_len; i++) {
      if (json_array_append_new(counts, json_integer(inst->counts[i])) < 0) {
        json_decref(counts);
        counts = NULL;
      }
    }
    return json_pack("{s:[i,i],s:o}", "size", p->h, p->w, "counts", counts);
  }
  json_t *polygons = json_array();
  const double *xy = inst->xy;
  for (int k = 0; polygons && k < inst->parts; k++) {
    if (json_array_append_new(polygons, real_array(xy, 2 * (size_t)inst->part_vertices[k])) < 0) {
      json_decref(polygons);
      polygons = NULL;
    }
    xy += 2 * inst->part_vertices[k];
  }
  return polygons;
}

static json_t *annotation_json(const synth_instance *inst, const image_plan *p, long long id) {
  return json_pack("{s:o,s:f,s:i,s:I,s:o,s:i,s:I}", "segmentation", segmentation_json(inst, p),
                   "area", inst->area, "iscrowd", inst->iscrowd, "image_id", (json_int_t)p->id,
                   "bbox", real_array(inst->bbox, 4), "category_id", inst->category_id, "id",
                   (json_int_t)id);
}

static json_t *image_json(const image_plan *p) {
  char name[32];
  snprintf(name, sizeof name, "%012lld.jpg", p->id);
  return json_pack("{s:i,s:s,s:s,s:i,s:i,s:s,s:s,s:I}", "license", p->license, "file_name", name,
                   "coco_url", "", "height", p->h, "width", p->w, "date_captured", p->date,
                   "flickr_url", "", "id", (json_int_t)p->id);
}

static json_t *licenses_json(void) {
  static const char *const names[8][2] = {
    {"Attribution-NonCommercial-ShareAlike License", "http://creativecommons.org/licenses/by-nc-sa/2.0/"},
    {"Attribution-NonCommercial License", "http://creativecommons.org/licenses/by-nc/2.0/"},
    {"Attribution-NonCommercial-NoDerivs License", "http://creativecommons.org/licenses/by-nc-nd/2.0/"},
    {"Attribution License", "http://creativecommons.org/licenses/by/2.0/"},
    {"Attribution-ShareAlike License", "http://creativecommons.org/licenses/by-sa/2.0/"},
    {"Attribution-NoDerivs License", "http://creativecommons.org/licenses/by-nd/2.0/"},
    {"No known copyright restrictions", "http://flickr.com/commons/usage/"},
    {"United States Government Work", "http://www.usa.gov/copyright.shtml"},
  };
  json_t *a = json_array();
  for (int i = 0; a && i < 8; i++) {
    if (json_array_append_new(a, json_pack("{s:s,s:i,s:s}", "url", names[i][1], "id", i + 1,
                                           "name", names[i][0])) < 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return a;
}

static json_t *categories_json(void) {
  json_t *a = json_array();
  for (int i = 0; a && i < SYNTH_CATEGORY_COUNT; i++) {
    const synth_category *c = &synth_categories[i];
    if (json_array_append_new(a, json_pack("{s:s,s:i,s:s}", "supercategory", c->supercategory,
                                           "id", c->id, "name", c->name)) < 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return a;
}

/* Annotation ids: polygons count up from 1 in image order; crowds, like COCO's, get
 * ids past 32 bits, so readers that truncate ids are caught. */
static json_t *annotations_json(const job *jb) {
  json_t *a = json_array();
  long long next_id = 1;
  for (uint64_t i = 0; a && i < jb->opt->images; i++) {
    const image_result *res = &jb->results[i];
    for (int k = 0; a && k < res->count; k++, next_id++) {
      const synth_instance *inst = &res->instances[k];
      long long id = inst->iscrowd ? CROWD_ID_BASE + next_id : next_id;
      if (json_array_append_new(a, annotation_json(inst, &jb->plans[i], id)) < 0) {
        json_decref(a);
        a = NULL;
      }
    }
  }
  return a;
}

static json_t *images_json(const job *jb) {
  json_t *a = json_array();
  for (uint64_t i = 0; a && i < jb->opt->images; i++) {
    if (json_array_append_new(a, image_json(&jb->plans[i])) < 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return a;
}

static int write_annotations(const job *jb, const char *ann_dir) {
  char contributor[128], tiny[48] = "";
  if (jb->opt->max_side) /* said only when given, so the default file stays as it was */
    snprintf(tiny, sizeof tiny, ", longer side <= %llu", (unsigned long long)jb->opt->max_side);
  /* "repro/": where synth_coco lived when these bytes were fixed; same arguments, same bytes. */
  snprintf(contributor, sizeof contributor, "ferry repro/synth_coco, seed %llu, %llu images%s",
           (unsigned long long)jb->opt->seed, (unsigned long long)jb->opt->images, tiny);
  json_t *info = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s}", "description",
                           "Synthetic COCO val2017-shaped data set", "url", "", "version", "1.0",
                           "year", 2017, "contributor", contributor, "date_created", "2017/09/01");
  json_t *root = json_pack("{s:o,s:o,s:o,s:o,s:o}", "info", info, "licenses", licenses_json(),
                           "images", images_json(jb), "annotations", annotations_json(jb),
                           "categories", categories_json());
  if (!root) {
    fprintf(stderr, "synth_coco: out of memory building the annotations\n");
    return -1;
  }
  char *path = join_path(ann_dir, "instances_val2017.json");
  char *tmp = join_path(ann_dir, ".instances_val2017.json.tmp");
  int st = -1;
  if (!path || !tmp)
    fprintf(stderr, "synth_coco: out of memory\n");
  else if (json_dump_file(root, tmp, JSON_COMPACT | JSON_REAL_PRECISION(12)) != 0)
    fprintf(stderr, "synth_coco: cannot write '%s'\n", tmp);
  else if (rename(tmp, path) != 0) /* readers never see a half-written file */
    fprintf(stderr, "synth_coco: cannot rename '%s' to '%s': %s\n", tmp, path, strerror(errno));
  else
    st = 0;
  free(path);
  free(tmp);
  json_decref(root);
  return st;
}

/* ---- summary ----------------------------------------------------------------------- */

static int compare_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* CPU seconds beside wall seconds: on a busy machine the wall time says little. */
static void print_summary(const job *jb, double seconds, double cpu_seconds) {
  size_t n = jb->opt->images, annotations = 0, crowd = 0, empty = 0, bytes = 0, pixels = 0;
  size_t small = 0, medium = 0, large = 0;
  int *counts = malloc(n * sizeof *counts), most = 0;
  for (size_t i = 0; i < n; i++) {
    const image_result *res = &jb->results[i];
    annotations += (size_t)res->count;
    empty += res->count == 0;
    most = res->count > most ? res->count : most;
    bytes += res->jpeg_bytes;
    pixels += (size_t)jb->plans[i].w * jb->plans[i].h;
    if (counts)
      counts[i] = res->count;
    for (int k = 0; k < res->count; k++) {
      double area = res->instances[k].area;
      crowd += (size_t)res->instances[k].iscrowd;
      small += area < 32.0 * 32.0;
      medium += area >= 32.0 * 32.0 && area < 96.0 * 96.0;
      large += area >= 96.0 * 96.0;
    }
  }
  double median = 0.0;
  if (counts) {
    qsort(counts, n, sizeof *counts, compare_int);
    median = n % 2 ? counts[n / 2] : 0.5 * (counts[n / 2 - 1] + counts[n / 2]);
  }
  free(counts);
  double per = annotations ? 100.0 / (double)annotations : 0.0;
  printf("images:               %zu\n", n);
  printf("annotations:          %zu (crowd %zu = %.2f%%)\n", annotations, crowd, crowd * per);
  printf("instances per image:  mean %.2f, median %.1f, max %d\n", (double)annotations / n, median,
         most);
  printf("empty images:         %zu (%.2f%%)\n", empty, 100.0 * empty / n);
  printf("object sizes:         small %.1f%%, medium %.1f%%, large %.1f%%\n", small * per,
         medium * per, large * per);
  printf("JPEG bytes per pixel: %.3f (%.1f MB in all)\n", (double)bytes / (double)pixels,
         bytes / 1e6);
  printf("seconds:              %.2f wall, %.2f CPU (%llu threads)\n", seconds, cpu_seconds,
         (unsigned long long)jb->opt->threads);
}

static void free_results(image_result *results, size_t n) {
  for (size_t i = 0; results && i < n; i++) {
    for (int k = 0; k < results[i].count; k++) {
      free(results[i].instances[k].xy);
      free(results[i].instances[k].counts);
    }
    free(results[i].instances);
  }
  free(results);
}

/* ---- main -------------------------------------------------------------------------- */

static double clock_seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int generate(const options *opt) {
  double start = clock_seconds(CLOCK_MONOTONIC), cpu_start = clock_seconds(CLOCK_PROCESS_CPUTIME_ID);
  char *ann_dir = join_path(opt->out, "annotations");
  job jb = {.opt = opt, .image_dir = join_path(opt->out, "val2017")};
  atomic_init(&jb.next, 0);
  atomic_init(&jb.failed, 0);
  pthread_mutex_init(&jb.lock, NULL);
  image_plan *plans = calloc(opt->images, sizeof *plans);
  jb.plans = plans;
  jb.results = calloc(opt->images, sizeof *jb.results);
  int st = -1;
  if (!ann_dir || !jb.image_dir || !plans || !jb.results)
    fprintf(stderr, "synth_coco: out of memory\n");
  else if (make_dirs(opt->out) == 0 && make_dirs(ann_dir) == 0 &&
           (opt->no_images || make_dirs(jb.image_dir) == 0)) {
    make_plans(opt, plans);
    if (run_workers(&jb) < 0)
      fprintf(stderr, "synth_coco: %s\n", jb.error);
    else if (write_annotations(&jb, ann_dir) == 0)
      st = 0;
  }
  if (st == 0)
    print_summary(&jb, clock_seconds(CLOCK_MONOTONIC) - start,
                  clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start);
  free_results(jb.results, opt->images);
  free(plans);
  free(ann_dir);
  free(jb.image_dir);
  pthread_mutex_destroy(&jb.lock);
  return st;
}

int main(int argc, char **argv) {
  options opt;
  int parsed = parse_args(argc, argv, &opt);
  if (parsed == 1)
    return 0;
  if (parsed != 0)
    return 2;
  if (opt.annotations_only)
    return synth_annotations_only(opt.out, opt.images_given ? opt.images : 118287, opt.instances, opt.seed) == 0 ? 0 : 1;
  return generate(&opt) == 0 ? 0 : 1;
}
