/* ferry_transfer: per-sample outputs equal their slices, own their storage, survive the
 * arena's reuse, and cost no extra device peak; the packed-then-clone path as the
 * baseline and ferry__packed_to (lib/transfer/packed_copy.h); hooks; normalisation. */
#include "../common/gate.h"
#include <math.h>
#include <pthread.h>

#include "fixtures.h"
#include "ferry/advanced.h"

/* By the direct path (ferry_transfer) or the packed-then-clone baseline
 * (lib/transfer/packed_copy.h): both must give the same outputs. */
static ferry_device_batch *transfer_by_or_die(rig *r, ferry_batch *b, ferry__transfer_path path,
                                              const ferry_transfer_options *o) {
  ferry_device_batch *db = NULL;
  cr_assert_eq(ferry__transfer_by(path, r->device, r->stream, b, o, &db), FERRY_OK, "%s", ferry_last_error());
  cr_assert_not_null(db);
  return db;
}

static ferry_device_batch *transfer_or_die(rig *r, ferry_batch *b, const ferry_transfer_options *o) {
  return transfer_by_or_die(r, b, FERRY__DIRECT, o);
}

static void outputs_equal_slices(const char *name) {
  rig r = rig_open(name, 2);
  ferry__transfer_path modes[2] = {FERRY__DIRECT, FERRY__PACKED_THEN_CLONE};
  for (int m = 0; m < 2; m++) {
    ferry_batch *b = make_packed(r.pool, 5, default_instances, 11 + m);
    snapshot s;
    snapshot_take(&s, b, r.stream);
    ferry_device_batch *db = transfer_by_or_die(&r, b, modes[m], NULL);
    ferry_batch_release(b);
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    cr_assert_eq(ferry_device_batch_num_fields(db), NFIELDS - 1, "every field but images is a record");
    ferry_tensor *images = ferry_device_batch_images(db);
    cr_assert_not_null(images);
    cr_assert_eq(images->ndim, 4);
    cr_assert_eq(images->shape[1], IMG_H);
    cr_assert_eq(images->shape[3], 3);
    expect_equal_to_snapshot(db, &s, r.stream);
    snapshot_free(&s);
    ferry_device_batch_free(db);
  }
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, outputs_equal_slices, outputs_equal_slices)

static void unpacked_batches_work_on_the_direct_path(const char *name) {
  rig r = rig_open(name, 1);
  ferry_device *host = NULL;
  cr_assert_eq(ferry_device_open("host", &host), FERRY_OK);
  ferry_batch *b = make_unpacked(host, 5, default_instances, 5);
  snapshot s;
  snapshot_take(&s, b, r.stream);
  ferry_device_batch *db = transfer_or_die(&r, b, NULL);
  ferry_device_batch *none = NULL;
  cr_assert_eq(ferry__transfer_packed_then_clone(r.device, r.stream, b, NULL, &none), FERRY_EUNSUPPORTED);
  cr_assert_null(none);
  cr_assert_neq(strstr(ferry_last_error(), "packed"), NULL, "%s", ferry_last_error());
  ferry_batch_release(b);
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  expect_equal_to_snapshot(db, &s, r.stream);
  snapshot_free(&s);
  ferry_device_batch_free(db);
  ferry_device_close(host);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, unpacked_batches_work_on_the_direct_path,
                 unpacked_batches_work_on_the_direct_path)

typedef struct range {
  uintptr_t begin, end;
} range;

static int by_begin(const void *a, const void *b) {
  const range *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static void outputs_own_distinct_storage(const char *name) {
  rig r = rig_open(name, 1);
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 3);
  ferry_tensor first, last;
  cr_assert_eq(ferry_batch_field(b, 0, &first), FERRY_OK);
  cr_assert_eq(ferry_batch_field(b, NFIELDS - 1, &last), FERRY_OK);
  range arena = {(uintptr_t)first.data, (uintptr_t)last.data + last.nbytes};
  ferry_device_batch *db = transfer_or_die(&r, b, NULL);
  range ranges[1 + 5 * NFIELDS];
  size_t n = 0;
  ferry_tensor *images = ferry_device_batch_images(db);
  ranges[n++] = (range){(uintptr_t)images->data, (uintptr_t)images->data + images->nbytes};
  for (size_t i = 0; i < 5; i++)
    for (size_t k = 0; k < ferry_device_batch_num_fields(db); k++) {
      ferry_tensor *t = ferry_device_batch_sample_field(db, i, ferry_device_batch_field_name(db, k));
      if (t->nbytes) ranges[n++] = (range){(uintptr_t)t->data, (uintptr_t)t->data + t->nbytes};
    }
  qsort(ranges, n, sizeof *ranges, by_begin);
  for (size_t i = 0; i < n; i++) {
    if (i + 1 < n) cr_assert_leq(ranges[i].end, ranges[i + 1].begin, "two outputs share storage");
    cr_assert(ranges[i].end <= arena.begin || ranges[i].begin >= arena.end, "an output aliases the arena");
  }
  cr_assert_eq(stats_of(r.device).live_allocations, n, "one allocation per non-empty output");
  ferry_batch_release(b);
  ferry_device_batch_free(db);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, outputs_own_distinct_storage, outputs_own_distinct_storage)

