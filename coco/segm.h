/* coco/segm.h - what coco/segm.c exports: an annotation's segmentation as one RLE at
 * its natural size (internal to coco/).
 *
 * Invariant: polygons, uncompressed counts and compressed strings all come out as the
 * same ferry_rle pycocotools' annToRLE makes.
 */
#ifndef FERRY_COCO_SEGM_H
#define FERRY_COCO_SEGM_H

#include "coco/store.h"
#include "ferry/mask.h"

/* The annotation's mask at its natural size, or FERRY_ENOTFOUND. */
ferry_status ferry__coco_ann_rle(const ferry_coco *coco, const ferry__coco_ann *ann, ferry_rle *out);

#endif
