/* lib/batch_internal.h - the packed batch's insides, for lib/ code that builds
 * batches in other places (the whole-batch copy, lib/transfer/packed_copy.c). Internal.
 * The invariants of these fields are in batch.c's opening comment. */
#ifndef FERRY_LIB_BATCH_INTERNAL_H
#define FERRY_LIB_BATCH_INTERNAL_H

#include "ferry/advanced.h"
#include "ferry/batch.h"
#include "lib/batch_fields.h"

typedef struct ferry__batch_field {
  ferry_field_spec spec;        /* spec.name points at name below */
  char name[FERRY_FIELD_NAME_MAX];
  int64_t *offsets;             /* batch_size + 1 row indices */
  size_t *sample_at;            /* a field with sample dimensions: batch_size + 1 byte offsets
                                 * of its samples in the field; NULL for the others */
  size_t row_bytes;             /* 0 for a field with sample dimensions */
  size_t byte_offset;           /* packed: where the field starts in the storage */
  size_t nbytes;                /* packed: total bytes of the field */
  void **sample_data;           /* unpacked: one allocation per sample */
} ferry__batch_field;

/* Who owns a batch's storage decides how it is given back. */
typedef enum { STORAGE_ARENA, STORAGE_DEVICE, STORAGE_UNPACKED } ferry__batch_storage;

struct ferry_batch {
  size_t batch_size;
  size_t nfields;
  ferry__batch_field fields[FERRY_MAX_FIELDS];
  ferry_field_role roles[FERRY_MAX_FIELDS]; /* field f's role; each role held by one field at most */
  size_t total_bytes;           /* packed: bytes of the laid-out storage */
  int64_t *sample_hw;           /* [2 * batch_size]: each sample's height and width, where a
                                 * field has sample dimensions; NULL otherwise */
  ferry__batch_storage storage;
  ferry_device *device;         /* where the bytes live */
  void *base;                   /* packed: start of storage */
  ferry_arena *arena;           /* STORAGE_ARENA */
  /* Owned until release, which hands them to the pool (ARENA) or waits for and
   * destroys them (DEVICE, UNPACKED). */
  ferry_event **held;           /* events to wait for before the storage is reused */
  size_t nheld, held_capacity;
  ferry_batch_release_fn release_hook;
  void *release_user;
  /* What makes the device images instead of a copy (lib/transfer/producer.h), NULL
   * for a plain batch. Not owned. */
  const struct ferry__producer *producer;
};

/* Validate the fields and row counts and lay them out: offsets, byte offsets,
 * total bytes. No storage is attached; *out is freed with batch_shell_free. */
ferry_status ferry__batch_shell(size_t batch_size, size_t nfields, const ferry_field_spec *fields,
                               const int64_t *rows, const int64_t *sample_hw, ferry_batch **out);
/* 1 when the spec's inner shape holds FERRY_DIM_SAMPLE_H or _W. */
int ferry__spec_has_sample_dims(const ferry_field_spec *spec);
void ferry__batch_shell_free(ferry_batch *batch);

/* Where a batch's bytes are: host memory unless the storage is a device allocation. */
int ferry__batch_bytes_on_host(const ferry_batch *batch);

#endif
