/* ferry/ferry.h - the stable public API, in one include. The advanced API (building
 * batches by hand, pools, release hooks) is ferry/advanced.h. */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include "ferry/error.h"
#include "ferry/tensor.h"
#include "ferry/device.h"
#include "ferry/batch.h"
#include "ferry/transfer.h"
#include "ferry/coco.h"
#include "ferry/mask.h"
#include "ferry/image.h"
#include "ferry/loader.h"
/* ferry/dlpack.h is left out on purpose: it needs <dlpack/dlpack.h> (libdlpack-dev),
 * which only programs that hand tensors to DLPack consumers should have to find. */

#endif
