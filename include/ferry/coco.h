/* ferry/coco.h - COCO annotation files, the per-image index, and training targets.
 *
 * ferry_coco_open parses an instances or person_keypoints file (an object with
 * "images", "annotations", "categories") or a result list (a top-level array of
 * annotations), checks every field it uses, and builds the per-image index. After open
 * the object is immutable: any number of threads may read it at once.
 *
 * Accepted variants: "is_crowd" for "iscrowd", null or missing "info"/"licenses", ids
 * and category ids starting at 0, extra keys anywhere, file names with sub-folders.
 * Everything else that is wrong is an error whose message starts with the file name and
 * the JSON path: "x.json: annotations[17].bbox[2]: expected a number",
 * "x.json: annotations[3].image_id: no image 42". docs/coco.md lists the rules.
 *
 * Masks follow pycocotools' COCO.annToRLE (see ferry/mask.h): polygon parts rasterised
 * at the image size and merged, RLE dicts at their own "size".
 */
#ifndef FERRY_COCO_H
#define FERRY_COCO_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"
#include "ferry/export.h"
#include "ferry/mask.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parsed file + per-image index; immutable after open (safe to read from many threads). */
typedef struct ferry_coco ferry_coco;

/* Called by a collecting open (see ferry_coco_options.on_problem) once per problem, with
 * the same message a strict open would have failed with. */
typedef void (*ferry_coco_problem_fn)(void *user, const char *message);

/* The label an annotation gets (ferry_coco_options.remap_categories). */
typedef enum ferry_category_labels {
  FERRY_CATEGORIES_RAW = 0,    /* its category_id, as written (the default) */
  FERRY_CATEGORIES_REMAP = 1,  /* its category's position in "categories": 0..C-1 */
  /* RF-DETR 1.11's rule for a Roboflow export (rfdetr/datasets/coco.py,
   * filter_parent_categories): the categories sorted by id, less every grouping
   * category that no annotation of the file uses (one whose name is another
   * category's "supercategory", other than its own; "", "none", "null", null or no
   * supercategory name no parent), unless that would leave none; a label is the
   * position among those kept. So an export's unannotated root category (id 0,
   * supercategory "none", the parent of every class) takes no label, and classes
   * 1..C get 0..C-1. ferry_coco_category_label gives each category's. */
  FERRY_CATEGORIES_RFDETR = 2
} ferry_category_labels;

typedef struct ferry_coco_options {
  int remap_categories;   /* a ferry_category_labels: FERRY_CATEGORIES_RAW (0, the default) */
  /* NULL (default): the first problem fails the open. Set: every problem in an image,
   * annotation or category is reported here, that element is left out, and the open
   * goes on (what `ferry-coco validate` uses). Unreadable JSON still fails the open. */
  ferry_coco_problem_fn on_problem;
  void *problem_user;
  /* Read only under FERRY_CATEGORIES_RFDETR (so a program built before this field
   * existed, which never sets that value, never has it read). NULL: the labels come
   * from this file's own categories and annotations. Else another open coco, opened
   * under FERRY_CATEGORIES_RFDETR, whose labels this file takes by category id:
   * RF-DETR labels a Roboflow export's valid and test splits by its train split's
   * mapping (_train_split_cat2label). An annotation whose category has no label there
   * fails the open, naming the annotation and both files. Only read during the open. */
  const ferry_coco *labels_from;
} ferry_coco_options;

/* Fill the first `size` bytes of *o with the defaults (raw category ids, strict, no
 * labels_from). Call it through ferry_coco_options_default, which passes the size this
 * header gives. */
FERRY_API void ferry_coco_options_init(ferry_coco_options *o, size_t size);
/* The defaults for a program built against a header older than labels_from, which
 * calls this function: it writes only the fields that header had. Declared before the
 * macro of the same name below, which every program built since calls instead. */
FERRY_API void ferry_coco_options_default(ferry_coco_options *o);
/* Defaults: raw category ids, strict. */
#define ferry_coco_options_default(o) ferry_coco_options_init((o), sizeof *(o))