static void writing_one_output_changes_nothing_else(const char *name) {
  rig r = rig_open(name, 1);
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 8);
  snapshot s;
  snapshot_take(&s, b, r.stream);
  ferry_device_batch *db = transfer_or_die(&r, b, NULL);
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  ferry_tensor *victim = ferry_device_batch_sample_field(db, 2, "masks");
  write_into(r.stream, victim, 0xEE);
  /* The arena is untouched. */
  for (size_t f = 0; f < NFIELDS; f++)
    for (size_t i = 0; i < 5; i++) {
      ferry_tensor v;
      cr_assert_eq(ferry_batch_sample(b, f, i, &v), FERRY_OK);
      if (v.nbytes) cr_assert_eq(memcmp(v.data, s.bytes[f][i], v.nbytes), 0, "the arena changed");
    }
  /* Every other output is unchanged; the written one holds what was written. */
  uint8_t *written = read_back(r.stream, victim);
  for (size_t k = 0; k < victim->nbytes; k++) cr_assert_eq(written[k], 0xEE);
  free(written);
  size_t mf = snapshot_field(&s, "masks");
  ferry_tensor taken;
  cr_assert_eq(ferry_device_batch_take(db, 2, "masks", &taken), FERRY_OK);
  ferry_tensor restored;
  cr_assert_eq(ferry_tensor_alloc(&restored, r.device, r.stream, taken.dtype, taken.ndim, taken.shape), FERRY_OK);
  cr_assert_eq(ferry_memcpy(r.stream, restored.data, s.bytes[mf][2], restored.nbytes,
                            on_host(&restored) ? FERRY_COPY_H2H : FERRY_COPY_H2D), FERRY_OK);
  cr_assert_eq(ferry_device_batch_replace(db, 2, "masks", &restored), FERRY_OK);
  cr_assert_null(restored.data, "replace takes ownership");
  expect_equal_to_snapshot(db, &s, r.stream);
  ferry_tensor_free(&taken);
  snapshot_free(&s);
  ferry_batch_release(b);
  ferry_device_batch_free(db);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, writing_one_output_changes_nothing_else,
                 writing_one_output_changes_nothing_else)

/* The copies are queued behind a closed gate, so they cannot have run when the batch
 * is released: its only arena must stay out of reach until they have. */
static void recycling_the_batch_leaves_outputs_intact(const char *name) {
  rig r = rig_open(name, 1);
  ferry__transfer_path modes[2] = {FERRY__DIRECT, FERRY__PACKED_THEN_CLONE};
  for (int m = 0; m < 2; m++) {
    ferry_batch *b = make_packed(r.pool, 5, default_instances, 21 + m);
    snapshot s;
    snapshot_take(&s, b, r.stream);
    gate g = GATE_CLOSED;
    cr_assert_eq(ferry_stream_call(r.stream, wait_at_gate, &g), FERRY_OK);
    ferry_device_batch *db = transfer_by_or_die(&r, b, modes[m], NULL);
    ferry_batch_release(b); /* returns at once although nothing has been copied yet */
    ferry_arena *early = NULL;
    cr_assert_eq(ferry_pool_try_acquire(r.pool, 1, &early), FERRY_EAGAIN,
                 "the arena came back before the copies read it");
    open_gate(&g);
    ferry_batch *next = make_packed(r.pool, 5, default_instances, 99); /* same arena, overwritten */
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    expect_equal_to_snapshot(db, &s, r.stream);
    ferry_batch_release(next);
    snapshot_free(&s);
    ferry_device_batch_free(db);
  }
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, recycling_the_batch_leaves_outputs_intact,
                 recycling_the_batch_leaves_outputs_intact)

static uint64_t output_bytes(ferry_device_batch *db) {
  uint64_t total = ferry_device_batch_images(db) ? ferry_device_batch_images(db)->nbytes : 0;
  for (size_t i = 0; i < ferry_device_batch_size(db); i++)
    for (size_t k = 0; k < ferry_device_batch_num_fields(db); k++)
      total += ferry_device_batch_sample_field(db, i, ferry_device_batch_field_name(db, k))->nbytes;
  return total;
}

