/* ferry/loader.h - the loader: worker threads fill pinned packed batches.
 *
 *   ferry_loader_config cfg;
 *   ferry_loader_config_default(&cfg);
 *   cfg.annotations = "annotations/instances_val2017.json";
 *   cfg.images = "val2017";
 *   ferry_loader *loader;
 *   if (ferry_loader_open(&cfg, &loader) != FERRY_OK) die(ferry_last_error());
 *   for (;;) {
 *     ferry_batch *batch;
 *     ferry_status st = ferry_loader_next(loader, &batch);
 *     if (st == FERRY_EEND) break;           // the epoch is over; the next call starts the next
 *     if (st != FERRY_OK) die(ferry_last_error());
 *     ... ferry_transfer(...) or read ferry_batch_sample(...) ...
 *     ferry_batch_release(batch);            // the arena goes back to the pool
 *   }
 *   ferry_loader_close(loader);
 *
 * What a batch holds: the fields named by FERRY_LOADER_FIELD_* (see below), laid
 * out before any pixel is decoded from the instance counts the index knows, then
 * filled in place by the workers. Batch k of (seed, epoch, rank, world_size) is
 * always the same samples in the same order, whatever the number of workers and
 * their timing. Memory is bounded: `prefetch + max_outstanding` arenas, and a
 * consumer that holds on to batches makes the workers wait. By default the prefetch
 * depth follows the worker count (docs/tuning.md), within `max_pinned_bytes`.
 *
 * Threads, signals, fork (docs/api.md, "A loader's lifetime"):
 *   - ferry_loader_next is called from one thread at a time; set_epoch, state_get/set
 *     and stats_get from any;
 *   - ferry_loader_close may come from another thread while such calls are in
 *     progress: a next waiting for a batch returns FERRY_ECANCELED at once, and close
 *     waits for every call in progress to return before it frees anything. A call
 *     begun after close has begun is the caller's error (the loader may be gone);
 *   - ferry_loader_next_timed bounds the wait, and returns FERRY_EAGAIN when a signal
 *     handler ran on the waiting thread, so a binding can run its own handlers;
 *   - the threads of a loader stay in the process that opened it: in a child made by
 *     fork(), every call on an inherited loader fails with FERRY_EUNSUPPORTED, and
 *     ferry_loader_close only forgets it (the parent's threads cannot be joined there,
 *     nor its locks trusted). Open a new loader in the child.
 */
#ifndef FERRY_LOADER_H
#define FERRY_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/batch.h"
#include "ferry/image.h"
#include "ferry/source.h"
#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_loader ferry_loader;

/* The names of the fields the loader fills (ferry_loader_config.fields chooses which);
 * FERRY_FIELD_IMAGES holds FERRY_ROLE_IMAGES (the field ferry_transfer turns into the batch
 * tensor) and FERRY_FIELD_SAMPLE_INDEX FERRY_ROLE_SAMPLE_INDEX in every batch the loader
 * lays out (ferry/batch.h). */
#define FERRY_FIELD_IMAGES "images"             /* u8 [R,R,3] or f32 [3,R,R], per sample */
#define FERRY_FIELD_SAMPLE_INDEX "sample_index" /* i64 [1]: the dataset index, per sample */
#define FERRY_FIELD_BOXES "boxes"               /* f32 [N,4] rows */
#define FERRY_FIELD_LABELS "labels"             /* i64 [N] rows */
#define FERRY_FIELD_MASKS "masks"               /* bool [N,R,R] rows */
#define FERRY_FIELD_AREA "area"                 /* f32 [N] rows */
#define FERRY_FIELD_ISCROWD "iscrowd"           /* i64 [N] rows */
#define FERRY_FIELD_IMAGE_ID "image_id"         /* i64 [1] per sample */
#define FERRY_FIELD_ORIG_SIZE "orig_size"       /* i64 [2] = h, w, per sample */
#define FERRY_FIELD_SIZE "size"                 /* i64 [2] = h, w of the content, per sample */
/* i32 [FERRY_AUGMENT_RECORD_LEN] per sample: the sample's augmentation record (ferry/image.h) */
#define FERRY_FIELD_AUGMENT "augment"
/* With the GPU decoder (ferry_image_options.decode), a loader's batch has no images
 * field: each sample's pixels arrive in exactly one of these two, and the transfer
 * stage builds the images tensor on the device from them (docs/images.md). */
