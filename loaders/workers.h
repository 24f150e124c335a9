/* loaders/workers.h - the worker threads' calls (workers.c; internal).
 *
 * Declares what the other files ask of workers.c, which alone writes loader->work
 * (loader_internal.h): start and stop the threads (open and close), and queue or
 * withdraw a plan's slots (the coordinator). All but start and stop are called with
 * loader->lock held.
 */
#ifndef FERRY_LOADERS_WORKERS_H
#define FERRY_LOADERS_WORKERS_H

#include <stddef.h>

#include "loaders/loader_internal.h"

/* Start `count` workers, at most `max_busy` of which fill samples at once. */
ferry_status ferry__loader_start_workers(ferry_loader *loader, size_t count, size_t max_busy);
void ferry__loader_stop_workers(ferry_loader *loader);
/* Queue a plan's slots for the workers and wake the idle ones it needs; O(1) but
 * for the wake-ups. */
void ferry__loader_dispatch(ferry_loader *loader, ferry__plan *p);
/* Take a plan's unclaimed slots back from the workers (it is being cancelled). */
void ferry__loader_withdraw(ferry_loader *loader, ferry__plan *p);

#endif