/* Read and index the file at `path`; `opts` may be NULL. FERRY_EIO if it cannot be read,
 * FERRY_EFORMAT for invalid JSON or content (with the JSON path).
 *
 * `path` may also be a binary index (ferry_coco_index_build; recognised by its first
 * bytes): it is checked and used in place, mapped shared when no one but root can
 * write it (read-only for all, as ferry writes it, and this process not root), else
 * read into private memory; either way, nothing later done to the file (rewritten,
 * truncated) changes what the object reads. For a JSON path, a fresh index of it is
 * used instead of parsing when there is one (beside it as PATH.ferryidx, or in
 * $FERRY_COCO_INDEX_DIR) and it is owned by this user or root and writable by no one
 * else; FERRY_COCO_INDEX=auto builds it first, =off never uses it, =use (or unset) is
 * the default, and any other value is FERRY_EINVAL. Where an index cannot be used or
 * built (refused, a build lock held past FERRY_COCO_INDEX_LOCK_WAIT seconds, an
 * index-only limit), the JSON is parsed and one line on stderr says why.
 * docs/coco.md has the rules. */
FERRY_API ferry_status ferry_coco_open(const char *path, const ferry_coco_options *opts, ferry_coco **out);

/* Same from a buffer of `len` bytes (need not be NUL-terminated; JSON or an index, which
 * is copied); `name` stands for the file in error messages. For fuzzers and tests. */
FERRY_API ferry_status ferry_coco_open_buffer(const char *json, size_t len, const char *name,
                                              const ferry_coco_options *opts, ferry_coco **out);

/* Release everything; NULL is a no-op. */
FERRY_API void ferry_coco_close(ferry_coco *coco);

/* ---- binary index ------------------------------------------------------------------ */

/* Parse the JSON at `json_path` and write its binary index to `index_path` (NULL: where
 * ferry_coco_open looks for it), atomically: a new temporary file of a unique name in the
 * same folder, made read-only (0444), synced, renamed into place, the folder synced. */
FERRY_API ferry_status ferry_coco_index_build(const char *json_path, const char *index_path);

/* Check an index completely: what an open checks plus every section's checksum.
 * FERRY_EFORMAT, naming the file, when it is damaged. */
FERRY_API ferry_status ferry_coco_index_verify(const char *index_path);

/* FERRY_OK when the index at `index_path` was built from `json_path` as that file is now
 * (size, modification time and hash of its bytes); FERRY_EFORMAT "stale: ..." if not. */
FERRY_API ferry_status ferry_coco_index_check(const char *index_path, const char *json_path);

/* Number of entries of "images" (0 for a result list). */
FERRY_API size_t ferry_coco_num_images(const ferry_coco *coco);

typedef struct ferry_coco_image {
  int64_t id;
  const char *file_name;      /* as written (may contain '/'); "" when absent; owned by coco */
  int64_t width, height;      /* 0 when the file gives none */
  size_t num_annotations;     /* annotations of this image, crowd included */
} ferry_coco_image;

/* Image `index` in the file order of "images". */
FERRY_API ferry_status ferry_coco_image_at(const ferry_coco *coco, size_t index, ferry_coco_image *out);

/* Index of the image with this id (FERRY_ENOTFOUND if none). */
FERRY_API ferry_status ferry_coco_find_image(const ferry_coco *coco, int64_t image_id, size_t *index);

/* K: the longest "keypoints" name list over the categories; 0 if none. */
FERRY_API size_t ferry_coco_num_keypoints(const ferry_coco *coco);

/* Number of categories, and category `index` (in file order): its id and name. */
FERRY_API size_t ferry_coco_num_categories(const ferry_coco *coco);
FERRY_API ferry_status ferry_coco_category_at(const ferry_coco *coco, size_t index, int64_t *id, const char **name);

/* The label annotations of category `index` get under the open's remap_categories:
 * its id (RAW), `index` (REMAP), or RF-DETR's label, -1 for a category that rule
 * drops (RFDETR). The class names of a model, in label order, follow from it. */
FERRY_API ferry_status ferry_coco_category_label(const ferry_coco *coco, size_t index, int64_t *label);

/* 1 when the file was a result list (top-level array). */
FERRY_API int ferry_coco_is_result_list(const ferry_coco *coco);

/* 1 when coco was opened from a binary index (given, or the fresh cache of a JSON path). */
FERRY_API int ferry_coco_is_index(const ferry_coco *coco);

/* ---- annotations ---------------------------------------------------------------- */

typedef enum ferry_segm_kind {
  FERRY_SEGM_NONE = 0,          /* no "segmentation", null, or [] */
  FERRY_SEGM_POLYGONS = 1,      /* list of polygon parts */
  FERRY_SEGM_RLE = 2,           /* {"size", "counts": "<compressed>"} */
  FERRY_SEGM_RLE_COUNTS = 3     /* {"size", "counts": [uncompressed runs]} */
} ferry_segm_kind;

/* Annotations in file order. Each carries `json_index`, its position in the file's
 * "annotations" array (or top-level list), which error paths use. */
