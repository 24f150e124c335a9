/* coco/index_internal.h - the binary index: build, open, cache (internal to coco/).
 * Also the few coco/ functions the index files share with coco.c (creating a coco,
 * reading a file, parsing a JSON without an index), grouped by the file that defines
 * them. */
#ifndef FERRY_COCO_INDEX_INTERNAL_H
#define FERRY_COCO_INDEX_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "coco/coco_internal.h"

/* The JSON file an index was built from, as recorded in its header. */
typedef struct ferry__index_source {
  uint64_t size;
  int64_t mtime_s, mtime_ns;
  uint64_t hash;
} ferry__index_source;

/* ---- coco/store.c, coco/coco.c, coco/json_load.c ---- */
/* An empty coco named `name` with the options copied, its arrays' element sizes set
 * (store.c). */
ferry_status ferry__coco_new(const char *name, const ferry_coco_options *opts, ferry_coco **out);
/* Read and parse the JSON file at path, never through an index (coco.c). */
ferry_status ferry__coco_open_json(const char *path, const ferry_coco_options *opts, ferry_coco **out);
/* The whole file at path in one ferry__malloc'd buffer (json_load.c). */
ferry_status ferry__coco_read_file(const char *path, char **data, size_t *len);

/* ---- coco/json_stream.c ---- */
/* Parse a top-level object annotation by annotation, without its whole tree: FERRY_OK,
 * FERRY_ENOMEM, or *declined = 1 when the caller must parse the text the usual way
 * (with a fresh coco). */
ferry_status ferry__coco_parse_streamed(ferry_coco *coco, const char *json, size_t len, int *declined);

/* ---- coco/index_write.c ---- */
/* The whole index of coco as bytes (ferry__malloc'd), recording `source`. */
ferry_status ferry__coco_index_serialize(const ferry_coco *coco, const ferry__index_source *source, char **data,
                                         size_t *len);
/* Parse json_path and write its index to index_path atomically (a new temporary,
 * synced, renamed into place). *json_failed (when not NULL) = 1 when the failure is
 * the JSON's own (unreadable, or invalid and unchanged while read), 0 when parsing it
 * again could succeed (it changed meanwhile, out of memory, an index-only limit,
 * writing failed). */
ferry_status ferry__coco_index_build_file(const char *json_path, const char *index_path, int *json_failed);

/* ---- coco/index_read.c ---- */
/* 1 when the bytes start with the index magic. */
int ferry__coco_index_sniff(const void *data, size_t len);
/* *is_index = 1 when the file starts with the magic; FERRY_EIO when it cannot be read. */
ferry_status ferry__coco_index_file_sniff(const char *path, int *is_index);
/* flags of ferry__coco_index_open: a cache's index, used only when owned by this user
 * or root and writable by no one else (else FERRY_EIO naming it). */
#define FERRY__INDEX_CACHED 1u
/* Take (map a sealed file, else copy) and check the index at path (header checksum,
 * every offset and count); later changes to the file never reach the result. */
ferry_status ferry__coco_index_open(const char *path, unsigned flags, const ferry_coco_options *opts,
                                    ferry_coco **out);
/* The same from bytes (copied). */
ferry_status ferry__coco_index_open_buffer(const void *data, size_t len, const char *name,
                                           const ferry_coco_options *opts, ferry_coco **out);
/* The source recorded by an opened index. */
void ferry__coco_index_source_of(const ferry_coco *coco, ferry__index_source *out);

/* ---- coco/index_cache.c ---- */
/* The fingerprint of the file at path now (size, mtime, hash of its bytes). */
ferry_status ferry__index_source_of_file(const char *path, ferry__index_source *out);

#endif
