/* soak: many epochs of what a long training run does to a loader, checked each epoch.
 *
 *   soak --annotations FILE --images DIR [--epochs 300] [--workers 16] [--batch 4]
 *        [--resolution 64] [--corrupt-percent 1] [--reopen-every 10] [--warmup 5]
 *        [--seed 1] [--pause-us 2000] [--rss-slack-mib 16] [--verbose]
 *        [--layout f32|u8] [--prefetch N] [--inject fd|memory|digest]
 *
 * The run: a scratch copy of the images folder (symbolic links) in which
 * --corrupt-percent of the images (at least one) are damaged, in turn truncated to a
 * third, emptied, given a garbage header, or missing; one loader with --workers
 * workers and the skip policy reads it epoch after epoch. The consumer pauses at
 * random, holds a batch across the next one now and then, copies every batch to the
 * host device and frees the copy, and calls ferry_loader_set_epoch at each epoch's
 * start (the DistributedSampler idiom). At a random batch, epochs 1 mod 4 restart
 * with set_epoch (what was read so far is dropped, the epoch starts over) and epochs
 * 3 mod 4 save the state, wander into another epoch for a batch or two, and restore
 * it. Every --reopen-every epochs the loader is closed (mid-epoch, with the batch the
 * consumer holds, when it holds one) and opened again, alternately at the epoch's
 * start and mid-epoch (the state saved before the close and restored after it).
 *
 * What each epoch must give (the digest): the SHA-256 of every delivered sample, in
 * delivery order (its fields' names, shapes and bytes, in the batch's field order).
 * The clean reference is a run of the same annotations, seed and options on the
 * original, undamaged images folder (fail policy, 4 workers: batch k does not depend
 * on the worker count), each epoch from its start, digesting every
 * sample except those of the damaged images' dataset indexes: the samples the skip
 * policy must leave, in the order it must leave them (the skip policy removes a
 * failed sample from the epoch's order and closes up the rest, loader.h). The
 * reference runs first, so that its loader is gone before the soak's is measured.
 * Also checked each epoch: every batch but the epoch's last has --batch samples.
 *
 * What each epoch must not grow, sampled once the epoch has ended (no batch held, no
 * device copy alive; the loader open and already filling the next epoch): resident
 * memory (/proc/self/statm), pinned bytes and device bytes (the device's accounting,
 * ferry_device_memory_stats), open descriptors (/proc/self/fd) and threads
 * (/proc/self/task). The bounds, against the largest value of the first --warmup
 * epochs (the baseline):
 *   descriptors, threads   no more than the baseline;
 *   device bytes           0 live (every copy was freed), at each epoch end;
 *   pinned bytes           at most the pool's own bound: arenas x (1.25 x the largest
 *                          batch the set can make, a full batch of its busiest images,
 *                          + 64 KiB), since lib/pool.c grows an arena to a quarter more
 *                          than a batch asks, in 64 KiB steps; and 0 once a loader is
 *                          closed, at each reopening;
 *   resident memory        at most the baseline + --rss-slack-mib (default 16 MiB: the
 *                          allocator's caches move with 16 threads made and joined at
 *                          each reopening). Not checked under AddressSanitizer, whose
 *                          quarantine keeps freed memory resident by design (its leak
 *                          checker runs at exit instead), nor under ThreadSanitizer,
 *                          whose shadow and per-thread history grow with every thread
 *                          made (16 more at each reopening).
 * --inject shows that the checks can fail (the test runs each): fd leaks a descriptor
 * and memory 4 MiB of touched memory per epoch; digest damages one more image than
 * the reference leaves out, as a loader that skipped a good sample would.
 *
 * Prints a summary and "soak: OK" (exit 0), or the first broken check (exit 1).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ferry/advanced.h" /* ferry_batch_layout_bytes: the largest batch's arena */
#include "ferry/coco.h"
#include "ferry/ferry.h"
#include "ferry/loader.h"
#include "ferry/transfer.h"
#include "repro/bench_util.h"
#include "repro/sha256.h"

/* A sanitizer whose own memory grows by design, so resident memory says nothing about
 * ferry's: NULL without one. */
