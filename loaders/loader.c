/* loaders/loader.c - the public loader: configuration, open/close, next, state.
 *
 * Owns the consumer's side of the pipeline (ferry_loader_next, set_epoch, state,
 * stats) and sizing at open: the worker count, the prefetch depth and the pool. The
 * coordinator and workers are in coordinator.c and workers.c, the release hook and
 * the other hand-offs in handoff.c; the lock and the condition variables they share
 * are described in loader_internal.h.
 * Callers: the user's threads. next from one thread at a time (loader.h); set_epoch,
 * state_get/set and stats_get from any, each under loader->lock; close from any,
 * also while those are in progress on other threads (not while one begins).
 *
 * Invariants:
 *   - everything open computes (config, the fill context, the field table, the
 *     instance counts, the depth and arena counts) is fixed before the coordinator
 *     and the workers start, and never written again: they read it without the
 *     lock. The one exception is the GPU decoder's per-image route bytes, which
 *     workers update with atomics (gpu_fill.c);
 *   - the consumer's view (state, samples_in_epoch, skipped_in_epoch) moves only with
 *     what next takes off the ready queue, or at once with a restart; it is what
 *     state_get saves, so a resumed loader continues with the batch after it;
 *   - `held` lists the batches delivered and not yet released; there are never more
 *     than `arenas` (the coordinator makes no more), so next can tell a consumer
 *     that holds them all instead of waiting forever;
 *   - open either returns a loader whose threads all run, or closes what it opened:
 *     close accepts a loader stopped at any step of open;
 *   - every public call but the two constant counts is counted in `calls` (enter,
 *     leave) from its first touch of the lock to its last touch of the loader, and
 *     close, once `stopping` is set (no call enters after it), frees nothing until
 *     `calls` is 0: a next waiting for a batch is woken and returns FERRY_ECANCELED;
 *   - in a child of fork() (`forks` differs from the process's count), no call takes
 *     the lock, which a thread that is not in the child may have held: they fail, and
 *     close forgets the loader.
 * Not done here: the order of batches (coordinator.c), filling (workers.c, fill.c,
 * gpu_fill.c), the wait for a batch's events before its arena is reused
 * (lib/pool.c).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/alloc.h"
#include "image/gpu/nvjpeg_api.h"
#include "lib/struct_size.h"
#include "lib/thread.h"
#include "image/gpu/jpeg_stage.h"
#include "coco/shards.h"
#include "loaders/baseline.h"
#include "loaders/loader_internal.h"
#include "ferry/advanced.h"

/* The defaults of every option this library knows. */
static void config_defaults(ferry_loader_config *c) {
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->batch_size = 8;
  c->prefetch = 0;
  c->max_outstanding = 2;
  c->max_pinned_bytes = FERRY_LOADER_PINNED_BUDGET_DEFAULT;
  c->max_instances = FERRY_LOADER_MAX_INSTANCES_DEFAULT;
  c->shuffle = 1;
  c->rank = c->world_size = -1;
  c->resolution = 312;
  c->fields = FERRY_LOADER_FIELDS_DEFAULT;
  c->box_format = FERRY_BOXES_XYXY;
  c->on_error = FERRY_ON_ERROR_FAIL;
  c->layout = FERRY_LAYOUT_F32_CHW;
  ferry_image_options_default(&c->image);
  ferry_augment_options_default(&c->augment);
}

void ferry_loader_config_init(ferry_loader_config *c, size_t size) {
  ferry_loader_config d;
  config_defaults(&d);
  d.struct_size = size;
  memcpy(c, &d, size < sizeof d ? size : sizeof d);
  if (size > sizeof d) memset((char *)c + sizeof d, 0, size - sizeof d);
}

/* A wrong images path would otherwise pass open and fail the first sample, each
 * sample's message naming a file rather than the folder that is wrong. */