FERRY_API size_t ferry_coco_num_annotations(const ferry_coco *coco);

typedef struct ferry_coco_annotation {
  size_t json_index;
  int has_id;                /* result lists usually have no "id" */
  int64_t id;
  int64_t image_id;
  size_t image_index;        /* SIZE_MAX when the file has no images (result list) */
  int64_t category_id;
  int64_t label;             /* category_id, or its position when remapping */
  int has_bbox;
  double bbox[4];            /* x, y, w, h as written */
  double area;               /* "area" as written; 0 when absent */
  int iscrowd;
  ferry_segm_kind segm;
  size_t num_polygons;       /* parts, for FERRY_SEGM_POLYGONS */
  size_t num_keypoints;      /* triplets given in "keypoints" (0 if none) */
} ferry_coco_annotation;

/* Annotation `index` (0 <= index < ferry_coco_num_annotations) in file order.
 * FERRY_EINVAL when the index is out of range. */
FERRY_API ferry_status ferry_coco_annotation_at(const ferry_coco *coco, size_t index, ferry_coco_annotation *out);

/* Annotation `k` (0 <= k < num_annotations) of image `image`: its annotation index. */
FERRY_API ferry_status ferry_coco_image_annotation(const ferry_coco *coco, size_t image, size_t k, size_t *annotation);

/* The full-size mask of annotation `index` per the annToRLE rules; FERRY_ENOTFOUND if it
 * has no segmentation. Errors (a malformed RLE, a polygon without an image size) name
 * the file and the JSON path. Release with ferry_rle_free. Thread-safe. */
FERRY_API ferry_status ferry_coco_annotation_rle(const ferry_coco *coco, size_t index, ferry_rle *out);

/* ---- targets (RF-DETR's ConvertCoco) ---------------------------------------------- */

typedef struct ferry_target_options {
  int keep_crowd;          /* 0 (default): drop iscrowd=1 annotations */
  int64_t mask_height, mask_width;   /* masks produced at this size by nearest from the image's (height,width); 0 = the image's own size */
  /* Optional index maps for the masks (an augmentation's resize/crop/resize/flip, as
   * one map per axis): output pixel (i, j) is source pixel (mask_rows[i],
   * mask_cols[j]), mask_rows[mask_height] non-decreasing, mask_cols[mask_width]
   * monotonic (a flip reverses it), every index inside the image (FERRY_EINVAL
   * otherwise). NULL: the nearest resize of that axis (ferry_nearest_index_map). */
  const uint32_t *mask_rows, *mask_cols;
  /* Optional: of the instances the target keeps (crowd policy, degenerate boxes),
   * write only those whose select[k] is nonzero (k counts kept instances in order):
   * what a crop drops. NULL: all. Every array is then filled with the selected ones,
   * packed in order. */
  const uint8_t *select;
} ferry_target_options;

/* Defaults: drop crowds, masks at the image's size. */
FERRY_API void ferry_target_options_default(ferry_target_options *o);

/* Number of instances the target of image `index` keeps (crowd policy, degenerate boxes
 * dropped). Cheap (no mask work). */
FERRY_API ferry_status ferry_coco_target_count(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                               int64_t *count);

typedef struct ferry_coco_target {        /* caller-provided buffers sized from target_count; any pointer may be NULL to skip that field */
  float *boxes;        /* [N,4] xyxy in original image pixels, clamped to the image */
  int64_t *labels;     /* [N] */
  float *area;         /* [N] annotation "area" */
  int64_t *iscrowd;    /* [N] */
  uint8_t *masks;      /* [N, mask_height, mask_width] row-major, 0/1 */
  float *keypoints;    /* [N, K, 3] (K = ferry_coco_num_keypoints) zeros when an annotation has none */
  int64_t image_id;    /* out */
  int64_t orig_h, orig_w; /* out */
} ferry_coco_target;

/* Fill the target for image `index`: the kept annotations in file order. Boxes are
 * xywh -> xyxy in float32 (x2 = x + w), clamped to [0,width] x [0,height]; an
 * annotation whose clamped box has x2 <= x1 or y2 <= y1 is dropped with its mask. An
 * annotation without segmentation gets an all-zero mask. Errors (e.g. a malformed RLE)
 * name the file, the annotation's JSON path and the image. Thread-safe for distinct out
 * buffers. */
FERRY_API ferry_status ferry_coco_target_write(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                               ferry_coco_target *out);

#ifdef __cplusplus
}
#endif
#endif