#define FERRY_FIELD_JPEG "jpeg"             /* u8 [N] rows: the file's bytes, for nvJPEG (N = 0 for a fallback) */
#define FERRY_FIELD_CPU_IMAGES "cpu_images" /* u8 [N,R,R,3] rows, N = 1 for a sample decoded on the CPU, else 0 */

/* The slots of ferry_loader_stats.samples_cpu_fallback: fixed, since the stats' layout
 * is (a reason image/ adds must find a free slot; a build-time check says so). */
#define FERRY_LOADER_FALLBACK_SLOTS 8

/* Target fields a batch can carry (FERRY_LOADER_FIELD_* bits of config.fields).
 * The "images" and "sample_index" fields are always present. */
enum {
  FERRY_LOADER_FIELD_BOXES = 1 << 0,     /* "boxes"     f32 [N,4] in box_format */
  FERRY_LOADER_FIELD_LABELS = 1 << 1,    /* "labels"    i64 [N] */
  FERRY_LOADER_FIELD_MASKS = 1 << 2,     /* "masks"     bool [N,R,R] ([N,h,w] with a recipe) */
  FERRY_LOADER_FIELD_AREA = 1 << 3,      /* "area"      f32 [N] as annotated */
  FERRY_LOADER_FIELD_ISCROWD = 1 << 4,   /* "iscrowd"   i64 [N] */
  FERRY_LOADER_FIELD_IMAGE_ID = 1 << 5,  /* "image_id"  i64 [1] */
  FERRY_LOADER_FIELD_ORIG_SIZE = 1 << 6, /* "orig_size" i64 [2] = h, w of the file */
  FERRY_LOADER_FIELD_SIZE = 1 << 7,      /* "size"      i64 [2] = h, w of the sample's content
                                            (R, R without a recipe) */
  FERRY_LOADER_FIELD_KEYPOINTS = 1 << 8, /* "keypoints" f32 [N,K,3] */
  FERRY_LOADER_FIELD_AUGMENT = 1 << 9,   /* "augment"   i32 [FERRY_AUGMENT_RECORD_LEN]: the sample's
                                            draws and sizes (ferry/image.h), to replay it */
  FERRY_LOADER_FIELD_NO_IMAGES = 1 << 15, /* no "images" field: no pixel is decoded (the
                                            targets, the augment records) */
  FERRY_LOADER_FIELDS_DEFAULT = 0xff     /* all but keypoints and augment */
};

typedef enum ferry_box_format {
  FERRY_BOXES_XYXY = 0,        /* x0, y0, x1, y1 in pixels of the resized R x R image */
  FERRY_BOXES_CXCYWH_NORM = 1  /* RF-DETR's training format: centre and size over image size */
} ferry_box_format;

/* The order of an epoch's samples (config.order; docs/shards.md). */
typedef enum ferry_sample_order {
  FERRY_ORDER_AUTO = 0,    /* SHARDS for a split packed as tar shards, DATASET otherwise */
  FERRY_ORDER_DATASET = 1, /* DistributedSampler's: one permutation of every sample from
                              seed + epoch; rank r takes positions r, r + world, ... */
  FERRY_ORDER_SHARDS = 2   /* WebDataset's: the shards permuted from seed + epoch, their
                              samples cut into one contiguous run per rank (so a rank reads
                              whole shards but at its run's two ends), and with shuffle
                              each run passed through a buffer of config.shuffle_buffer
                              samples. Shard specs only */
} ferry_sample_order;

