/* ferry/error.h - status codes and the per-thread error message.
 *
 * Every ferry function that can fail returns a ferry_status. FERRY_OK is 0 and
 * every failure is negative, so `if (st < 0)` and `if (st != FERRY_OK)` both work.
 * A failing call also leaves a message on the calling thread that names what
 * failed: the file, the JSON path, the sample. Read it with ferry_last_error()
 * before the next ferry call on the same thread overwrites it.
 */
#ifndef FERRY_ERROR_H
#define FERRY_ERROR_H

#include "ferry/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ferry_status {
  FERRY_OK = 0,
  FERRY_EINVAL = -1,       /* an argument is invalid (NULL, out of range, wrong shape) */
  FERRY_ENOMEM = -2,       /* host, pinned or device memory could not be allocated (free some, retry) */
  FERRY_EIO = -3,          /* a file could not be opened or read */
  FERRY_EFORMAT = -4,      /* input data is malformed: JSON, RLE, polygon, image bytes */
  FERRY_ENODEV = -5,       /* no such device, or no driver/device for its backend */
  FERRY_EDEVICE = -6,      /* the device runtime reported an error (a copy, a kernel, nvJPEG) */
  FERRY_EUNSUPPORTED = -7, /* valid but not supported (an image kind, an operation on this batch) */
  FERRY_ELIMIT = -8,       /* a configured limit was exceeded (pixel limit, nesting depth) */
  FERRY_ENOTFOUND = -9,    /* a named thing (field, image, category, file) does not exist */
  FERRY_ECANCELED = -10,   /* the object was closed or cancelled while the call waited */
  FERRY_EAGAIN = -11,      /* nothing available now; a non-blocking call would have waited */
  FERRY_EEND = -12         /* the end of an epoch: no more batches until the next one */
} ferry_status;

/* A short fixed description of a status ("invalid argument"). Never NULL. */
FERRY_API const char *ferry_strerror(ferry_status status);

/* The message left by the last failing ferry call on this thread, with its context,
 * e.g. "annotations[17].bbox[2]: expected a number". Empty string if none. The pointer
 * stays valid until the next ferry call on this thread. */
FERRY_API const char *ferry_last_error(void);

/* Forget this thread's last error message. */
FERRY_API void ferry_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