static ferry_status check_images_folder(const char *images) {
  struct stat st;
  if (stat(images, &st) != 0)
    return ferry__fail(errno == ENOENT || errno == ENOTDIR ? FERRY_ENOTFOUND : FERRY_EIO,
                      "loader: images folder %s: %s", images, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return ferry__fail(FERRY_EIO, "loader: images folder %s is not a folder", images);
  return FERRY_OK;
}

/* The recipe's options, and the combinations it cannot take: keypoints (the recipes
 * would need their flip pairs) and the GPU decoder (it resizes square on the device),
 * each refused naming both options rather than given a different recipe silently. */
static ferry_status check_augment(const ferry_loader_config *c) {
  ferry_status st = ferry_augment_options_check(&c->augment, c->resolution);
  if (st != FERRY_OK) return ferry__error_prefix(st, "loader: config.");
  if (c->augment.recipe == FERRY_AUGMENT_NONE) return FERRY_OK;
  if (c->fields & FERRY_LOADER_FIELD_KEYPOINTS)
    return ferry__fail(FERRY_EUNSUPPORTED, "loader: config.augment.recipe %s with the keypoints field: the recipes "
                       "do not move keypoints (drop FERRY_LOADER_FIELD_KEYPOINTS or use recipe none)",
                       ferry_augment_name(c->augment.recipe));
  if (c->image.decode == FERRY_DECODE_GPU)
    return ferry__fail(FERRY_EUNSUPPORTED, "loader: config.augment.recipe %s with config.image.decode = GPU: the GPU "
                       "decoder resizes to R x R only; decode on the CPU (FERRY_DECODE_CPU) to augment",
                       ferry_augment_name(c->augment.recipe));
  return FERRY_OK;
}

/* The label policy, and the other split whose labels RF-DETR's may take. */
static ferry_status check_labels(const ferry_loader_config *c) {
  if ((unsigned)c->remap_categories > (unsigned)FERRY_CATEGORIES_RFDETR)
    return ferry__fail(FERRY_EINVAL, "loader: config.remap_categories %d is not a ferry_category_labels (0 raw, 1 "
                       "remap, 2 rfdetr)", c->remap_categories);
  if (!c->categories_from) return FERRY_OK;
  if (c->remap_categories != FERRY_CATEGORIES_RFDETR)
    return ferry__fail(FERRY_EINVAL, "loader: config.categories_from (%s) takes RF-DETR's labels from another split: "
                       "it needs remap_categories = FERRY_CATEGORIES_RFDETR", c->categories_from);
  if (ferry__shards_recognise(c->annotations))
    return ferry__fail(FERRY_EINVAL, "loader: config.categories_from (%s) with shards (%s): a shard index carries its "
                       "own label policy", c->categories_from, c->annotations);
  return FERRY_OK;
}

/* The reduced-size decode (ferry/image.h, draft_size): what it cannot be combined with,
 * each refused naming both options. RF-DETR's own rule (FERRY_DRAFT_SIZE_RFDETR) turns
 * itself off where RF-DETR's does (masks), so only an explicit size is refused there. */
static ferry_status check_draft(const ferry_loader_config *c) {
  int draft = c->image.draft_size;
  if (draft < FERRY_DRAFT_SIZE_RFDETR)
    return ferry__fail(FERRY_EINVAL, "loader: config.image.draft_size %d: 0 (full size), a size, or "
                       "FERRY_DRAFT_SIZE_RFDETR", draft);
  if (draft == 0) return FERRY_OK;
  if (c->image.dct_scaling)
    return ferry__fail(FERRY_EINVAL, "loader: config.image.draft_size with config.image.dct_scaling: two rules for "
                       "one decode scale; choose one");
  if (c->image.decode == FERRY_DECODE_GPU)
    return ferry__fail(FERRY_EUNSUPPORTED, "loader: config.image.draft_size with config.image.decode = GPU: nvJPEG "
                       "decodes at full size; decode on the CPU (FERRY_DECODE_CPU)");
  if (draft > 0 && (c->fields & (FERRY_LOADER_FIELD_MASKS | FERRY_LOADER_FIELD_KEYPOINTS)))
    return ferry__fail(FERRY_EINVAL, "loader: config.image.draft_size %d with the %s field: they cannot be rescaled "
                       "to a reduced decode as boxes are (RF-DETR never reduces a decode with masks)", draft,
                       c->fields & FERRY_LOADER_FIELD_MASKS ? "masks" : "keypoints");
  return FERRY_OK;
}

/* The config's bounds, checked before anything is allocated or parsed, so a wrong
 * argument costs no annotation parse. */
static ferry_status check_config(const ferry_loader_config *c) {
  /* A split packed as shards holds its images: config.images may then be NULL. */
  if (!c->annotations) return ferry__fail(FERRY_EINVAL, "loader: config.annotations is required");
  if (!c->images && !ferry__shards_recognise(c->annotations))
    return ferry__fail(FERRY_EINVAL, "loader: config.images, the folder of the images, is required for %s (only a "
                       "split packed as shards holds its images)", c->annotations);
  if (c->batch_size == 0 || c->max_outstanding == 0)
    return ferry__fail(FERRY_EINVAL, "loader: batch_size and max_outstanding must be at least 1");
  if (c->batch_size > FERRY_LOADER_MAX_BATCH)
    return ferry__fail(FERRY_EINVAL, "loader: batch_size %zu is more than %d (FERRY_LOADER_MAX_BATCH)",
                      c->batch_size, FERRY_LOADER_MAX_BATCH);
  if (c->prefetch > FERRY_LOADER_MAX_PREFETCH)
    return ferry__fail(FERRY_EINVAL, "loader: prefetch %zu is more than %d batches", c->prefetch,
                      FERRY_LOADER_MAX_PREFETCH);
  if (c->resolution < 1 || c->resolution > 8192)
    return ferry__fail(FERRY_EINVAL, "loader: resolution %d is outside 1..8192", c->resolution);
  if (c->workers > 1024) return ferry__fail(FERRY_EINVAL, "loader: %zu workers is too many", c->workers);
  if (c->max_instances == 0)
    return ferry__fail(FERRY_EINVAL, "loader: config.max_instances is 0: at least 1 (SIZE_MAX for no cap; "
                       "default %d)", FERRY_LOADER_MAX_INSTANCES_DEFAULT);
  /* Enums are ints to C: an unknown value would otherwise fail every sample (layout)
   * or quietly act as the default (box_format, on_error). */
  if (c->layout != FERRY_LAYOUT_F32_CHW && c->layout != FERRY_LAYOUT_U8_HWC)
    return ferry__fail(FERRY_EINVAL, "loader: config.layout %d is neither F32_CHW nor U8_HWC", (int)c->layout);
  if (c->on_error != FERRY_ON_ERROR_FAIL && c->on_error != FERRY_ON_ERROR_SKIP)
    return ferry__fail(FERRY_EINVAL, "loader: config.on_error %d is neither FAIL nor SKIP", (int)c->on_error);
  if ((unsigned)c->box_format > (unsigned)FERRY_BOXES_CXCYWH_NORM)
    return ferry__fail(FERRY_EINVAL, "loader: config.box_format %d is not a ferry_box_format", (int)c->box_format);
  if ((unsigned)c->order > (unsigned)FERRY_ORDER_SHARDS)
    return ferry__fail(FERRY_EINVAL, "loader: config.order %d is not a ferry_sample_order", (int)c->order);
  if (c->order == FERRY_ORDER_SHARDS && !ferry__shards_recognise(c->annotations))
    return ferry__fail(FERRY_EINVAL, "loader: config.order SHARDS needs a split packed as shards, and %s is not "
                       "a shard spec (docs/shards.md)", c->annotations);
  if ((c->rank < 0) != (c->world_size < 0))
    return ferry__fail(FERRY_EINVAL, "loader: give both rank and world_size, or neither (-1) to read the launcher's");
  ferry_status st = check_augment(c);
  if (st == FERRY_OK) st = check_labels(c);
  if (st == FERRY_OK) st = check_draft(c);
  return st == FERRY_OK && c->images ? check_images_folder(c->images) : st;
}

/* One field spec; returns its index. The table has FERRY_MAX_FIELDS entries and
 * define_fields adds at most 12. */
static int add_field(ferry_loader *l, const char *name, ferry_dtype dtype, ferry_field_kind kind,
                     int ndim, int64_t d0, int64_t d1, int64_t d2) {
  ferry_field_spec *f = &l->fields[l->nfields];
  *f = (ferry_field_spec){name, dtype, kind, ndim, {d0, d1, d2}};
  return (int)l->nfields++;
}

/* The batch's fields, in the order their slots are handed out. sample_index always
 * exists (fill.c writes it without looking), and so does images unless the GPU
 * decoder is in use (jpeg and cpu_images instead); every other slot stays -1
 * (memset to 0xFF bytes) unless asked for, and keypoints also needs a dataset that
 * has them. */
static void define_fields(ferry_loader *l) {
  const ferry_loader_config *c = &l->config;
  /* With a recipe, every sample has its own height and width (batch.h's sample
   * dimensions); without one, R x R. */
  int64_t H = l->fill.varies ? FERRY_DIM_SAMPLE_H : c->resolution, W = l->fill.varies ? FERRY_DIM_SAMPLE_W : c->resolution;
  int64_t R = c->resolution;
  unsigned want = c->fields;
  field_slots *s = &l->fill.slots;
  memset(s, -1, sizeof *s);
  if (want & FERRY_LOADER_FIELD_NO_IMAGES) {
    /* no pixels: nothing is decoded */
  } else if (l->fill.gpu.api) {
    /* No pixels but the fallbacks' u8 ones: the device makes the images tensor. */
    s->jpeg = add_field(l, FERRY_FIELD_JPEG, FERRY_U8, FERRY_FIELD_ROWS, 0, 0, 0, 0);
    s->cpu_images = add_field(l, FERRY_FIELD_CPU_IMAGES, FERRY_U8, FERRY_FIELD_ROWS, 3, R, R, 3);
  } else if (c->layout == FERRY_LAYOUT_U8_HWC) {
    s->images = add_field(l, FERRY_FIELD_IMAGES, FERRY_U8, FERRY_FIELD_PER_SAMPLE, 3, H, W, 3);
  } else {
    s->images = add_field(l, FERRY_FIELD_IMAGES, FERRY_F32, FERRY_FIELD_PER_SAMPLE, 3, 3, H, W);
  }
  s->sample_index = add_field(l, FERRY_FIELD_SAMPLE_INDEX, FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, 1, 0, 0);
  if (want & FERRY_LOADER_FIELD_BOXES) s->boxes = add_field(l, FERRY_FIELD_BOXES, FERRY_F32, FERRY_FIELD_ROWS, 1, 4, 0, 0);
  if (want & FERRY_LOADER_FIELD_LABELS) s->labels = add_field(l, FERRY_FIELD_LABELS, FERRY_I64, FERRY_FIELD_ROWS, 0, 0, 0, 0);
  if (want & FERRY_LOADER_FIELD_MASKS) s->masks = add_field(l, FERRY_FIELD_MASKS, FERRY_BOOL, FERRY_FIELD_ROWS, 2, H, W, 0);
  if (want & FERRY_LOADER_FIELD_AREA) s->area = add_field(l, FERRY_FIELD_AREA, FERRY_F32, FERRY_FIELD_ROWS, 0, 0, 0, 0);
  if (want & FERRY_LOADER_FIELD_ISCROWD) s->iscrowd = add_field(l, FERRY_FIELD_ISCROWD, FERRY_I64, FERRY_FIELD_ROWS, 0, 0, 0, 0);
  if (want & FERRY_LOADER_FIELD_IMAGE_ID) s->image_id = add_field(l, FERRY_FIELD_IMAGE_ID, FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, 1, 0, 0);
  if (want & FERRY_LOADER_FIELD_ORIG_SIZE) s->orig_size = add_field(l, FERRY_FIELD_ORIG_SIZE, FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, 2, 0, 0);
  if (want & FERRY_LOADER_FIELD_SIZE) s->size = add_field(l, FERRY_FIELD_SIZE, FERRY_I64, FERRY_FIELD_PER_SAMPLE, 1, 2, 0, 0);
  if ((want & FERRY_LOADER_FIELD_KEYPOINTS) && l->keypoints)
    s->keypoints = add_field(l, "keypoints", FERRY_F32, FERRY_FIELD_ROWS, 2, (int64_t)l->keypoints, 3, 0);
  if (want & FERRY_LOADER_FIELD_AUGMENT)
    s->augment = add_field(l, FERRY_FIELD_AUGMENT, FERRY_I32, FERRY_FIELD_PER_SAMPLE, 1, FERRY_AUGMENT_RECORD_LEN, 0, 0);
}

/* Instance counts of every image, up front: they lay every batch out. Counted with the
 * same target options the workers write with, so a batch's rows and what fill.c
 * writes into them agree; an annotation the targets cannot use (no bbox) fails here,
 * at open, rather than in a sample. */
static ferry_status count_instances(ferry_loader *l) {
  size_t n = ferry_coco_num_images(l->coco);
  l->instances = ferry__calloc(n, sizeof *l->instances);
  if (!l->instances) return ferry__fail(FERRY_ENOMEM, "loader: out of memory for %zu images", n);
  for (size_t i = 0; i < n; i++) {
    ferry_status st = ferry__loader_target_count(&l->fill, i, &l->instances[i]);
    if (st != FERRY_OK) return st;
  }
  return FERRY_OK;
}

/* The annotations and, for the image files, the source of their bytes; under RF-DETR's
 * labels with categories_from, that split's labels first, kept only for the open. */
static ferry_status open_annotations(ferry_loader *l) {
  ferry_coco_options co;
  ferry_coco_options_default(&co);
  co.remap_categories = l->config.remap_categories;
  ferry_coco *labels = NULL;
  if (l->config.categories_from) {
    ferry_status st = ferry_coco_open(l->config.categories_from, &co, &labels);
    if (st != FERRY_OK) return ferry__error_prefix(st, "loader: config.categories_from: ");
    co.labels_from = labels;
  }
  ferry_status st = ferry__loader_open_annotations(l->annotations_path, &co, &l->coco, &l->source);
  ferry_coco_close(labels);
  return st;
}

static ferry_status open_data(ferry_loader *l) {
  if (l->fill.gpu.api && ferry__shards_recognise(l->annotations_path)) /* before the walk: fail fast */
    return ferry__fail(FERRY_EUNSUPPORTED, "loader: %s: the GPU decoder reads image files, not shards; decode on "
                       "the CPU (FERRY_DECODE_CPU)", l->annotations_path);
  ferry_status st = open_annotations(l);
  if (st != FERRY_OK) return st;
  l->fill.source = l->source;
  l->keypoints = ferry_coco_num_keypoints(l->coco);
  ferry_target_options_default(&l->fill.target);
  l->fill.target.keep_crowd = l->config.keep_crowd;
  l->fill.target.mask_height = l->fill.target.mask_width = l->config.resolution;
  l->fill.coco = l->coco;
  l->fill.images_dir = l->images_dir;
  l->fill.resolution = l->config.resolution;
  l->fill.seed = l->config.seed;
  l->fill.max_instances = l->config.max_instances;
  st = ferry__augment_recipe_init(&l->fill.recipe, &l->config.augment, l->config.resolution);
  if (st != FERRY_OK) return ferry__error_prefix(st, "loader: config.");
  l->fill.varies = ferry__augment_varies(&l->fill.recipe);
  l->fill.box_format = l->config.box_format;
  l->fill.layout = l->config.layout;
  l->fill.image = l->config.image;
  if (l->fill.image.draft_size == FERRY_DRAFT_SIZE_RFDETR) /* before the counts: they are made at its size */
    l->fill.image.draft_size =
        ferry__augment_draft_size(&l->fill.recipe, (l->config.fields & FERRY_LOADER_FIELD_MASKS) != 0);
  l->fill.allow_escaping_paths = l->config.allow_escaping_paths;
  define_fields(l);
  /* Checked once here, not for every batch the coordinator makes (lib/batch_internal.h). */
  st = ferry__batch_fields_check(l->nfields, l->fields, &l->checked_fields);
  if (st == FERRY_OK) st = count_instances(l);
  if (st == FERRY_OK && l->fill.gpu.api) st = ferry__gpu_stat_files(&l->fill, l->workers);
  l->fill.gpu.skip_unreadable = l->config.on_error == FERRY_ON_ERROR_SKIP;
  if (st == FERRY_OK && l->fill.gpu.api) st = ferry__gpu_stage_open(&l->fill, &l->fill.gpu.stage);
  return st;
}

/* Tell the source how the sampler reads (image_source.h): neighbours in the shards
 * are read close together in the shard order (within the shuffle buffer) and, on one
 * rank, in the dataset order without shuffle; the dataset order's permutation, or its
 * stride across ranks, reads a shard's members far apart. */
static ferry_status plan_source_reads(ferry_loader *l) {
  if (!l->source || !l->source->plan_reads) return FERRY_OK;
  const ferry_sampler *s = &l->sampler;
  int neighbours = s->shard_samples ? 1 : !s->shuffle && s->world_size == 1;
  size_t buffer = s->shard_samples && s->shuffle ? s->buffer : 1;
  return l->source->plan_reads(l->source, neighbours, buffer, l->workers);
}

/* rank and world_size both -1: from the launcher's environment (sampler.c). The
 * shard order is AUTO's for shards (check_config refused SHARDS without them). */
static ferry_status open_sampler(ferry_loader *l) {
  int rank = l->config.rank, world = l->config.world_size;
  if (rank < 0) {
    ferry_status st = ferry__sampler_rank_from_env(&rank, &world);
    if (st != FERRY_OK) return st;
  }
  l->stats.rank = rank;
  l->stats.world_size = world;
  ferry_status st = ferry__sampler_init(&l->sampler, ferry_coco_num_images(l->coco), rank, world,
                                       l->config.shuffle, l->config.drop_last, l->config.seed);
  if (st != FERRY_OK || !l->source || !l->source->shard_samples || l->config.order == FERRY_ORDER_DATASET)
    return st == FERRY_OK ? plan_source_reads(l) : st;
  size_t buffer = l->config.shuffle_buffer ? l->config.shuffle_buffer : FERRY_LOADER_SHUFFLE_BUFFER_DEFAULT;
  st = ferry__sampler_use_shards(&l->sampler, l->source->shard_samples, l->source->num_shards, buffer);
  return st == FERRY_OK ? plan_source_reads(l) : st;
}


/* The mean of n values, rounded up (0 for none; negative values count as 0). */
static int64_t mean_up(const int64_t *v, size_t n) {
  int64_t total = 0;
  for (size_t i = 0; i < n; i++) total += v[i] > 0 ? v[i] : 0;
  return n ? (total + (int64_t)n - 1) / (int64_t)n : 0;
}

/* The bytes of a batch of mean instance counts (and, with the GPU decoder, mean file
 * sizes and no fallback), plus the quarter of headroom the pool gives an arena: what
 * one arena costs in the steady state. */
static size_t typical_arena_bytes(const ferry_loader *l) {
  size_t n = ferry_coco_num_images(l->coco), B = l->config.batch_size;
  int64_t mean = mean_up(l->instances, n);
  int64_t rows[FERRY_MAX_FIELDS];
  for (size_t f = 0; f < l->nfields; f++) rows[f] = mean;
  if (l->fill.gpu.api) {
    rows[l->fill.slots.jpeg] = mean_up(l->fill.gpu.file_bytes, n);
    rows[l->fill.slots.cpu_images] = 0;
  }
  /* With a recipe, a sample of the largest scale, 4:3 (capped) unless square. */
  const ferry__augment_recipe *r = &l->fill.recipe;
  int64_t s = r->scales[r->nscales - 1], hw[2] = {s, s};
  if (r->options.recipe != FERRY_AUGMENT_RFDETR_SQUARE) hw[1] = s * 4 / 3 < r->options.max_size ? s * 4 / 3 : r->options.max_size;
  size_t per_sample = 0;
  for (size_t f = 0; f < l->nfields; f++) {
    size_t one;
    if (ferry_batch_layout_bytes_sized(1, 1, &l->fields[f], &rows[f], hw, &one) != FERRY_OK) return SIZE_MAX;
    per_sample += one;
  }
  return per_sample > SIZE_MAX / 2 / B ? SIZE_MAX : per_sample * B + per_sample * B / 4;
}

/* Cores this process may run on: its affinity mask (taskset, cgroup cpusets), else
 * the online count. */
static size_t usable_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return (size_t)CPU_COUNT(&set);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? (size_t)cores : 1;
}