/* The shuffle buffer config.shuffle_buffer = 0 stands for, in samples. */
#define FERRY_LOADER_SHUFFLE_BUFFER_DEFAULT 1000

typedef enum ferry_error_policy {
  FERRY_ON_ERROR_FAIL = 0, /* the epoch ends with the error, naming the file and the
                              sample's dataset index (its position in the annotations) */
  FERRY_ON_ERROR_SKIP = 1  /* the sample is dropped, counted, and the next one takes its place */
} ferry_error_policy;

typedef struct ferry_loader_progress {
  int64_t epoch;
  uint64_t batches_delivered;  /* in this epoch */
  uint64_t batches_per_epoch;  /* nominal, before any skip */
  uint64_t samples_delivered;  /* in this epoch */
  uint64_t samples_skipped;    /* in this epoch */
  int epoch_ended;             /* 1 on the one call made when the epoch ends (ferry_loader_next
                                * returned FERRY_EEND): the counts are then final, and may be
                                * short of batches_per_epoch when samples were skipped */
} ferry_loader_progress;

typedef void (*ferry_progress_fn)(const ferry_loader_progress *progress, void *user);

/* The pinned budget ferry_loader_config_default sets (1 GiB), the deepest prefetch a
 * loader takes (a bound on its bookkeeping, far past any need), and the largest
 * batch_size (65536 samples: past any training batch, and it stops a negative number
 * cast to size_t from reaching the allocator as a huge one). */
#define FERRY_LOADER_PINNED_BUDGET_DEFAULT ((size_t)1 << 30)
#define FERRY_LOADER_MAX_PREFETCH 4096
#define FERRY_LOADER_MAX_BATCH 65536
/* The default config.max_instances: 10,000 instances on one image, far past the
 * busiest images of COCO-style sets (a few hundred at most). */
#define FERRY_LOADER_MAX_INSTANCES_DEFAULT 10000

/* A ferry_progress_fn that draws a one-line bar on stderr when stderr is a terminal
 * (and prints nothing otherwise, so logs stay clean). `user` is unused. */
FERRY_API void ferry_loader_progress_bar(const ferry_loader_progress *progress, void *user);

/* The configuration grows with new options, appended at the end. struct_size, set by
 * ferry_loader_config_default to the size this header gives, tells the library which
 * of them the caller knows: a program built against an older header gets every later
 * option's default, one built against a newer header may set options this library
 * lacks only to zero, their default (else FERRY_EUNSUPPORTED, naming the byte); the
 * library writes no byte past struct_size. So always start from
 * ferry_loader_config_default. */
