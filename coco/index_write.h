/* coco/index_write.h - what coco/index_write.c exports: building the binary index of a
 * JSON file (internal to coco/).
 *
 * Invariant: an index file appears at its path whole or not at all (a new temporary,
 * synced, renamed into place), and records the source it was parsed from.
 */
#ifndef FERRY_COCO_INDEX_WRITE_H
#define FERRY_COCO_INDEX_WRITE_H

#include "ferry/error.h"

/* Parse json_path and write its index to index_path atomically. *json_failed (when not
 * NULL) = 1 when the failure is the JSON's own (unreadable, or invalid and unchanged
 * while read), 0 when parsing it again could succeed (it changed meanwhile, out of
 * memory, an index-only limit, writing failed). */
ferry_status ferry__coco_index_build_file(const char *json_path, const char *index_path, int *json_failed);

#endif
