/* coco/rle.h - what coco/rle.c exports: helpers shared by the RLE and polygon code
 * (internal).
 *
 * rle.c defines them; polygon.c uses them to check a mask's size, allocate its runs
 * and hand them over, rle_decode.c to check what it decodes. Nothing outside those
 * three files includes this header. The rule
 * they share: ferry__rle_adopt is the last step of every function that returns a
 * ferry_rle, reached only once the runs are known to sum to h*w (checked by
 * ferry__rle_check_sum, or true by construction: encoded pixels, a merge of checked
 * masks, rasterised crossings closed at h*w); every function that is given a size
 * passes it through ferry__rle_check_size first (merge and IoU take theirs from their
 * inputs).
 */
#ifndef FERRY_COCO_RLE_H
#define FERRY_COCO_RLE_H

#include "ferry/mask.h"

/* FERRY_ELIMIT unless h*w fits in 32 bits (maskApi.c's run type). */
ferry_status ferry__rle_check_size(uint32_t h, uint32_t w);
/* FERRY_EINVAL for a NULL RLE or one without counts, FERRY_ELIMIT past 2^32-1
 * pixels; `fn` names the public function in the message. */
ferry_status ferry__rle_check_arg(const ferry_rle *rle, const char *fn);
/* FERRY_EFORMAT unless the m counts sum to exactly h*w. */
ferry_status ferry__rle_check_sum(const uint32_t *counts, size_t m, uint32_t h, uint32_t w);
/* ferry__malloc room for m counts (FERRY_ENOMEM on failure or overflow). */
ferry_status ferry__rle_alloc_counts(size_t m, uint32_t **counts);
/* Fill *out, taking ownership of counts; checks nothing (see above). Always FERRY_OK,
 * so that a caller can end with `return ferry__rle_adopt(...)`. */
ferry_status ferry__rle_adopt(uint32_t *counts, size_t m, uint32_t h, uint32_t w, ferry_rle *out);

#endif