/* The worker count; the number that may fill at once (max_busy) is the core count
 * whatever this is, so more workers than cores only sleep (docs/tuning.md). */
static size_t resolve_workers(const ferry_loader_config *c) {
  return c->workers ? c->workers : usable_cores();
}

/* Samples in flight per worker by default. A batch is done only when its slowest
 * sample is, and batches are handed out in order, so with about `workers` samples in
 * flight the early finishers idle behind the slowest, and every time they run out
 * they sleep and must be woken: 16 workers on 2 cores, tiny images, batch 8,
 * switched context 0.58 times per image with 4 samples per worker against 1.6 with 2
 * (docs/tuning.md). */
enum { SAMPLES_PER_WORKER = 4 };

/* Batches in flight: what the config asks for, or SAMPLES_PER_WORKER samples per
 * worker (at least 2 batches), within the pinned budget. The budget pays for the
 * consumer's max_outstanding arenas first; the depth gets the rest, at least 1 (an
 * arena too large for the budget, or one whose size overflows, leaves 1). It binds
 * only packed loaders: an unpacked batch is plain per-sample memory, not the pool. */
static size_t resolve_prefetch(const ferry_loader *l) {
  const ferry_loader_config *c = &l->config;
  if (c->prefetch) return c->prefetch;
  size_t samples = l->workers > SIZE_MAX / SAMPLES_PER_WORKER ? SIZE_MAX : SAMPLES_PER_WORKER * l->workers;
  size_t want = samples / c->batch_size + (samples % c->batch_size != 0);
  if (want < 2) want = 2;
  if (want > FERRY_LOADER_MAX_PREFETCH) want = FERRY_LOADER_MAX_PREFETCH;
  if (c->max_pinned_bytes && l->packed) {
    size_t arena = typical_arena_bytes(l);
    size_t fit = arena ? c->max_pinned_bytes / arena : want + c->max_outstanding;
    size_t room = fit > c->max_outstanding ? fit - c->max_outstanding : 1;
    if (room < want) want = room;
  }
  return want;
}