#if defined(__SANITIZE_ADDRESS__)
#define SOAK_SANITIZER "AddressSanitizer"
#elif defined(__SANITIZE_THREAD__)
#define SOAK_SANITIZER "ThreadSanitizer"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_SANITIZER "AddressSanitizer"
#elif __has_feature(thread_sanitizer)
#define SOAK_SANITIZER "ThreadSanitizer"
#endif
#endif
#ifndef SOAK_SANITIZER
#define SOAK_SANITIZER NULL
#endif

enum { DAMAGE_KINDS = 4, PATH_MAX_SOAK = 4096 };
static const char *const damage_names[DAMAGE_KINDS] = {"truncated", "empty", "garbage header", "missing"};

typedef struct options {
  bench_common data; /* --annotations, --images, --workers, --batch, --resolution, ... */
  const char *inject;
  int epochs, reopen_every, warmup, pause_us, verbose;
  double corrupt_percent, rss_slack_mib;
  uint64_t seed;
} options;

/* The damaged copy of the images folder. */
typedef struct dataset {
  size_t images;
  uint8_t *damaged;  /* [images]: 1 for a damaged image's dataset index */
  size_t ndamaged;
  int64_t *busiest;  /* [batch]: the largest instance counts of the set, descending */
  size_t unmarked;   /* --inject digest: one more damaged image, which the reference
                        digests as good (SIZE_MAX: none) */
  char scratch[PATH_MAX_SOAK], folder[PATH_MAX_SOAK + 16];
} dataset;

/* One epoch-end sample of what must stay flat. */
typedef struct gauges {
  uint64_t rss, pinned, device, fds, threads;
} gauges;

/* What the run did, for the summary. */
typedef struct tally {
  uint64_t samples, batches, pauses, held_across, restarts, wanders, reopen_start, reopen_mid;
  uint64_t largest_batch; /* bytes of the largest batch the set can make (its busiest images) */
  uint64_t pinned_bound;  /* the pool's bound for those (pinned_bound) */
  gauges first, baseline, worst_after, last;
} tally;

/* The soak's own random stream (splitmix64): pauses, positions, damage. */
static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint64_t rng_below(uint64_t n) { return n ? rng_next() % n : 0; }

static int failed(const char *what) {
  fprintf(stderr, "soak: %s: %s\n", what, ferry_last_error());
  return -1;
}

/* ---- the damaged folder ------------------------------------------------------------ */

static int write_file(const char *path, const uint8_t *data, size_t len) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(data, 1, len, f) == len;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "soak: cannot write %s: %s\n", path, strerror(errno));
  return ok ? 0 : -1;
}

/* `to` made from `from` damaged as `kind`: a third of it, nothing, its first bytes
 * overwritten (no decoder recognises it), or no file at all. */
static int damage(const char *from, const char *to, int kind) {
  if (kind == 3) return 0;
  FILE *f = fopen(from, "rb");
  uint8_t buf[1 << 16];
  size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  if (!len) {
    fprintf(stderr, "soak: cannot read %s\n", from);
    return -1;
  }
  if (kind == 0) len /= 3;
  if (kind == 1) len = 0;
  if (kind == 2) memset(buf, 0x5a, len < 64 ? len : 64);
  return write_file(to, buf, len);
}

/* Which dataset indexes to damage: round(percent of the images), at least one, drawn
 * without repeats. */
static void pick_damaged(dataset *d, double percent) {
  size_t want = (size_t)((double)d->images * percent / 100.0 + 0.5);
  if (want < 1) want = 1;
  if (want > d->images) want = d->images;
  while (d->ndamaged < want) {
    size_t i = (size_t)rng_below(d->images);
    if (!d->damaged[i]) d->damaged[i] = 1, d->ndamaged++;
  }
}

/* One image's entry in the scratch folder: a link to the original, or a damaged copy
 * (the kinds in turn). */
static int place_image(const options *o, dataset *d, const char *name, size_t index, int *kind) {
  if (strchr(name, '/')) {
    fprintf(stderr, "soak: file name %s has a folder: the soak links a flat images folder only\n", name);
    return -1;
  }
  char from[2 * PATH_MAX_SOAK], to[2 * PATH_MAX_SOAK], real[PATH_MAX];
  snprintf(from, sizeof from, "%s/%s", o->data.images, name);
  snprintf(to, sizeof to, "%s/%s", d->folder, name);
  if (d->damaged[index] || index == d->unmarked) {
    int k = (*kind)++ % DAMAGE_KINDS;
    if (o->verbose) printf("damaged: dataset index %zu (%s): %s\n", index, name, damage_names[k]);
    return damage(from, to, k);
  }
  if (!realpath(from, real) || symlink(real, to) != 0) {
    fprintf(stderr, "soak: cannot link %s: %s\n", from, strerror(errno));
    return -1;
  }
  return 0;
}

