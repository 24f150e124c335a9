/* ferry/transfer.h - a packed batch onto the device, one allocation per sample.
 *
 * ferry_transfer turns a packed (or unpacked) host batch into a DEVICE BATCH:
 *   - the image field becomes ONE device tensor [B, inner...] (or, normalised,
 *     [B,3,H,W] f32/bf16), because a training step consumes it whole; when the
 *     samples' images differ in shape (an augmentation's sizes: batch.h's sample
 *     dimensions), each sample's image is instead its own tensor, a per-sample record
 *     under the image field's name ([3,h,w], or [h,w,3] unnormalised);
 *   - every other field becomes, for every sample, its own device allocation made on
 *     the given stream and filled by one asynchronous copy from that sample's slice.
 * No device buffer ever holds a whole packed field, so the device's extra peak
 * (peak minus what the returned tensors keep) is exactly 0 bytes. One event is
 * recorded after the copies and handed to ferry_batch_hold_until, so releasing the
 * packed batch right after ferry_transfer is safe and never blocks: its arena goes
 * back to the pool only when the copies have read it.
 *
 * Every output tensor is independently owned: free it, replace it, write into it, or
 * take it out of the device batch, and nothing else notices (not the other tensors,
 * not the arena, not a later transfer of a batch that reuses the arena).
 *
 * The path that preceded this one (the whole packed batch copied to the device once,
 * each sample's slice cloned from it, the copy freed: an extra peak of the packed
 * batch's size) is kept inside the project as the baseline repro/cuda_peak_memory
 * measures; it is not part of this API. See docs/transfer.md.
 *
 * Contents are ready when ferry_device_batch_event completes (ferry_device_batch_wait
 * waits for it). Work queued later on the same stream may use them at once.
 */
#ifndef FERRY_TRANSFER_H
#define FERRY_TRANSFER_H

#include <stddef.h>

#include "ferry/batch.h"
#include "ferry/device.h"
#include "ferry/export.h"
#include "ferry/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ferry_device_batch ferry_device_batch;

/* ImageNet's per-channel statistics, in RGB order and [0, 1] units: the mean and std
 * normalisation takes when the options' std is all zero, and those of the CPU
 * decoder's f32 layout (ferry/image.h, FERRY_LAYOUT_F32_CHW), which applies the same
 * formula. They live here, with the formula, because lib/ applies it and includes
 * nothing above it. */
#define FERRY_IMAGENET_MEAN \
  { 0.485f, 0.456f, 0.406f }
#define FERRY_IMAGENET_STD \
  { 0.229f, 0.224f, 0.225f }

/* Device-side normalisation of a u8 [H,W,3] image field: out = (x/255 - mean) / std,
 * written channel-first. Copying u8 and widening on the device moves 4x fewer bytes
 * over the bus than copying f32. The CUDA backend runs a kernel; the host backend
 * computes the same values (bit for bit) on the CPU, in stream order. */
typedef enum ferry_normalize {
  FERRY_NORMALIZE_NONE = 0, /* images copied as they are */
  FERRY_NORMALIZE_F32 = 1,  /* [B,3,H,W] f32 */
  FERRY_NORMALIZE_BF16 = 2  /* [B,3,H,W] bf16, rounded to nearest even */
} ferry_normalize;

/* A transfer hook: a training loop's post-processing of a landed batch (convert boxes,
 * drop a field, replace a tensor). It may mutate the device batch's tensors, replace
 * them (ferry_device_batch_replace) or take them out. A negative return is remembered
 * and reported by ferry_device_batch_wait (the first failure wins; later hooks of the
 * same transfer still run). */
typedef ferry_status (*ferry_transfer_hook_fn)(ferry_device_batch *batch, void *user);

typedef enum ferry_hook_stage {
  /* Runs as a host function on the transfer's stream (ferry_stream_call), after every
   * copy of the batch has landed and before any later work on that stream. On the host
   * backend it can read and write the tensors' bytes directly. Under CUDA it runs in
   * the driver's callback thread and must make no CUDA or ferry stream calls, so it
   * can only rearrange tensors already allocated. Until the batch's event completes
   * the caller must not touch the device batch's records. */
  FERRY_HOOK_ON_STREAM = 0,
  /* Runs inside ferry_transfer on the caller's thread, right after the copies are
   * queued: it queues its own device work (kernels, copies, ferry_stream_call) on
   * ferry_device_batch_stream(batch), which the stream orders after the copies. The
   * usual choice under CUDA. */
  FERRY_HOOK_ENQUEUE = 1
} ferry_hook_stage;

typedef struct ferry_transfer_hook {
  ferry_transfer_hook_fn fn;
  void *user;
  ferry_hook_stage stage;
} ferry_transfer_hook;

#define FERRY_TRANSFER_MAX_HOOKS 8

/* A zeroed struct (or a NULL pointer) means: the batch's images field (its role), no
 * normalisation, no hooks. */
