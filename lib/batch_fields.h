/* lib/batch_fields.h - a field table checked once, and the batches made of it (internal;
 * one of lib/'s floor headers, for the layers above: docs/architecture.md).
 *
 * What a layer that makes many batches of one layout needs and no more: the table, its
 * roles, and the creation from it. The batch's insides stay in lib/batch_internal.h,
 * which only lib/ includes.
 */
#ifndef FERRY_LIB_BATCH_FIELDS_H
#define FERRY_LIB_BATCH_FIELDS_H

#include "ferry/batch.h"
#include "ferry/device.h"
#include "ferry/pool.h"

/* A field table checked once, for a caller that makes many batches of the same
 * fields: the loader's coordinator makes one per batch on its serial path, and the
 * checks of every spec (names, ranks, dtypes, a name given twice) were a third of
 * its work there (issue #14). ferry__batch_fields_check makes them and copies the
 * names in; ferry__batch_create_checked then checks only the row counts. */
typedef struct ferry__batch_fields {
  size_t count;
  ferry_field_spec specs[FERRY_MAX_FIELDS];           /* names point at names[] */
  char names[FERRY_MAX_FIELDS][FERRY_FIELD_NAME_MAX]; /* zero-padded */
  size_t row_bytes[FERRY_MAX_FIELDS];
  ferry_field_role roles[FERRY_MAX_FIELDS]; /* given to every batch made of it */
} ferry__batch_fields;
ferry_status ferry__batch_fields_check(size_t nfields, const ferry_field_spec *fields, ferry__batch_fields *out);
/* Give field `field` of the table `role` (no field holds one after the check), as
 * ferry_batch_set_role does to a batch: every batch made of the table has it. */
ferry_status ferry__batch_fields_set_role(ferry__batch_fields *fields, size_t field, ferry_field_role role);
/* ferry_batch_create on `pool`, or (pool NULL) ferry_batch_create_unpacked on
 * `host`, of fields checked by ferry__batch_fields_check. */
ferry_status ferry__batch_create_checked(ferry_pool *pool, ferry_device *host, size_t batch_size,
                                         const ferry__batch_fields *fields, const int64_t *rows,
                                         const int64_t *sample_hw, ferry_batch **out);

#endif
