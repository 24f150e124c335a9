/* coco/index_format.h - the on-disk layout of a binary COCO index (internal).
 *
 * A file is a header, then sections, each at an offset that is a multiple of 64.
 * A section is a flat array of one of ferry_coco's records (coco/store.h) as
 * they are in memory on a 64-bit little-endian machine, so that an opened index is
 * ferry_coco with its arrays pointing into a read-only mapping. docs/coco.md gives the
 * table of sections. Versioning rule: any change to a record, a section or the header
 * bumps FERRY_INDEX_VERSION; a reader accepts only its own version (a cache with
 * another version is stale and rebuilt or bypassed).
 */
#ifndef FERRY_COCO_INDEX_FORMAT_H
#define FERRY_COCO_INDEX_FORMAT_H

#include <stdint.h>

#include "coco/store.h"

#define FERRY_INDEX_MAGIC "FERRYIDX"
#define FERRY_INDEX_MAGIC_LEN 8
#define FERRY_INDEX_VERSION 2u /* 2: ferry__coco_category.supercategory */
#define FERRY_INDEX_ALIGN 64u
/* K: a JSON's bound is its own length; an index's header could claim anything, and
 * targets allocate N x K x 3 floats, so the index format caps it (COCO-WholeBody: 133). */
#define FERRY_INDEX_MAX_KEYPOINTS 16384u
#define FERRY_INDEX_FLAG_RESULT_LIST 1u
#define FERRY_INDEX_FLAG_CATEGORY_IDS 2u  /* some annotation gives a category_id */
#define FERRY_INDEX_FLAGS (FERRY_INDEX_FLAG_RESULT_LIST | FERRY_INDEX_FLAG_CATEGORY_IDS)

/* The JSON file an index was built from, as its header records it (index_write.c
 * writes it, index_read.c reads it back, index_cache.c compares it with the file now). */
typedef struct ferry__index_source {
  uint64_t size;
  int64_t mtime_s, mtime_ns;
  uint64_t hash;
} ferry__index_source;

typedef enum ferry__index_section_id {
  SEC_IMAGES,       /* ferry__coco_image, "images" order */
  SEC_CATEGORIES,   /* ferry__coco_category, "categories" order */
  SEC_ANNS,         /* ferry__coco_ann, file order */
  SEC_PARTS,        /* ferry__coco_part: polygon parts */
  SEC_COORDS,       /* double: polygon vertices as parsed */
  SEC_COUNTS,       /* uint32_t: uncompressed RLE runs */
  SEC_KEYPOINTS,    /* float: x, y, v triplets */
  SEC_STRINGS,      /* char: NUL-terminated strings, "" at offset 0 */
  SEC_IMAGE_IDS,    /* ferry__coco_id_entry: image id -> position, sorted */
  SEC_CATEGORY_IDS, /* ferry__coco_id_entry: category id -> position, sorted */
  SEC_IMAGE_ANNS,   /* size_t: annotation positions grouped by image */
  SEC_COUNT
} ferry__index_section_id;

typedef struct ferry__index_section {
  uint32_t id;         /* ferry__index_section_id, in order */
  uint32_t elem_size;  /* bytes per element: must equal the reader's record size */
  uint64_t offset;     /* from the start of the file; a multiple of FERRY_INDEX_ALIGN */
  uint64_t count;      /* elements */
  uint64_t checksum;   /* hash64 (seed 0) of the count * elem_size bytes */
} ferry__index_section;

typedef struct ferry__index_header {
  char magic[FERRY_INDEX_MAGIC_LEN];
  uint32_t version;
  uint32_t header_size;      /* sizeof(ferry__index_header) */
  uint64_t file_size;        /* the whole file: a truncated copy is refused */
  uint64_t source_size;      /* the JSON it was built from: bytes, */
  int64_t source_mtime_s;    /* modification time, */
  int64_t source_mtime_ns;
  uint64_t source_hash;      /* and hash64 of its bytes */
  uint64_t num_keypoints;    /* K */
  uint32_t flags;            /* FERRY_INDEX_FLAG_* */
  uint32_t num_sections;     /* SEC_COUNT */
  ferry__index_section sections[SEC_COUNT];
  uint64_t checksum;         /* hash64 of every byte above */
} ferry__index_header;

_Static_assert(sizeof(void *) == 8 && sizeof(size_t) == 8, "the index format needs a 64-bit machine");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the index format is little-endian");
_Static_assert(sizeof(ferry__index_header) % 8 == 0, "index header size");
_Static_assert(sizeof(ferry__coco_image) == 48 && sizeof(ferry__coco_category) == 32 &&
                   sizeof(ferry__coco_part) == 16 && sizeof(ferry__coco_id_entry) == 16 &&
                   sizeof(ferry__coco_ann) == 168,
               "a record changed size: bump FERRY_INDEX_VERSION and update docs/coco.md");

/* Bytes per element of each section, as this reader and writer lay them out. */
static inline uint32_t ferry__index_elem_size(ferry__index_section_id id) {
  switch (id) {
    case SEC_IMAGES: return sizeof(ferry__coco_image);
    case SEC_CATEGORIES: return sizeof(ferry__coco_category);
    case SEC_ANNS: return sizeof(ferry__coco_ann);
    case SEC_PARTS: return sizeof(ferry__coco_part);
    case SEC_COORDS: return sizeof(double);
    case SEC_COUNTS: return sizeof(uint32_t);
    case SEC_KEYPOINTS: return sizeof(float);
    case SEC_STRINGS: return 1;
    case SEC_IMAGE_IDS:
    case SEC_CATEGORY_IDS: return sizeof(ferry__coco_id_entry);
    case SEC_IMAGE_ANNS: return sizeof(size_t);
    case SEC_COUNT: break;
  }
  return 0;
}

#endif