typedef struct ferry_loader_config {
  size_t struct_size;          /* sizeof(ferry_loader_config), set by ferry_loader_config_default */
  const char *annotations;     /* COCO instances/keypoints JSON (required); or a split packed
                                  as WebDataset tar shards: RF-DETR's SPLIT-index.json, a
                                  pattern "train-{000000..000127}.tar" or one ".tar", whose
                                  sidecars are the annotations and whose members the images,
                                  as a path or an http(s):// or s3:// URL (docs/shards.md) */
  const char *images;          /* folder that file_name is relative to (required; checked
                                  to be a folder at open); with shards, not read: NULL, or
                                  any folder (the shards' own, say) */
  size_t batch_size;           /* 8; 1..FERRY_LOADER_MAX_BATCH */
  size_t workers;              /* 0: one per core this process may run on. However many,
                                  no more of them fill samples at once than it has cores.
                                  Not torch's num_workers, whose 0 means no worker at all */
  size_t prefetch;             /* batches being filled ahead of the consumer. 0 (the default):
                                  enough that 4 x workers samples are in flight, at least 2,
                                  within max_pinned_bytes (docs/tuning.md) */
  size_t max_outstanding;      /* batches the consumer may hold at once: 2 */
  int shuffle;                 /* 1: a new order per epoch from seed + epoch (config.order) */
  uint64_t seed;               /* 0 */
  int drop_last;               /* 0: pad shards by wrapping, keep a short last batch;
                                  1: drop the shard tail and a short last batch */
  int rank, world_size;        /* -1: from RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, SLURM_*; else 0/1 */
  int resolution;              /* R: images and masks are R x R (square resize): 312; with a
                                  recipe, its base scale */
  unsigned fields;             /* FERRY_LOADER_FIELDS_DEFAULT */
  ferry_box_format box_format; /* FERRY_BOXES_XYXY here; the Python package's default is
                                  "cxcywh" (FERRY_BOXES_CXCYWH_NORM), DETR's format */
  int keep_crowd;              /* 0: drop iscrowd annotations (RF-DETR's ConvertCoco) */
  int remap_categories;        /* labels (ferry/coco.h, ferry_category_labels): raw category
                                  ids (FERRY_CATEGORIES_RAW, 0); 0..C-1 in categories order
                                  (REMAP, 1); RF-DETR's rule for a Roboflow export (RFDETR,
                                  2): unannotated grouping categories take no label, the
                                  rest 0..C-1 by id. A shard index's own policy wins */
  ferry_error_policy on_error; /* FERRY_ON_ERROR_FAIL */
  ferry_image_layout layout;   /* FERRY_LAYOUT_F32_CHW (normalised) or U8_HWC */
  int allow_escaping_paths;    /* 0: file names with ".." or absolute paths are errors */
  ferry_image_options image;   /* decoder options (DCT scaling, EXIF, pixel limit) */
  ferry_device *device;        /* pins arenas for this device; NULL: plain host memory */
  ferry_progress_fn progress;  /* called on the consumer's thread after each batch, and
                                * once more at the end of each epoch (epoch_ended) */
  void *progress_user;
  size_t max_pinned_bytes;     /* bound on the pinned pool when prefetch is 0: the depth is
                                  cut so that prefetch + max_outstanding arenas of a batch of
                                  mean instance counts fit (at least 1 batch ahead); 0: no
                                  bound. Default FERRY_LOADER_PINNED_BUDGET_DEFAULT */
  /* The geometry each sample gets (ferry/image.h, docs/augment.md): recipe NONE (the
   * default) is the square resize above; VAL and the training recipes RFDETR_SQUARE
   * and RFDETR give samples their own sizes (images [3,h,w] or [h,w,3], masks
   * [N,h,w]: FERRY_DIM_SAMPLE_H/_W, the "size" field), drawn from (seed, epoch,
   * dataset index). Keypoints and the GPU decoder are refused with a recipe. */
  ferry_augment_options augment;
  /* The most instances one image may bring (those its target keeps: the crowd policy
   * applied): FERRY_LOADER_MAX_INSTANCES_DEFAULT, at least 1, SIZE_MAX for no cap. An
   * image past it is laid out without rows and fails as a sample (FERRY_ELIMIT, its
   * message naming the image and the cap; skipped under FERRY_ON_ERROR_SKIP), so one
   * annotation file cannot ask an arena for gigabytes: the masks of 100,000 instances
   * at R = 312 alone are 9.7 GB. */
  size_t max_instances;
  /* Which order an epoch's samples take: FERRY_ORDER_AUTO (0, the default) is the shard
   * order for a shard spec and the dataset order for a JSON and its folder. Either
   * way every rank gets ferry_loader_samples_per_epoch samples (padded by wrapping, or
   * cut with drop_last: uneven shards never leave a rank short),
   * batch k is the same whatever the worker count, and a saved state resumes exactly
   * under the same config. */
  ferry_sample_order order;
  /* FERRY_ORDER_SHARDS with shuffle: the buffer, in samples (0: the default,
   * FERRY_LOADER_SHUFFLE_BUFFER_DEFAULT; 1: no shuffle within the shards). No sample
   * is moved more than shuffle_buffer - 1 positions from its place in the rank's run
   * of shards. It holds dataset indices, not images: 8 bytes a sample while an epoch
   * is drawn. Unused by the dataset order. */
  size_t shuffle_buffer;
  /* With remap_categories = FERRY_CATEGORIES_RFDETR: another annotations file (a JSON
   * or its index) whose labels this split takes, by category id, as RF-DETR labels a
   * Roboflow export's valid and test splits by its train split's mapping. NULL (the
   * default): this split's own. Read at open only. An annotation whose category has no
   * label there fails the open, naming it (ferry/coco.h, labels_from). Refused with
   * another policy, and with a shard spec (its index carries its own policy). */
  const char *categories_from;
  /* How shards at an http(s):// or s3:// URL are read (ferry/source.h): retries,
   * timeouts, the blocks the workers share. Zeroed: every default; FERRY_REMOTE_*
   * environment variables override it field by field. */
  ferry_source_options source;
} ferry_loader_config;