/* Extra peak = peak - live after the transfer, the peak reset just before. */
static uint64_t measure_extra_peak(rig *r, ferry_batch *b, ferry__transfer_path mode,
                                   uint64_t *retained) {
  ferry_device_synchronize(r->device);
  uint64_t live_before = stats_of(r->device).live_bytes;
  cr_assert_eq(ferry_device_reset_peak(r->device), FERRY_OK);
  ferry_device_batch *db = transfer_by_or_die(r, b, mode, NULL);
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  ferry_memory_stats after = stats_of(r->device);
  *retained = output_bytes(db);
  cr_assert_eq(after.live_bytes - live_before, *retained, "accounting is exact to the byte");
  ferry_device_batch_free(db);
  return after.peak_bytes - after.live_bytes;
}

static void extra_peak_is_zero_on_the_direct_path(const char *name) {
  rig r = rig_open(name, 1);
  int64_t many[8] = {9, 0, 31, 4, 17, 2, 0, 25};
  ferry_batch *b = make_packed(r.pool, 8, many, 4);
  ferry_tensor masks;
  cr_assert_eq(ferry_batch_field(b, 2, &masks), FERRY_OK);
  uint64_t retained_direct = 0, retained_previous = 0;
  cr_assert_eq(measure_extra_peak(&r, b, FERRY__DIRECT, &retained_direct), 0);
  uint64_t previous = measure_extra_peak(&r, b, FERRY__PACKED_THEN_CLONE, &retained_previous);
  cr_assert_geq(previous, masks.nbytes, "the previous path holds the whole mask field (%llu < %zu)",
                (unsigned long long)previous, masks.nbytes);
  cr_assert_eq(retained_direct, retained_previous, "both paths return the same tensors");
  ferry_batch_release(b);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, extra_peak_is_zero_on_the_direct_path,
                 extra_peak_is_zero_on_the_direct_path)

static void empty_samples_get_empty_tensors(const char *name) {
  rig r = rig_open(name, 1);
  int64_t counts[3] = {0, 2, 0};
  ferry_batch *b = make_packed(r.pool, 3, counts, 1);
  ferry_device_batch *db = transfer_or_die(&r, b, NULL);
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  ferry_tensor *boxes = ferry_device_batch_sample_field(db, 0, "boxes");
  ferry_tensor *masks = ferry_device_batch_sample_field(db, 2, "masks");
  ferry_tensor *labels = ferry_device_batch_sample_field(db, 0, "labels");
  cr_assert_not_null(boxes);
  cr_assert_eq(boxes->ndim, 2);
  cr_assert_eq(boxes->shape[0], 0);
  cr_assert_eq(boxes->shape[1], 4);
  cr_assert_eq(boxes->nbytes, 0);
  cr_assert_null(boxes->data);
  cr_assert_eq(masks->ndim, 3);
  cr_assert_eq(masks->shape[0], 0);
  cr_assert_eq(masks->shape[1], MASK_H);
  cr_assert_eq(masks->shape[2], MASK_W);
  cr_assert_eq(labels->ndim, 1);
  cr_assert_eq(labels->dtype, FERRY_I64);
  cr_assert_eq(ferry_device_batch_sample_field(db, 1, "masks")->shape[0], 2);
  ferry_tensor *id = ferry_device_batch_sample_field(db, 0, "image_id");
  cr_assert_eq(id->ndim, 1);
  cr_assert_eq(id->nbytes, 8, "a per-sample field keeps its inner shape");
  ferry_tensor t;
  cr_assert_eq(ferry_device_batch_take(db, 0, "boxes", &t), FERRY_OK);
  ferry_tensor_free(&t); /* freeing an empty owned tensor is fine */
  cr_assert_null(ferry_device_batch_sample_field(db, 0, "boxes"), "a taken tensor is gone");
  cr_assert_eq(ferry_device_batch_take(db, 0, "boxes", &t), FERRY_ENOTFOUND);
  cr_assert_eq(ferry_device_batch_take(db, 7, "boxes", &t), FERRY_ENOTFOUND);
  cr_assert_null(ferry_device_batch_sample_field(db, 0, "nope"));
  ferry_batch_release(b);
  ferry_device_batch_free(db);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, empty_samples_get_empty_tensors, empty_samples_get_empty_tensors)

static void expect_batch_bytes_equal(ferry_stream *stream, ferry_batch *moved, const snapshot *s) {
  cr_assert(ferry_batch_is_packed(moved));
  cr_assert_eq(ferry_batch_num_fields(moved), s->nfields);
  for (size_t f = 0; f < s->nfields; f++)
    for (size_t i = 0; i < s->batch; i++) {
      ferry_tensor v;
      cr_assert_eq(ferry_batch_sample(moved, f, i, &v), FERRY_OK);
      cr_assert(same_shape(&v, &s->views[f][i]));
      uint8_t *bytes = read_back(stream, &v);
      if (v.nbytes) cr_assert_eq(memcmp(bytes, s->bytes[f][i], v.nbytes), 0);
      free(bytes);
    }
}

