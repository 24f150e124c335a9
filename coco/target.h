/* coco/target.h - what coco/target.c exports beyond ferry/coco.h: targets for an image
 * decoded at a reduced size.
 *
 * The loader's reduced-size JPEG decode (ferry/image.h, draft_size) makes an image of
 * source_w x source_h from one annotated at width x height; RF-DETR then moves the
 * annotations into the decoded image (rfdetr/datasets/coco.py, scale_coco_annotation)
 * before ConvertCoco. These are ferry_coco_target_count and ferry_coco_target_write in
 * that frame: each bbox value and the area multiplied by source/annotated per axis in
 * double, then rounded to float32, boxes clamped to source_w x source_h; the same
 * instances kept, in the same order. 0 x 0, or the annotated size itself, is the
 * public calls' frame. Internal, so that ferry_target_options, which carries no
 * struct_size, does not grow. Masks and keypoints are not made at a reduced size
 * (FERRY_EINVAL): RF-DETR never reduces a decode that has them.
 */
#ifndef FERRY_COCO_TARGET_H
#define FERRY_COCO_TARGET_H

#include "ferry/coco.h"

ferry_status ferry__coco_target_count_at(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                         int64_t source_w, int64_t source_h, int64_t *count);
ferry_status ferry__coco_target_write_at(const ferry_coco *coco, size_t index, const ferry_target_options *opts,
                                         int64_t source_w, int64_t source_h, ferry_coco_target *out);

#endif
