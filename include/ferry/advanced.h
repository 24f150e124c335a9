/* ferry/advanced.h - the advanced API: exported and documented, not frozen.
 *
 * ferry.h's headers are the stable surface: the loader, the transfer, devices,
 * tensors, errors, COCO and masks (and ferry/dlpack.h). What is declared here, or in
 * the headers included here, may still change between minor versions, as zstd's
 * static-linking-only API may:
 *   - building packed and unpacked batches by hand, and sizing them;
 *   - the pinned pool and its arenas (ferry/pool.h);
 *   - a batch's held events and its release hook (how the loader learns that the
 *     consumer handed a batch back).
 * docs/api.md lists both tiers.
 */
#ifndef FERRY_ADVANCED_H
#define FERRY_ADVANCED_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/batch.h"
#include "ferry/device.h"
#include "ferry/export.h"
#include "ferry/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- building batches ------------------------------------------------------------ */

/* Bytes a packed batch with these fields and row counts needs in its arena, field
 * regions aligned for device copies. rows[f * batch_size + i] is field f's row count
 * for sample i (ignored for PER_SAMPLE fields; rows may be NULL if there are none). */
FERRY_API ferry_status ferry_batch_layout_bytes(size_t batch_size, size_t nfields,
                                                const ferry_field_spec *fields, const int64_t *rows,
                                                size_t *out_bytes);

/* A packed batch in an arena taken from `pool` (blocks while none is free). */
FERRY_API ferry_status ferry_batch_create(ferry_pool *pool, size_t batch_size, size_t nfields,
                                          const ferry_field_spec *fields, const int64_t *rows,
                                          ferry_batch **out);
/* The same for fields with sample dimensions (batch.h): sample_hw[2*i], [2*i+1] is
 * sample i's height and width, each at least 1 (required when a field has sample
 * dimensions, ignored otherwise). */
FERRY_API ferry_status ferry_batch_create_sized(ferry_pool *pool, size_t batch_size, size_t nfields,
                                                const ferry_field_spec *fields, const int64_t *rows,
                                                const int64_t *sample_hw, ferry_batch **out);
FERRY_API ferry_status ferry_batch_layout_bytes_sized(size_t batch_size, size_t nfields,
                                                      const ferry_field_spec *fields, const int64_t *rows,
                                                      const int64_t *sample_hw, size_t *out_bytes);
/* An unpacked batch: one host allocation per sample and field. */
FERRY_API ferry_status ferry_batch_create_unpacked(ferry_device *host, size_t batch_size, size_t nfields,
                                                   const ferry_field_spec *fields, const int64_t *rows,
                                                   ferry_batch **out);

/* Give field `field` of `batch` the role `role` (ferry/batch.h), taking it from any
 * other field that held it; FERRY_ROLE_NONE takes the field's role away. What a role
 * asks of the field (the images PER_SAMPLE, the sample index i64 [1]) is checked
 * where it is used, as for a field named in the transfer's options. FERRY_EINVAL for
 * a field or role out of range. */
FERRY_API ferry_status ferry_batch_set_role(ferry_batch *batch, size_t field, ferry_field_role role);

/* ---- holding a batch, and learning of its release ---------------------------------- */

/* Keep the batch's memory from being reused until `event` completes (the transfer
 * stage calls this after queueing the copies that read the batch). Takes ownership. */
FERRY_API ferry_status ferry_batch_hold_until(ferry_batch *batch, ferry_event *event);

/* Call fn(batch, user) from ferry_batch_release, before the memory is handed back:
 * how the owner of a batch (the loader) learns that the consumer is done with it.
 * One hook per batch; a later call replaces it. */
typedef void (*ferry_batch_release_fn)(ferry_batch *batch, void *user);
FERRY_API void ferry_batch_set_release_hook(ferry_batch *batch, ferry_batch_release_fn fn, void *user);

#ifdef __cplusplus
}
#endif

#endif
