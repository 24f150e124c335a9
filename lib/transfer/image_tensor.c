/* lib/transfer/image_tensor.c - what the image field becomes on the device: one
 * image's shape and dtype there (as copied, or normalised from u8 [H,W,3] to [3,H,W]),
 * and the batch tensor of images of different sizes, zero-padded at the bottom and
 * right (ferry_transfer_options.pad_multiple): the batch DETR's NestedTensor makes,
 * built by the copies themselves rather than by a second pass over a batch of
 * per-sample tensors.
 *
 * Owns nothing between calls. Called by transfer.c's direct path on the caller's
 * thread; the copies and normalisations it queues run in stream order like the
 * transfer's others.
 * Invariants:
 *   - the batch tensor is [B, C, Hp, Wp] (CHW images, and every normalised one) or
 *     [B, Hp, Wp, C] (HWC), Hp and Wp the largest height and width of the batch
 *     rounded up to pad_multiple; sample i's image sits at the top left of row i
 *     and every other element of the row is zero (0.0 normalised, not a normalised
 *     black: DETR pads after normalising);
 *   - each plane is written once, content and padding together, so the tensor needs
 *     no memset of its own, and no staging beyond normalisation's one image.
 * Not done here: deciding that a batch is padded (transfer.c: pad_multiple set and
 * an image field with sample sizes, or sizes that are not multiples).
 */
#include <string.h>

#include "lib/device_internal.h"
#include "lib/transfer/normalize.h"
#include "lib/transfer/device_batch_internal.h"
#include "lib/transfer/image_tensor.h"
#include "lib/transfer/sample_name.h"

/* The dimension of the image's height in its shape: that of a field's sample height
 * when it has one, else 0 for HWC (last dimension 3) or 1 for CHW (first 3). */
static int height_dim(const ferry_field_spec *spec, const int64_t *shape, ferry_normalize normalize) {
  if (normalize != FERRY_NORMALIZE_NONE) return 1;
  for (int d = 0; d + 1 < spec->inner_ndim; d++)
    if (spec->inner_shape[d] == FERRY_DIM_SAMPLE_H) return d;
  return shape[2] == 3 ? 0 : shape[0] == 3 ? 1 : -1;
}

/* The shape and dtype of one image once it is on the device: its view's (`inner`, the
 * sample's own shape), or, normalised, [3,H,W] from u8 [H,W,3]. */
ferry_status ferry__image_shape(const ferry_field_spec *spec, const ferry_tensor *inner, ferry_normalize normalize,
                                ferry_dtype *dtype, int *ndim, int64_t *shape) {
  if (spec->kind != FERRY_FIELD_PER_SAMPLE)
    return ferry__fail(FERRY_EINVAL, "transfer: image field '%s' must be a per-sample field", spec->name);
  if (normalize == FERRY_NORMALIZE_NONE) {
    *dtype = spec->dtype;
    *ndim = inner->ndim;
    for (int d = 0; d < inner->ndim; d++) shape[d] = inner->shape[d];
    return FERRY_OK;
  }
  if (normalize != FERRY_NORMALIZE_F32 && normalize != FERRY_NORMALIZE_BF16)
    return ferry__fail(FERRY_EINVAL, "transfer: unknown normalisation %d", (int)normalize);
  if (spec->dtype != FERRY_U8 || inner->ndim != 3 || inner->shape[2] != 3)
    return ferry__fail(FERRY_EUNSUPPORTED, "transfer: normalising '%s' needs u8 [H,W,3] images",
                      spec->name);
  /* Normalisation also transposes: [H,W,3] becomes [3,H,W]. */
  *dtype = normalize == FERRY_NORMALIZE_F32 ? FERRY_F32 : FERRY_BF16;
  *ndim = 3;
  shape[0] = 3;
  shape[1] = inner->shape[0];
  shape[2] = inner->shape[1];
  return FERRY_OK;
}

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

