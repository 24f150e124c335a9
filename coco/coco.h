/* coco/coco.h - what coco/coco.c exports to the rest of coco/ (internal; the public
 * API of coco.c is include/ferry/coco.h).
 *
 * Two ways of opening that other files reuse: a JSON file never through an index
 * (index_cache.c's fallback and index_write.c's source), and the stepwise open of a
 * head plus annotations one by one (shards.c). Invariant, as for every open: on
 * failure *out is NULL and nothing is left allocated.
 */
#ifndef FERRY_COCO_COCO_H
#define FERRY_COCO_COCO_H

#include <jansson.h>

#include "ferry/coco.h"

/* Read and parse the JSON file at path, never through an index. */
ferry_status ferry__coco_open_json(const char *path, const ferry_coco_options *opts, ferry_coco **out);

/* Open a coco from a head built by the caller, who keeps it: an object with
 * "categories" and "images"; then each annotation that `next` yields (a new reference,
 * NULL at the end; an error status ends the open) is added in turn and freed.
 * annotated_ids: NULL, or the category ids RF-DETR's rule is to take as annotated (a
 * shard index's annotated_category_ids), borrowed for the open.
 * Call ferry__coco_json_use_ferry_allocator (coco/json_load.h) before building any of
 * them. */
typedef ferry_status (*ferry__coco_annotation_fn)(void *user, json_t **annotation);
ferry_status ferry__coco_open_stepwise(json_t *head, const json_t *annotated_ids, const char *name,
                                       const ferry_coco_options *opts, ferry__coco_annotation_fn next, void *user,
                                       ferry_coco **out);

#endif
