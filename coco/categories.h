/* coco/categories.h - the label each category gives its annotations (coco/categories.c).
 *
 * ferry_coco_options.remap_categories picks the policy (ferry/coco.h): raw ids,
 * positions, or RF-DETR's rule. Raw ids and positions need no table; RF-DETR's rule
 * is worked out once per open into ferry_coco.category_labels, which ferry__coco_label
 * then reads.
 */
#ifndef FERRY_COCO_CATEGORIES_H
#define FERRY_COCO_CATEGORIES_H

#include "ferry/coco.h"

/* The last step of every open (parse.c ferry__coco_parse_finish, index_read.c adopt),
 * on a coco whose records are complete: under FERRY_CATEGORIES_RFDETR, fills
 * category_labels (from this file, or opts.labels_from) and checks that every
 * annotation's category has a label. Nothing to do under the other policies. */
ferry_status ferry__coco_assign_labels(ferry_coco *coco);

#endif
