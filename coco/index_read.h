/* coco/index_read.h - what coco/index_read.c exports: recognising and opening a binary
 * index (internal to coco/).
 *
 * Invariant: an index is opened only once its header checksum, every section's
 * checksum, offset and count, and its id tables are checked; later changes to the
 * file never reach the opened coco.
 */
#ifndef FERRY_COCO_INDEX_READ_H
#define FERRY_COCO_INDEX_READ_H

#include <stddef.h>

#include "coco/index_format.h"
#include "ferry/coco.h"

/* 1 when the bytes start with the index magic. */
int ferry__coco_index_sniff(const void *data, size_t len);
/* *is_index = 1 when the file starts with the magic; FERRY_EIO when it cannot be read. */
ferry_status ferry__coco_index_file_sniff(const char *path, int *is_index);
/* flags of ferry__coco_index_open: a cache's index, used only when owned by this user
 * or root and writable by no one else (else FERRY_EIO naming it). */
#define FERRY__INDEX_CACHED 1u
/* Take (map a sealed file, else copy) and check the index at path. */
ferry_status ferry__coco_index_open(const char *path, unsigned flags, const ferry_coco_options *opts, ferry_coco **out);
/* The same from bytes (copied). */
ferry_status ferry__coco_index_open_buffer(const void *data, size_t len, const char *name,
                                           const ferry_coco_options *opts, ferry_coco **out);
/* The source recorded by an opened index. */
void ferry__coco_index_source_of(const ferry_coco *coco, ferry__index_source *out);

#endif