/* One arena for each batch in flight or ready, plus one for each the consumer may
 * hold. The coordinator never makes more batches than there are arenas, so in the
 * pool it waits only for an arena released but still pending on its events. */
static ferry_status open_memory(ferry_loader *l) {
  l->prefetch = resolve_prefetch(l);
  l->arenas = l->prefetch + l->config.max_outstanding;
  l->refill = l->prefetch / 4 ? l->prefetch / 4 : 1;
  l->stats.prefetch = l->prefetch;
  l->stats.arenas = l->arenas;
  l->device = l->config.device;
  if (!l->device) {
    ferry_status st = ferry_device_open("host", &l->device);
    if (st != FERRY_OK) return st;
    l->owns_device = 1;
  }
  if (!l->packed) return FERRY_OK;
  return ferry_pool_open(l->device, l->arenas, 0, &l->pool);
}

/* config.image.decode, resolved on config.device (NULL: the host). GPU decoding needs
 * a CUDA device and nvJPEG (ferry__nvjpeg_device_check names what is missing): GPU
 * fails at open without them, AUTO falls back to the CPU. With the GPU decoder the
 * batches carry compressed bytes (gpu_fill.c) and ferry_transfer's direct path makes
 * the images tensor on the device (image/gpu/jpeg_stage.h). */
