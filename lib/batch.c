/* lib/batch.c - layout, views and lifetime of packed (and unpacked) batches.
 *
 * Owns: a ferry_batch: its field table (names copied in), one allocation holding every
 * offset table, the events it is held until, and its storage, which is one of
 *   STORAGE_ARENA     a pool arena, handed back to the pool at release;
 *   STORAGE_DEVICE    one device allocation (made by ferry__packed_to), freed at release;
 *   STORAGE_UNPACKED  one heap buffer per sample and field, freed at release.
 * Callers: a batch is not locked. Its layout never changes after creation, so views
 * may be taken from many threads at once (the loader's workers fill disjoint slices
 * of one arena batch); hold_until and release are one thread's (the consumer's).
 * Creation is two steps: the field specs are checked (ferry__batch_fields_check), then
 * a shell is laid out from them and the row counts. The public creators do both each
 * time; the loader checks its fields once at open and makes every batch from them.
 *
 * Invariants, from creation to release:
 *   - every offset table has batch_size + 1 entries, starts at 0 and never decreases;
 *     a PER_SAMPLE field's is 0, 1, ..., batch_size; no entry exceeds INT64_MAX / 2;
 *   - packed: field f is the bytes [byte_offset, byte_offset + nbytes) of `base`,
 *     nbytes = total rows x row_bytes; fields lie in spec order, disjoint, each
 *     starting on a FIELD_ALIGN boundary; total_bytes is where the last one ends;
 *   - every byte size is at most SIZE_MAX / 4, a margin that keeps sums of a few of
 *     them (an arena's quarter of headroom, its rounding) from overflowing;
 *   - the layout is a function of (batch_size, specs, row counts) alone: the same
 *     inputs give the same offsets and bytes, which is what lets the loader lay a
 *     batch out before any data exists and ferry__packed_to copy one in a single piece;
 *   - field names are unique, 1..FERRY_FIELD_NAME_MAX-1 characters, and each
 *     spec.name points at the batch's own copy;
 *   - a field with sample dimensions (FERRY_DIM_SAMPLE_H/_W in its inner shape)
 *     takes them from the batch's sample_hw, given at creation (h, w >= 1 per
 *     sample); its samples' bytes are consecutive in sample order, sample i at
 *     sample_at[i] bytes into the field (sample_at[B] == nbytes), and its row_bytes
 *     is 0: it has no one row size.
 *   - each role (ferry/batch.h) is held by one field at most; a batch made of a
 *     checked table (ferry__batch_create_checked) holds the table's roles, any other
 *     new batch none, until ferry_batch_set_role.
 * Not done here: storage is never cleared (an arena comes back holding the previous
 * batch's bytes); batch.c knows no field by name, nor what a role asks of its field
 * (the transfer checks the one it uses).
 */
#include <string.h>

#include "lib/alloc.h"
#include "lib/batch_internal.h"
#include "lib/status.h"
#include "ferry/advanced.h"

/* Every field starts on this boundary: what cudaMemcpyAsync and vector loads like. */
enum { FIELD_ALIGN = 256 };

static int is_sample_dim(int64_t n) { return n == FERRY_DIM_SAMPLE_H || n == FERRY_DIM_SAMPLE_W; }

int ferry__spec_has_sample_dims(const ferry_field_spec *spec) {
  for (int d = 0; d < spec->inner_ndim; d++)
    if (is_sample_dim(spec->inner_shape[d])) return 1;
  return 0;
}