/* Host batches move to a second host device object; on CUDA they move to the GPU. */
static void packed_to_keeps_batches_packed(const char *name) {
  rig r = rig_open(name, 1);
  ferry_device *other = NULL;
  cr_assert_eq(ferry_device_open("host", &other), FERRY_OK);
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 31);
  snapshot s;
  snapshot_take(&s, b, r.stream);
  ferry_batch *moved = NULL;
  cr_assert_eq(ferry__packed_to(b, r.device, r.stream, &moved), FERRY_OK, "%s", ferry_last_error());
  cr_assert_neq(moved, b, "an arena batch is not yet in the device's memory");
  cr_assert_eq(ferry_batch_device(moved), r.device);
  uint64_t live = stats_of(r.device).live_bytes;
  cr_assert_gt(live, 0, "one device allocation holds the packed batch");
  cr_assert_eq(stats_of(r.device).live_allocations, 1);
  ferry_batch *again = NULL;
  cr_assert_eq(ferry__packed_to(moved, r.device, r.stream, &again), FERRY_OK);
  cr_assert_eq(again, moved, "already there: the same batch comes back");
  expect_batch_bytes_equal(r.stream, moved, &s);
  /* A device batch transfers per sample from device memory. */
  ferry_device_batch *db = transfer_or_die(&r, moved, NULL);
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  expect_equal_to_snapshot(db, &s, r.stream);
  ferry_device_batch_free(db);
  /* And onward to another device, still packed. */
  ferry_batch *back = NULL;
  cr_assert_eq(ferry__packed_to(moved, other, NULL, &back), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_batch_device(back), other);
  ferry_stream_synchronize(r.stream);
  cr_assert_eq(stats_of(r.device).live_bytes, 0, "the source was released after the copy");
  ferry_stream *other_stream = NULL;
  cr_assert_eq(ferry_stream_open(other, &other_stream), FERRY_OK);
  expect_batch_bytes_equal(other_stream, back, &s);
  ferry_batch_release(back);
  ferry_stream_close(other_stream);
  snapshot_free(&s);
  ferry_device_close(other);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, packed_to_keeps_batches_packed, packed_to_keeps_batches_packed)

/* ---- hooks ---------------------------------------------------------------------- */

typedef struct hook_log {
  int calls[4];
  int order[4];
  int next;
  float first_box[4]; /* what the ON_STREAM hook saw, before converting */
  int64_t *sevens;    /* 64 of them, pinned: an ENQUEUE hook's copies are asynchronous */
} hook_log;

/* xywh -> xyxy in place, as a training loop does after the batch lands. */
static ferry_status convert_boxes(ferry_device_batch *db, void *user) {
  hook_log *log = user;
  log->calls[0]++;
  log->order[log->next++] = 0;
  for (size_t i = 0; i < ferry_device_batch_size(db); i++) {
    ferry_tensor *t = ferry_device_batch_sample_field(db, i, "boxes");
    float *box = t->data;
    if (i == 0) memcpy(log->first_box, box, sizeof log->first_box);
    for (int64_t n = 0; n < t->shape[0]; n++) {
      box[4 * n + 2] += box[4 * n + 0];
      box[4 * n + 3] += box[4 * n + 1];
    }
  }
  return FERRY_OK;
}

/* Replaces every sample's labels with a tensor of 7s, queued on the batch's stream. */
static ferry_status relabel(ferry_device_batch *db, void *user) {
  hook_log *log = user;
  log->calls[1]++;
  log->order[log->next++] = 1;
  const int64_t *sevens = log->sevens;
  ferry_device *d = ferry_device_batch_device(db);
  ferry_stream *s = ferry_device_batch_stream(db);
  for (size_t i = 0; i < ferry_device_batch_size(db); i++) {
    ferry_tensor *old = ferry_device_batch_sample_field(db, i, "labels");
    ferry_tensor fresh;
    ferry_status st = ferry_tensor_alloc(&fresh, d, s, FERRY_I64, old->ndim, old->shape);
    if (st == FERRY_OK)
      st = ferry_memcpy_async(s, fresh.data, sevens, fresh.nbytes,
                              ferry_device_get_kind(d) == FERRY_DEVICE_HOST ? FERRY_COPY_H2H : FERRY_COPY_H2D);
    if (st == FERRY_OK) st = ferry_device_batch_replace(db, i, "labels", &fresh);
    if (st != FERRY_OK) return st;
  }
  return FERRY_OK;
}