int ferry__images_padded_layout(const ferry_batch *batch, int field, const ferry_transfer_options *o,
                                ferry__padded_layout *out, ferry_status *st) {
  *st = FERRY_OK;
  if (field < 0 || o->pad_multiple == 0 || ferry_batch_size(batch) == 0) return 0;
  const ferry_field_spec *spec = ferry_batch_field_spec(batch, (size_t)field);
  int64_t hw[2] = {0, 0}, first[2] = {-1, -1};
  int differ = 0;
  for (size_t i = 0; i < ferry_batch_size(batch) && *st == FERRY_OK; i++) {
    ferry_tensor view;
    int64_t one[FERRY_MAX_RANK];
    *st = ferry_batch_sample(batch, (size_t)field, i, &view);
    if (*st == FERRY_OK) *st = ferry__image_shape(spec, &view, o->normalize, &out->dtype, &out->ndim, one);
    if (*st != FERRY_OK) break;
    out->hdim = out->ndim == 3 ? height_dim(spec, one, o->normalize) : -1;
    if (out->hdim < 0) {
      /* nothing to pad in a dense field of another shape at multiple 1; a larger
       * multiple it cannot apply is refused rather than ignored */
      if (!ferry__spec_has_sample_dims(spec) && o->pad_multiple == 1) return 0;
      *st = ferry__fail(FERRY_EINVAL, "transfer: pad_multiple %zu: '%s' is not an image of [H,W,C] or [C,H,W]",
                        o->pad_multiple, spec->name);
      break;
    }
    int64_t h = one[out->hdim], w = one[out->hdim + 1];
    if (i == 0) {
      memcpy(out->shape + 1, one, sizeof(int64_t) * (size_t)out->ndim);
      first[0] = h;
      first[1] = w;
    }
    differ |= h != first[0] || w != first[1];
    hw[0] = h > hw[0] ? h : hw[0];
    hw[1] = w > hw[1] ? w : hw[1];
  }
  if (*st != FERRY_OK) return 0;
  int64_t m = (int64_t)o->pad_multiple, ph = round_up(hw[0], m), pw = round_up(hw[1], m);
  if (!differ && ph == hw[0] && pw == hw[1]) return 0; /* a dense batch as it is */
  out->shape[0] = (int64_t)ferry_batch_size(batch);
  out->shape[1 + out->hdim] = ph;
  out->shape[2 + out->hdim] = pw;
  out->ndim += 1;
  return 1;
}

/* Sample i's image into its row `dst` of the padded tensor: one padded plane for HWC,
 * one per channel for CHW. */
static ferry_status copy_one(ferry_stream *stream, const ferry__padded_layout *l, const ferry_tensor *view,
                             char *dst, ferry_copy_kind kind) {
  size_t item = ferry_dtype_size(l->dtype);
  const int64_t *s = view->shape;
  if (l->hdim == 0) { /* [h, w, C] into [Hp, Wp, C] */
    size_t px = (size_t)s[2] * item;
    ferry__plane_copy p = {dst, (size_t)l->shape[2] * px, (size_t)l->shape[1], view->data, (size_t)s[1] * px,
                           (size_t)s[1] * px, (size_t)s[0]};
    return ferry__copy_plane_or_wait(stream, &p, kind);
  }
  size_t plane_out = (size_t)(l->shape[2] * l->shape[3]) * item, plane_in = (size_t)(s[1] * s[2]) * item;
  ferry_status st = FERRY_OK;
  for (int64_t c = 0; c < s[0] && st == FERRY_OK; c++) {
    ferry__plane_copy p = {dst + (size_t)c * plane_out, (size_t)l->shape[3] * item, (size_t)l->shape[2],
                           (const char *)view->data + (size_t)c * plane_in, (size_t)s[2] * item,
                           (size_t)s[2] * item, (size_t)s[1]};
    st = ferry__copy_plane_or_wait(stream, &p, kind);
  }
  return st;
}

ferry_status ferry__copy_padded_images(ferry_device_batch *db, ferry_batch *batch, size_t field,
                                       const ferry__padded_layout *l, const ferry__norm_params *norm, int src_on_host,
                                       ferry_copy_kind kind) {
  ferry_tensor *images;
  ferry_status st = ferry__device_batch_alloc_images(db, l->dtype, l->ndim, l->shape, &images);
  if (st != FERRY_OK) return ferry__error_prefix(st, "the padded images tensor: ");
  size_t row = images->nbytes / db->batch_size;
  for (size_t i = 0; i < db->batch_size && st == FERRY_OK; i++) {
    ferry_tensor view;
    char *dst = (char *)images->data + i * row;
    st = ferry_batch_sample(batch, field, i, &view);
    if (st == FERRY_OK && norm) {
      ferry__norm_shape shape = {(size_t)view.shape[0], (size_t)view.shape[1], (size_t)l->shape[2],
                                 (size_t)l->shape[3]};
      st = ferry__normalize_enqueue(db->stream, view.data, src_on_host, dst, &shape, norm);
    } else if (st == FERRY_OK) {
      st = copy_one(db->stream, l, &view, dst, kind);
    }
    if (st != FERRY_OK) ferry__sample_error(st, batch, i);
  }
  return st;
}
