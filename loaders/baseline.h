/* loaders/baseline.h - the loader's unpacked baseline (internal: not public API).
 *
 * Packed batches (one arena per batch, laid out before decoding) are measured against
 * the obvious alternative, one host allocation per sample and field: repro/throughput
 * ("unpacked") times it and repro/coco_parity holds both to the same bytes. Nothing
 * else uses it, so it is reached through this header by static links only.
 */
#ifndef FERRY_LOADERS_BASELINE_H
#define FERRY_LOADERS_BASELINE_H

#include "ferry/loader.h"

/* ferry_loader_open, whose batches are unpacked (ferry_batch_create_unpacked): no
 * pinned pool; the same samples, order and bytes as a packed loader's. */
ferry_status ferry__loader_open_unpacked(const ferry_loader_config *config, ferry_loader **out);

#endif