static ferry_status resolve_decoder(ferry_loader *l, const struct ferry_nvjpeg_api *api) {
  ferry_decode_mode want = l->config.image.decode;
  l->stats.decoder = FERRY_DECODE_CPU;
  if (want != FERRY_DECODE_CPU && want != FERRY_DECODE_GPU && want != FERRY_DECODE_AUTO)
    return ferry__fail(FERRY_EINVAL, "loader: config.image.decode %d is not CPU, GPU or AUTO", (int)want);
  if (!api && want == FERRY_DECODE_CPU) return FERRY_OK;
  /* AUTO takes the CPU where the GPU decoder cannot do what is asked: a recipe
   * (check_augment refuses GPU with one), no images at all, or tar shards (open_data
   * refuses GPU with them). */
  if (!api && want == FERRY_DECODE_AUTO &&
      (l->config.augment.recipe != FERRY_AUGMENT_NONE || (l->config.fields & FERRY_LOADER_FIELD_NO_IMAGES) ||
       ferry__shards_recognise(l->annotations_path))) {
    ferry__gpu_decoder_note(l, ferry__fail(FERRY_EUNSUPPORTED, "the GPU decoder neither augments, skips images "
                                           "nor reads tar shards"));
    return FERRY_OK;
  }
  ferry_status st = FERRY_OK;
  if (!api) st = ferry__nvjpeg_device_check(l->config.device);
  if (!api && st == FERRY_OK) st = ferry__nvjpeg_load(&api);
  /* Every worker opens nvJPEG: where it cannot start, AUTO knows it now, not at the
   * first worker. */
  if (st == FERRY_OK) st = ferry__gpu_decoder_probe(api);
  if (st != FERRY_OK && want == FERRY_DECODE_AUTO) {
    ferry__gpu_decoder_note(l, st);
    return FERRY_OK;
  }
  if (st != FERRY_OK) return ferry__error_prefix(st, "loader: config.image.decode = GPU: ");
  l->fill.gpu.api = api; /* a test's fake table (ferry__loader_open_gpu), or nvJPEG */
  l->stats.decoder = FERRY_DECODE_GPU;
  return FERRY_OK;
}