/* *row_bytes: the bytes of one row, the sample dimensions left out (a factor of 1). */
static ferry_status check_spec(const ferry_field_spec *spec, size_t f, size_t *row_bytes) {
  if (!spec->name || !spec->name[0] || strlen(spec->name) >= FERRY_FIELD_NAME_MAX)
    return ferry__fail(FERRY_EINVAL, "batch field %zu: name must be 1..%d characters", f, FERRY_FIELD_NAME_MAX - 1);
  if (spec->inner_ndim < 0 || spec->inner_ndim > FERRY_MAX_RANK - 1)
    return ferry__fail(FERRY_EINVAL, "batch field '%s': inner rank %d is outside 0..%d", spec->name,
                      spec->inner_ndim, FERRY_MAX_RANK - 1);
  size_t bytes = ferry_dtype_size(spec->dtype);
  if (bytes == 0) return ferry__fail(FERRY_EINVAL, "batch field '%s': unknown dtype", spec->name);
  for (int d = 0; d < spec->inner_ndim; d++) {
    int64_t n = spec->inner_shape[d];
    if (is_sample_dim(n)) continue;
    if (n < 0 || (n > 0 && bytes > SIZE_MAX / 4 / (size_t)n))
      return ferry__fail(FERRY_EINVAL, "batch field '%s': inner dimension %d is invalid (%lld)",
                        spec->name, d, (long long)n);
    bytes *= (size_t)n;
  }
  *row_bytes = bytes;
  return FERRY_OK;
}

/* Fill one field's offset table from its row counts; check for overflow. */
/* `rows` is read only for a ROWS field, which the caller has checked it is given for.
 * A count is accepted only while the running total stays <= INT64_MAX / 2. */
static ferry_status fill_offsets(ferry__batch_field *field, size_t batch_size, const int64_t *rows) {
  field->offsets[0] = 0;
  for (size_t i = 0; i < batch_size; i++) {
    int64_t n = field->spec.kind == FERRY_FIELD_PER_SAMPLE ? 1 : rows[i];
    if (n < 0 || n > INT64_MAX / 2 - field->offsets[i])
      return ferry__fail(FERRY_EINVAL, "batch field '%s': sample %zu has an invalid row count %lld",
                        field->name, i, (long long)n);
    field->offsets[i + 1] = field->offsets[i] + n;
  }
  return FERRY_OK;
}

/* The inner shape of sample i of a field: the spec's, its sample dimensions replaced
 * by the sample's height and width. */
static void sample_inner_shape(const ferry_batch *b, const ferry__batch_field *field, size_t i, int64_t *shape) {
  for (int d = 0; d < field->spec.inner_ndim; d++) {
    int64_t n = field->spec.inner_shape[d];
    shape[d] = n == FERRY_DIM_SAMPLE_H ? b->sample_hw[2 * i] : n == FERRY_DIM_SAMPLE_W ? b->sample_hw[2 * i + 1] : n;
  }
}

/* The bytes of a field with sample dimensions, sample by sample into sample_at. */
static ferry_status lay_out_samples(ferry_batch *b, ferry__batch_field *field, uint64_t *total) {
  size_t elem = ferry_dtype_size(field->spec.dtype);
  uint64_t at = 0;
  for (size_t i = 0; i < b->batch_size; i++) {
    int64_t inner[FERRY_MAX_RANK];
    sample_inner_shape(b, field, i, inner);
    uint64_t bytes = (uint64_t)(field->offsets[i + 1] - field->offsets[i]) * elem;
    for (int d = 0; d < field->spec.inner_ndim; d++) {
      if (inner[d] && bytes > (SIZE_MAX / 4) / (uint64_t)inner[d])
        return ferry__fail(FERRY_EINVAL, "batch field '%s': sample %zu overflows the address space", field->name, i);
      bytes *= (uint64_t)inner[d];
    }
    field->sample_at[i] = (size_t)at;
    if (bytes > SIZE_MAX / 4 - at) return ferry__fail(FERRY_EINVAL, "batch field '%s': total size overflows", field->name);
    at += bytes;
  }
  field->sample_at[b->batch_size] = (size_t)at;
  *total = at;
  return FERRY_OK;
}

