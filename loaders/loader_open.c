/* loaders/loader_open.c - opening a loader: the config, the plan of its batches, its sizes.
 *
 * Owns everything fixed at open: the config's defaults (ferry_loader_config_init),
 * its adoption across struct sizes (the ABI) and every check of it, the field table,
 * the fill context, the instance count of every image, the decoder (CPU or nvJPEG),
 * the sample order's setup, and the sizing of the pipeline: the worker count, the
 * prefetch depth, the arenas and the pool. Then it starts the threads. The consumer's
 * calls on an open loader, close and fork detection are in loader.c; the coordinator
 * and the workers in coordinator.c and workers.c; the state they share is described
 * in loader_internal.h.
 * Callers: the user's threads, through ferry_loader_open and the internal
 * ferry__loader_open_unpacked (baseline.h) and ferry__loader_open_gpu. Nobody else
 * sees the loader until open returns it, so nothing here takes the lock.
 *
 * Invariants:
 *   - a wrong config costs nothing: adopt_config and check_config refuse it before
 *     anything is allocated or parsed, and the decoder is resolved before the
 *     annotations are read (fail fast, naming the option);
 *   - everything computed here (config, the fill context, the field table, the
 *     instance counts, the depth and arena counts) is written before the coordinator
 *     and the workers start, and never again: they read it without the lock (what
 *     changes later, the GPU decoder's routes, it only points to: gpu_route.c's);
 *   - the instance counts are made with the same target options the workers write
 *     with (fill.c), so the layout and the fill agree on every row;
 *   - open either returns a loader whose threads all run, or closes what it opened
 *     (ferry_loader_close accepts a loader stopped at any step of open), keeping the
 *     failing step's message.
 * Not done here: anything after open returns (loader.c), the order of batches
 * (coordinator.c), filling (workers.c, fill.c, gpu_fill.c).
 */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/alloc.h"
