/* coco/parse.h - what coco/parse.c exports: a JSON tree into a coco's records
 * (internal to coco/).
 *
 * parse.c is the reference for every error message about the JSON; json_stream.c
 * reuses its steps annotation by annotation. Invariant: ferry__coco_parse_finish is
 * the last step, after which the coco holds the invariants of coco/store.h.
 */
#ifndef FERRY_COCO_PARSE_H
#define FERRY_COCO_PARSE_H

#include <stddef.h>

#include <jansson.h>

#include "ferry/coco.h"

/* Parse the JSON root (coco->root) into coco. */
ferry_status ferry__coco_parse(ferry_coco *coco);
/* The same in steps, for a root object whose "annotations" come one by one:
 * categories and images, each annotation, the per-image index. */
ferry_status ferry__coco_parse_head(ferry_coco *coco);
ferry_status ferry__coco_add_annotation(ferry_coco *coco, const json_t *obj, size_t i);
ferry_status ferry__coco_parse_finish(ferry_coco *coco);

#endif