static ferry_status lay_out(ferry_batch *b) {
  size_t cursor = 0;
  for (size_t f = 0; f < b->nfields; f++) {
    ferry__batch_field *field = &b->fields[f];
    uint64_t total_rows = (uint64_t)field->offsets[b->batch_size], total_bytes = 0;
    if (field->sample_at) {
      ferry_status st = lay_out_samples(b, field, &total_bytes);
      if (st != FERRY_OK) return st;
    } else if (field->row_bytes && total_rows > (SIZE_MAX / 4) / field->row_bytes) {
      return ferry__fail(FERRY_EINVAL, "batch field '%s': %llu rows overflow the address space",
                        field->name, (unsigned long long)total_rows);
    } else {
      total_bytes = total_rows * field->row_bytes;
    }
    cursor = (cursor + FIELD_ALIGN - 1) / FIELD_ALIGN * FIELD_ALIGN;
    field->byte_offset = cursor;
    field->nbytes = (size_t)total_bytes;
    if (field->nbytes > SIZE_MAX / 4 - cursor)
      return ferry__fail(FERRY_EINVAL, "batch: total size overflows");
    cursor += field->nbytes;
  }
  b->total_bytes = cursor;
  return FERRY_OK;
}

ferry_status ferry__batch_fields_check(size_t nfields, const ferry_field_spec *fields,
                                      ferry__batch_fields *out) {
  if (nfields > FERRY_MAX_FIELDS || (nfields && !fields))
    return ferry__fail(FERRY_EINVAL, "batch: need a batch size >= 1 and at most %d fields", FERRY_MAX_FIELDS);
  out->count = nfields;
  memset(out->roles, 0, sizeof out->roles);
  for (size_t f = 0; f < nfields; f++) {
    ferry_status st = check_spec(&fields[f], f, &out->row_bytes[f]);
    if (st != FERRY_OK) return st;
    for (size_t g = 0; g < f; g++)
      if (strcmp(out->names[g], fields[f].name) == 0)
        return ferry__fail(FERRY_EINVAL, "batch: field '%s' appears twice", fields[f].name);
    /* check_spec bounded the name's length, so the copy fits; the rest of the
     * buffer is zeroed, so that a batch may copy it whole. */
    memset(out->names[f], 0, sizeof out->names[f]);
    strcpy(out->names[f], fields[f].name);
    out->specs[f] = fields[f];
    out->specs[f].name = out->names[f];
  }
  return FERRY_OK;
}

/* Field `field` of `nfields` takes `role` in roles[], which no other field then holds:
 * the one rule of roles, for a table and for a batch alike. */
static ferry_status assign_role(ferry_field_role *roles, size_t nfields, size_t field, ferry_field_role role) {
  if (field >= nfields || role < FERRY_ROLE_NONE || role >= FERRY_ROLE_COUNT)
    return ferry__fail(FERRY_EINVAL, "batch: role %d for field %zu of %zu: no such role or field", (int)role, field,
                       nfields);
  for (size_t f = 0; f < nfields && role != FERRY_ROLE_NONE; f++)
    if (roles[f] == role) roles[f] = FERRY_ROLE_NONE;
  roles[field] = role;
  return FERRY_OK;
}

ferry_status ferry__batch_fields_set_role(ferry__batch_fields *fields, size_t field, ferry_field_role role) {
  return assign_role(fields->roles, fields->count, field, role);
}

ferry_status ferry_batch_set_role(ferry_batch *b, size_t field, ferry_field_role role) {
  if (!b) return ferry__fail(FERRY_EINVAL, "ferry_batch_set_role: batch is NULL");
  return assign_role(b->roles, b->nfields, field, role);
}

int ferry_batch_find_role(const ferry_batch *b, ferry_field_role role) {
  for (size_t f = 0; role != FERRY_ROLE_NONE && f < b->nfields; f++)
    if (b->roles[f] == role) return (int)f;
  return -1;
}

/* The sample sizes a batch of these fields needs: given (each at least 1) when a field
 * has sample dimensions; the count of such fields into *nsampled. */