static ferry_status start_threads(ferry_loader *l) {
  ferry_status st = ferry__loader_start_workers(l, l->workers, usable_cores());
  return st == FERRY_OK ? ferry__coordinator_start(l) : st;
}

/* The caller's config as this library's: the options it knows, copied; those it was
 * built without, at their defaults; those it knows and this library does not, refused
 * unless left at zero (loader.h, struct_size). */
static ferry_status adopt_config(const ferry_loader_config *given, ferry_loader_config *c) {
  size_t n = given->struct_size;
  if (n < offsetof(ferry_loader_config, annotations) + sizeof given->annotations)
    return ferry__fail(FERRY_EINVAL, "loader: config.struct_size is %zu: fill the config with "
                       "ferry_loader_config_default before setting options", n);
  config_defaults(c);
  memcpy(c, given, n < sizeof *c ? n : sizeof *c);
  c->struct_size = sizeof *c;
  for (size_t i = sizeof *c; i < n; i++)
    if (((const unsigned char *)given)[i])
      return ferry__fail(FERRY_EUNSUPPORTED, "loader: the config sets an option at byte %zu, which this "
                         "library (config of %zu bytes) does not know: it is older than the header the "
                         "program was built with", i, sizeof *c);
  return FERRY_OK;
}

/* ---- fork ---------------------------------------------------------------------- */

/* Children fork() has made in this process's line (pthread_atfork, installed at the
 * first open): a loader opened under another count is a child's copy of its parent's. */
static atomic_uint fork_count;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;
static void count_fork(void) { atomic_fetch_add_explicit(&fork_count, 1, memory_order_relaxed); }
static void install_fork_hook(void) { pthread_atfork(NULL, NULL, count_fork); }

static unsigned forks_so_far(void) {
  pthread_once(&fork_hook_once, install_fork_hook);
  return atomic_load_explicit(&fork_count, memory_order_relaxed);
}

static int in_fork_child(const ferry_loader *l) {
  return atomic_load_explicit(&fork_count, memory_order_relaxed) != l->forks;
}

static ferry_status open_loader(const ferry_loader_config *config, const struct ferry_nvjpeg_api *api, int packed,
                                ferry_loader **out) {
  if (!config || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_open: config and out are required");
  *out = NULL;
  ferry_loader_config adopted;
  ferry_status st = adopt_config(config, &adopted);
  if (st == FERRY_OK) st = check_config(&adopted);
  if (st != FERRY_OK) return st;
  ferry_loader *l = ferry__calloc(1, sizeof *l);
  if (!l) return ferry__fail(FERRY_ENOMEM, "loader: out of memory");
  l->forks = forks_so_far();
  l->config = adopted;
  l->packed = packed;
  l->workers = l->stats.workers = resolve_workers(config);
  pthread_mutex_init(&l->lock, NULL);
  l->annotations_path = ferry__strdup(config->annotations);
  l->images_dir = ferry__strdup(config->images ? config->images : "");
  l->view.state.seed = config->seed;
  if (!l->annotations_path || !l->images_dir) st = ferry__fail(FERRY_ENOMEM, "loader: out of memory");
  if (st == FERRY_OK) st = resolve_decoder(l, api); /* before the annotations: fail fast */
  if (st == FERRY_OK) st = open_data(l);
  if (st == FERRY_OK) st = open_sampler(l);
  if (st == FERRY_OK) st = open_memory(l);
  if (st == FERRY_OK) st = ferry__handoff_open(l, l->workers, l->arenas);
  if (st == FERRY_OK) st = start_threads(l);
  if (st != FERRY_OK) {
    char message[FERRY_ERROR_MAX];
    memcpy(message, ferry_last_error(), sizeof message);
    ferry_loader_close(l);
    return ferry__error_restore(st, message);
  }
  *out = l;
  return FERRY_OK;
}

ferry_status ferry_loader_open(const ferry_loader_config *config, ferry_loader **out) {
  return open_loader(config, NULL, 1, out);
}

ferry_status ferry__loader_open_unpacked(const ferry_loader_config *config, ferry_loader **out) {
  return open_loader(config, NULL, 0, out);
}

ferry_status ferry__loader_open_gpu(const ferry_loader_config *config, const struct ferry_nvjpeg_api *api,
                                   ferry_loader **out) {
  if (!api) return ferry__fail(FERRY_EINVAL, "ferry__loader_open_gpu: an nvJPEG table is required");
  return open_loader(config, api, 1, out);
}






/* ---- calls in progress, close and fork ---------------------------------------- */

/* Count a call in and return with the lock held; or refuse it, without the lock: in
 * a fork child (its lock may be held by a parent's thread, which will never let it
 * go), or once close has begun. */
static ferry_status enter(ferry_loader *l, const char *call) {
  if (in_fork_child(l))
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: the loader was opened before fork() and its threads are in the "
                       "parent process; open a new loader in the child", call);
  pthread_mutex_lock(&l->lock);
  if (l->stopping) {
    ferry__loader_unlock(l);
    return ferry__fail(FERRY_ECANCELED, "%s: the loader is being closed", call);
  }
  l->calls++;
  return FERRY_OK;
}

/* Count a call out, the lock not held, once it touches the loader no more. Nothing is
 * owed after the decrement, so the unlock is the last touch: close may free next. */
static void leave(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  if (--l->calls == 0 && l->stopping) ferry__cond_wake(&l->close_cv);
  ferry__loader_unlock(l);
}

/* leave, from a call that holds the lock: the wake-ups it owes go out first. */
static void leave_locked(ferry_loader *l) {
  ferry__loader_unlock(l);
  leave(l);
}

