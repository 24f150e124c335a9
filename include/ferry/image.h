/* ferry/image.h - JPEG/PNG decoding and the square resize/normalise of one sample.
 *
 * A ferry_decoder belongs to one worker thread: it holds the TurboJPEG handle and
 * scratch buffers that grow to the largest image seen and are then reused, so the
 * steady state allocates nothing. Decoding gives 8-bit RGB whatever the source
 * (grayscale, palette, 16-bit, alpha, CMYK), converted as Pillow's convert("RGB")
 * would, because the reference training pipelines open images with Pillow.
 *
 * The resize is Pillow's BILINEAR (the filter torchvision applies to PIL images):
 * a separable convolution whose support widens with the downscale factor, so
 * downscaling is antialiased. Its u8 output equals Pillow's (tests check
 * |difference| <= 1; it is 0 on every image tried). See docs/images.md.
 *
 * Errors name the file (or the name given for an in-memory image). When a call
 * fails, whatever it wrote into the caller's buffer is unspecified: the loader
 * treats the whole sample as failed and never hands that buffer out.
 */
#ifndef FERRY_IMAGE_H
#define FERRY_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"
#include "ferry/export.h"
#include "ferry/transfer.h" /* FERRY_IMAGENET_MEAN and _STD: the normalisation's statistics */