static ferry_status check_sample_hw(size_t batch_size, const ferry__batch_fields *fields, const int64_t *sample_hw,
                                    size_t *nsampled) {
  *nsampled = 0;
  for (size_t f = 0; f < fields->count; f++) *nsampled += ferry__spec_has_sample_dims(&fields->specs[f]);
  if (!*nsampled) return FERRY_OK;
  if (!sample_hw)
    return ferry__fail(FERRY_EINVAL, "batch: a field has sample dimensions, so each sample's height and width "
                       "are required");
  for (size_t i = 0; i < batch_size; i++)
    if (sample_hw[2 * i] < 1 || sample_hw[2 * i + 1] < 1 || sample_hw[2 * i] > INT32_MAX ||
        sample_hw[2 * i + 1] > INT32_MAX)
      return ferry__fail(FERRY_EINVAL, "batch: sample %zu has an invalid size %lldx%lld", i,
                         (long long)sample_hw[2 * i], (long long)sample_hw[2 * i + 1]);
  return FERRY_OK;
}

/* The shell of a batch of checked fields: offsets from the row counts, then the
 * layout. What is left to check is the row counts and the sample sizes. */
static ferry_status shell_checked(size_t batch_size, const ferry__batch_fields *fields,
                                  const int64_t *rows, const int64_t *sample_hw, ferry_batch **out) {
  *out = NULL;
  if (batch_size == 0)
    return ferry__fail(FERRY_EINVAL, "batch: need a batch size >= 1 and at most %d fields", FERRY_MAX_FIELDS);
  for (size_t f = 0; f < fields->count && !rows; f++)
    if (fields->specs[f].kind == FERRY_FIELD_ROWS)
      return ferry__fail(FERRY_EINVAL, "batch field '%s': row counts are required", fields->names[f]);
  size_t nfields = fields->count, nsampled;
  ferry_status st = check_sample_hw(batch_size, fields, sample_hw, &nsampled);
  if (st != FERRY_OK) return st;
  /* The offset tables, the sample sizes and the sample byte offsets follow the struct
   * in one allocation: a loader makes and frees a batch shell per batch on its serial
   * path, so one malloc rather than several. */
  size_t nwords = batch_size < SIZE_MAX / 8 / (2 * FERRY_MAX_FIELDS + 3)
                      ? nfields * (batch_size + 1) + 1 + (nsampled ? 2 * batch_size + nsampled * (batch_size + 1) : 0)
                      : SIZE_MAX;
  ferry_batch *b = nwords != SIZE_MAX ? ferry__calloc(1, sizeof *b + nwords * sizeof(int64_t)) : NULL;
  if (!b) return ferry__fail(FERRY_ENOMEM, "batch: out of memory for %zu samples' offset tables", batch_size);
  _Static_assert(sizeof(ferry_batch) % _Alignof(int64_t) == 0, "offset tables follow the struct");
  _Static_assert(sizeof(size_t) == sizeof(int64_t), "sample offsets share the offset tables' words");
  int64_t *words = (int64_t *)(b + 1);
  b->batch_size = batch_size;
  b->nfields = nfields;
  memcpy(b->roles, fields->roles, sizeof b->roles);
  int64_t *next = words + nfields * (batch_size + 1);
  if (nsampled) {
    b->sample_hw = next;
    memcpy(b->sample_hw, sample_hw, 2 * batch_size * sizeof *sample_hw);
    next += 2 * batch_size;
  }
  for (size_t f = 0; f < nfields && st == FERRY_OK; f++) {
    ferry__batch_field *field = &b->fields[f];
    memcpy(field->name, fields->names[f], sizeof field->name);
    field->spec = fields->specs[f];
    field->spec.name = field->name;
    field->offsets = words + f * (batch_size + 1);
    if (ferry__spec_has_sample_dims(&field->spec)) {
      field->sample_at = (size_t *)next;
      next += batch_size + 1;
    } else {
      field->row_bytes = fields->row_bytes[f];
    }
    st = fill_offsets(field, batch_size, rows ? rows + f * batch_size : NULL);
  }
  if (st == FERRY_OK) st = lay_out(b);
  if (st != FERRY_OK) {
    ferry__batch_shell_free(b);
    return st;
  }
  *out = b;
  return FERRY_OK;
}