static ferry_status refuse(ferry_device_batch *db, void *user) {
  hook_log *log = user;
  log->calls[2]++;
  log->order[log->next++] = 2;
  return FERRY_EFORMAT;
}

static void hooks_run_after_the_batch_lands(const char *name) {
  rig r = rig_open(name, 1);
  int on_host_backend = ferry_device_get_kind(r.device) == FERRY_DEVICE_HOST;
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 41);
  snapshot s;
  snapshot_take(&s, b, r.stream);
  hook_log log = {0};
  cr_assert_eq(ferry_device_host_alloc(r.device, 64 * sizeof *log.sevens, (void **)&log.sevens), FERRY_OK);
  for (int k = 0; k < 64; k++) log.sevens[k] = 7;
  /* ON_STREAM hooks touch bytes directly, which only the host backend allows. */
  ferry_transfer_hook hooks[3] = {{convert_boxes, &log, FERRY_HOOK_ON_STREAM},
                                  {relabel, &log, FERRY_HOOK_ENQUEUE},
                                  {refuse, &log, FERRY_HOOK_ON_STREAM}};
  ferry_transfer_hook *first = on_host_backend ? hooks : hooks + 1;
  ferry_transfer_options o = {.hooks = first, .nhooks = on_host_backend ? 3 : 2};
  /* A closed gate proves that ON_STREAM hooks wait for the stream (host backend), and
   * that nothing ferry_transfer or the ENQUEUE hook queues blocks behind it: their
   * copies read pinned memory, which no backend copies synchronously. */
  gate g = GATE_CLOSED;
  cr_assert_eq(ferry_stream_call(r.stream, wait_at_gate, &g), FERRY_OK);
  ferry_device_batch *db = transfer_or_die(&r, b, &o);
  cr_assert_eq(log.calls[1], 1, "ENQUEUE hooks run inside ferry_transfer");
  if (on_host_backend) cr_assert_eq(log.calls[0] + log.calls[2], 0, "ON_STREAM hooks wait for the stream");
  ferry_batch_release(b);
  open_gate(&g);
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_EFORMAT, "a failing hook is reported");
  cr_assert_neq(strstr(ferry_last_error(), "hook"), NULL, "%s", ferry_last_error());
  cr_assert_eq(log.calls[2], 1, "hooks after a failure still run");
  if (on_host_backend) {
    cr_assert_eq(log.order[0], 1);
    cr_assert_eq(log.order[1], 0);
    cr_assert_eq(log.order[2], 2);
    size_t bf = snapshot_field(&s, "boxes");
    cr_assert_eq(memcmp(log.first_box, s.bytes[bf][0], sizeof log.first_box), 0,
                 "the hook saw the landed boxes");
    for (size_t i = 0; i < 5; i++) {
      const float *orig = (const float *)s.bytes[bf][i];
      const float *box = ferry_device_batch_sample_field(db, i, "boxes")->data;
      for (int64_t n = 0; n < default_instances[i]; n++) {
        cr_assert_eq(box[4 * n + 2], orig[4 * n] + orig[4 * n + 2]);
        cr_assert_eq(box[4 * n + 3], orig[4 * n + 1] + orig[4 * n + 3]);
      }
    }
  }
  for (size_t i = 0; i < 5; i++) {
    ferry_tensor *labels = ferry_device_batch_sample_field(db, i, "labels");
    cr_assert_eq(labels->shape[0], default_instances[i]);
    int64_t *got = (int64_t *)read_back(r.stream, labels);
    for (int64_t n = 0; n < labels->shape[0]; n++) cr_assert_eq(got[n], 7);
    free(got);
  }
  snapshot_free(&s);
  ferry_device_batch_free(db);
  ferry_device_host_free(r.device, log.sevens);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, hooks_run_after_the_batch_lands, hooks_run_after_the_batch_lands)

/* ---- normalisation -------------------------------------------------------------- */

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Computed here in double from the definition, independently of the library. */
static double expected_value(uint8_t x, int c) {
  static const double mean[3] = {0.485, 0.456, 0.406}, std[3] = {0.229, 0.224, 0.225};
  return ((double)x / 255.0 - mean[c]) / std[c];
}

/* torchvision v2's ToDtype(float32, scale=True) (image.to(float32).mul_(1.0 / 255))
 * then Normalize, step by step in float32: what the loader's F32_CHW layout holds, so
 * device-normalised images equal it. */
static float torchvision_value(uint8_t x, int c) {
  static const float mean[3] = FERRY_IMAGENET_MEAN, std[3] = FERRY_IMAGENET_STD;
  float scaled = (float)x * (float)(1.0 / 255);
  float centred = scaled - mean[c];
  return centred / std[c];
}