#include "image/gpu/nvjpeg_api.h"
#include "loaders/baseline.h"
#include "loaders/gpu_fill.h"
#include "loaders/loader_open.h"
#include "loaders/loader_internal.h"
#include "loaders/coordinator.h"
#include "loaders/handoff.h"
#include "loaders/loader.h"
#include "loaders/shard_open.h"
#include "loaders/workers.h"
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
static ferry_status check_labels(const ferry_loader_config *c, const ferry__source_desc *src) {
  if ((unsigned)c->remap_categories > (unsigned)FERRY_CATEGORIES_RFDETR)
    return ferry__fail(FERRY_EINVAL, "loader: config.remap_categories %d is not a ferry_category_labels (0 raw, 1 "
                       "remap, 2 rfdetr)", c->remap_categories);
  if (!c->categories_from) return FERRY_OK;
  if (c->remap_categories != FERRY_CATEGORIES_RFDETR)
    return ferry__fail(FERRY_EINVAL, "loader: config.categories_from (%s) takes RF-DETR's labels from another split: "
                       "it needs remap_categories = FERRY_CATEGORIES_RFDETR", c->categories_from);
  if (ferry__source_is_shards(src))
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
static ferry_status check_config(const ferry_loader_config *c, const ferry__source_desc *src) {
  /* A split packed as shards holds its images: config.images may then be NULL. */
  if (!c->annotations) return ferry__fail(FERRY_EINVAL, "loader: config.annotations is required");
  if (!c->images && !ferry__source_is_shards(src))
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
  if (c->order == FERRY_ORDER_SHARDS && !ferry__source_is_shards(src))
    return ferry__fail(FERRY_EINVAL, "loader: config.order SHARDS needs a split packed as shards, and %s is not "
                       "a shard spec (docs/shards.md)", c->annotations);
  if ((c->rank < 0) != (c->world_size < 0))
    return ferry__fail(FERRY_EINVAL, "loader: give both rank and world_size, or neither (-1) to read the launcher's");
  ferry_status st = check_augment(c);
  if (st == FERRY_OK) st = check_labels(c, src);
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
  ferry__field_slots *s = &l->fill.slots;
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

/* The field table, checked once here, not for every batch the coordinator makes
 * (lib/batch_fields.h), and the roles that tell the transfer (lib/) which fields are
 * the images and the sample index without knowing their names: every batch laid out
 * carries them. */
static ferry_status check_fields(ferry_loader *l) {
  const ferry__field_slots *s = &l->fill.slots;
  ferry_status st = ferry__batch_fields_check(l->nfields, l->fields, &l->checked_fields);
  if (st == FERRY_OK && s->images >= 0)
    st = ferry__batch_fields_set_role(&l->checked_fields, (size_t)s->images, FERRY_ROLE_IMAGES);
  if (st == FERRY_OK)
    st = ferry__batch_fields_set_role(&l->checked_fields, (size_t)s->sample_index, FERRY_ROLE_SAMPLE_INDEX);
  return st;
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
  ferry_status st = ferry__loader_open_annotations(&l->source_desc, &co, &l->coco, &l->source);
  ferry_coco_close(labels);
  return st;
}

static ferry_status open_data(ferry_loader *l) {
  if (l->fill.gpu.api && ferry__source_is_shards(&l->source_desc)) /* before the walk: fail fast */
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
  st = check_fields(l);
  if (st == FERRY_OK) st = count_instances(l);
  if (st == FERRY_OK && l->fill.gpu.api) st = ferry__gpu_stat_files(&l->fill, l->workers);
  if (st == FERRY_OK && l->fill.gpu.api)
    st = ferry__gpu_stage_open(&l->fill, l->config.on_error == FERRY_ON_ERROR_SKIP);
  return st;
}

/* Tell the source how the sampler reads (image_source.h): neighbours in the shards
 * are read close together in the shard order (within the shuffle buffer) and, on one
 * rank, in the dataset order without shuffle; the dataset order's permutation, or its
 * stride across ranks, reads a shard's members far apart. */
static ferry_status plan_source_reads(ferry_loader *l) {
  if (!l->source || !l->source->plan_reads) return FERRY_OK;
  const ferry__sampler *s = &l->sampler;
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
static ferry_status resolve_decoder(ferry_loader *l, const struct ferry__nvjpeg_api *api) {
  ferry_decode_mode want = l->config.image.decode;
  l->stats.decoder = FERRY_DECODE_CPU;
  if (want != FERRY_DECODE_CPU && want != FERRY_DECODE_GPU && want != FERRY_DECODE_AUTO)
    return ferry__fail(FERRY_EINVAL, "loader: config.image.decode %d is not CPU, GPU or AUTO", (int)want);
  if (!api && want == FERRY_DECODE_CPU) return FERRY_OK;
  /* AUTO takes the CPU where the GPU decoder cannot do what is asked: a recipe
   * (check_augment refuses GPU with one), a reduced-size decode (check_draft refuses
   * GPU with it: nvJPEG decodes at full size), no images at all, or tar shards
   * (open_data refuses GPU with them). */
  if (!api && want == FERRY_DECODE_AUTO &&
      (l->config.augment.recipe != FERRY_AUGMENT_NONE || l->config.image.draft_size != 0 ||
       (l->config.fields & FERRY_LOADER_FIELD_NO_IMAGES) || ferry__source_is_shards(&l->source_desc))) {
    ferry__gpu_decoder_note(l, ferry__fail(FERRY_EUNSUPPORTED, "the GPU decoder neither augments, decodes at a "
                                           "reduced size, skips images nor reads tar shards"));
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

static ferry_status open_loader(const ferry_loader_config *config, const struct ferry__nvjpeg_api *api, int packed,
                                ferry_loader **out) {
  if (!config || !out) return ferry__fail(FERRY_EINVAL, "ferry_loader_open: config and out are required");
  *out = NULL;
  ferry_loader_config adopted;
  ferry__source_desc src;
  ferry_status st = adopt_config(config, &adopted);
  if (st == FERRY_OK)
    st = ferry__source_resolve(adopted.annotations, &adopted.source, &src); /* once: every later question asks src */
  if (st == FERRY_OK) st = check_config(&adopted, &src);
  if (st != FERRY_OK) return st;
  ferry_loader *l = ferry__calloc(1, sizeof *l);
  if (!l) return ferry__fail(FERRY_ENOMEM, "loader: out of memory");
  l->forks = ferry__loader_forks_so_far();
  l->config = adopted;
  l->packed = packed;
  l->workers = l->stats.workers = resolve_workers(config);
  pthread_mutex_init(&l->lock, NULL);
  l->annotations_path = ferry__strdup(config->annotations);
  l->source_desc = src;
  l->source_desc.annotations = l->annotations_path;
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

ferry_status ferry__loader_open_gpu(const ferry_loader_config *config, const struct ferry__nvjpeg_api *api,
                                    ferry_loader **out) {
  if (!api) return ferry__fail(FERRY_EINVAL, "ferry__loader_open_gpu: an nvJPEG table is required");
  return open_loader(config, api, 1, out);
}
