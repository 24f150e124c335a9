/* image/gpu/nvjpeg_table.h - nvJPEG's table of entry points, the per-worker parser and the
 * routing rules (internal; needs nvjpeg.h, so only for builds with FERRY_HAVE_NVJPEG).
 *
 * Tests fill a ferry__nvjpeg_api with fakes and run the same rules the real table runs.
 */
#ifndef FERRY_LIB_NVJPEG_TABLE_H
#define FERRY_LIB_NVJPEG_TABLE_H

#include "ferry/device.h"
#include "ferry/image.h"
#include "image/gpu/nvjpeg_api.h"

#if FERRY_HAVE_NVJPEG
#include <nvjpeg.h>

/* The entry points ferry uses, with nvJPEG's own signatures (checked against the
 * header at compile time, since the real ones are assigned from dlsym by name). */
typedef struct ferry__nvjpeg_api {
  nvjpegStatus_t (*CreateEx)(nvjpegBackend_t, nvjpegDevAllocator_t *, nvjpegPinnedAllocator_t *,
                             unsigned int, nvjpegHandle_t *);
  nvjpegStatus_t (*Destroy)(nvjpegHandle_t);
  nvjpegStatus_t (*JpegStateCreate)(nvjpegHandle_t, nvjpegJpegState_t *);
  nvjpegStatus_t (*JpegStateDestroy)(nvjpegJpegState_t);
  nvjpegStatus_t (*GetImageInfo)(nvjpegHandle_t, const unsigned char *, size_t, int *,
                                 nvjpegChromaSubsampling_t *, int *, int *);
  nvjpegStatus_t (*JpegStreamCreate)(nvjpegHandle_t, nvjpegJpegStream_t *);
  nvjpegStatus_t (*JpegStreamDestroy)(nvjpegJpegStream_t);
  nvjpegStatus_t (*JpegStreamParse)(nvjpegHandle_t, const unsigned char *, size_t, int, int,
                                    nvjpegJpegStream_t);
  nvjpegStatus_t (*JpegStreamGetJpegEncoding)(nvjpegJpegStream_t, nvjpegJpegEncoding_t *);
  nvjpegStatus_t (*JpegStreamGetComponentsNum)(nvjpegJpegStream_t, unsigned int *);
  nvjpegStatus_t (*JpegStreamGetSamplePrecision)(nvjpegJpegStream_t, unsigned int *);
  nvjpegStatus_t (*JpegStreamGetChromaSubsampling)(nvjpegJpegStream_t, nvjpegChromaSubsampling_t *);
  nvjpegStatus_t (*JpegStreamGetExifOrientation)(nvjpegJpegStream_t, nvjpegExifOrientation_t *);
  nvjpegStatus_t (*DecodeBatchedSupported)(nvjpegHandle_t, nvjpegJpegStream_t, int *);
  nvjpegStatus_t (*DecodeBatchedInitialize)(nvjpegHandle_t, nvjpegJpegState_t, int, int,
                                            nvjpegOutputFormat_t);
  nvjpegStatus_t (*DecodeBatched)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *,
                                  const size_t *, nvjpegImage_t *, cudaStream_t);
  nvjpegStatus_t (*GetProperty)(libraryPropertyType, int *);
} ferry__nvjpeg_api;

/* The one library name ferry__nvjpeg_load tries: libnvjpeg.so.N for the major N of
 * the nvjpeg.h ferry was compiled with (NVJPEG_VER_MAJOR). nvJPEG's major is CUDA's
 * (12 ships with CUDA 12, 13 with CUDA 13); the table's types and enum values are that
 * header's, and a libnvjpeg of another major brings its own CUDA runtime and driver
 * requirement into the process. So no other major is tried: a CUDA 12 build never
 * picks up a CUDA 13 libnvjpeg because it happens to be installed. */
