/* coco/json_load.h - what coco/json_load.c exports: reading a file whole and parsing
 * text with jansson through ferry's allocator (internal to coco/).
 *
 * Invariant: a tree is returned only when jansson could store every byte it read.
 */
#ifndef FERRY_COCO_JSON_LOAD_H
#define FERRY_COCO_JSON_LOAD_H

#include <stddef.h>

#include <jansson.h>

#include "ferry/error.h"

/* Make jansson allocate through ferry's allocator (once per process, before the first
 * parse). */
void ferry__coco_json_use_ferry_allocator(void);
/* json_loadb through ferry's allocator: NULL with *out_of_memory = 1 when any of its
 * allocations failed (jansson may otherwise return a tree missing what it could not
 * store). */
json_t *ferry__coco_json_load(const char *text, size_t len, json_error_t *err, int *out_of_memory);
/* The whole file at path in one ferry__malloc'd buffer. */
ferry_status ferry__coco_read_file(const char *path, char **data, size_t *len);

#endif
