/* coco_parity: every target of every sample, packed direct path vs unpacked path.
 *
 *   coco_parity [--annotations FILE --images DIR] [--workers N] [--batch 8]
 *               [--resolution 312] [--layout f32|u8] [--remap-categories 0|1]
 *               [--shuffle 0|1] [--order auto|dataset|shards]
 *               [--processes N] [--json]
 *
 * Both loaders walk one epoch of the same set in the same order; each batch goes
 * through ferry_transfer (host device) and every per-sample tensor of one path is
 * compared with the other's, byte for byte (boxes also by IoU). The digest is the
 * SHA-256 of every delivered byte (field name, shape, data) in delivery order, so
 * runs with different worker counts, or in different processes, must agree.
 * Without --annotations/--images a 5,000-image synthetic set is generated once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"
#include "ferry/loader.h"
#include "ferry/transfer.h"
#include "repro/bench_util.h"
#include "repro/sha256.h"

typedef struct options {
  bench_common data;
  int processes, json;
} options;

typedef struct summary {
  double batches, images, instances, mask_bytes, mismatches, min_iou;
  uint8_t digest[32];
} summary;
enum { SUMMARY_VALUES = 6 + 4 }; /* the digest travels as four 8-byte values */

static double box_iou(const float *a, const float *b) {
  double iw = (a[2] < b[2] ? a[2] : b[2]) - (a[0] > b[0] ? a[0] : b[0]);
  double ih = (a[3] < b[3] ? a[3] : b[3]) - (a[1] > b[1] ? a[1] : b[1]);
  double inter = iw > 0 && ih > 0 ? iw * ih : 0;
  double ua = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return ua > 0 ? inter / ua : (memcmp(a, b, 16) == 0 ? 1.0 : 0.0);
}

static void digest_tensor(sha256 *h, const char *name, const ferry_tensor *t) {
  sha256_update(h, name, strlen(name) + 1);
  sha256_update(h, t->shape, sizeof t->shape);
  if (t->nbytes) sha256_update(h, t->data, t->nbytes);
}

