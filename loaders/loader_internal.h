/* loaders/loader_internal.h - the loader's data model (internal): struct ferry_loader,
 * its plans and ready items, and the parts of its state each file writes. Like
 * coco/store.h, it declares no function: each file's calls are in its own header
 * (loaders/handoff.h, workers.h, coordinator.h, loader_check.h, loader.h for loader.c,
 * loader_open.h, gpu_fill.h), which includes this one where its calls take these types.
 *
 * Threads: one coordinator lays batches out ahead of the consumer (a PLAN per
 * batch: its samples, its offset tables, its arena) and commits them in order;
 * `workers` threads fill the samples of the plans in flight. Plans are optimistic:
 * each starts where the previous one ends. When a sample fails under the skip
 * policy, the failing plan and every plan after it are cancelled and laid out
 * again without that sample, so batch k stays a pure function of the data and the
 * config, whatever the timing.
 *
 * Serial work per batch is what bounds a many-core node (issue #14), so the one
 * lock guards only O(1) steps in steady state:
 *   - workers claim samples as (plan, slot) from a queue of plans with unclaimed
 *     slots (`work.head`): queueing a plan links one node, whatever the batch size;
 *   - each role sleeps on its own condition variable (lib/cond.h) and is woken only
 *     when something it waits for happened: workers each on their own (woken one
 *     after another, each by the last, while there are unclaimed samples, idle
 *     workers and free cores, the last to go idle first; no more workers fill at
 *     once than the process has cores), the coordinator on `coord_cv` (its head
 *     plan is complete, or there is room to plan ahead), the consumer on
 *     `ready_cv` (a batch or marker is ready);
 *   - wake-ups are sent after the lock is let go, and as far as possible by the
 *     workers rather than by the two serial threads (handoff.c);
 *   - a plan counts its failures, so committing a good plan reads one counter;
 *   - plans and ready items are recycled through free lists: no allocation per
 *     batch once the pipeline is full.
 * Lock order: loader->lock, then the pool's lock (the coordinator never holds the
 * loader's lock while it waits for an arena).
 * Who writes what: fields fixed at open (config, fill, fields, instances, the depth
 * and arena counts) are read without the lock; the GPU decoder's route bytes change
 * by atomics (ferry__gpu_decode, loaders/fill.h). Once the threads run, everything
 * from `lock` down changes under it, except a claimed slot, which its worker fills without the lock
 * (and writes its message before retaking it, workers.c). That state is in parts,
 * each written by one file: `work` by workers.c, `hand` by handoff.c, `coord`,
 * `stopping` and `generation` by coordinator.c, `view` by loader.c (struct
 * ferry_loader below says which counter is whose). ferry__loader_check
 * (loader_check.c) asserts their invariants at every release of the lock in the
 * debug and sanitizer builds, and the lock is let go only by ferry__loader_unlock
 * and ferry__loader_wait (tests/loaders/check_unlocks.py).
 */
#ifndef FERRY_LOADERS_LOADER_INTERNAL_H
#define FERRY_LOADERS_LOADER_INTERNAL_H

#include <pthread.h>

#include "ferry/advanced.h"
#include "ferry/coco.h"
#include "ferry/loader.h"
#include "image/augment.h"
#include "lib/batch_fields.h"
#include "lib/cond.h"
#include "lib/status.h"
#include "loaders/fill.h"
#include "loaders/sampler.h"
#include "source/image_source.h"
#include "source/shards.h"

struct ferry__ready_item;

/* One batch being filled. The arrays hold batch_size entries (count are used);
 * they are allocated once and reused when the plan is recycled. */