static void normalisation_matches_the_math(const char *name) {
  rig r = rig_open(name, 1);
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 51);
  ferry_normalize kinds[2] = {FERRY_NORMALIZE_F32, FERRY_NORMALIZE_BF16};
  for (int k = 0; k < 2; k++) {
    ferry_transfer_options o = {.normalize = kinds[k]};
    ferry_device_batch *db = transfer_or_die(&r, b, &o);
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    ferry_tensor *images = ferry_device_batch_images(db);
    cr_assert_eq(images->dtype, kinds[k] == FERRY_NORMALIZE_F32 ? FERRY_F32 : FERRY_BF16);
    int64_t want[4] = {5, 3, IMG_H, IMG_W};
    for (int d = 0; d < 4; d++) cr_assert_eq(images->shape[d], want[d]);
    uint8_t *got = read_back(r.stream, images);
    size_t hw = IMG_H * IMG_W;
    for (size_t i = 0; i < 5; i++) {
      ferry_tensor v;
      cr_assert_eq(ferry_batch_sample(b, 0, i, &v), FERRY_OK);
      const uint8_t *src = v.data;
      for (int c = 0; c < 3; c++)
        for (size_t p = 0; p < hw; p++) {
          size_t at = (i * 3 + (size_t)c) * hw + p;
          double want_v = expected_value(src[3 * p + (size_t)c], c);
          double got_v = kinds[k] == FERRY_NORMALIZE_F32 ? ((float *)got)[at]
                                                         : bf16_to_f32(((uint16_t *)got)[at]);
          double tol = kinds[k] == FERRY_NORMALIZE_F32 ? 2e-6 : fabs(want_v) / 256.0 + 1e-6;
          cr_assert_leq(fabs(got_v - want_v), tol, "image %zu c%d p%zu: %.9g vs %.9g", i, c, p,
                        got_v, want_v);
          if (kinds[k] == FERRY_NORMALIZE_F32)
            cr_assert_eq(((float *)got)[at], torchvision_value(src[3 * p + (size_t)c], c),
                         "image %zu c%d p%zu: not torchvision's float32 steps", i, c, p);
        }
    }
    free(got);
    ferry_device_batch_free(db);
  }
  ferry_transfer_options bad = {.normalize = FERRY_NORMALIZE_F32, .image_field = "masks"};
  ferry_device_batch *none = NULL;
  cr_assert_eq(ferry_transfer(r.device, r.stream, b, &bad, &none), FERRY_EINVAL,
               "a ROWS field cannot be the image field");
  ferry_transfer_options wrong = {.normalize = FERRY_NORMALIZE_F32, .image_field = "image_id"};
  cr_assert_eq(ferry_transfer(r.device, r.stream, b, &wrong, &none), FERRY_EUNSUPPORTED);
  cr_assert_neq(strstr(ferry_last_error(), "u8 [H,W,3]"), NULL, "%s", ferry_last_error());
  /* One zero (or non-finite) std among others would give inf or NaN pixels. */
  ferry_transfer_options zero = {.normalize = FERRY_NORMALIZE_F32, .mean = {0.5f, 0.5f, 0.5f},
                                 .std = {0.25f, 0.0f, 0.25f}};
  cr_assert_eq(ferry_transfer(r.device, r.stream, b, &zero, &none), FERRY_EINVAL);
  cr_assert_null(none);
  cr_assert_neq(strstr(ferry_last_error(), "channel 1"), NULL, "%s", ferry_last_error());
  ferry_transfer_options nan_mean = {.normalize = FERRY_NORMALIZE_BF16, .mean = {0.5f, NAN, 0.5f},
                                     .std = {0.25f, 0.25f, 0.25f}};
  cr_assert_eq(ferry_transfer(r.device, r.stream, b, &nan_mean, &none), FERRY_EINVAL);
  ferry_batch_release(b);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, normalisation_matches_the_math, normalisation_matches_the_math)

