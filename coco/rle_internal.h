/* coco/rle_internal.h - helpers shared by the RLE and polygon code (internal). */
#ifndef FERRY_COCO_RLE_INTERNAL_H
#define FERRY_COCO_RLE_INTERNAL_H

#include "ferry/mask.h"

/* FERRY_ELIMIT unless h*w fits in 32 bits (maskApi.c's run type). */
ferry_status ferry__rle_check_size(uint32_t h, uint32_t w);
/* FERRY_EFORMAT unless the m counts sum to exactly h*w. */
ferry_status ferry__rle_check_sum(const uint32_t *counts, size_t m, uint32_t h, uint32_t w);
/* ferry__malloc room for m counts (FERRY_ENOMEM on failure or overflow). */
ferry_status ferry__rle_alloc_counts(size_t m, uint32_t **counts);
/* Fill *out, taking ownership of counts. */
ferry_status ferry__rle_adopt(uint32_t *counts, size_t m, uint32_t h, uint32_t w, ferry_rle *out);

#endif