typedef struct ferry__plan {
  uint64_t start, end;     /* the cursor range of this rank's order it consumed */
  size_t count;            /* samples in the batch */
  size_t *dataset_index;   /* [count] */
  uint64_t *position;      /* [count] cursor positions */
  ferry_status *status;    /* [count], written by workers */
  char (*message)[FERRY_ERROR_MAX]; /* [count], written only for a failed sample */
  int64_t *rows;           /* [nfields * count]: the layout's row counts */
  int64_t *sample_hw;      /* [2 * count]: each sample's height and width, with a recipe */
  int32_t (*augment)[FERRY_AUGMENT_RECORD_LEN]; /* [count]: each sample's record, with a recipe */
  uint64_t batch_index;    /* its place in the epoch: batch k (per-batch scales) */
  size_t claimed;          /* slots handed to workers so far (under the lock) */
  size_t pending;          /* slots not yet finished */
  size_t failures;         /* slots that finished with an error */
  /* set by cancel_inflight: a cancelled plan is never delivered */
  int canceled;
  int64_t epoch;
  /* the loader's generation when it was laid out (a restart voids older ones) */
  uint64_t generation;
  ferry_batch *batch;
  struct ferry__ready_item *item; /* what it is delivered in, taken up front so committing cannot fail */
  struct ferry__plan *next;       /* the in-flight list, or the spare list */
  struct ferry__plan *next_work;  /* the work queue: plans with unclaimed slots */
} ferry__plan;

/* An entry of the queue between coordinator and consumer. */
typedef enum { ITEM_BATCH, ITEM_END, ITEM_ERROR } ferry__item_kind;
typedef struct ferry__ready_item {
  ferry__item_kind kind;
  uint64_t generation;
  int64_t epoch;
  uint64_t cursor_after;   /* where the next batch starts once this one is delivered */
  size_t count;
  ferry_batch *batch;
  uint64_t skipped;        /* samples skipped in the epoch so far */
  ferry_status status;
  char *message;
  struct ferry__ready_item *next;
} ferry__ready_item;

/* ---- the loader's state, in parts, each written by one file ----------------------
 *
 * Everything from `lock` down in struct ferry_loader changes only under the lock once
 * the threads run. Each part below is written by the file its comment names; another
 * file that must change it calls a function of that file (reading is free under the
 * lock). ferry__loader_check (loader_check.c) asserts the invariants the parts'
 * comments state, at every release of the lock in the debug and sanitizer builds. */

/* The work queue and the worker threads (workers.c). */
typedef struct ferry__work_queue {
  pthread_t *threads;
  struct worker_slot *slots;       /* [nworkers]: each thread's index and wake-up */
  struct worker_slot **idle_stack; /* [nworkers]: idle workers, the last to go idle on top */
  size_t nworkers, started;
  ferry__plan *head, *tail;        /* plans with unclaimed slots, oldest first */
  size_t unclaimed;                /* their unclaimed slots, all plans together */
  size_t idle;                     /* workers on the idle stack */
  size_t busy;                     /* workers holding a slot (between claim and finish) */
  size_t max_busy;                 /* at most this many hold one at once: the usable cores */
  size_t waking;                   /* workers taken off the idle stack and not yet running */
  int stop;
} ferry__work_queue;

/* What passes between the threads (handoff.c): the plans in flight in delivery order,
 * the ready queue, spare plans and items, the batches that exist, and the wake-ups
 * owed. */
typedef struct ferry__handoff {
  ferry__plan *inflight_head, *inflight_tail;
  size_t inflight;
  ferry__plan *spare_plans; /* recycled plans */
  ferry__ready_item *ready_head, *ready_tail;
  size_t ready;
  ferry__ready_item *spare_items;  /* recycled items */
  ferry__ready_item *reserve_item; /* so an end or error marker can always be queued */
  size_t outstanding;              /* batches made (or being made) and not yet released */
  size_t laying_out;               /* of which the coordinator is making now, unlocked: 0 or 1 */
  ferry_batch **held;              /* [arenas]: batches the consumer holds, for close */
  size_t nheld;
  /* What the coordinator, idle in its main loop, waits for beyond what always wakes
   * it (a head plan that needs it, a restart, close): room to plan ahead, or the
   * plans in flight all delivered (the epoch's end, a layout to retry). Whoever
   * sees it happen wakes it, and sets this back to COORD_BUSY so that nobody else
   * wakes it for the same. */
  enum { COORD_BUSY, COORD_WAITS_ROOM, COORD_WAITS_DRAIN } coordinator_waits;
  /* wake-ups decided under the lock and sent just after it is let go */
  int owed_ready;                  /* a wake-up owed to ready_cv */
  int owed_coord;                  /* a wake-up owed to coord_cv */
  ferry__cond **owed_workers;      /* [nworkers]: workers taken off the idle stack */
  size_t nowed_workers;
} ferry__handoff;