#ifdef __cplusplus
extern "C" {
#endif

/* How a resized image is written into the caller's buffer. */
typedef enum ferry_image_layout {
  /* float32 [3,R,R], (v/255 - mean[c]) / std[c] with ImageNet's mean and std: the
   * transfer's normalisation formula and statistics (ferry/transfer.h,
   * FERRY_IMAGENET_MEAN and _STD), bit for bit */
  FERRY_LAYOUT_F32_CHW = 0,
  /* uint8 [R,R,3], the resized pixels, for normalising on the device (4x fewer bytes) */
  FERRY_LAYOUT_U8_HWC = 1
} ferry_image_layout;

/* Pillow's Image.MAX_IMAGE_PIXELS: the default decompression-bomb limit. */
#define FERRY_IMAGE_DEFAULT_MAX_PIXELS UINT64_C(89478485)

/* Where a loader decodes its images (ferry_image_options.decode). The single-image
 * calls of this header always decode on the CPU; the loader reads the field at
 * ferry_loader_open (docs/images.md, "Choosing a decoder"). With the GPU decoder a
 * loader's batches hold each sample's compressed bytes (FERRY_FIELD_JPEG) or, for an
 * image nvJPEG cannot take, its u8 pixels (FERRY_FIELD_CPU_IMAGES), and no images
 * field: ferry_transfer (direct path) decodes, resizes and normalises them into the
 * device batch's images tensor. Status: built and tested on the host through a fake
 * nvJPEG; not yet run on a GPU (docs/images.md says what is verified). */
typedef enum ferry_decode_mode {
  FERRY_DECODE_CPU = 0,  /* TurboJPEG and libpng on the worker threads (the default) */
  FERRY_DECODE_GPU = 1,  /* nvJPEG on the loader's CUDA device: ferry_loader_open fails
                            (FERRY_EUNSUPPORTED) when the device is the host or nvJPEG
                            is missing, naming what is */
  FERRY_DECODE_AUTO = 2  /* GPU where it can open, else CPU; the loader's stats say which */
} ferry_decode_mode;

/* "cpu", "gpu" or "auto" (command-line flags, configs) into *out: FERRY_OK, or
 * FERRY_EINVAL naming the value. And back: the name, or "?" out of range. */
FERRY_API ferry_status ferry_decode_mode_parse(const char *name, ferry_decode_mode *out);
FERRY_API const char *ferry_decode_mode_name(ferry_decode_mode mode);

/* Why the GPU decoder sent a sample to the CPU path instead: image/'s own reasons
 * (image/gpu/ gives every CPU route of its rules one of them). A loader counts them
 * in its stats through its own table (ferry/loader.h, samples_cpu_fallback). */
typedef enum ferry_decode_fallback {
  FERRY_FALLBACK_NOT_JPEG = 0,  /* PNG, or anything without the JPEG signature */
  FERRY_FALLBACK_CORRUPT,       /* nvJPEG's parser refuses the stream, or nvJPEG failed to
                                   decode it in a transfer (the CPU path then decodes it,
                                   or fails or skips it by config.on_error, naming the file) */
  FERRY_FALLBACK_COMPONENTS,    /* CMYK/YCCK, or a component count other than 1 and 3 */
  FERRY_FALLBACK_PRECISION,     /* not 8-bit samples */
  FERRY_FALLBACK_ENCODING,      /* lossless, arithmetic, or progressive on the hardware engine */
  FERRY_FALLBACK_SUBSAMPLING,   /* unknown, or 4:1:1 / 4:1:0 on the hardware engine */
  FERRY_FALLBACK_UNSUPPORTED,   /* the hardware engine's own check refuses it */
  FERRY_FALLBACK_ORIENTED,      /* EXIF says rotate and the options apply EXIF */
  FERRY_FALLBACK_REASONS
} ferry_decode_fallback;

typedef struct ferry_image_options {
  /* Nonzero: when the target is much smaller than a JPEG, let TurboJPEG decode at
   * the smallest scale (k/8) still at least the target in both dimensions, then
   * resize. Faster, but the result is no longer Pillow's, so it is off by default
   * (measurements in docs/images.md). PNG is unaffected. */
  int dct_scaling;
  /* Nonzero: rotate/flip by the EXIF Orientation tag (JPEG APP1, PNG eXIf) as
   * Pillow's ImageOps.exif_transpose does. Default 0, as Pillow and torchvision. */
  int apply_exif;
  /* Images with more than this many pixels fail with FERRY_ELIMIT before any pixel
   * is decoded. 0 disables the check. Default FERRY_IMAGE_DEFAULT_MAX_PIXELS. */
  uint64_t max_pixels;
  /* The loader's decoder. Default FERRY_DECODE_CPU. */
  ferry_decode_mode decode;
  /* Reduced-size JPEG decoding as RF-DETR 1.11 does it for detection training
   * (PIL.Image.draft, or simplejpeg at the same scale): 0 (the default) decodes at full
   * size; N > 0 decodes a JPEG at 1/8, 1/4 or 1/2 scale, the smallest that keeps both
   * sides at least N (ferry_image_draft_factor), in libjpeg-turbo's scaled IDCT, so the
   * pixels are Pillow's draft's. PNG is decoded at full size, as Pillow's draft leaves
   * it. A loader also rescales each sample's boxes and areas per axis as RF-DETR's
   * scale_coco_annotation does, and takes FERRY_DRAFT_SIZE_RFDETR: RF-DETR's own rule
   * for N from the recipe (docs/images.md, "Reduced-size decoding"). Not with
   * dct_scaling, masks, keypoints or the GPU decoder. */
  int draft_size;
  /* Zero. Room for options to come without moving the fields that follow these
   * options in ferry_loader_config. */
  uint32_t reserved[6];
} ferry_image_options;

/* config.image.draft_size for a loader: RF-DETR 1.11's draft_size_for_transforms. With
 * a training recipe and without masks, the largest scale the recipe can resize to
 * directly (the largest multi-scale scale, else the resolution), at least branch B's
 * largest first resize (600) with scale jitter; otherwise (validation recipes, masks)
 * 0: full size. */
#define FERRY_DRAFT_SIZE_RFDETR (-1)

/* The reduction a JPEG of width x height gets under draft_size: the largest of 8, 4, 2
 * with both width / f and height / f (rounded down) at least draft_size, else 1 (and 1
 * for draft_size <= 0). The decoded size is then ceil(width / f) x ceil(height / f). */
FERRY_API int ferry_image_draft_factor(int width, int height, int draft_size);

/* Fill *o with the defaults: dct_scaling 0, apply_exif 0, max_pixels 89478485,
 * decode FERRY_DECODE_CPU. */
FERRY_API void ferry_image_options_default(ferry_image_options *o);

/* ---- augmentation recipes (docs/augment.md) ----------------------------------------
 *
 * The geometry a loader gives each sample: RF-DETR 1.11's own transforms
 * (rfdetr/datasets/_torchvision.py), restated. Every random choice is drawn from
 * (seed, epoch, dataset index) (per-batch scales from (seed, epoch, batch index)), so
 * batch k has the same pixels whatever the worker count, rank split or resume. Images
 * are resized with Pillow's BILINEAR on u8, masks with torch's nearest rule, boxes and
 * areas as torchvision moves them; each sample records its choices (the "augment"
 * field, FERRY_AUGMENT_RECORD_LEN int32s) so that anyone can replay it through the
 * reference transforms. */

typedef enum ferry_augment {
  /* "none" (= "val-square"): Resize((R, R)), the validation transform (the default) */
  FERRY_AUGMENT_NONE = 0,
  /* "val": RandomResize([R], max_size): shortest side R, longest at most max_size */
  FERRY_AUGMENT_VAL = 1,
  /* "rfdetr-square": RF-DETR's square training recipe. A coin picks branch A,
   * Resize((s, s)), or branch B, RandomResize(resize_b) then RandomSizedCrop((crop_min,
   * crop_max), (s, s)); then RandomHorizontalFlip(hflip). s is drawn from the scales. */
  FERRY_AUGMENT_RFDETR_SQUARE = 2,
  /* "rfdetr": the non-square one. Branch A is RandomResize([s], max_size); branch B
   * crops to (min(s, max_size), min(s, max_size)). */
  FERRY_AUGMENT_RFDETR = 3
} ferry_augment;
#define FERRY_AUGMENT_VAL_SQUARE FERRY_AUGMENT_NONE

typedef enum ferry_multi_scale {
  FERRY_MULTI_SCALE_OFF = 0,        /* the one scale is the resolution */
  FERRY_MULTI_SCALE_PER_SAMPLE = 1, /* s drawn per sample from compute_multi_scale_scales */
  FERRY_MULTI_SCALE_PER_BATCH = 2   /* one s per batch, from (seed, epoch, batch index) */
} ferry_multi_scale;

/* The int32 fields of a sample's augment record, in this order. */
enum {
  FERRY_AUGMENT_FLIP = 0,     /* 1 when flipped horizontally (last) */
  FERRY_AUGMENT_BRANCH,       /* 0: branch A; 1: branch B */
  FERRY_AUGMENT_RESIZE_H,     /* branch B's first resize: output height (0 for A) */
  FERRY_AUGMENT_RESIZE_W,     /* and width */
  FERRY_AUGMENT_CROP_TOP,     /* branch B's crop in that image (zeros for A) */
  FERRY_AUGMENT_CROP_LEFT,
  FERRY_AUGMENT_CROP_H,
  FERRY_AUGMENT_CROP_W,
  FERRY_AUGMENT_OUT_H,        /* the sample's final content height and width */
  FERRY_AUGMENT_OUT_W,
  FERRY_AUGMENT_RECORD_LEN
};

typedef struct ferry_augment_options {
  ferry_augment recipe;          /* FERRY_AUGMENT_NONE */
  ferry_multi_scale multi_scale; /* FERRY_MULTI_SCALE_OFF */
  /* compute_multi_scale_scales(resolution, expanded_scales, patch_size, num_windows):
   * the multiples of patch_size * num_windows around the resolution, offsets -3..4
   * (expanded: -5..5), at least twice that multiple. Defaults 0, 16, 4. */
  int expanded_scales;
  int patch_size;
  int num_windows;
  int scale_jitter;              /* 1: the coin picks branch A or B; 0: A only */
  float hflip;                   /* probability of the flip, in [0, 1]: 0.5 */
  int max_size;                  /* the non-square recipes' longest side: 1333 */
  int crop_min, crop_max;        /* RandomSizedCrop's side range: 384, 600 */
  int resize_b[3];               /* branch B's shortest sides: 400, 500, 600 */
  uint32_t reserved[8];          /* zero */
} ferry_augment_options;

/* Fill *o with the defaults above (recipe none). */
FERRY_API void ferry_augment_options_default(ferry_augment_options *o);
/* "none", "val-square", "val", "rfdetr-square", "rfdetr" into *out (FERRY_EINVAL
 * naming the value otherwise), and back ("?" out of range). */
FERRY_API ferry_status ferry_augment_parse(const char *name, ferry_augment *out);
FERRY_API const char *ferry_augment_name(ferry_augment recipe);
/* "off", "per-sample", "per-batch" likewise. */
FERRY_API ferry_status ferry_multi_scale_parse(const char *name, ferry_multi_scale *out);
FERRY_API const char *ferry_multi_scale_name(ferry_multi_scale mode);
/* Check the options (FERRY_EINVAL naming the option: an unknown recipe or mode, a
 * scale, patch or window that is not positive, crop bounds out of order, a
 * probability outside [0, 1]). */
FERRY_API ferry_status ferry_augment_options_check(const ferry_augment_options *o, int resolution);
/* The scales a recipe draws s from at this resolution, in increasing order, into
 * scales[0 .. *n) (at most `cap`): [resolution] without multi-scale. */
FERRY_API ferry_status ferry_augment_scales(const ferry_augment_options *o, int resolution, int *scales,
                                            size_t cap, size_t *n);

/* Per-thread decoder: TurboJPEG handle plus reusable scratch. Not thread-safe;
 * open one per worker. */
typedef struct ferry_decoder ferry_decoder;

/* Open a decoder. FERRY_ENOMEM if the handle or its state cannot be allocated. */
FERRY_API ferry_status ferry_decoder_open(ferry_decoder **out);

/* Close a decoder and free its scratch. NULL is allowed. */
FERRY_API void ferry_decoder_close(ferry_decoder *d);

/* Width and height from the header only (JPEG SOF or PNG IHDR), without decoding
 * pixels; as stored, i.e. before any EXIF rotation. `name` is used in messages.
 * FERRY_EFORMAT if the bytes are neither, or the header is malformed. */
FERRY_API ferry_status ferry_image_probe(const void *data, size_t len, const char *name, int *width,
                                         int *height);

/* ferry_image_probe on a file: reads only as much of it as the header needs
 * (growing the read on demand), so probing a dataset's sizes is cheap. */
FERRY_API ferry_status ferry_image_probe_file(const char *path, int *width, int *height);

/* Full decode to RGB8 HWC (row stride 3*width) into the decoder's scratch. *out
 * points into that scratch and stays valid until the next call on d. Honours
 * opts->apply_exif and opts->max_pixels (opts NULL: defaults); never DCT-scales.
 * A truncated or corrupt image, even one libjpeg would finish with a warning, is
 * FERRY_EFORMAT; an image kind this decoder does not handle is FERRY_EUNSUPPORTED. */
FERRY_API ferry_status ferry_decode_rgb(ferry_decoder *d, const void *data, size_t len, const char *name,
                                        const ferry_image_options *opts, const uint8_t **out, int *width,
                                        int *height);

/* ferry_decode_rgb on a file, read whole into the decoder's reusable file buffer.
 * This is the decode-only limit the loader's throughput is measured against
 * (repro/decode_bench). A missing, unreadable or empty file is an error naming it. */
FERRY_API ferry_status ferry_image_load_rgb(ferry_decoder *d, const char *path,
                                            const ferry_image_options *opts, const uint8_t **out,
                                            int *width, int *height);

/* Read `path` into the decoder's file buffer, decode, resize to size x size and
 * write the result straight into dst in `layout` (room for 3*size*size elements of
 * the layout's type). *orig_w and *orig_h (may be NULL) receive the full-resolution
 * size of the image before the resize (after EXIF rotation when applied; the
 * header size even when DCT scaling decoded it smaller), which is what boxes are
 * scaled from. A missing, unreadable or empty file is an error naming the path. */
FERRY_API ferry_status ferry_image_load_resized(ferry_decoder *d, const char *path,
                                                const ferry_image_options *opts, int size,
                                                ferry_image_layout layout, void *dst, int *orig_w,
                                                int *orig_h);

/* ferry_image_load_resized on bytes in memory; `name` is used in messages. */
FERRY_API ferry_status ferry_image_decode_resized(ferry_decoder *d, const void *data, size_t len,
                                                  const char *name, const ferry_image_options *opts,
                                                  int size, ferry_image_layout layout, void *dst,
                                                  int *orig_w, int *orig_h);

/* Resize an RGB8 HWC image (row stride 3*width) to size x size into dst, with the
 * same filter and output layouts as ferry_image_load_resized. Uses d's scratch
 * for the filter tables and the intermediate rows; src must not alias dst. */
FERRY_API ferry_status ferry_image_resize(ferry_decoder *d, const uint8_t *src, int width, int height,
                                          int size, ferry_image_layout layout, void *dst);

/* Scale a COCO box [x, y, w, h] given in the orig_w x orig_h image into the
 * size x size image it was resized to (each axis by its own factor). */
FERRY_API void ferry_image_scale_box(const float in[4], int orig_w, int orig_h, int size, float out[4]);

#ifdef __cplusplus
}
#endif
#endif
