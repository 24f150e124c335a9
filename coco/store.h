/* coco/store.h - the parsed form of a COCO file, and what store.c exports (internal to
 * coco/).
 *
 * store.c owns the object: its arrays, id tables, strings, creation and close; it sits
 * at the bottom of coco/ and calls nothing else of it. One layout serves two sources:
 * parse.c / json_stream.c fill the arrays from JSON, and index_read.c points the same
 * arrays into an index file's bytes. So the records are the on-disk format too
 * (coco/index_format.h): changing one changes the index and must bump
 * FERRY_INDEX_VERSION.
 * Invariants of an opened ferry_coco (parse.c establishes them; index_read.c checks the
 * bounds and the id tables of every index): every offset and slice in a record lies
 * inside the array it names; image_ids / category_ids are sorted by id, one entry per
 * image / category; each image's slice of image_anns lists its annotations in file
 * order; an opened coco is not written again, which is what lets many threads read one.
 */
#ifndef FERRY_COCO_STORE_H
#define FERRY_COCO_STORE_H

#include <jansson.h>

#include "ferry/coco.h"

/* The records below hold no pointers (strings are offsets into ferry_coco.strings) and
 * no padding that parse.c leaves uninitialised: a binary index (coco/index_format.h)
 * stores them as they are, and an index-backed ferry_coco points into the mapping. */
typedef struct ferry__coco_image {
  int64_t id;
  uint64_t file_name; /* offset in ferry_coco.strings (0: "") */
  int64_t width, height;
  size_t first_ann, num_anns; /* slice of ferry_coco.image_anns */
} ferry__coco_image;

typedef struct ferry__coco_category {
  int64_t id;
  uint64_t name;          /* offset in ferry_coco.strings */
  uint64_t supercategory; /* offset in ferry_coco.strings; 0 ("") when absent, null or
                             not a string (coco/categories.c reads it) */
  size_t num_keypoints;
} ferry__coco_category;

typedef struct ferry__coco_ann {
  ferry_coco_annotation pub;
  uint32_t seg_h, seg_w; /* the RLE dict's own "size" */
  size_t seg_first;      /* polygons: first part in ferry_coco.parts; counts: offset in .counts */
  size_t seg_len;        /* counts: number of runs; string: bytes */
  uint64_t rle_string;   /* compressed counts: offset in ferry_coco.strings */
  size_t kp_first;       /* offset of its keypoints in ferry_coco.keypoints (3 floats each) */
} ferry__coco_ann;

typedef struct ferry__coco_part {
  size_t first; /* offset in ferry_coco.coords */
  size_t k;     /* vertices (an odd trailing number already dropped) */
} ferry__coco_part;

/* An id -> position table, sorted by id for binary search. */
typedef struct ferry__coco_id_entry {
  int64_t id;
  size_t index;
} ferry__coco_id_entry;

/* A growable array of fixed-size elements. */
typedef struct ferry__coco_vec {
  void *data;
  size_t n, cap, elem;
} ferry__coco_vec;

struct ferry_coco {
  char *name;
  json_t *root;  /* the JSON tree while parsing; released after */
  void *backing; /* an index's bytes: a mapping (backing_mapped) or a copy */
  size_t backing_len;
  int backing_mapped;
  ferry_coco_options opts;
  int result_list;
  int any_category_id;                            /* some annotation gives a category_id */
  ferry__coco_vec images;                         /* ferry__coco_image */
  ferry__coco_vec categories;                     /* ferry__coco_category */
  ferry__coco_vec anns;                           /* ferry__coco_ann, file order */
  ferry__coco_vec parts;                          /* ferry__coco_part */
  ferry__coco_vec coords;                         /* double */
  ferry__coco_vec counts;                         /* uint32_t */
  ferry__coco_vec keypoints;                      /* float */
  ferry__coco_vec strings;                        /* char: NUL-terminated strings, "" at offset 0 */
  ferry__coco_id_entry *image_ids, *category_ids; /* sorted */
  size_t *image_anns;                             /* annotation indices grouped by image, file order within */
  size_t num_keypoints;                           /* K */
  /* FERRY_CATEGORIES_RFDETR: the label of each category (categories order), -1 for
   * one the rule drops; set last by every open (coco/categories.c). NULL otherwise. */
  int64_t *category_labels;
  /* While a stepwise open runs (coco/sidecars.c): the ids a shard index says are
   * annotated, which RF-DETR's rule then reads instead of the annotations. Borrowed. */
  const json_t *annotated_ids;
};

/* ferry__coco_vec helpers (store.c): reserve room for `more` elements / append one. Only for a
 * coco being parsed: an index-backed coco's arrays point into read-only bytes. */
ferry_status ferry__coco_vec_reserve(ferry__coco_vec *v, size_t more);
ferry_status ferry__coco_vec_push(ferry__coco_vec *v, const void *elem);
void ferry__coco_vec_free(ferry__coco_vec *v);
#define COCO_AT(vec, type, i) (((type *)(vec).data)[i])

/* An empty coco named `name` with the options copied, its arrays' element sizes set. */
ferry_status ferry__coco_new(const char *name, const ferry_coco_options *opts, ferry_coco **out);

/* Copy len bytes of s (plus a NUL) into coco->strings; *offset says where. */
ferry_status ferry__coco_intern(ferry_coco *coco, const char *s, size_t len, uint64_t *offset);
#define COCO_STRING(coco, offset) ((const char *)(coco)->strings.data + (offset))

/* The label an annotation gets under the options' remap_categories (ferry/coco.h):
 * its category_id, its category's position, or RF-DETR's label (category_labels).
 * Computed on access so that an index serves every policy. */
int64_t ferry__coco_label(const ferry_coco *coco, const ferry__coco_ann *ann);

/* Binary search in a sorted id table; SIZE_MAX when absent. */
size_t ferry__coco_id_lookup(const ferry__coco_id_entry *table, size_t n, int64_t id);

/* "annotations" or the top-level list, for JSON paths. */
const char *ferry__coco_ann_array_name(const ferry_coco *coco);

#endif