/* The coordinator thread's (coordinator.c). */
typedef struct ferry__coordinator_part {
  pthread_t thread;
  int started;
  int failed;                      /* out of memory for its own bookkeeping: see fatal_* */
  ferry_status fatal_status;
  char fatal_message[FERRY_ERROR_MAX];
  uint64_t epoch_skipped;          /* samples skipped in the epoch being laid out so far */
  /* where the next generation begins (ferry__coordinator_restart): the cursor, and the
   * index in the epoch of the batch that starts there */
  int64_t restart_epoch;
  uint64_t restart_cursor, restart_batch;
} ferry__coordinator_part;

/* The consumer's view: what has been delivered (loader.c). */
typedef struct ferry__consumer_view {
  ferry_loader_state state;
  uint64_t samples_in_epoch, skipped_in_epoch;
} ferry__consumer_view;

struct ferry_loader {
  /* Fixed at open (loader_open.c), read without the lock. */
  ferry_loader_config config;
  char *annotations_path, *images_dir;
  ferry__source_desc source_desc; /* what annotations_path names, resolved once at open (source/shards.h) */
  ferry_coco *coco;
  ferry__image_source *source; /* NULL: config.images; else the shards' (source/image_source.h) */
  ferry_device *device;        /* for pinned memory */
  int owns_device;
  int packed;                  /* 0: unpacked batches, the baseline (loaders/baseline.h) */
  ferry_pool *pool;            /* packed mode */
  size_t arenas;
  size_t prefetch;             /* batches in flight or ready: config.prefetch, or sized at open */
  size_t refill;               /* the coordinator, idle, is woken when this many batches fit */
  size_t workers;              /* threads that fill samples */
  ferry_field_spec fields[FERRY_MAX_FIELDS];
  ferry__batch_fields checked_fields; /* the same, checked at open, for every batch */
  size_t nfields;
  ferry__fill_context fill;
  size_t keypoints;
  int64_t *instances;          /* per image: instances its target keeps (layout first) */
  char decoder_note[FERRY_ERROR_MAX]; /* ferry_loader_decoder_note (gpu_fill.c) */
  /* The sample order: per_rank fixed at open; the order drawn by the coordinator
   * alone, for the epoch it lays out (coordinator.c). */
  ferry__sampler sampler;

  pthread_mutex_t lock;
  ferry__cond coord_cv;        /* coordinator: head complete, room ahead, restart or stop */
  ferry__cond ready_cv;        /* consumer: an item is ready, a fatal error, or stop */
  int stopping;                /* set once, by close (loader.c) */
  /* The public calls in progress (loader.c): close, once `stopping` is set, waits on
   * close_cv until none is left, so that no call still reads what it frees. */
  size_t calls;
  ferry__cond close_cv;
  unsigned forks;              /* the process's fork count at open (loader_open.c): another
                                  count means this is a child's copy of the loader */
  uint64_t generation;         /* bumped by set_epoch/state_set (coordinator.c) and close */
  ferry__work_queue work;      /* workers.c */
  ferry__handoff hand;         /* handoff.c */
  ferry__coordinator_part coord; /* coordinator.c */
  ferry__consumer_view view;     /* loader.c */
  /* Counters, each written by one file: samples_decoded and peak_busy_workers by
   * workers.c, samples_skipped, replans, batches_dropped and coordinator_idle_cpu_ns by
   * coordinator.c, batches_delivered and consumer_idle_cpu_ns by loader.c; the rest
   * at open. */
  ferry_loader_stats stats;
};

#endif
