/* loaders/coordinator.h - the coordinator's calls (coordinator.c; internal).
 *
 * Declares what the other files ask of coordinator.c, which alone writes
 * loader->coord, `stopping` and `generation` (loader_internal.h): its thread started
 * (open) and joined (close), a restart at a new point (set_epoch, state_set) and the
 * stop for close (loader.c).
 */
#ifndef FERRY_LOADERS_COORDINATOR_H
#define FERRY_LOADERS_COORDINATOR_H

#include <stdint.h>

#include "ferry/error.h"
#include "ferry/loader.h"

/* Start and join its thread. */
ferry_status ferry__coordinator_start(ferry_loader *loader);
void ferry__coordinator_join(ferry_loader *loader);
/* Restart at (epoch, cursor): a new generation, so what is in flight or ready is
 * dropped once the coordinator wakes. The caller holds the lock (and sets the
 * consumer's view in the same hold). */
void ferry__coordinator_restart(ferry_loader *loader, int64_t epoch, uint64_t cursor, uint64_t batch);
/* Stop for close: `stopping` set, a new generation, the consumer and the coordinator
 * woken. Takes the lock. */
void ferry__coordinator_stop(ferry_loader *loader);

#endif
