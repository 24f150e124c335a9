/* loaders/fill.h - filling one sample: the fill context and fill.c's calls (internal;
 * gpu_fill.c's are in loaders/gpu_fill.h).
 *
 * The fill of a sample reads only its fill context, fixed at open (loader_open.c),
 * and writes only its slot's slices of a batch the coordinator laid out; it needs
 * nothing of struct ferry_loader, its lock or its threads. That is why this header
 * is apart from loader_internal.h (which includes it): fill.c includes this one
 * alone, so a change to the loader's locked state does not touch it, and it cannot
 * reach for that state by accident. The layout (coordinator.c, loader_open.c's
 * instance counts) uses the same helpers, so a batch's rows and what the fill writes
 * into them agree.
 * Callers: the workers (workers.c), many at once, without the lock, each on a slot it
 * alone claimed; open (counts, the GPU decoder's stats and stage); the coordinator
 * (the layout's counts and rows).
 * Invariant: a ferry__fill_context is written only at open and read-only once the threads
 * start. What changes while they run is not in it but pointed to from it: the GPU
 * decoder's routes, owned by loaders/gpu_route.c, which alone writes them.
 */
#ifndef FERRY_LOADERS_FILL_H
#define FERRY_LOADERS_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/coco.h"
#include "ferry/image.h"
#include "ferry/loader.h"
#include "image/augment.h"
#include "lib/status.h"
#include "source/image_source.h"

/* Where each requested field sits in a batch (-1 when absent). */
typedef struct ferry__field_slots {
  int images, sample_index, boxes, labels, masks, area, iscrowd, image_id, orig_size, size,
      keypoints, jpeg, cpu_images, augment;
} ferry__field_slots;

struct ferry__nvjpeg_api;

/* The GPU decoder's worker side (gpu_fill.c), set at open when it is in use. A sample
 * is laid out before its file is read, so where its pixels go is decided from what
 * is known then: `file_bytes` (a stat at open) sizes its jpeg rows, and its route
 * (loaders/gpu_route.h) says whether it has jpeg rows or one cpu_images row. A
 * worker that finds an image laid out for nvJPEG must go to the CPU reports its route
 * and fails the slot with FERRY_EAGAIN; the coordinator lays the batch out again
 * (each image at most once per loader), whatever config.on_error says. */
typedef struct ferry__gpu_decode {
  const struct ferry__nvjpeg_api *api;
  int64_t *file_bytes;       /* [images]: -1 where the stat failed (the fill names the file) */
  struct ferry__gpu_routes *routes; /* the routes and the stage's skipped count: gpu_route.c's */
  struct ferry__jpeg_stage *stage;  /* attached to every batch; closed after the threads */
} ferry__gpu_decode;

/* What filling one sample needs, fixed at open. Read-only while workers run. */
typedef struct ferry__fill_context {
  const ferry_coco *coco;
  const char *images_dir;
  const ferry__image_source *source;  /* NULL: files of images_dir; else where the bytes are (shards) */
  int resolution;
  ferry_box_format box_format;
  ferry_image_layout layout;
  ferry_image_options image;
  ferry_target_options target;
  int allow_escaping_paths;
  ferry__field_slots slots;
  ferry__gpu_decode gpu; /* api NULL: the CPU decoder */
  /* The recipe (image/augment.h); varies: samples have their own sizes and records
   * (any recipe but none), drawn at layout time from (seed, epoch, dataset index). */
  ferry__augment_recipe recipe;
  int varies;
  uint64_t seed;
  size_t max_instances;      /* config.max_instances: more on one image fail its sample */
} ferry__fill_context;

/* A worker's own buffers for the fill of an augmented sample: the targets before the
 * crop and the masks' index maps (fill.c grows them; workers.c frees them). */
typedef struct ferry__fill_scratch {
  float *boxes, *areas;
  uint8_t *keep;
  size_t instances;       /* room for this many in boxes, areas and keep */
  uint32_t *maps;         /* rows then columns */
  size_t map_entries;
  uint8_t *bytes;         /* an image's bytes from the fill's source (shards) */
  size_t bytes_cap;
} ferry__fill_scratch;
void ferry__fill_scratch_free(ferry__fill_scratch *s);

/* Fill sample `slot` of `batch` with dataset image `index` (fill.c): by the square
 * resize, or, with a recipe, by its record (the plan's, drawn at layout time). */
ferry_status ferry__loader_fill_sample(const ferry__fill_context *ctx, ferry_decoder *decoder,
                                       ferry__fill_scratch *scratch, ferry_batch *batch, size_t slot, size_t index,
                                       const int32_t *record);
/* A sample's record is laid out with no pixel and no instance when its sizes pass
 * the image options' pixel limit; its fill then fails, naming the sizes. 1 when so. */
int ferry__augment_over_limit(const ferry__fill_context *ctx, const int32_t *record);
/* An image with more instances than config.max_instances is laid out with no rows
 * (the coordinator asks ferry__loader_over_instance_cap), and its sample fails before
 * its fill starts (the worker calls ferry__loader_check_instances: FERRY_ELIMIT, the
 * message naming the image, its count and the cap). `count` is loader->instances[index]. */
int ferry__loader_over_instance_cap(const ferry__fill_context *ctx, int64_t count);
ferry_status ferry__loader_check_instances(const ferry__fill_context *ctx, size_t index, int64_t count);
/* The image's record and the path of its file, refusing names that leave the images
 * folder; the message names the dataset index (fill.c). */
ferry_status ferry__loader_image_file(const ferry__fill_context *ctx, size_t index, ferry_coco_image *img, char *path,
                                      size_t size);
/* Write sample `slot`'s targets (everything but the pixels) for image `index` (fill.c). */
ferry_status ferry__loader_write_targets(const ferry__fill_context *ctx, ferry_batch *batch, size_t slot, size_t index,
                                         const ferry_coco_image *img);
/* The check every decoder makes: the pixels are the size the annotations say. */
ferry_status ferry__loader_check_size(const char *path, int w, int h, const ferry_coco_image *img);
/* The size image `img` is decoded at, and so the frame of its targets and its
 * orig_size: the annotated size, or under config.image.draft_size the reduced size of
 * a file named as a JPEG. Known before the file is read, from its annotations and its
 * name, because a crop's instance count, which lays the batch out, depends on it. */
void ferry__loader_source_size(const ferry__fill_context *ctx, const ferry_coco_image *img, int *w, int *h);
/* ferry_coco_target_write / _count of image `index` in that frame (coco/target.h);
 * every count and write of the loader goes through these, so they agree. */
ferry_status ferry__loader_targets(const ferry__fill_context *ctx, size_t index, const ferry_target_options *opts,
                                   ferry_coco_target *out);
ferry_status ferry__loader_target_count(const ferry__fill_context *ctx, size_t index, int64_t *count);
/* ferry__loader_check_size for a decoder that gives the decoded pixels' size: they
 * must have the size ferry__loader_source_size planned. */
ferry_status ferry__loader_check_decoded(const ferry__fill_context *ctx, const char *path, int w, int h,
                                         const ferry_coco_image *img);
/* A field's slice for one sample, NULL when the field is absent (-1). */
void *ferry__loader_slice(ferry_batch *batch, int field, size_t slot);

#endif