static int descending(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The `batch` largest instance counts, as the loader counts them (its default target
 * options: crowd annotations dropped): the rows of the largest batch there can be. */
static int find_busiest(const options *o, dataset *d, const ferry_coco *coco) {
  int64_t *counts = calloc(d->images, sizeof *counts);
  d->busiest = calloc((size_t)o->data.batch, sizeof *d->busiest);
  if (!counts || !d->busiest) return free(counts), -1;
  ferry_target_options t;
  ferry_target_options_default(&t);
  for (size_t i = 0; i < d->images; i++)
    if (ferry_coco_target_count(coco, i, &t, &counts[i]) != FERRY_OK) return free(counts), failed("count");
  qsort(counts, d->images, sizeof *counts, descending);
  for (size_t i = 0; i < (size_t)o->data.batch; i++) d->busiest[i] = counts[i % d->images];
  free(counts);
  return 0;
}

static int make_dataset(const options *o, dataset *d) {
  ferry_coco *coco;
  if (ferry_coco_open(o->data.annotations, NULL, &coco) != FERRY_OK) return failed(o->data.annotations);
  d->images = ferry_coco_num_images(coco);
  d->damaged = calloc(d->images ? d->images : 1, 1);
  const char *tmp = getenv("TMPDIR");
  snprintf(d->scratch, sizeof d->scratch, "%.3000s/ferry-soak-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  int st = d->damaged && d->images && mkdtemp(d->scratch) ? 0 : -1;
  if (st) fprintf(stderr, "soak: no images, or no scratch folder (%s)\n", strerror(errno));
  snprintf(d->folder, sizeof d->folder, "%s/images", d->scratch);
  if (!st && mkdir(d->folder, 0700) != 0) st = -1;
  if (!st) st = find_busiest(o, d, coco);
  if (!st) pick_damaged(d, o->corrupt_percent);
  d->unmarked = SIZE_MAX;
  for (size_t i = 0; o->inject && !strcmp(o->inject, "digest") && d->unmarked == SIZE_MAX && i < d->images; i++)
    if (!d->damaged[i]) d->unmarked = i;
  int kind = 0;
  for (size_t i = 0; !st && i < d->images; i++) {
    ferry_coco_image img;
    st = ferry_coco_image_at(coco, i, &img) == FERRY_OK ? place_image(o, d, img.file_name, i, &kind) : failed("image");
  }
  ferry_coco_close(coco);
  return st;
}

static void remove_dataset(dataset *d) {
  DIR *dir = d->scratch[0] ? opendir(d->folder) : NULL;
  for (struct dirent *e; dir && (e = readdir(dir));) {
    char path[2 * PATH_MAX_SOAK + 256];
    snprintf(path, sizeof path, "%s/%s", d->folder, e->d_name);
    if (e->d_name[0] != '.') unlink(path);
  }
  if (dir) closedir(dir);
  if (d->scratch[0]) rmdir(d->folder), rmdir(d->scratch);
  free(d->damaged);
  free(d->busiest);
}

/* ---- digests ----------------------------------------------------------------------- */

/* Sample `i` of `b`, every field in the batch's order; a damaged index (reference
 * run) is left out. Returns 1 if it was digested. */
static int digest_sample(sha256 *h, const ferry_batch *b, size_t i, const dataset *d) {
  int index_field = ferry_batch_find_field(b, FERRY_FIELD_SAMPLE_INDEX);
  ferry_tensor view;
  if (index_field < 0 || ferry_batch_sample(b, (size_t)index_field, i, &view) != FERRY_OK) return 0;
  if (d && d->damaged[*(const int64_t *)view.data]) return 0;
  for (size_t f = 0; f < ferry_batch_num_fields(b); f++) {
    const char *name = ferry_batch_field_spec(b, f)->name;
    if (ferry_batch_sample(b, f, i, &view) != FERRY_OK) continue;
    sha256_update(h, name, strlen(name) + 1);
    sha256_update(h, view.shape, sizeof view.shape);
    if (view.nbytes) sha256_update(h, view.data, view.nbytes);
  }
  return 1;
}

static void hex(const uint8_t digest[32], char out[33]) {
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", digest[i]);
}

static void loader_config(const options *o, const char *images, ferry_device *dev, ferry_loader_config *c) {
  bench_loader_config(c, &o->data, dev);
  c->images = images;
  c->seed = o->seed;
  c->rank = 0;
  c->world_size = 1;
}

/* The clean run: each epoch's digest over the undamaged images, and its sample count. */
static int reference(const options *o, const dataset *d, ferry_device *dev, uint8_t (*digests)[32]) {
  ferry_loader_config c;
  loader_config(o, o->data.images, dev, &c);
  c.workers = 4;
  ferry_loader *l;
  if (ferry_loader_open(&c, &l) != FERRY_OK) return failed("reference loader");
  ferry_status st = FERRY_OK;
  for (int e = 0; e < o->epochs && st == FERRY_OK; e++) {
    sha256 h;
    sha256_init(&h);
    st = ferry_loader_set_epoch(l, e);
    ferry_batch *b;
    while (st == FERRY_OK && (st = ferry_loader_next(l, &b)) == FERRY_OK) {
      for (size_t i = 0; i < ferry_batch_size(b); i++) digest_sample(&h, b, i, d);
      ferry_batch_release(b);
    }
    if (st == FERRY_EEND) st = FERRY_OK;
    sha256_final(&h, digests[e]);
  }
  if (st != FERRY_OK) failed("reference run");
  ferry_loader_close(l);
  return st == FERRY_OK ? 0 : -1;
}

/* ---- gauges ------------------------------------------------------------------------ */

static uint64_t count_entries(const char *folder) {
  DIR *dir = opendir(folder);
  uint64_t n = 0;
  for (struct dirent *e; dir && (e = readdir(dir));) n += e->d_name[0] != '.';
  if (dir) closedir(dir);
  return n;
}

static uint64_t resident_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (f && fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
  if (f) fclose(f);
  return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

enum { SETTLE_READINGS = 100 };

/* What the process holds for good in `folder` (descriptors, threads): when an epoch
 * ends the loader is already filling the next one, and a worker holds an image file
 * open while it reads it, so one reading can count a descriptor gone a moment later.
 * A leak stays: the smallest of up to SETTLE_READINGS readings 1 ms apart, stopping
 * at the first that is at most `enough`. */
static uint64_t settled_entries(const char *folder, uint64_t enough) {
  uint64_t least = count_entries(folder);
  for (int i = 1; i < SETTLE_READINGS && least > enough; i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    uint64_t n = count_entries(folder);
    if (n < least) least = n;
  }
  return least;
}

/* `enough`: the baseline once known (zeros during the warm-up: every reading taken). */
static gauges read_gauges(ferry_device *dev, const gauges *enough) {
  ferry_memory_stats m = {0};
  ferry_memory_stats_init(&m);
  ferry_device_memory_stats(dev, &m);
  return (gauges){resident_bytes(), m.pinned_live_bytes, m.live_bytes,
                  settled_entries("/proc/self/fd", enough->fds), settled_entries("/proc/self/task", enough->threads)};
}

static void gauges_max(gauges *into, const gauges *g) {
  if (g->rss > into->rss) into->rss = g->rss;
  if (g->pinned > into->pinned) into->pinned = g->pinned;
  if (g->device > into->device) into->device = g->device;
  if (g->fds > into->fds) into->fds = g->fds;
  if (g->threads > into->threads) into->threads = g->threads;
}

/* The largest pinned bytes the pool may hold: arenas x (1.25 x the largest batch,
 * rounded up to lib/pool.c's 64 KiB quantum), since the pool grows an arena to a
 * quarter more than the batch it is given. */
static uint64_t pinned_bound(ferry_loader *l, const tally *t) {
  ferry_loader_stats s;
  ferry_loader_stats_init(&s);
  if (ferry_loader_stats_get(l, &s) != FERRY_OK) return 0;
  return (uint64_t)s.arenas * (t->largest_batch + t->largest_batch / 4 + 65536);
}

/* After a warm-up epoch the baseline grows; after it every bound holds. */
static int check_gauges(const options *o, ferry_loader *l, int epoch, tally *t, const gauges *g) {
  char why[256] = "";
  if (epoch < o->warmup) gauges_max(&t->baseline, g);
  else gauges_max(&t->worst_after, g);
  uint64_t slack = (uint64_t)(o->rss_slack_mib * 1048576.0), pinned_max = t->pinned_bound = pinned_bound(l, t);
  if (g->device != 0) snprintf(why, sizeof why, "%llu device bytes live with no batch held", (unsigned long long)g->device);
  else if (g->pinned > pinned_max)
    snprintf(why, sizeof why, "pinned bytes %llu pass the pool's bound %llu", (unsigned long long)g->pinned,
             (unsigned long long)pinned_max);
  else if (epoch >= o->warmup && g->fds > t->baseline.fds)
    snprintf(why, sizeof why, "open descriptors grew: %llu, baseline %llu", (unsigned long long)g->fds,
             (unsigned long long)t->baseline.fds);
  else if (epoch >= o->warmup && g->threads > t->baseline.threads)
    snprintf(why, sizeof why, "threads grew: %llu, baseline %llu", (unsigned long long)g->threads,
             (unsigned long long)t->baseline.threads);
  else if (!SOAK_SANITIZER && epoch >= o->warmup && g->rss > t->baseline.rss + slack)
    snprintf(why, sizeof why, "resident memory grew: %.1f MiB, baseline %.1f MiB + %.1f MiB slack",
             (double)g->rss / 1048576.0, (double)t->baseline.rss / 1048576.0, o->rss_slack_mib);
  if (!why[0]) return 0;
  fprintf(stderr, "soak: FAILED at epoch %d: %s\n", epoch, why);
  return -1;
}

/* ---- the consumer ------------------------------------------------------------------ */

/* What the soak's loop carries across batches, epochs and reopenings. */
typedef struct run {
  const options *o;
  const dataset *d;
  ferry_device *dev;              /* the host device, shared by every loader */
  ferry_stream *stream;
  ferry_loader_config config;     /* the soak's: the damaged folder, the skip policy */
  ferry_loader *loader;           /* replaced at each reopening */
  ferry_batch *held;              /* a batch kept across the next one */
  sha256 h;                       /* this epoch's digest so far */
  uint64_t samples, short_batches; /* this epoch's, so far */
  char digest[33];                /* the last epoch's, in hex (its first 16 bytes) */
  tally t;
} run;

static void pause_maybe(run *r) {
  if (rng_below(8) != 0 || r->o->pause_us <= 0) return;
  struct timespec ts = {0, (long)rng_below((uint64_t)r->o->pause_us) * 1000};
  nanosleep(&ts, NULL);
  r->t.pauses++;
}

/* The arena bytes of the largest batch the set can make: `b`'s fields, a full batch
 * of the busiest images. */
static uint64_t largest_batch_bytes(const ferry_batch *b, const dataset *d, size_t batch) {
  size_t n = ferry_batch_num_fields(b), bytes = 0;
  ferry_field_spec specs[FERRY_MAX_FIELDS];
  int64_t rows[FERRY_MAX_FIELDS * 64];
  for (size_t f = 0; f < n; f++) {
    specs[f] = *ferry_batch_field_spec(b, f);
    for (size_t i = 0; i < batch; i++) rows[f * batch + i] = d->busiest[i];
  }
  return ferry_batch_layout_bytes(batch, n, specs, rows, &bytes) == FERRY_OK ? bytes : UINT64_MAX / 4;
}

/* Copy to the device and free the copy, as a training step would. */
static int to_device(run *r, ferry_batch *b) {
  ferry_device_batch *db;
  ferry_transfer_options none = {0};
  if (ferry_transfer(r->dev, r->stream, b, &none, &db) != FERRY_OK) return failed("transfer");
  ferry_status st = ferry_device_batch_wait(db);
  ferry_device_batch_free(db);
  return st == FERRY_OK ? 0 : failed("transfer wait");
}

/* One delivered batch: digested (unless `wander`), copied, released now or after the
 * next one. */
static int consume(run *r, ferry_batch *b, int wander) {
  if (!r->t.largest_batch) r->t.largest_batch = largest_batch_bytes(b, r->d, (size_t)r->o->data.batch);
  if (!wander) {
    /* a short batch must be the epoch's last: any batch after one counts too */
    if (r->short_batches || ferry_batch_size(b) != (size_t)r->o->data.batch) r->short_batches++;
    for (size_t i = 0; i < ferry_batch_size(b); i++) r->samples += (uint64_t)digest_sample(&r->h, b, i, NULL);
    r->t.batches++;
  }
  if (to_device(r, b) != 0) return -1;
  pause_maybe(r);
  if (r->held) ferry_batch_release(r->held), r->held = NULL;
  if (rng_below(4) == 0) r->held = b, r->t.held_across++;
  else ferry_batch_release(b);
  return 0;
}

static void drop_held(run *r) {
  if (r->held) ferry_batch_release(r->held);
  r->held = NULL;
}

static int open_loader(run *r) {
  if (ferry_loader_open(&r->config, &r->loader) != FERRY_OK) return failed("open");
  return 0;
}

/* Closed with a batch held (close releases it), then the pinned and device bytes
 * must be back to nothing before the next loader opens. */
static int reopen(run *r) {
  ferry_loader_close(r->loader);
  r->loader = NULL;
  r->held = NULL;
  gauges g = read_gauges(r->dev, &r->t.baseline);
  if (g.pinned || g.device) {
    fprintf(stderr, "soak: FAILED: %llu pinned and %llu device bytes live after close\n",
            (unsigned long long)g.pinned, (unsigned long long)g.device);
    return -1;
  }
  return open_loader(r);
}

/* The mid-epoch event of `epoch`, at its `k`th batch: a restart (1 mod 4), a wander
 * away and back (3 mod 4), or a reopening with the state carried over. */
typedef enum { EVENT_NONE, EVENT_RESTART, EVENT_WANDER, EVENT_REOPEN } event_kind;

static int wander(run *r, int epoch) {
  ferry_loader_state saved;
  if (ferry_loader_state_get(r->loader, &saved) != FERRY_OK) return failed("state_get");
  if (ferry_loader_set_epoch(r->loader, epoch + 7) != FERRY_OK) return failed("set_epoch (wander)");
  for (uint64_t k = 1 + rng_below(2); k > 0; k--) {
    ferry_batch *b;
    ferry_status st = ferry_loader_next(r->loader, &b);
    if (st == FERRY_EEND) break; /* an epoch of one batch */
    if (st != FERRY_OK) return failed("next (wander)");
    if (consume(r, b, 1) != 0) return -1;
  }
  drop_held(r);
  r->t.wanders++;
  return ferry_loader_state_set(r->loader, &saved) == FERRY_OK ? 0 : failed("state_set");
}

static int reopen_mid(run *r) {
  ferry_loader_state saved;
  if (ferry_loader_state_get(r->loader, &saved) != FERRY_OK) return failed("state_get");
  if (reopen(r) != 0) return -1;
  r->t.reopen_mid++;
  return ferry_loader_state_set(r->loader, &saved) == FERRY_OK ? 0 : failed("state_set after reopen");
}

static int fire(run *r, event_kind event, int epoch) {
  if (event == EVENT_WANDER) return wander(r, epoch);
  if (event == EVENT_REOPEN) return reopen_mid(r);
  /* restart: the epoch begins again, and so does its digest */
  if (ferry_loader_set_epoch(r->loader, epoch) != FERRY_OK) return failed("set_epoch (restart)");
  drop_held(r);
  sha256_init(&r->h);
  r->samples = r->short_batches = 0;
  r->t.restarts++;
  return 0;
}

static event_kind event_of(int epoch, int reopening) {
  if (reopening) return EVENT_REOPEN;
  if (epoch % 4 == 1) return EVENT_RESTART;
  if (epoch % 4 == 3) return EVENT_WANDER;
  return EVENT_NONE;
}

/* One epoch from set_epoch to its end, with its event; the digest compared. */
static int run_epoch(run *r, int epoch, const uint8_t expected[32], event_kind event) {
  sha256_init(&r->h);
  r->samples = r->short_batches = 0;
  if (ferry_loader_set_epoch(r->loader, epoch) != FERRY_OK) return failed("set_epoch");
  uint64_t per_epoch = ferry_loader_batches_per_epoch(r->loader);
  uint64_t at = per_epoch > 1 ? 1 + rng_below(per_epoch - 1) : 1, seen = 0;
  ferry_status st;
  for (ferry_batch *b; (st = ferry_loader_next(r->loader, &b)) == FERRY_OK;) {
    if (consume(r, b, 0) != 0) return -1;
    if (++seen == at && event != EVENT_NONE && fire(r, event, epoch) != 0) return -1;
  }
  drop_held(r);
  if (st != FERRY_EEND) return failed("next");
  uint8_t got[32];
  sha256_final(&r->h, got);
  uint64_t want_samples = r->d->images - r->d->ndamaged;
  char clean[33];
  hex(got, r->digest), hex(expected, clean);
  if (memcmp(got, expected, 32) != 0 || r->samples != want_samples || r->short_batches > 1) {
    fprintf(stderr, "soak: FAILED at epoch %d: digest %s, the clean run's %s; %llu samples of %llu; %llu short "
            "batches\n", epoch, r->digest, clean, (unsigned long long)r->samples, (unsigned long long)want_samples,
            (unsigned long long)r->short_batches);
    return -1;
  }
  r->t.samples += r->samples;
  return 0;
}

/* --inject fd or memory: what a leaking loader would do, once an epoch. The memory
 * escapes through a volatile pointer, so that the compiler keeps it. */
static void *volatile injected;
static void inject_leak(const char *kind) {
  if (kind && !strcmp(kind, "fd") && open("/dev/null", O_RDONLY) < 0) perror("soak: --inject fd");
  if (kind && !strcmp(kind, "memory") && (injected = malloc(4u << 20))) memset(injected, 1, 4u << 20);
}

/* Every epoch: a reopening at the start or in the middle (in turn) every
 * reopen_every epochs, the epoch with its event, the gauges. */
static int soak(run *r, uint8_t (*digests)[32]) {
  const options *o = r->o;
  if (open_loader(r) != 0) return -1;
  int reopenings = 0;
  for (int e = 0; e < o->epochs; e++) {
    int reopening = e > 0 && o->reopen_every > 0 && e % o->reopen_every == 0;
    int mid = reopening && reopenings++ % 2 == 1;
    if (reopening && !mid) {
      if (reopen(r) != 0) return -1;
      r->t.reopen_start++;
    }
    if (run_epoch(r, e, digests[e], event_of(e, mid)) != 0) return -1;
    inject_leak(o->inject);
    gauges none = {0}, g = read_gauges(r->dev, e < o->warmup ? &none : &r->t.baseline);
    if (e == 0) r->t.first = g;
    r->t.last = g;
    if (o->verbose)
      printf("epoch %d: %llu samples, digest %s; resident %.1f MiB, pinned %.2f MiB, device %llu B, %llu fds, "
             "%llu threads\n", e, (unsigned long long)r->samples, r->digest, (double)g.rss / 1048576.0,
             (double)g.pinned / 1048576.0, (unsigned long long)g.device, (unsigned long long)g.fds,
             (unsigned long long)g.threads);
    if (check_gauges(o, r->loader, e, &r->t, &g) != 0) return -1;
  }
  return 0;
}

static void print_gauge(const char *name, uint64_t first, uint64_t base, uint64_t worst, uint64_t last, double unit) {
  printf("  %-16s %12.1f %12.1f %12.1f %12.1f\n", name, (double)first / unit, (double)base / unit, (double)worst / unit,
         (double)last / unit);
}

static void summary(const options *o, const dataset *d, const tally *t) {
  printf("soak: %d epochs of %zu images (%zu damaged, skip policy), %d workers, batch %d, R %d: %llu samples in "
         "%llu batches; %llu pauses, %llu batches held across the next, %llu set_epoch restarts, %llu state "
         "wanders, %llu reopenings at an epoch's start and %llu mid-epoch\n",
         o->epochs, d->images, d->ndamaged, o->data.workers, o->data.batch, o->data.resolution, (unsigned long long)t->samples,
         (unsigned long long)t->batches, (unsigned long long)t->pauses, (unsigned long long)t->held_across,
         (unsigned long long)t->restarts, (unsigned long long)t->wanders, (unsigned long long)t->reopen_start,
         (unsigned long long)t->reopen_mid);
  printf("  %-16s %12s %12s %12s %12s\n", "at epoch end", "epoch 0", "warmup max", "max after", "last");
  const gauges *f = &t->first, *b = &t->baseline, *w = &t->worst_after, *l = &t->last;
  print_gauge("resident MiB", f->rss, b->rss, w->rss, l->rss, 1048576.0);
  print_gauge("pinned MiB", f->pinned, b->pinned, w->pinned, l->pinned, 1048576.0);
  print_gauge("device bytes", f->device, b->device, w->device, l->device, 1);
  print_gauge("descriptors", f->fds, b->fds, w->fds, l->fds, 1);
  print_gauge("threads", f->threads, b->threads, w->threads, l->threads, 1);
  const char *sanitizer = SOAK_SANITIZER;
  printf("  largest batch the set can make %.1f KiB, pinned bound %.1f MiB; warmup %d epochs; resident bound: "
         "warmup max + %.1f MiB%s%s%s\n", (double)t->largest_batch / 1024.0, (double)t->pinned_bound / 1048576.0,
         o->warmup, o->rss_slack_mib, sanitizer ? " (not checked: " : "", sanitizer ? sanitizer : "",
         sanitizer ? ")" : "");
}

static int usage(void) {
  fprintf(stderr, "usage: soak --annotations FILE --images DIR [--epochs N] [--workers N] [--batch N]\n"
                  "            [--resolution R] [--corrupt-percent P] [--reopen-every N] [--warmup N]\n"
                  "            [--seed S] [--pause-us US] [--rss-slack-mib M] [--verbose]\n"
                  "            [--layout f32|u8] [--prefetch N] [--inject fd|memory|digest]\n");
  return 2;
}

static int parse(int argc, char **argv, options *o) {
  *o = (options){.epochs = 300, .reopen_every = 10, .warmup = 5, .pause_us = 2000, .corrupt_percent = 1.0,
                 .rss_slack_mib = 16.0, .seed = 1};
  bench_common_default(&o->data);
  o->data.workers = 16;
  o->data.batch = 4;
  o->data.resolution = 64;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--verbose")) { o->verbose = 1; continue; }
    if (i + 1 >= argc) return -1;
    const char *v = argv[++i];
    int common = bench_common_flag(&o->data, a, v);
    if (common < 0) return -1;
    if (common) continue;
    if (!strcmp(a, "--epochs")) o->epochs = atoi(v);
    else if (!strcmp(a, "--corrupt-percent")) o->corrupt_percent = atof(v);
    else if (!strcmp(a, "--reopen-every")) o->reopen_every = atoi(v);
    else if (!strcmp(a, "--warmup")) o->warmup = atoi(v);
    else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--pause-us")) o->pause_us = atoi(v);
    else if (!strcmp(a, "--rss-slack-mib")) o->rss_slack_mib = atof(v);
    else if (!strcmp(a, "--inject") && (!strcmp(v, "fd") || !strcmp(v, "memory") || !strcmp(v, "digest")))
      o->inject = v;
    else return -1;
  }
  const bench_common *c = &o->data;
  if (!c->annotations || !c->images || o->epochs < 1 || c->workers < 1 || c->batch < 1 || c->batch > 64 ||
      o->warmup < 1 || o->warmup >= o->epochs || o->corrupt_percent < 0 || o->reopen_every < 0)
    return -1;
  return 0;
}

int main(int argc, char **argv) {
  options o;
  if (parse(argc, argv, &o) != 0) return usage();
  rng_state = o.seed;
  dataset d = {0};
  uint8_t (*digests)[32] = calloc((size_t)o.epochs, 32);
  run r = {.o = &o, .d = &d};
  int st = digests && make_dataset(&o, &d) == 0 ? 0 : -1;
  if (!st && ferry_device_open("host", &r.dev) != FERRY_OK) st = failed("device");
  if (!st && ferry_stream_open(r.dev, &r.stream) != FERRY_OK) st = failed("stream");
  if (!st) st = reference(&o, &d, r.dev, digests);
  if (!st) {
    loader_config(&o, d.folder, r.dev, &r.config);
    r.config.on_error = FERRY_ON_ERROR_SKIP;
    st = soak(&r, digests);
    drop_held(&r);
    ferry_loader_close(r.loader);
  }
  if (r.stream) ferry_stream_close(r.stream);
  if (r.dev) ferry_device_close(r.dev);
  if (!st) summary(&o, &d, &r.t);
  remove_dataset(&d);
  free(digests);
  printf("soak: %s\n", st ? "FAILED" : "OK");
  return st ? 1 : 0;
}
