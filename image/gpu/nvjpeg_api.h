/* image/gpu/nvjpeg_api.h - nvJPEG, loaded at run time, and which images it may decode (internal).
 *
 * libferry never links libnvjpeg: ferry__nvjpeg_load opens libnvjpeg.so.N, N the
 * major of the nvjpeg.h it was built with (nvjpeg_table.h, FERRY_NVJPEG_SONAME, says
 * why no other), with dlopen, fills a table of the entry points ferry uses and checks
 * the version the library reports, so the library loads and runs where nvJPEG is
 * absent and never runs on an nvJPEG of another major. Everything that decides or decodes
 * goes through a table (ferry__nvjpeg_api), which tests fill with fakes.
 *
 * This header has no nvJPEG types, so the loader can ask whether GPU decoding can
 * open without seeing CUDA's headers; the table, the parser and the routing rules
 * are in image/gpu/nvjpeg_table.h. The routing rules (ferry__nvjpeg_route) say, per image, whether nvJPEG's batched
 * decode takes it or the CPU path (TurboJPEG/libpng) must: header parsing is CPU
 * work, cheap, done by the worker that read the file.
 */
#ifndef FERRY_LIB_NVJPEG_API_H
#define FERRY_LIB_NVJPEG_API_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/device.h"
#include "ferry/error.h"
#include "ferry/image.h"
#include "ferry_config.h"

/* Why an image goes where it goes. Every value but GPU sends the sample to the CPU
 * path; CORRUPT ones then fail or are skipped there by the loader's error policy,
 * with the CPU decoder's message naming the file. */
typedef enum ferry__nvjpeg_route_kind {
  FERRY_NVJPEG_ROUTE_GPU = 0,
  FERRY_NVJPEG_ROUTE_NOT_JPEG,    /* PNG, or anything without the JPEG signature */
  FERRY_NVJPEG_ROUTE_CORRUPT,     /* nvJPEG's parser refuses the stream */
  FERRY_NVJPEG_ROUTE_COMPONENTS,  /* CMYK/YCCK (4 components) or another count but 1 and 3 */
  FERRY_NVJPEG_ROUTE_PRECISION,   /* not 8-bit samples */
  FERRY_NVJPEG_ROUTE_ENCODING,    /* lossless, arithmetic, or progressive on the hardware engine */
  FERRY_NVJPEG_ROUTE_SUBSAMPLING, /* unknown, or 4:1:1 / 4:1:0 on the hardware engine */
  FERRY_NVJPEG_ROUTE_UNSUPPORTED, /* the hardware engine's own check says no */
  FERRY_NVJPEG_ROUTE_ORIENTED,    /* EXIF says rotate, and the config applies EXIF */
  FERRY_NVJPEG_ROUTES
} ferry__nvjpeg_route_kind;

/* A short name for a route ("gpu", "not-jpeg", ...); "?" out of range. */
const char *ferry__nvjpeg_route_name(ferry__nvjpeg_route_kind route);
/* The reason (ferry/image.h's ferry_decode_fallback) a CPU route gives; -1 for
 * FERRY_NVJPEG_ROUTE_GPU and out of range. */
int ferry__nvjpeg_route_reason(ferry__nvjpeg_route_kind route);

struct ferry__nvjpeg_api;

/* Open nvJPEG once per process (later calls return the same table) and give its
 * table. FERRY_ENODEV when ferry was built without nvjpeg.h, or libnvjpeg.so.N (N:
 * the major ferry was built for) does not load, lacks an entry point, or reports
 * another major through nvjpegGetProperty; the message says which. Thread-safe. */
ferry_status ferry__nvjpeg_load(const struct ferry__nvjpeg_api **out);

/* Whether `device` can decode with nvJPEG: FERRY_OK, or FERRY_EUNSUPPORTED with a
 * message saying that GPU decoding needs a CUDA device and nvJPEG, and which of the
 * two is missing (the host device; no libnvjpeg, and why). Opens no CUDA context. */
ferry_status ferry__nvjpeg_device_check(ferry_device *device);

#endif