/* The CUDA kernel and the host backend's CPU loop agree bit for bit. */
Test(transfer, normalisation_cuda_equals_host) {
  rig gpu = rig_open("cuda", 1);
  rig cpu = rig_open("host", 1);
  ferry_batch *bg = make_packed(gpu.pool, 5, default_instances, 61);
  ferry_batch *bc = make_packed(cpu.pool, 5, default_instances, 61);
  ferry_normalize kinds[2] = {FERRY_NORMALIZE_F32, FERRY_NORMALIZE_BF16};
  for (int k = 0; k < 2; k++)
    for (int m = 0; m < 2; m++) {
      ferry_transfer_options o = {.normalize = kinds[k]};
      ferry__transfer_path path = m ? FERRY__PACKED_THEN_CLONE : FERRY__DIRECT;
      ferry_device_batch *dg = transfer_by_or_die(&gpu, bg, path, &o);
      ferry_device_batch *dc = transfer_by_or_die(&cpu, bc, path, &o);
      cr_assert_eq(ferry_device_batch_wait(dg), FERRY_OK);
      cr_assert_eq(ferry_device_batch_wait(dc), FERRY_OK);
      ferry_tensor *ig = ferry_device_batch_images(dg), *ic = ferry_device_batch_images(dc);
      cr_assert(same_shape(ig, ic));
      uint8_t *g = read_back(gpu.stream, ig), *c = read_back(cpu.stream, ic);
      cr_assert_eq(memcmp(g, c, ig->nbytes), 0, "kernel and CPU differ (%s, mode %d)",
                   ferry_dtype_name(ig->dtype), m);
      free(g);
      free(c);
      ferry_device_batch_free(dg);
      ferry_device_batch_free(dc);
    }
  ferry_batch_release(bg);
  ferry_batch_release(bc);
  rig_close(&gpu);
  rig_close(&cpu);
}

/* ---- options and arguments ------------------------------------------------------ */

static void image_field_is_an_option(const char *name) {
  rig r = rig_open(name, 1);
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 71);
  snapshot s;
  snapshot_take(&s, b, r.stream);
  ferry_transfer_options none = {.image_field = ""};
  ferry_device_batch *db = transfer_or_die(&r, b, &none);
  cr_assert_null(ferry_device_batch_images(db));
  cr_assert_eq(ferry_device_batch_num_fields(db), NFIELDS);
  cr_assert_eq(ferry_device_batch_sample_field(db, 4, "images")->ndim, 3, "a per-sample record");
  cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
  expect_equal_to_snapshot(db, &s, r.stream);
  ferry_device_batch_free(db);
  ferry_transfer_options masks_as_batch = {.image_field = "image_id"};
  db = transfer_or_die(&r, b, &masks_as_batch);
  ferry_tensor *ids = ferry_device_batch_images(db);
  cr_assert_eq(ids->ndim, 2);
  cr_assert_eq(ids->shape[0], 5);
  cr_assert_null(ferry_device_batch_sample_field(db, 0, "image_id"));
  cr_assert_not_null(ferry_device_batch_sample_field(db, 0, "images"));
  ferry_tensor taken;
  cr_assert_eq(ferry_device_batch_take_images(db, &taken), FERRY_OK);
  cr_assert_null(ferry_device_batch_images(db));
  cr_assert_eq(ferry_device_batch_take_images(db, &taken), FERRY_ENOTFOUND);
  ferry_device_batch_free(db); /* the taken tensor outlives its batch */
  int64_t *got = (int64_t *)read_back(r.stream, &taken);
  for (int i = 0; i < 5; i++) cr_assert_eq(got[i], 71 * 100 + i);
  free(got);
  ferry_tensor_free(&taken);
  ferry_transfer_options absent = {.image_field = "pixels"};
  db = transfer_or_die(&r, b, &absent);
  cr_assert_null(ferry_device_batch_images(db), "a batch without the image field is fine");
  ferry_device_batch_free(db);
  snapshot_free(&s);
  ferry_batch_release(b);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, image_field_is_an_option, image_field_is_an_option)

/* By default the transfer takes the field holding the images role, whatever its name:
 * lib/ knows no field by name (issue 37). */
static void the_images_role_not_a_name_makes_the_batch_tensor(const char *name) {
  rig r = rig_open(name, 1);
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 73);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), 0);
  cr_assert_eq(ferry_batch_set_role(b, 0, FERRY_ROLE_NONE), FERRY_OK);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), -1);
  ferry_device_batch *db = transfer_or_die(&r, b, NULL);
  cr_assert_null(ferry_device_batch_images(db), "a field called images without the role is a record");
  cr_assert_not_null(ferry_device_batch_sample_field(db, 0, "images"));
  ferry_device_batch_free(db);
  cr_assert_eq(ferry_batch_set_role(b, 6, FERRY_ROLE_IMAGES), FERRY_OK); /* image_id */
  db = transfer_or_die(&r, b, NULL);
  cr_assert(ferry_device_batch_images(db) && ferry_device_batch_images(db)->shape[0] == 5, "image_id's role");
  cr_assert_null(ferry_device_batch_sample_field(db, 0, "image_id"));
  ferry_device_batch_free(db);
  cr_assert_eq(ferry_batch_set_role(b, 0, FERRY_ROLE_IMAGES), FERRY_OK);
  cr_assert_eq(ferry_batch_find_role(b, FERRY_ROLE_IMAGES), 0, "a role moves: one field holds it");
  ferry_batch_release(b);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, the_images_role_not_a_name_makes_the_batch_tensor,
                 the_images_role_not_a_name_makes_the_batch_tensor)