typedef struct ferry_transfer_options {
  /* The field that becomes the batch tensor, by name. NULL: the field holding
   * FERRY_ROLE_IMAGES (ferry/batch.h): the loader's batches mark their "images" field
   * so, a batch built by hand marks its own with ferry_batch_set_role or names it here
   * (the transfer knows no field by its name). "": none; every field is then a
   * per-sample record. A batch without the field is fine. The field must be
   * FERRY_FIELD_PER_SAMPLE. */
  const char *image_field;
  ferry_normalize normalize;
  /* Per-channel mean and std for normalisation, in [0, 1] units. All-zero std means
   * ImageNet's (FERRY_IMAGENET_MEAN and _STD); otherwise every
   * std must be finite and non-zero and every mean finite (FERRY_EINVAL). */
  float mean[3];
  float std[3];
  /* Run in array order, ON_STREAM ones after ENQUEUE ones' queued work. Copied. */
  const ferry_transfer_hook *hooks;
  size_t nhooks; /* at most FERRY_TRANSFER_MAX_HOOKS */
  /* 0: images whose sizes differ (a training recipe's, image.h) are one record per
   * sample. n >= 1: they are one batch tensor, [B,C,Hp,Wp] (CHW and normalised
   * images) or [B,Hp,Wp,C] (HWC), Hp and Wp the batch's largest height and width
   * rounded up to a multiple of n, each image at the top left of its row and zeros
   * (0.0 after normalisation) around it: DETR's padded batch, made by the copies
   * themselves. Same-size images not multiples of n are padded too. */
  size_t pad_multiple;
} ferry_transfer_options;

/* Copy `batch` to `device` on `stream` (NULL: the device's default stream; otherwise a
 * stream of `device`). The batch stays the caller's and may be released at once.
 * Both packed and unpacked batches work. Normalisation needs a u8 PER_SAMPLE image
 * field of inner shape [H,W,3] whose bytes the target can read (host memory, or the
 * target device itself). A batch held in GPU memory cannot go to the host backend
 * (FERRY_EUNSUPPORTED). On failure nothing is left allocated and *out is NULL. */
FERRY_API ferry_status ferry_transfer(ferry_device *device, ferry_stream *stream, ferry_batch *batch,
                                      const ferry_transfer_options *options, ferry_device_batch **out);

/* ---- the device batch --------------------------------------------------------- */

/* Number of samples B (the image tensor's first dimension). */
FERRY_API size_t ferry_device_batch_size(const ferry_device_batch *batch);
/* The device every tensor of the batch lives on. */
FERRY_API ferry_device *ferry_device_batch_device(const ferry_device_batch *batch);
/* The stream the transfer ran on; tensors' frees are ordered on it. */
FERRY_API ferry_stream *ferry_device_batch_stream(const ferry_device_batch *batch);

/* Per-sample fields: every field of the source batch except the image field, in the
 * source's order. */
FERRY_API size_t ferry_device_batch_num_fields(const ferry_device_batch *batch);
/* Name of per-sample field k (NULL when k is out of range). */
FERRY_API const char *ferry_device_batch_field_name(const ferry_device_batch *batch, size_t k);

/* The batch tensor, or NULL when there was no image field, its samples differ in shape
 * (each is then a record under the field's name: ferry_device_batch_sample_field(db, i,
 * FERRY_FIELD_IMAGES) for a loader's batch) or it was taken out. */
FERRY_API ferry_tensor *ferry_device_batch_images(ferry_device_batch *batch);
/* Sample i's tensor for field `name`: [rows, inner...] for a ROWS field (rows may be 0:
 * a valid empty tensor, data NULL), the inner shape for a PER_SAMPLE field. NULL when
 * there is no such sample or field, or the tensor was taken out. The pointer stays
 * valid until the device batch is freed; write into the tensor's memory freely. */
FERRY_API ferry_tensor *ferry_device_batch_sample_field(ferry_device_batch *batch, size_t sample,
                                                        const char *name);

/* Move a tensor's ownership out to *out; the record becomes empty (a later lookup gives
 * NULL). FERRY_ENOTFOUND if there is no such tensor (or it was already taken). */
FERRY_API ferry_status ferry_device_batch_take(ferry_device_batch *batch, size_t sample, const char *name,
                                               ferry_tensor *out);
FERRY_API ferry_status ferry_device_batch_take_images(ferry_device_batch *batch, ferry_tensor *out);
/* Free the record's tensor (if still there) and put *tensor in its place, taking
 * ownership (*tensor is cleared). FERRY_ENOTFOUND if there is no such sample/field. */
FERRY_API ferry_status ferry_device_batch_replace(ferry_device_batch *batch, size_t sample,
                                                  const char *name, ferry_tensor *tensor);

/* An event that completes once every copy (and every hook) of the transfer has run.
 * Owned by the device batch. */
FERRY_API ferry_event *ferry_device_batch_event(ferry_device_batch *batch);
/* Wait for that event; returns the first hook failure (with its message), else FERRY_OK. */
FERRY_API ferry_status ferry_device_batch_wait(ferry_device_batch *batch);

/* Free every tensor still in the batch (stream-ordered, so queued work that reads them
 * still sees them) and the batch itself. Waits for the event first only when
 * ON_STREAM hooks may still be about to run. Safe on NULL. */
FERRY_API void ferry_device_batch_free(ferry_device_batch *batch);

#ifdef __cplusplus
}
#endif
#endif