/* Where an epoch stands, to save and restore: the batches after a restore are
 * identical to those of an uninterrupted run. */
typedef struct ferry_loader_state {
  int64_t epoch;
  uint64_t batches_delivered; /* in this epoch */
  uint64_t cursor;            /* position in this rank's sample order where the next batch starts */
  uint64_t seed;
} ferry_loader_state;

/* Counters that grow: struct_size first, set with ferry_loader_stats_init, honoured as
 * ferry/device.h says above ferry_memory_stats (at most struct_size bytes written,
 * struct_size set to the bytes written; `pool`, embedded, gets its own struct_size:
 * sizeof(ferry_pool_stats) when the caller's struct covers it entirely). */
typedef struct ferry_loader_stats {
  size_t struct_size;         /* sizeof(ferry_loader_stats), set by ferry_loader_stats_init */
  uint64_t samples_decoded;   /* since open, including re-planned ones */
  uint64_t samples_skipped;   /* since open; when an epoch ends the loader lays out the
                               * next at once, so this may already count that epoch's
                               * first skips before its first batch is taken */
  uint64_t batches_delivered; /* since open */
  uint64_t replans;           /* batches laid out again after a skipped sample */
  size_t workers;
  size_t arenas;
  int rank, world_size;
  ferry_pool_stats pool;      /* the pinned pool (zeros when unpacked) */
  size_t prefetch;            /* the depth in use (config.prefetch, or the one sized at open) */
  uint64_t coordinator_cpu_ns; /* CPU time of the thread that lays batches out, since open */
  uint64_t coordinator_idle_cpu_ns; /* of which spent going to sleep and waking up */
  uint64_t consumer_idle_cpu_ns; /* CPU time ferry_loader_next spent going to sleep and
                                  waking up while it waited for a batch */
  size_t peak_busy_workers;   /* most workers filling samples at once: never more than the
                                 cores the process may run on */
  ferry_decode_mode decoder;  /* the decoder in use: FERRY_DECODE_CPU or FERRY_DECODE_GPU
                                 (config.image.decode, with AUTO resolved at open) */
  /* With the GPU decoder: samples whose compressed bytes went to nvJPEG, and samples
   * decoded on the CPU instead, by reason: samples_cpu_fallback[FERRY_FALLBACK_X]
   * counts reason X of ferry/image.h's ferry_decode_fallback (the loader maps each
   * reason to its slot, loaders/gpu_fill.c). Counted when a worker fills the sample,
   * re-planned ones included, as samples_decoded is. */
  uint64_t samples_gpu_decode;
  uint64_t samples_cpu_fallback[FERRY_LOADER_FALLBACK_SLOTS];
  uint64_t batches_dropped;   /* batches laid out ahead (in flight or ready) and thrown
                                 away by set_epoch or state_set, to be filled again; a
                                 set_epoch to the epoch the loader stands at the start
                                 of drops none */
} ferry_loader_stats;
/* Set stats->struct_size to the size this header gives, before ferry_loader_stats_get. */
#define ferry_loader_stats_init(stats) ((void)((stats)->struct_size = sizeof *(stats)))