static void bad_arguments_fail_cleanly(const char *name) {
  rig r = rig_open(name, 1);
  ferry_device *other = NULL;
  cr_assert_eq(ferry_device_open("host", &other), FERRY_OK);
  ferry_stream *foreign = NULL;
  cr_assert_eq(ferry_stream_open(other, &foreign), FERRY_OK);
  ferry_batch *b = make_packed(r.pool, 5, default_instances, 81);
  ferry_device_batch *db = NULL;
  cr_assert_eq(ferry_transfer(r.device, foreign, b, NULL, &db), FERRY_EINVAL);
  cr_assert_neq(strstr(ferry_last_error(), "stream"), NULL);
  cr_assert_eq(ferry_transfer(NULL, NULL, b, NULL, &db), FERRY_EINVAL);
  cr_assert_eq(ferry_transfer(r.device, NULL, NULL, NULL, &db), FERRY_EINVAL);
  cr_assert_eq(ferry__transfer_by((ferry__transfer_path)9, r.device, NULL, b, NULL, &db), FERRY_EINVAL);
  ferry_transfer_hook hook = {NULL, NULL, FERRY_HOOK_ENQUEUE};
  ferry_transfer_options hooks = {.hooks = &hook, .nhooks = 1};
  cr_assert_eq(ferry_transfer(r.device, NULL, b, &hooks, &db), FERRY_EINVAL);
  ferry_transfer_options too_many = {.hooks = &hook, .nhooks = FERRY_TRANSFER_MAX_HOOKS + 1};
  cr_assert_eq(ferry_transfer(r.device, NULL, b, &too_many, &db), FERRY_EINVAL);
  cr_assert_null(db);
  ferry_batch *same = NULL;
  cr_assert_eq(ferry__packed_to(NULL, r.device, NULL, &same), FERRY_EINVAL);
  ferry_batch_release(b);
  ferry_device *host = NULL;
  cr_assert_eq(ferry_device_open("host", &host), FERRY_OK);
  ferry_batch *u = make_unpacked(host, 5, default_instances, 1);
  cr_assert_eq(ferry__packed_to(u, r.device, NULL, &same), FERRY_EUNSUPPORTED);
  ferry_batch_release(u);
  ferry_device_close(host);
  ferry_stream_close(foreign);
  ferry_device_close(other);
  rig_close(&r);
}
ON_EVERY_BACKEND(transfer, bad_arguments_fail_cleanly, bad_arguments_fail_cleanly)

/* The CUDA pool's own high watermark is a second witness of ferry's accounting. */
Test(transfer, pool_watermark_agrees_with_accounting) {
  rig r = rig_open("cuda", 1);
  int64_t many[8] = {30, 0, 31, 4, 17, 2, 0, 25};
  ferry_batch *b = make_packed(r.pool, 8, many, 4);
  ferry__transfer_path modes[2] = {FERRY__DIRECT, FERRY__PACKED_THEN_CLONE};
  uint64_t high[2];
  for (int m = 0; m < 2; m++) {
    ferry_device_synchronize(r.device);
    cr_assert_eq(stats_of(r.device).live_bytes, 0);
    cr_assert_eq(ferry_device_reset_peak(r.device), FERRY_OK);
    uint64_t allocations = stats_of(r.device).allocations;
    ferry_device_batch *db = transfer_by_or_die(&r, b, modes[m], NULL);
    cr_assert_eq(ferry_device_batch_wait(db), FERRY_OK);
    ferry_memory_stats s = stats_of(r.device);
    cr_assert(s.pool_witness, "the CUDA backend reads its pool's watermark");
    /* The pool rounds each allocation up (to 512 bytes, as observed; not documented). */
    uint64_t slack = (s.allocations - allocations) * 1024;
    cr_assert_geq(s.pool_used_high, s.peak_bytes, "pool %llu < ferry %llu",
                  (unsigned long long)s.pool_used_high, (unsigned long long)s.peak_bytes);
    cr_assert_leq(s.pool_used_high, s.peak_bytes + slack, "pool %llu > ferry %llu + %llu",
                  (unsigned long long)s.pool_used_high, (unsigned long long)s.peak_bytes,
                  (unsigned long long)slack);
    high[m] = s.pool_used_high;
    ferry_device_batch_free(db);
  }
  ferry_tensor masks;
  cr_assert_eq(ferry_batch_field(b, 2, &masks), FERRY_OK);
  cr_assert_geq(high[1] - high[0], masks.nbytes, "the pool, too, sees the previous path's extra peak");
  ferry_batch_release(b);
  rig_close(&r);
}