ferry_status ferry__batch_shell(size_t batch_size, size_t nfields, const ferry_field_spec *fields,
                               const int64_t *rows, const int64_t *sample_hw, ferry_batch **out) {
  if (!out || batch_size == 0)
    return ferry__fail(FERRY_EINVAL, "batch: need a batch size >= 1 and at most %d fields", FERRY_MAX_FIELDS);
  *out = NULL;
  ferry__batch_fields checked;
  ferry_status st = ferry__batch_fields_check(nfields, fields, &checked);
  return st == FERRY_OK ? shell_checked(batch_size, &checked, rows, sample_hw, out) : st;
}

void ferry__batch_shell_free(ferry_batch *b) {
  if (!b) return;
  ferry__free(b->held);
  ferry__free(b); /* the offset tables with it */
}

ferry_status ferry_batch_layout_bytes(size_t batch_size, size_t nfields,
                                      const ferry_field_spec *fields, const int64_t *rows,
                                      size_t *out_bytes) {
  return ferry_batch_layout_bytes_sized(batch_size, nfields, fields, rows, NULL, out_bytes);
}

ferry_status ferry_batch_layout_bytes_sized(size_t batch_size, size_t nfields, const ferry_field_spec *fields,
                                            const int64_t *rows, const int64_t *sample_hw, size_t *out_bytes) {
  ferry_batch *b;
  ferry_status st = ferry__batch_shell(batch_size, nfields, fields, rows, sample_hw, &b);
  if (st != FERRY_OK) return st;
  *out_bytes = b->total_bytes;
  ferry__batch_shell_free(b);
  return FERRY_OK;
}

/* Laid out first, then the arena: the size is known exactly, and a failed or
 * canceled acquire (which can block) leaves only the shell to free. */
static ferry_status attach_arena(ferry_pool *pool, ferry_batch *b, ferry_batch **out) {
  ferry_status st = ferry_pool_acquire(pool, b->total_bytes, &b->arena);
  if (st != FERRY_OK) {
    ferry__batch_shell_free(b);
    return st;
  }
  b->storage = STORAGE_ARENA;
  b->device = ferry_pool_device(pool);
  b->base = ferry_arena_data(b->arena);
  *out = b;
  return FERRY_OK;
}

ferry_status ferry_batch_create(ferry_pool *pool, size_t batch_size, size_t nfields,
                                const ferry_field_spec *fields, const int64_t *rows,
                                ferry_batch **out) {
  return ferry_batch_create_sized(pool, batch_size, nfields, fields, rows, NULL, out);
}

ferry_status ferry_batch_create_sized(ferry_pool *pool, size_t batch_size, size_t nfields,
                                      const ferry_field_spec *fields, const int64_t *rows, const int64_t *sample_hw,
                                      ferry_batch **out) {
  if (!pool) return ferry__fail(FERRY_EINVAL, "ferry_batch_create: pool is NULL");
  ferry_batch *b;
  ferry_status st = ferry__batch_shell(batch_size, nfields, fields, rows, sample_hw, &b);
  return st == FERRY_OK ? attach_arena(pool, b, out) : st;
}

static void free_unpacked(ferry_batch *b) {
  for (size_t f = 0; f < b->nfields; f++) {
    void **data = b->fields[f].sample_data;
    for (size_t i = 0; data && i < b->batch_size; i++) ferry__free(data[i]);
    ferry__free(data);
  }
}

/* The per-sample buffers are plain pageable memory on purpose: an unpacked batch
 * stands for a loader without an arena, and that is what such a loader has. Pinning
 * each one instead (cudaHostAlloc per sample and field, and a cudaFreeHost that
 * synchronises the whole GPU) would make the baseline measure the driver's pinning
 * cost, not what packing saves. The transfer copies them synchronously, which is what
 * CUDA does with pageable memory anyway, so both backends pay the same. */
