/* tests/transfer/fixtures.h - devices, realistic packed batches and read-back helpers
 * shared by the transfer tests. Every test runs on the host backend and, when a GPU
 * answers, on CUDA; without one the CUDA variant is skipped and says why (or fails,
 * when FERRY_REQUIRE_CUDA=1, as repro/gpu_check.sh sets it: tests/common/require_cuda.h). */
#ifndef FERRY_TESTS_TRANSFER_FIXTURES_H
#define FERRY_TESTS_TRANSFER_FIXTURES_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/require_cuda.h"
#include "ferry/advanced.h"
#include "ferry/ferry.h"
#include "ferry/transfer.h"
#include "lib/transfer/packed_copy.h"

/* One Criterion test per backend for a body taking the device name. */
#define ON_EVERY_BACKEND(suite, name, body_fn)      \
  Test(suite, name##_host) { body_fn("host"); }     \
  Test(suite, name##_cuda) { body_fn("cuda"); }

/* A small deterministic generator (splitmix64). */
static inline uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The detection fields a COCO loader produces, with small images and masks. */
enum { IMG_H = 24, IMG_W = 32, MASK_H = 24, MASK_W = 32, NFIELDS = 7 };

static inline void detection_fields(ferry_field_spec *f) {
  f[0] = (ferry_field_spec){"images", FERRY_U8, FERRY_FIELD_PER_SAMPLE, 3, {IMG_H, IMG_W, 3}};
  f[1] = (ferry_field_spec){"boxes", FERRY_F32, FERRY_FIELD_ROWS, 1, {4}};
  f[2] = (ferry_field_spec){"masks", FERRY_U8, FERRY_FIELD_ROWS, 2, {MASK_H, MASK_W}};
  f[3] = (ferry_field_spec){"labels", FERRY_I64, FERRY_FIELD_ROWS, 0, {0}};
  f[4] = (ferry_field_spec){"area", FERRY_F32, FERRY_FIELD_ROWS, 0, {0}};
  f[5] = (ferry_field_spec){"iscrowd", FERRY_BOOL, FERRY_FIELD_ROWS, 0, {0}};
  f[6] = (ferry_field_spec){"image_id", FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, {1}};
}

/* Field 0 is the images: the role by which the transfer finds its batch tensor (lib/
 * knows no field by name; the loader marks its own batches the same way). */
static inline void mark_images(ferry_batch *b) {
  cr_assert_eq(ferry_batch_set_role(b, 0, FERRY_ROLE_IMAGES), FERRY_OK, "%s", ferry_last_error());
}

/* rows[f * batch + i] for every field: instance counts for ROWS fields. */
static inline void detection_rows(size_t batch, const int64_t *instances, int64_t *rows) {
  for (size_t f = 0; f < NFIELDS; f++)
    for (size_t i = 0; i < batch; i++) rows[f * batch + i] = instances[i];
}

/* Mask-like content: each instance a filled ellipse of 1s on 0s, its box the
 * ellipse's bounding box, its area the pixel count; labels from COCO's id range. */
static void fill_sample(ferry_batch *b, size_t i, uint64_t seed) {
  uint64_t rng = seed * 1000003u + i;
  ferry_tensor v;
  cr_assert_eq(ferry_batch_sample(b, 0, i, &v), FERRY_OK);
  for (size_t k = 0; k < v.nbytes; k++) ((uint8_t *)v.data)[k] = (uint8_t)next_random(&rng);
  ferry_tensor boxes, masks, labels, area, crowd, id;
  cr_assert_eq(ferry_batch_sample(b, 1, i, &boxes), FERRY_OK);
  cr_assert_eq(ferry_batch_sample(b, 2, i, &masks), FERRY_OK);
  cr_assert_eq(ferry_batch_sample(b, 3, i, &labels), FERRY_OK);
  cr_assert_eq(ferry_batch_sample(b, 4, i, &area), FERRY_OK);
  cr_assert_eq(ferry_batch_sample(b, 5, i, &crowd), FERRY_OK);
  cr_assert_eq(ferry_batch_sample(b, 6, i, &id), FERRY_OK);
  ((int64_t *)id.data)[0] = (int64_t)(seed * 100 + i);
  for (int64_t n = 0; n < masks.shape[0]; n++) {
    uint8_t *m = (uint8_t *)masks.data + n * MASK_H * MASK_W;
    int cx = (int)(next_random(&rng) % MASK_W), cy = (int)(next_random(&rng) % MASK_H);
    int rx = 1 + (int)(next_random(&rng) % 10), ry = 1 + (int)(next_random(&rng) % 8);
    int x0 = MASK_W, y0 = MASK_H, x1 = -1, y1 = -1, count = 0;
    for (int y = 0; y < MASK_H; y++)
      for (int x = 0; x < MASK_W; x++) {
        int in = (x - cx) * (x - cx) * ry * ry + (y - cy) * (y - cy) * rx * rx <= rx * rx * ry * ry;
        m[y * MASK_W + x] = (uint8_t)in;
        if (!in) continue;
        count++;
        if (x < x0) x0 = x;
        if (y < y0) y0 = y;
        if (x > x1) x1 = x;
        if (y > y1) y1 = y;
      }
    float *box = (float *)boxes.data + 4 * n;
    box[0] = (float)x0, box[1] = (float)y0, box[2] = (float)(x1 - x0 + 1), box[3] = (float)(y1 - y0 + 1);
    ((int64_t *)labels.data)[n] = 1 + (int64_t)(next_random(&rng) % 90);
    ((float *)area.data)[n] = (float)count;
    ((uint8_t *)crowd.data)[n] = (uint8_t)(next_random(&rng) % 50 == 0);
  }
}

static inline void fill_batch(ferry_batch *b, uint64_t seed) {
  for (size_t i = 0; i < ferry_batch_size(b); i++) fill_sample(b, i, seed);
}

/* Five samples, one of them empty, one crowded. */
static const int64_t default_instances[5] = {3, 0, 7, 1, 12};

static inline ferry_batch *make_packed(ferry_pool *pool, size_t batch, const int64_t *instances,
                                       uint64_t seed) {
  ferry_field_spec f[NFIELDS];
  int64_t rows[NFIELDS * 16];
  cr_assert_leq(batch, 16);
  detection_fields(f);
  detection_rows(batch, instances, rows);
  ferry_batch *b = NULL;
  cr_assert_eq(ferry_batch_create(pool, batch, NFIELDS, f, rows, &b), FERRY_OK, "%s",
               ferry_last_error());
  mark_images(b);
  fill_batch(b, seed);
  return b;
}

static inline ferry_batch *make_unpacked(ferry_device *host, size_t batch,
                                         const int64_t *instances, uint64_t seed) {
  ferry_field_spec f[NFIELDS];
  int64_t rows[NFIELDS * 16];
  detection_fields(f);
  detection_rows(batch, instances, rows);
  ferry_batch *b = NULL;
  cr_assert_eq(ferry_batch_create_unpacked(host, batch, NFIELDS, f, rows, &b), FERRY_OK, "%s",
               ferry_last_error());
  mark_images(b);
  fill_batch(b, seed);
  return b;
}

static inline int on_host(const ferry_tensor *t) {
  return ferry_device_get_kind(t->device) == FERRY_DEVICE_HOST;
}

/* A host copy of a tensor's bytes (malloc'd; NULL for an empty tensor). */
static inline uint8_t *read_back(ferry_stream *stream, const ferry_tensor *t) {
  if (t->nbytes == 0) return NULL;
  uint8_t *host = malloc(t->nbytes);
  cr_assert_not_null(host);
  cr_assert_eq(ferry_memcpy(stream, host, t->data, t->nbytes,
                            on_host(t) ? FERRY_COPY_H2H : FERRY_COPY_D2H), FERRY_OK, "%s",
               ferry_last_error());
  return host;
}

/* Overwrite a tensor's bytes with `byte`, from the host. */
static inline void write_into(ferry_stream *stream, ferry_tensor *t, uint8_t byte) {
  if (t->nbytes == 0) return;
  uint8_t *host = malloc(t->nbytes);
  memset(host, byte, t->nbytes);
  cr_assert_eq(ferry_memcpy(stream, t->data, host, t->nbytes,
                            on_host(t) ? FERRY_COPY_H2H : FERRY_COPY_H2D), FERRY_OK, "%s",
               ferry_last_error());
  free(host);
}

static inline int same_shape(const ferry_tensor *a, const ferry_tensor *b) {
  if (a->ndim != b->ndim || a->dtype != b->dtype || a->nbytes != b->nbytes) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

/* A host snapshot of every sample's slice of every field, taken before the batch is
 * released, to compare outputs against after the arena has been reused. */
typedef struct snapshot {
  size_t batch, nfields;
  char names[16][32];
  ferry_tensor views[16][16]; /* shapes as the batch gave them */
  uint8_t *bytes[16][16];
} snapshot;

static inline void snapshot_take(snapshot *s, const ferry_batch *b, ferry_stream *stream) {
  memset(s, 0, sizeof *s);
  s->batch = ferry_batch_size(b);
  s->nfields = ferry_batch_num_fields(b);
  for (size_t f = 0; f < s->nfields; f++) {
    snprintf(s->names[f], sizeof s->names[f], "%s", ferry_batch_field_spec(b, f)->name);
    for (size_t i = 0; i < s->batch; i++) {
      cr_assert_eq(ferry_batch_sample(b, f, i, &s->views[f][i]), FERRY_OK);
      s->bytes[f][i] = read_back(stream, &s->views[f][i]);
    }
  }
}

static inline void snapshot_free(snapshot *s) {
  for (size_t f = 0; f < s->nfields; f++)
    for (size_t i = 0; i < s->batch; i++) free(s->bytes[f][i]);
}

static inline size_t snapshot_field(const snapshot *s, const char *name) {
  for (size_t f = 0; f < s->nfields; f++)
    if (strcmp(s->names[f], name) == 0) return f;
  cr_assert_fail("no field %s in the snapshot", name);
  return 0;
}

/* Every output equals its packed slice bit for bit, with the slice's shape (images:
 * row i of the batch tensor). */
static inline void expect_equal_to_snapshot(ferry_device_batch *db, const snapshot *s,
                                            ferry_stream *stream) {
  cr_assert_eq(ferry_device_batch_size(db), s->batch);
  ferry_tensor *images = ferry_device_batch_images(db);
  if (images) {
    size_t f = snapshot_field(s, "images");
    uint8_t *bytes = read_back(stream, images);
    size_t item = images->nbytes / s->batch;
    cr_assert_eq(images->shape[0], (int64_t)s->batch);
    for (size_t i = 0; i < s->batch; i++) {
      cr_assert_eq(item, s->views[f][i].nbytes);
      cr_assert_eq(memcmp(bytes + i * item, s->bytes[f][i], item), 0, "image %zu differs", i);
    }
    free(bytes);
  }
  for (size_t k = 0; k < ferry_device_batch_num_fields(db); k++) {
    const char *name = ferry_device_batch_field_name(db, k);
    size_t f = snapshot_field(s, name);
    for (size_t i = 0; i < s->batch; i++) {
      ferry_tensor *t = ferry_device_batch_sample_field(db, i, name);
      cr_assert_not_null(t, "sample %zu has no %s", i, name);
      cr_assert(same_shape(t, &s->views[f][i]), "sample %zu %s: shape or dtype differs", i, name);
      cr_assert(t->owned, "sample %zu %s is not owned", i, name);
      uint8_t *bytes = read_back(stream, t);
      if (t->nbytes) cr_assert_eq(memcmp(bytes, s->bytes[f][i], t->nbytes), 0, "sample %zu %s differs", i, name);
      else cr_assert_null(t->data, "an empty tensor has no data");
      free(bytes);
    }
  }
}

/* A device, a stream of it and a pool of `arenas` arenas for it. */
typedef struct rig {
  ferry_device *device;
  ferry_stream *stream;
  ferry_pool *pool;
} rig;

static inline rig rig_open(const char *name, size_t arenas) {
  rig r = {open_device(name), NULL, NULL};
  cr_assert_eq(ferry_stream_open(r.device, &r.stream), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_pool_open(r.device, arenas, 0, &r.pool), FERRY_OK);
  return r;
}

static inline ferry_memory_stats stats_of(ferry_device *d) {
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  return s;
}

/* Everything given back: no device byte may outlive its owner. */
static inline void rig_close(rig *r) {
  ferry_pool_close(r->pool);
  ferry_stream_synchronize(r->stream);
  cr_expect_eq(stats_of(r->device).live_bytes, 0, "device bytes leaked");
  ferry_stream_close(r->stream);
  ferry_device_close(r->device);
}

#endif
