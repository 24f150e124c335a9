/* lib/transfer/image_tensor.h - image_tensor.c's calls: an image's device shape, and
 * the zero-padded batch tensor of images of different sizes (internal; used by
 * transfer.c). */
#ifndef FERRY_LIB_TRANSFER_IMAGE_TENSOR_H
#define FERRY_LIB_TRANSFER_IMAGE_TENSOR_H

#include <stddef.h>

#include "ferry/transfer.h"
#include "lib/batch_internal.h"

/* The shape and dtype of one image once it is on the device (image_tensor.c): its
 * view's, or [3,H,W] normalised from u8 [H,W,3]. FERRY_EINVAL for a field that is
 * not per-sample, FERRY_EUNSUPPORTED for one normalisation cannot read. */
ferry_status ferry__image_shape(const ferry_field_spec *spec, const ferry_tensor *view, ferry_normalize normalize,
                                ferry_dtype *dtype, int *ndim, int64_t *shape);

/* A padded batch tensor (image_tensor.c): its dtype and shape [B, ...], and where
 * the height is in an image's shape (the width follows it). */
typedef struct ferry__padded_layout {
  ferry_dtype dtype;
  int ndim;
  int64_t shape[FERRY_MAX_RANK];
  int hdim;
} ferry__padded_layout;
struct ferry__norm_params;

/* 1 and *out when the transfer pads the batch's images into one tensor: options ask
 * for it (pad_multiple) and the images differ in size or are not multiples of it;
 * 0 otherwise, or on error (*st, with its message). */
int ferry__images_padded_layout(const ferry_batch *batch, int field, const ferry_transfer_options *o,
                                ferry__padded_layout *out, ferry_status *st);
/* Allocate the padded tensor as db's images and queue every sample's image into it,
 * normalised (norm non-NULL) or copied. */
ferry_status ferry__copy_padded_images(ferry_device_batch *db, ferry_batch *batch, size_t field,
                                       const ferry__padded_layout *layout, const struct ferry__norm_params *norm,
                                       int src_on_host, ferry_copy_kind kind);

#endif