static int same(const ferry_tensor *a, const ferry_tensor *b) {
  return a && b && a->dtype == b->dtype && a->ndim == b->ndim &&
         memcmp(a->shape, b->shape, sizeof a->shape) == 0 && a->nbytes == b->nbytes &&
         (a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

/* Compare one sample of the two device batches and fold the packed one into the digest. */
static void compare_sample(ferry_device_batch *p, ferry_device_batch *u, size_t i, sha256 *h, summary *s) {
  for (size_t f = 0; f < ferry_device_batch_num_fields(p); f++) {
    const char *name = ferry_device_batch_field_name(p, f);
    ferry_tensor *a = ferry_device_batch_sample_field(p, i, name);
    ferry_tensor *b = ferry_device_batch_sample_field(u, i, name);
    if (!same(a, b)) s->mismatches++;
    if (a) digest_tensor(h, name, a);
    if (!a || !b) continue;
    if (!strcmp(name, FERRY_FIELD_MASKS)) s->mask_bytes += (double)a->nbytes;
    if (!strcmp(name, FERRY_FIELD_BOXES)) {
      s->instances += (double)a->shape[0];
      for (int64_t k = 0; k < a->shape[0] && a->nbytes == b->nbytes; k++) {
        double iou = box_iou((float *)a->data + 4 * k, (float *)b->data + 4 * k);
        if (iou < s->min_iou) s->min_iou = iou;
      }
    }
  }
}

static int fail(const char *what) {
  fprintf(stderr, "coco_parity: %s: %s\n", what, ferry_last_error());
  return 1;
}

static ferry_loader *open_path(const options *o, ferry_device *dev, int packed) {
  ferry_loader_config c;
  bench_loader_config(&c, &o->data, dev);
  if (packed) c.progress = ferry_loader_progress_bar;
  ferry_loader *l = NULL;
  if (bench_loader_open(&c, packed, &l) != FERRY_OK) return NULL;
  return l;
}

static ferry_status transfer_next(ferry_loader *l, ferry_device *dev, ferry_device_batch **out) {
  ferry_batch *b;
  ferry_status st = ferry_loader_next(l, &b);
  if (st != FERRY_OK) return st;
  st = ferry_transfer(dev, NULL, b, NULL, out);
  ferry_batch_release(b);
  if (st == FERRY_OK) st = ferry_device_batch_wait(*out);
  return st;
}

/* One epoch through both paths. */
static int traverse(const options *o, summary *s) {
  ferry_device *dev;
  if (ferry_device_open("host", &dev) != FERRY_OK) return fail("device");
  ferry_loader *packed = open_path(o, dev, 1);
  ferry_loader *unpacked = packed ? open_path(o, dev, 0) : NULL;
  if (!unpacked) {  /* the message first: closing must not be what it reports */
    int failed = fail(packed ? "unpacked loader" : "packed loader");
    ferry_loader_close(packed);
    ferry_device_close(dev);
    return failed;
  }
  memset(s, 0, sizeof *s);
  s->min_iou = 1.0;
  sha256 h;
  sha256_init(&h);
  int rc = 0;
  for (;;) {
    ferry_device_batch *p = NULL, *u = NULL;
    ferry_status sp = transfer_next(packed, dev, &p), su = transfer_next(unpacked, dev, &u);
    if (sp == FERRY_EEND && su == FERRY_EEND) break;
    if (sp != FERRY_OK || su != FERRY_OK) {
      rc = fail(sp != FERRY_OK ? "packed path" : "unpacked path");
      ferry_device_batch_free(p);
      ferry_device_batch_free(u);
      break;
    }
    size_t n = ferry_device_batch_size(p);
    if (n != ferry_device_batch_size(u)) s->mismatches++;
    if (!same(ferry_device_batch_images(p), ferry_device_batch_images(u))) s->mismatches++;
    digest_tensor(&h, FERRY_FIELD_IMAGES, ferry_device_batch_images(p));
    for (size_t i = 0; i < n; i++) compare_sample(p, u, i, &h, s);
    s->batches++;
    s->images += (double)n;
    ferry_device_batch_free(p);
    ferry_device_batch_free(u);
  }
  sha256_final(&h, s->digest);
  ferry_loader_close(packed);
  ferry_loader_close(unpacked);
  ferry_device_close(dev);
  return rc;
}

static int traverse_child(void *arg, double *out) {
  summary s;
  if (traverse(arg, &s) != 0) return 1;
  memcpy(out, &s, sizeof(double) * 6);
  memcpy(out + 6, s.digest, 32);
  return 0;
}

static void print_summary(const summary *s, int json) {
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", s->digest[i]);
  if (json) {
    printf("{\"batches\": %.0f, \"images\": %.0f, \"instances\": %.0f, \"mask_bytes\": %.0f, "
           "\"mismatches\": %.0f, \"min_iou\": %.6f, \"digest\": \"%s\"}\n",
           s->batches, s->images, s->instances, s->mask_bytes, s->mismatches, s->min_iou, hex);
    return;
  }
  printf("batches %.0f, images %.0f, instances %.0f, mask bytes %.0f\n", s->batches, s->images,
         s->instances, s->mask_bytes);
  printf("mismatches %.0f, min IoU of matched boxes %.6f\n", s->mismatches, s->min_iou);
  printf("sha256 of every delivered byte: %s\n", hex);
}

static int usage(void) {
  fprintf(stderr, "usage: coco_parity [--annotations FILE --images DIR] [--workers N] [--batch N]\n"
                  "                   [--resolution R] [--layout f32|u8] [--remap-categories 0|1]\n"
                  "                   [--shuffle 0|1] [--order auto|dataset|shards]\n"
                  "                   [--processes N] [--json]\n");
  return 2;
}

int main(int argc, char **argv) {
  options o = {.processes = 1};
  bench_common_default(&o.data);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) { o.json = 1; continue; }
    if (i + 1 >= argc) return usage();
    const char *v = argv[++i];
    int common = bench_common_flag(&o.data, a, v);
    if (common < 0) return usage();
    if (common) continue;
    if (!strcmp(a, "--processes")) o.processes = atoi(v);
    else return usage();
  }
  if (o.data.workers < 1 || o.data.batch < 1 || o.processes < 1 || o.processes > 15) return usage();
  if (bench_dataset(argv[0], "build-parity-data", 5000, &o.data.annotations, &o.data.images) != 0) return 1;
  summary s;
  if (o.processes == 1) {
    if (traverse(&o, &s) != 0) return 1;
    print_summary(&s, o.json);
    return s.mismatches == 0 ? 0 : 1;
  }
  double values[15 * SUMMARY_VALUES];
  if (bench_in_processes(o.processes, traverse_child, &o, SUMMARY_VALUES, values) != 0) return 1;
  int identical = 1;
  for (int p = 1; p < o.processes; p++)
    identical &= memcmp(values, values + p * SUMMARY_VALUES, sizeof(double) * SUMMARY_VALUES) == 0;
  memcpy(&s, values, sizeof(double) * 6);
  memcpy(s.digest, values + 6, 32);
  print_summary(&s, o.json);
  if (!o.json) printf("%d processes: summaries %s\n", o.processes, identical ? "identical" : "DIFFER");
  return s.mismatches == 0 && identical ? 0 : 1;
}
