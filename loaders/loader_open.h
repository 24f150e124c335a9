/* loaders/loader_open.h - what loader_open.c offers besides ferry_loader_open (internal).
 *
 * Declares the open with a given nvJPEG table, for the tests of the GPU decoder's
 * loader side (tests/loaders/test_gpu_loader.c) without a GPU. loader_open.c is the
 * top of loaders/: nothing in the folder calls it.
 */
#ifndef FERRY_LOADERS_LOADER_OPEN_H
#define FERRY_LOADERS_LOADER_OPEN_H

#include "ferry/error.h"
#include "ferry/loader.h"

struct ferry__nvjpeg_api;

/* ferry_loader_open (loader_open.c) with the GPU decoder's worker side on `api` (a
 * fake table in the tests), on whatever device the config names: the host backend
 * included, so the layout, routing, re-layout and stats are tested without a GPU. */
ferry_status ferry__loader_open_gpu(const ferry_loader_config *config, const struct ferry__nvjpeg_api *api,
                                    ferry_loader **out);

#endif