static ferry_status attach_unpacked(ferry_device *host, ferry_batch *b, ferry_batch **out) {
  ferry_status st = FERRY_OK;
  size_t batch_size = b->batch_size;
  b->storage = STORAGE_UNPACKED;
  b->device = host;
  for (size_t f = 0; f < b->nfields && st == FERRY_OK; f++) {
    ferry__batch_field *field = &b->fields[f];
    field->sample_data = ferry__calloc(batch_size, sizeof(void *));
    if (!field->sample_data) st = FERRY_ENOMEM;
    for (size_t i = 0; i < batch_size && st == FERRY_OK; i++) {
      size_t n = field->sample_at ? field->sample_at[i + 1] - field->sample_at[i]
                                  : (size_t)(field->offsets[i + 1] - field->offsets[i]) * field->row_bytes;
      field->sample_data[i] = n ? ferry__aligned_alloc(64, n) : NULL;
      if (n && !field->sample_data[i]) st = FERRY_ENOMEM;
    }
  }
  if (st != FERRY_OK) {
    free_unpacked(b);
    ferry__batch_shell_free(b);
    return ferry__fail(st, "unpacked batch: out of memory for per-sample buffers");
  }
  *out = b;
  return FERRY_OK;
}

ferry_status ferry_batch_create_unpacked(ferry_device *host, size_t batch_size, size_t nfields,
                                         const ferry_field_spec *fields, const int64_t *rows,
                                         ferry_batch **out) {
  ferry_batch *b;
  ferry_status st = ferry__batch_shell(batch_size, nfields, fields, rows, NULL, &b);
  return st == FERRY_OK ? attach_unpacked(host, b, out) : st;
}

ferry_status ferry__batch_create_checked(ferry_pool *pool, ferry_device *host, size_t batch_size,
                                        const ferry__batch_fields *fields, const int64_t *rows,
                                        const int64_t *sample_hw, ferry_batch **out) {
  ferry_batch *b;
  ferry_status st = shell_checked(batch_size, fields, rows, sample_hw, &b);
  if (st != FERRY_OK) return st;
  return pool ? attach_arena(pool, b, out) : attach_unpacked(host, b, out);
}

size_t ferry_batch_size(const ferry_batch *b) { return b->batch_size; }
size_t ferry_batch_num_fields(const ferry_batch *b) { return b->nfields; }
int ferry_batch_is_packed(const ferry_batch *b) { return b->storage != STORAGE_UNPACKED; }
ferry_device *ferry_batch_device(const ferry_batch *b) { return b->device; }

int ferry_batch_find_field(const ferry_batch *b, const char *name) {
  for (size_t f = 0; f < b->nfields; f++)
    if (strcmp(b->fields[f].name, name) == 0) return (int)f;
  return -1;
}

const ferry_field_spec *ferry_batch_field_spec(const ferry_batch *b, size_t field) {
  return field < b->nfields ? &b->fields[field].spec : NULL;
}

const int64_t *ferry_batch_offsets(const ferry_batch *b, size_t field) {
  return field < b->nfields ? b->fields[field].offsets : NULL;
}

size_t ferry_batch_row_bytes(const ferry_batch *b, size_t field) {
  return field < b->nfields ? b->fields[field].row_bytes : 0;
}

/* The shape of sample i's `rows` rows of a field: [rows, inner...], or inner alone
 * per sample (the sample's own, where the field has sample dimensions). */
static int view_shape(const ferry_batch *b, const ferry__batch_field *field, size_t i, int64_t rows, int64_t *shape) {
  int ndim = 0;
  if (field->spec.kind == FERRY_FIELD_ROWS || rows != 1) shape[ndim++] = rows;
  sample_inner_shape(b, field, i, shape + ndim);
  return ndim + field->spec.inner_ndim;
}

ferry_status ferry_batch_sample(const ferry_batch *b, size_t field, size_t sample,
                                ferry_tensor *view) {
  if (!b || !view || field >= b->nfields || sample >= b->batch_size)
    return ferry__fail(FERRY_EINVAL, "batch: no field %zu / sample %zu", field, sample);
  const ferry__batch_field *fd = &b->fields[field];
  int64_t begin = fd->offsets[sample], rows = fd->offsets[sample + 1] - begin;
  int64_t shape[FERRY_MAX_RANK];
  int ndim = view_shape(b, fd, sample, rows, shape);
  size_t at = fd->sample_at ? fd->sample_at[sample] : (size_t)begin * fd->row_bytes;
  void *data = b->storage == STORAGE_UNPACKED ? fd->sample_data[sample] : (char *)b->base + fd->byte_offset + at;
  return ferry_tensor_view(view, b->device, data, fd->spec.dtype, ndim, shape);
}