#define FERRY_NVJPEG_STR_(x) #x
#define FERRY_NVJPEG_STR(x) FERRY_NVJPEG_STR_(x)
#define FERRY_NVJPEG_SONAME "libnvjpeg.so." FERRY_NVJPEG_STR(NVJPEG_VER_MAJOR)

/* The loaded library's own word on its version (nvjpegGetProperty): FERRY_OK when its
 * major is NVJPEG_VER_MAJOR, else FERRY_ENODEV naming `soname`, both versions and the
 * CUDA whose nvJPEG to install (a file renamed or linked across majors, or the query
 * failing, is refused the same way). */
ferry_status ferry__nvjpeg_check_version(const ferry__nvjpeg_api *api, const char *soname);

/* nvjpegStatus_t's name ("NVJPEG_STATUS_ARCH_MISMATCH"), "unknown status" out of range. */
const char *ferry__nvjpeg_status_name(nvjpegStatus_t status);

/* One handle and one parsed-stream object: what a worker needs to route its images.
 * `hardware` is 1 when the handle is on NVJPEG_BACKEND_HARDWARE (A100, H100, H200). */
typedef struct ferry__nvjpeg_parser {
  const ferry__nvjpeg_api *api;
  nvjpegHandle_t handle;
  nvjpegJpegStream_t stream;
  int hardware;
} ferry__nvjpeg_parser;

/* A handle on the hardware backend where nvjpegCreateEx accepts it, else on the
 * default GPU backend, and a stream object. FERRY_EDEVICE naming the failing call. */
ferry_status ferry__nvjpeg_parser_open(const ferry__nvjpeg_api *api, ferry__nvjpeg_parser *out);
void ferry__nvjpeg_parser_close(ferry__nvjpeg_parser *p);

/* Where the image in data[0..len) goes. apply_exif: the config rotates by EXIF, which
 * the device path does not (so a rotated image goes to the CPU). */
ferry__nvjpeg_route_kind ferry__nvjpeg_route(ferry__nvjpeg_parser *p, const uint8_t *data, size_t len, int apply_exif);

/* One decode state on one handle: what one stream decodes with (nvJPEG wants a state
 * per concurrent decode). `batch` is the batch size the state was last initialised
 * for (0: not yet, or reset after a failed batch). */
typedef struct ferry__nvjpeg_decoder {
  ferry__nvjpeg_parser parser;
  nvjpegJpegState_t state;
  int batch;
} ferry__nvjpeg_decoder;

/* A parser (its handle) and a decode state. FERRY_EDEVICE naming the failing call. */
ferry_status ferry__nvjpeg_decoder_open(const ferry__nvjpeg_api *api, ferry__nvjpeg_decoder *out);
void ferry__nvjpeg_decoder_close(ferry__nvjpeg_decoder *d);

/* The size nvJPEG decodes the image at (its first component's), held to the CPU
 * decoder's pixel limit (opts->max_pixels; NULL: the defaults), so that a header
 * claiming a huge image is refused before anything is allocated for it, with the CPU
 * decoder's message. FERRY_EFORMAT naming `name` when nvJPEG cannot read the header,
 * FERRY_ELIMIT past the limit. */
ferry_status ferry__nvjpeg_image_size(ferry__nvjpeg_parser *p, const uint8_t *data, size_t len, const char *name,
                                      const ferry_image_options *opts, int *width, int *height);

/* Queue the decode of n JPEGs (host memory) to interleaved RGB8 on `stream` (a CUDA
 * stream of ferry's): image i into dst[i], device memory of 3 * width[i] bytes a row.
 * The state is initialised for n images when it was for another count. On failure,
 * FERRY_EDEVICE naming the call and its status, and the state is reset for the next
 * batch. The sources must stay alive until the stream has run the decode. */
ferry_status ferry__nvjpeg_decode_rgbi(ferry__nvjpeg_decoder *d, const uint8_t *const *data, const size_t *len,
                                       const int *width, uint8_t *const *dst, int n, ferry_stream *stream);

#endif /* FERRY_HAVE_NVJPEG */
#endif
