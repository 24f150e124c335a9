/* ferry/ferry.h - everything public, in one include. */
#ifndef FERRY_FERRY_H
#define FERRY_FERRY_H

#include "ferry/error.h"
#include "ferry/tensor.h"
#include "ferry/device.h"
#include "ferry/pool.h"
#include "ferry/batch.h"

#endif