ferry_status ferry_batch_sample_size(const ferry_batch *b, size_t sample, int64_t *height, int64_t *width) {
  if (!b || sample >= b->batch_size || !height || !width)
    return ferry__fail(FERRY_EINVAL, "ferry_batch_sample_size: no sample %zu", sample);
  if (!b->sample_hw) return ferry__fail(FERRY_ENOTFOUND, "batch: no field has sample dimensions");
  *height = b->sample_hw[2 * sample];
  *width = b->sample_hw[2 * sample + 1];
  return FERRY_OK;
}

ferry_status ferry_batch_field(const ferry_batch *b, size_t field, ferry_tensor *view) {
  if (!b || !view || field >= b->nfields)
    return ferry__fail(FERRY_EINVAL, "batch: no field %zu", field);
  if (b->storage == STORAGE_UNPACKED)
    return ferry__fail(FERRY_EUNSUPPORTED, "batch field '%s': an unpacked batch has no whole-field view",
                      b->fields[field].name);
  const ferry__batch_field *fd = &b->fields[field];
  if (fd->sample_at)
    return ferry__fail(FERRY_EUNSUPPORTED, "batch field '%s': its samples have their own shapes "
                       "(ferry_batch_sample views each)", fd->name);
  int64_t shape[FERRY_MAX_RANK];
  int ndim = 0;
  shape[ndim++] = fd->offsets[b->batch_size];
  for (int d = 0; d < fd->spec.inner_ndim; d++) shape[ndim++] = fd->spec.inner_shape[d];
  return ferry_tensor_view(view, b->device, (char *)b->base + fd->byte_offset, fd->spec.dtype,
                           ndim, shape);
}

ferry_status ferry_batch_hold_until(ferry_batch *b, ferry_event *event) {
  if (!b || !event) return ferry__fail(FERRY_EINVAL, "ferry_batch_hold_until: batch and event are required");
  if (b->nheld == b->held_capacity) {
    size_t cap = b->held_capacity ? 2 * b->held_capacity : 4;
    ferry_event **held = ferry__realloc(b->held, cap * sizeof *held);
    if (!held) {
      /* Cannot remember it: wait now, which keeps the guarantee. */
      ferry_event_synchronize(event);
      ferry_event_destroy(event);
      return FERRY_OK;
    }
    b->held = held;
    b->held_capacity = cap;
  }
  b->held[b->nheld++] = event;
  return FERRY_OK;
}

static void wait_held(ferry_batch *b) {
  for (size_t i = 0; i < b->nheld; i++) {
    ferry_event_synchronize(b->held[i]);
    ferry_event_destroy(b->held[i]);
  }
  b->nheld = 0;
}

void ferry_batch_set_release_hook(ferry_batch *b, ferry_batch_release_fn fn, void *user) {
  b->release_hook = fn;
  b->release_user = user;
}

/* The release hook runs first, while the batch is still whole. */
void ferry_batch_release(ferry_batch *b) {
  if (!b) return;
  if (b->release_hook) b->release_hook(b, b->release_user);
  switch (b->storage) {
    case STORAGE_ARENA:
      /* The pool takes the events and returns the arena once they complete, without
       * waiting here; only the array that held them is freed below. */
      ferry_arena_release_after(b->arena, b->held, b->nheld);
      b->nheld = 0;
      break;
    case STORAGE_DEVICE:
      /* Waits here for the held events (the work reading this storage), then frees it
       * on the device's default stream. */
      wait_held(b);
      ferry_device_free(b->device, NULL, b->base);
      break;
    case STORAGE_UNPACKED:
      wait_held(b);
      free_unpacked(b);
      break;
  }
  ferry__batch_shell_free(b);
}

int ferry__batch_bytes_on_host(const ferry_batch *b) {
  return b->storage != STORAGE_DEVICE || ferry_device_get_kind(b->device) == FERRY_DEVICE_HOST;
}
