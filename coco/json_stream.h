/* coco/json_stream.h - what coco/json_stream.c exports: the streamed parse, which
 * never builds the tree of "annotations" (internal to coco/).
 *
 * Invariant: it either succeeds with the same coco a whole-tree parse would make, or
 * declines, and the caller parses the text the usual way with a fresh coco.
 */
#ifndef FERRY_COCO_JSON_STREAM_H
#define FERRY_COCO_JSON_STREAM_H

#include <stddef.h>

#include "ferry/coco.h"

/* Parse a top-level object annotation by annotation, without its whole tree: FERRY_OK,
 * FERRY_ENOMEM, or *declined = 1 when the caller must parse the text the usual way
 * (with a fresh coco). */
ferry_status ferry__coco_parse_streamed(ferry_coco *coco, const char *json, size_t len, int *declined);

#endif