/* Fill the first `size` bytes of *config with the documented defaults (options this
 * library does not know, past its own size, with zeros) and set struct_size to `size`.
 * Call it through ferry_loader_config_default, which passes the size this header
 * gives; bindings (ctypes) pass the size of their own mirror. */
FERRY_API void ferry_loader_config_init(ferry_loader_config *config, size_t size);
/* Fill *config with the documented defaults, struct_size included. */
#define ferry_loader_config_default(config) ferry_loader_config_init((config), sizeof *(config))

/* Parse the annotations, start the workers and begin epoch 0. */
FERRY_API ferry_status ferry_loader_open(const ferry_loader_config *config, ferry_loader **out);

/* The next batch of the current epoch, in order; blocks until it is filled.
 * FERRY_EEND ends the epoch (the next call begins the next one). An error under
 * FERRY_ON_ERROR_FAIL ends the epoch too. FERRY_ECANCELED when ferry_loader_close,
 * called on another thread, ended the wait. Call from one thread at a time. */
FERRY_API ferry_status ferry_loader_next(ferry_loader *loader, ferry_batch **out);

/* ferry_loader_next, waiting at most `timeout_ms` milliseconds for the batch (-1: no
 * bound, as ferry_loader_next; 0: only what is ready). FERRY_EAGAIN, with nothing
 * taken and *out NULL, when none came in time or when a signal handler ran on this
 * thread during the wait: call again. What a binding whose signal handlers run only
 * once the call returns (Python's) calls in a loop of short waits. */
FERRY_API ferry_status ferry_loader_next_timed(ferry_loader *loader, ferry_batch **out, int timeout_ms);

/* Drop what is in flight and start `epoch` from its first batch (as
 * DistributedSampler.set_epoch). When the loader already stands at the first batch of
 * `epoch` (just opened, or the previous epoch's end taken), nothing is dropped: the
 * batches prefetched for it are those it would make again. */
FERRY_API ferry_status ferry_loader_set_epoch(ferry_loader *loader, int64_t epoch);

/* Where the loader stands: as of the last batch ferry_loader_next returned. Save it
 * with the model's weights after training on that batch; ferry_loader_state_set on a
 * new loader then continues with the batch after it (docs/examples/train_loop.c). */
FERRY_API ferry_status ferry_loader_state_get(ferry_loader *loader, ferry_loader_state *out);
/* Continue from a saved state (the seed must match the loader's). */
FERRY_API ferry_status ferry_loader_state_set(ferry_loader *loader, const ferry_loader_state *state);

/* Counters since open (samples decoded and skipped, batches, re-plans), the worker and
 * arena counts, and the pinned pool's statistics. out->struct_size must be set first
 * (ferry_loader_stats_init); FERRY_EINVAL when it is not, and nothing is written. */
FERRY_API ferry_status ferry_loader_stats_get(ferry_loader *loader, ferry_loader_stats *out);
/* Why the loader decodes where it does (config.image.decode): "" when it runs what was
 * asked; under FERRY_DECODE_AUTO on the CPU, the reason the GPU decoder did not open
 * (the device is the host, nvJPEG is missing or of another version, nvjpegCreateEx
 * failed on this GPU, ...), in words. Valid until the loader is closed. */
FERRY_API const char *ferry_loader_decoder_note(const ferry_loader *loader);
/* Nominal batches and samples per epoch on this rank (before any skip). */
FERRY_API uint64_t ferry_loader_batches_per_epoch(const ferry_loader *loader);
FERRY_API uint64_t ferry_loader_samples_per_epoch(const ferry_loader *loader);

/* Stop and join every thread and free every arena, also mid-epoch. Batches the
 * consumer still holds are released here: do not use them afterwards, nor release
 * them on another thread while close runs. Calls in progress on other threads return
 * first (ferry_loader_next with FERRY_ECANCELED); close waits for them. In a child
 * made by fork(), it only forgets the loader (see the top of this header). */
FERRY_API void ferry_loader_close(ferry_loader *loader);

#ifdef __cplusplus
}
#endif
#endif