/* close, after `stopping`: the calls in progress have all returned. */
static void wait_for_calls(ferry_loader *l) {
  pthread_mutex_lock(&l->lock);
  while (l->calls) ferry__loader_wait(l, &l->close_cv, NULL);
  ferry__loader_unlock(l);
}

/* The absolute CLOCK_MONOTONIC time `ms` from now (ms >= 0). */
static struct timespec deadline_after(int ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

/* Wait for the next current-generation item; NULL with the status set if none can come.
 * An item of an older generation at the head is left for the coordinator to drop
 * (it wakes on the restart that made it stale). With nothing ready and every arena
 * held by the consumer, no batch can be made until one is released: that is an
 * error, not a wait that would never end. With a deadline (NULL: none), the wait
 * also ends, FERRY_EAGAIN, when it passes or a signal handler ran on this thread. */
static ready_item *wait_item(ferry_loader *l, const struct timespec *deadline, ferry_status *st) {
  for (;;) {
    if (l->stopping) {
      *st = ferry__fail(FERRY_ECANCELED, "loader: closed");
      return NULL;
    }
    if (l->coord.failed) {
      *st = ferry__error_restore(l->coord.fatal_status, l->coord.fatal_message);
      return NULL;
    }
    ready_item *item = ferry__handoff_pop_ready(l);
    if (item) return item;
    if (!l->hand.ready_head && l->hand.nheld >= l->arenas) {
      *st = ferry__fail(FERRY_ELIMIT, "loader: the consumer holds all %zu batches; release one "
                       "(ferry_batch_release) before asking for the next", l->arenas);
      return NULL;
    }
    if (ferry__loader_wait_until(l, &l->ready_cv, &l->stats.consumer_idle_cpu_ns, deadline) != 0) {
      *st = ferry__fail(FERRY_EAGAIN, "loader: no batch yet (the wait was bounded or interrupted)");
      return NULL;
    }
  }
}

/* After an end or an error, the consumer's view moves to the next epoch, as the
 * coordinator did when it queued the marker (coordinator.c begin_epoch). */
static void next_epoch_view(ferry_loader *l, int64_t ended) {
  consumer_view *v = &l->view;
  v->state.epoch = ended + 1;
  v->state.batches_delivered = 0;
  v->state.cursor = 0;
  v->samples_in_epoch = v->skipped_in_epoch = 0;
}

/* The view and `held` change under the lock; the progress callback runs after it is
 * let go, so that the callback may call the loader (stats_get, state_get). An item
 * is recycled whatever its kind: a batch's item carries only its address. */
ferry_status ferry_loader_next_timed(ferry_loader *l, ferry_batch **out, int timeout_ms) {
  if (!l || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_next: loader and out are required");
  *out = NULL;
  ferry_status st = enter(l, "ferry_loader_next");
  if (st != FERRY_OK) return st;
  struct timespec deadline = deadline_after(timeout_ms > 0 ? timeout_ms : 0);
  ready_item *item = wait_item(l, timeout_ms >= 0 ? &deadline : NULL, &st);
  ferry_loader_progress progress = {0};
  consumer_view *v = &l->view;
  if (item && item->kind == ITEM_BATCH) {
    ferry__handoff_hold(l, item->batch);
    v->state.epoch = item->epoch;
    v->state.batches_delivered++;
    v->state.cursor = item->cursor_after;
    v->samples_in_epoch += item->count;
    v->skipped_in_epoch = item->skipped;
    l->stats.batches_delivered++;
    progress = (ferry_loader_progress){v->state.epoch, v->state.batches_delivered,
                                       ferry_loader_batches_per_epoch(l), v->samples_in_epoch,
                                       v->skipped_in_epoch, 0};
    *out = item->batch;
  } else if (item) {
    if (item->kind == ITEM_END) /* the final counts, before the view moves on */
      progress = (ferry_loader_progress){item->epoch, v->state.batches_delivered,
                                         ferry_loader_batches_per_epoch(l), v->samples_in_epoch,
                                         item->skipped, 1};
    next_epoch_view(l, item->epoch);
    st = item->kind == ITEM_END ? FERRY_EEND : ferry__error_restore(item->status, item->message);
  }
  ferry__handoff_item_put(l, item);
  ferry__loader_unlock(l);
  if ((*out || progress.epoch_ended) && l->config.progress)
    l->config.progress(&progress, l->config.progress_user);
  leave(l);
  if (st == FERRY_EEND) ferry__fail(FERRY_EEND, "end of epoch"); /* the callback may call ferry */
  return st;
}

ferry_status ferry_loader_next(ferry_loader *l, ferry_batch **out) { return ferry_loader_next_timed(l, out, -1); }

/* Restart the coordinator at (epoch, cursor); what was in flight is dropped
 * (coordinator.c). The view is set in the same hold of the lock, so a state_get right
 * after already says where the loader stands, and no batch of the old generation can
 * be taken in between. Batches the consumer holds stay valid. The lock is held. */
static void restart(ferry_loader *l, int64_t epoch, uint64_t cursor, uint64_t delivered) {
  ferry__coordinator_restart(l, epoch, cursor, delivered);
  consumer_view *v = &l->view;
  v->state.epoch = epoch;
  v->state.batches_delivered = delivered;
  v->state.cursor = cursor;
  v->samples_in_epoch = v->skipped_in_epoch = 0;
}

/* Nothing of `epoch` delivered yet, and the coordinator laying it out from its start:
 * just opened (or restarted there), or the previous epoch's end or error taken (the
 * coordinator begins the next epoch as it queues either: coordinator.c). What is in
 * flight is then exactly what a restart would make again. */
static int stands_at_start_of(const ferry_loader *l, int64_t epoch) {
  const ferry_loader_state *s = &l->view.state;
  return s->epoch == epoch && s->batches_delivered == 0 && s->cursor == 0 && !l->coord.failed;
}

/* The recommended loop calls set_epoch before every epoch, at the epoch the loader
 * already stands at: a restart there would throw the prefetched batches away. */
ferry_status ferry_loader_set_epoch(ferry_loader *l, int64_t epoch) {
  if (!l || epoch < 0) return ferry__fail(FERRY_EINVAL, "ferry_loader_set_epoch: a loader and an epoch >= 0 are required");
  ferry_status st = enter(l, "ferry_loader_set_epoch");
  if (st != FERRY_OK) return st;
  if (!stands_at_start_of(l, epoch)) restart(l, epoch, 0, 0);
  leave_locked(l);
  return FERRY_OK;
}

ferry_status ferry_loader_state_get(ferry_loader *l, ferry_loader_state *out) {
  if (!l || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_state_get: loader and out are required");
  ferry_status st = enter(l, "ferry_loader_state_get");
  if (st != FERRY_OK) return st;
  *out = l->view.state;
  leave_locked(l);
  return FERRY_OK;
}

/* The seed draws every epoch's order: a state saved under another seed names
 * positions in a different order, so it is refused rather than resumed. */
ferry_status ferry_loader_state_set(ferry_loader *l, const ferry_loader_state *s) {
  if (!l || !s) return ferry__fail(FERRY_EINVAL, "ferry_loader_state_set: loader and state are required");
  if (s->seed != l->config.seed)
    return ferry__fail(FERRY_EINVAL, "loader state: seed %llu was saved, but this loader uses seed %llu",
                      (unsigned long long)s->seed, (unsigned long long)l->config.seed);
  if (s->epoch < 0 || s->cursor > l->sampler.per_rank)
    return ferry__fail(FERRY_EINVAL, "loader state: epoch %lld / cursor %llu are out of range (%zu samples per epoch)",
                      (long long)s->epoch, (unsigned long long)s->cursor, l->sampler.per_rank);
  ferry_status st = enter(l, "ferry_loader_state_set");
  if (st != FERRY_OK) return st;
  restart(l, s->epoch, s->cursor, s->batches_delivered);
  leave_locked(l);
  return FERRY_OK;
}

/* CPU time of the coordinator thread so far: the serial part of the pipeline that
 * repro/throughput reports per batch (0 before it starts). */
static uint64_t coordinator_cpu_ns(const ferry_loader *l) {
  clockid_t clock;
  struct timespec ts;
  if (!l->coord.started || pthread_getcpuclockid(l->coord.thread, &clock) != 0 ||
      clock_gettime(clock, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The counters are gathered in this library's layout, then copied out as far as the
 * caller's struct_size reaches (loader.h, ferry_loader_stats; lib/struct_size.h): the
 * caller's struct is written once, at the end, and not at all on failure. The embedded
 * pool stats' struct_size is the part of them the caller's struct covers. */
ferry_status ferry_loader_stats_get(ferry_loader *l, ferry_loader_stats *out) {
  if (!l || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_stats_get: loader and out are required");
  ferry_status st = ferry__struct_size_check(out, offsetof(ferry_loader_stats, samples_decoded) +
                                                      sizeof out->samples_decoded,
                                             "ferry_loader_stats_get", "ferry_loader_stats_init");
  if (st == FERRY_OK) st = enter(l, "ferry_loader_stats_get");
  if (st != FERRY_OK) return st;
  ferry_loader_stats s = l->stats;
  ferry__loader_unlock(l);
  s.samples_skipped += ferry__gpu_skipped_in_transfer(&l->fill);
  s.coordinator_cpu_ns = coordinator_cpu_ns(l);
  ferry_pool_stats_init(&s.pool);
  if (l->pool) st = ferry_pool_stats_get(l->pool, &s.pool);
  leave(l);
  if (st != FERRY_OK) return st;
  s.pool.struct_size = ferry__struct_nested_size(out->struct_size, offsetof(ferry_loader_stats, pool), sizeof s.pool);
  ferry__struct_copy_out(out, &s, sizeof s);
  return FERRY_OK;
}

uint64_t ferry_loader_samples_per_epoch(const ferry_loader *l) { return l->sampler.per_rank; }

/* Nominal: skipped samples make an epoch shorter, never longer. */
uint64_t ferry_loader_batches_per_epoch(const ferry_loader *l) {
  uint64_t n = l->sampler.per_rank, b = l->config.batch_size;
  return l->config.drop_last ? n / b : (n + b - 1) / b;
}

/* The order matters. stopping and a new generation make the consumer and the
 * coordinator give up, and no call enters after it; the calls in progress return
 * (a next waiting for a batch with FERRY_ECANCELED); cancelling the pool frees a
 * coordinator blocked on an arena;
 * the coordinator is joined before the workers, since its exit waits for the slots
 * they hold; the consumer's batches go back before the pool that owns their arenas
 * is closed, and the pool before the device whose memory it pinned. Their hooks are
 * removed first: the loader they point to is going away. */
void ferry_loader_close(ferry_loader *l) {
  if (!l) return;
  if (in_fork_child(l)) { /* the threads to join and the locks are the parent's: forget it */
    ferry__fail(FERRY_EUNSUPPORTED, "ferry_loader_close: the loader was opened before fork(); the child "
                "only forgets it (its memory stays, as the parent's copy)");
    return;
  }
  ferry__coordinator_stop(l);
  wait_for_calls(l);
  if (l->pool) ferry_pool_cancel(l->pool);
  ferry__coordinator_join(l);
  ferry__loader_stop_workers(l);
  ferry__handoff_close(l);
  ferry__jpeg_stage_close(l->fill.gpu.stage); /* after the batches: it waits for their device work */
  ferry_pool_close(l->pool);
  if (l->owns_device) ferry_device_close(l->device);
  ferry__sampler_destroy(&l->sampler);
  ferry__free(l->instances);
  ferry__free(l->fill.gpu.file_bytes);
  ferry__free(l->fill.gpu.route);
  ferry_coco_close(l->coco);
  if (l->source) l->source->close(l->source);
  ferry__free(l->annotations_path);
  ferry__free(l->images_dir);
  pthread_mutex_destroy(&l->lock);
  ferry__free(l);
}
