/* loaders/handoff.h - the hand-off between the loader's threads (handoff.c; internal).
 *
 * Declares what the other files ask of handoff.c, which alone writes loader->hand
 * (loader_internal.h): the wake-ups owed and the one unlock (ferry__loader_unlock,
 * ferry__loader_wait: every release of loader->lock goes through them,
 * tests/loaders/check_unlocks.py), spare plans and items, the plans in flight, the
 * ready queue, the batches that exist. Every call but the release hook and
 * ferry__handoff_close expects loader->lock held (and ferry__loader_unlock lets it go).
 */
#ifndef FERRY_LOADERS_HANDOFF_H
#define FERRY_LOADERS_HANDOFF_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "ferry/batch.h"
#include "lib/cond.h"
#include "loaders/loader_internal.h"

/* Wake-ups are owed, not sent, under the lock: a thread woken while the signaller
 * still holds the lock would only go back to sleep on the lock itself, and the
 * signal's system call would lengthen the time everyone else waits for it. Whoever
 * lets the lock go next sends them (ferry__loader_unlock), and a thread about to
 * wait sends them first (ferry__loader_wait). Every release of the lock goes
 * through one of the two (tests/loaders/check_unlocks.py holds the code to that), and
 * both run ferry__loader_check first in the checking builds; the rare broadcasts
 * (close, a fatal error, a restart) are sent at once. */
void ferry__loader_owe_ready(ferry_loader *loader);
void ferry__loader_owe_coord(ferry_loader *loader);
void ferry__loader_owe_worker(ferry_loader *loader, ferry__cond *wake);
/* pthread_mutex_unlock of loader->lock, then the wake-ups owed. */
void ferry__loader_unlock(ferry_loader *loader);
/* Wait on `cv` (loader->lock held), adding to *idle_ns (if not NULL) the CPU time the
 * thread spent going to sleep and waking up. With wake-ups owed it sends them
 * instead (letting the lock go and taking it back) and returns at once, as a
 * spurious wake-up would: every caller waits in a loop that looks again. The serial
 * threads wait this way, so that their CPU time per batch can be split into work and
 * idling: at saturation they never wait, so only the work bounds the rate
 * (repro/throughput's ceiling). */
void ferry__loader_wait(ferry_loader *loader, ferry__cond *cv, uint64_t *idle_ns);
/* The same, sleeping no later than `deadline` (CLOCK_MONOTONIC; NULL: no bound): 0, or
 * ETIMEDOUT / EINTR as ferry__cond_wait_until says. */
int ferry__loader_wait_until(ferry_loader *loader, ferry__cond *cv, uint64_t *idle_ns, const struct timespec *deadline);

/* Plans: a new one with arrays for a full batch (NULL when out of memory; allocated
 * without needing the lock), a spare one (NULL when there is none), one back to the
 * spare list (no worker may hold one of its slots), and the spare list freed (the
 * coordinator's exit). */
ferry__plan *ferry__handoff_plan_new(size_t batch_size, size_t nfields);
ferry__plan *ferry__handoff_plan_spare(ferry_loader *loader);
void ferry__handoff_plan_put(ferry_loader *loader, ferry__plan *p);
void ferry__handoff_free_spare_plans(ferry_loader *loader);
/* Items: one from the spare list or the heap (NULL when out of memory), one back. */
ferry__ready_item *ferry__handoff_item_get(ferry_loader *loader);
void ferry__handoff_item_put(ferry_loader *loader, ferry__ready_item *item);
/* An item for an end or error marker: a spare one, else the reserve (NULL only when
 * both fail). ferry__handoff_restock_reserve makes a new reserve if it was used. */
ferry__ready_item *ferry__handoff_marker_item(ferry_loader *loader);
void ferry__handoff_restock_reserve(ferry_loader *loader);
/* Append an item to the ready queue and wake the consumer. */
void ferry__handoff_push_item(ferry_loader *loader, ferry__ready_item *item);

/* The coordinator lays a batch out: _begin counts it among the batches that exist
 * before the lock is let go for the layout; _end with made 0 (the layout failed)
 * takes it back, with made 1 the batch now exists and is appended or discarded. */
void ferry__handoff_layout_begin(ferry_loader *loader);
void ferry__handoff_layout_end(ferry_loader *loader, int made);
/* A laid-out plan goes in flight, behind the others. */
void ferry__handoff_append(ferry_loader *loader, ferry__plan *p);
/* Give a batch back on the coordinator's side, without the consumer's hook. */
void ferry__handoff_discard(ferry_loader *loader, ferry_batch *batch);
/* Every plan in flight, cancelled and with no slot held by a worker any more
 * (coordinator.c cancel_inflight), off the list: batches given back, plans to spare. */
void ferry__handoff_release_inflight(ferry_loader *loader);
/* Drop ready items of another generation than `generation` (UINT64_MAX: all); returns
 * how many batches went with them. */
size_t ferry__handoff_drop_stale(ferry_loader *loader, uint64_t generation);
/* The head plan is complete and good: hand its batch out in the item it was laid out
 * with (so that delivering needs no memory), and recycle the plan. */
void ferry__handoff_deliver_head(ferry_loader *loader);
/* Hand every complete, good plan at the head of the in-flight list to the consumer,
 * in order. 0 when it stopped at a complete plan that needs the coordinator
 * (failures, cancelled, an older generation). */
int ferry__handoff_deliver_complete(ferry_loader *loader);
/* The coordinator goes idle, waiting for room (drain 0) or for every plan in flight
 * to be delivered (drain 1); or it is busy again. */
void ferry__handoff_coordinator_idle(ferry_loader *loader, int drain);
void ferry__handoff_coordinator_busy(ferry_loader *loader);
/* Wake the idle coordinator if a quarter of the depth (at least 1 batch) can be laid
 * out, so that with a deep pipeline it wakes once per several batches, not for each.
 * Workers call it as they finish a slot (workers.c). */
void ferry__handoff_wake_coordinator_for_room(ferry_loader *loader);
/* The consumer's side: the ready item at the head if it is of the current
 * generation (taken off the queue), else NULL; a delivered batch recorded as held. */
ferry__ready_item *ferry__handoff_pop_ready(ferry_loader *loader);
void ferry__handoff_hold(ferry_loader *loader, ferry_batch *batch);
/* The consumer's release hook: a delivered batch was released. Takes the lock. */
void ferry__loader_release_hook(ferry_batch *batch, void *loader);
/* At open: room for `arenas` held batches and `workers` owed wake-ups. */
ferry_status ferry__handoff_open(ferry_loader *loader, size_t workers, size_t arenas);
/* At close, once every thread is joined: the batches the consumer still holds are
 * released (their hooks removed first), the spare items and the reserve freed. */
void ferry__handoff_close(ferry_loader *loader);

#endif
