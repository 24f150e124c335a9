/* The loader: determinism, sharding, resume, packed vs unpacked, errors, bounds. */
#include <pthread.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry/coco.h"
#include "../common/canary.h"
#include "loader_fixture.h"
#include "loaders/baseline.h"
#include "loaders/sampler.h"

enum { MAXB = 64, N = LOADER_TEST_IMAGES, NBATCH = (N + 3) / 4 };

Test(loader, batches_do_not_depend_on_the_number_of_workers, .timeout = 120) {
  uint64_t ref[MAXB], got[MAXB];
  size_t nref = 0;
  const size_t workers[] = {1, 2, 4, 16};
  for (size_t w = 0; w < 4; w++) {
    ferry_loader_config c;
    test_config(&c);
    c.workers = workers[w];
    c.prefetch = 3;
    ferry_loader *l = open_loader(&c);
    size_t n = epoch_digests(l, got, MAXB);
    ferry_loader_close(l);
    if (w == 0) {
      memcpy(ref, got, sizeof ref);
      nref = n;
      cr_assert_eq(n, NBATCH, "%d images in batches of 4", N);
      continue;
    }
    cr_assert_eq(n, nref);
    for (size_t k = 0; k < n; k++) cr_assert_eq(got[k], ref[k], "batch %zu differs with %zu workers", k, workers[w]);
  }
}

Test(loader, epochs_reshuffle_and_repeat_for_the_same_seed) {
  ferry_loader_config c;
  test_config(&c);
  uint64_t e0[MAXB], e1[MAXB], again[MAXB];
  ferry_loader *l = open_loader(&c);
  size_t n0 = epoch_digests(l, e0, MAXB);
  size_t n1 = epoch_digests(l, e1, MAXB);
  cr_assert_eq(n0, n1);
  cr_assert_neq(e0[0], e1[0], "epoch 1 is a new permutation");
  cr_assert_eq(ferry_loader_set_epoch(l, 0), FERRY_OK);
  epoch_digests(l, again, MAXB);
  for (size_t k = 0; k < n0; k++) cr_assert_eq(again[k], e0[k]);
  ferry_loader_close(l);
}

/* Every image once per epoch across `world` ranks, with DistributedSampler padding. */
static void check_shards(int world, int drop_last) {
  int seen[N] = {0};
  size_t total = 0, per_rank = 0;
  for (int r = 0; r < world; r++) {
    ferry_loader_config c;
    test_config(&c);
    c.rank = r;
    c.world_size = world;
    c.drop_last = drop_last;
    c.fields = 0; /* images and sample_index only */
    ferry_loader *l = open_loader(&c);
    per_rank = ferry_loader_samples_per_epoch(l);
    ferry_batch *b;
    ferry_status st;
    while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
      for (size_t i = 0; i < ferry_batch_size(b); i++) seen[sample_index(b, i)]++;
      total += ferry_batch_size(b);
      ferry_batch_release(b);
    }
    cr_assert_eq(st, FERRY_EEND, "%s", ferry_last_error());
    ferry_loader_close(l);
  }
  size_t covered = 0;
  for (int i = 0; i < N; i++) covered += seen[i] > 0;
  if (drop_last) {
    cr_assert_eq(per_rank, (size_t)(N / world));
    cr_assert_leq(total, N);
    for (int i = 0; i < N; i++) cr_assert_leq(seen[i], 1, "image %d twice", i);
  } else {
    cr_assert_eq(per_rank, (size_t)((N + world - 1) / world));
    cr_assert_eq(covered, N, "every image is seen");
    cr_assert_eq(total, per_rank * (size_t)world, "ranks are padded to equal length");
    int twice = 0;
    for (int i = 0; i < N; i++) twice += seen[i] - 1;
    cr_assert_eq(twice, (int)(per_rank * (size_t)world) - N, "padding repeats only what is needed");
  }
}

Test(loader, shards_cover_the_dataset_once, .timeout = 120) {
  check_shards(1, 0);
  check_shards(3, 0);
  check_shards(3, 1);
}

Test(sampler, rank_from_the_launchers_environment) {
  int r, w;
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  cr_assert_eq(ferry__sampler_rank_from_env(&r, &w), FERRY_OK);
  cr_assert_eq(r, 1);
  cr_assert_eq(w, 4);
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "3", 1);
  cr_assert_eq(ferry__sampler_rank_from_env(&r, &w), FERRY_OK);
  cr_assert_eq(r, 2, "torchrun's variables come first");
  setenv("RANK", "5", 1);
  ferry_status st = ferry__sampler_rank_from_env(&r, &w);
  /* Tests may share a process (the TSan harness): leave the environment as found. */
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  cr_assert_eq(st, FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "RANK=5"), "%s", ferry_last_error());
}

Test(sampler, permutation_is_a_permutation_and_depends_on_seed_and_epoch) {
  size_t a[100], b[100];
  int seen[100] = {0};
  ferry__sampler_permutation(a, 100, 3, 0);
  for (int i = 0; i < 100; i++) seen[a[i]]++;
  for (int i = 0; i < 100; i++) cr_assert_eq(seen[i], 1);
  ferry__sampler_permutation(b, 100, 3, 1);
  cr_assert_neq(memcmp(a, b, sizeof a), 0);
  ferry__sampler_permutation(b, 100, 3, 0);
  cr_assert_eq(memcmp(a, b, sizeof a), 0);
}

/* The shard order's laws over many layouts (empty shards, fewer samples than ranks,
 * a buffer past the run, drop_last): equal counts per rank; the unbuffered runs,
 * rank after rank, are whole shards in member order then the wrap (or the cut tail);
 * a buffer of B keeps every sample within B - 1 positions of its place in the run and
 * shuffles nothing across ranks; shuffle off is the shards in index order. */
static void shard_runs(size_t *out, const size_t *sizes, size_t nshards, size_t n, int world, int drop_last,
                       int shuffle, size_t buffer, int64_t epoch, size_t *per_rank) {
  for (int r = 0; r < world; r++) {
    ferry__sampler s;
    cr_assert_eq(ferry__sampler_init(&s, n, r, world, shuffle, drop_last, 11), FERRY_OK);
    cr_assert_eq(ferry__sampler_use_shards(&s, sizes, nshards, buffer), FERRY_OK, "%s", ferry_last_error());
    cr_assert_eq(ferry__sampler_set_epoch(&s, epoch), FERRY_OK);
    memcpy(out + (size_t)r * s.per_rank, s.order, s.per_rank * sizeof *s.order);
    *per_rank = s.per_rank;
    ferry__sampler_destroy(&s);
  }
}

static void check_shard_layout(const size_t *sizes, size_t nshards, int world, int drop_last, size_t buffer) {
  size_t n = 0, first[16];
  for (size_t i = 0; i < nshards; i++) first[i] = n, n += sizes[i];
  size_t run[512], got[512], m = 0;
  for (int shuffle = 0; shuffle < 2; shuffle++) {
    shard_runs(run, sizes, nshards, n, world, drop_last, shuffle, 1, 3, &m);
    size_t total = m * (size_t)world;
    cr_assert_eq(m, drop_last ? n / (size_t)world : (n + (size_t)world - 1) / (size_t)world);
    /* the sequence: whole shards in member order (the cut tail aside), then the wrap */
    int used[16] = {0};
    size_t at = 0;
    while (at < total && at < n) {
      size_t s = 0;
      while (s + 1 < nshards && run[at] >= first[s] + sizes[s]) s++;
      cr_assert_eq(run[at], first[s], "position %zu starts inside shard %zu", at, s);
      cr_assert(!used[s], "shard %zu twice", s);
      used[s] = 1;
      for (size_t j = 0; j < sizes[s] && at < total; j++, at++) cr_assert_eq(run[at], first[s] + j);
    }
    for (size_t s = 0; s < nshards && total >= n; s++) cr_assert(used[s] || !sizes[s], "shard %zu missing", s);
    for (; at < total; at++) cr_assert_eq(run[at], run[at - n], "the padding wraps");
    for (size_t k = 0; k < total && !shuffle; k++) cr_assert_eq(run[k], k % n, "no shuffle: the shards in order");
    shard_runs(got, sizes, nshards, n, world, drop_last, shuffle, buffer, 3, &m);
    for (size_t r = 0; r < (size_t)world; r++)
      for (size_t k = 0; k < m; k++) {
        size_t here = r * m + k, from = SIZE_MAX;
        for (size_t j = r * m; j < r * m + m; j++)
          if (run[j] == got[here]) from = j; /* a run holds a sample once: m <= n */
        cr_assert_neq(from, SIZE_MAX, "sample %zu left rank %zu's run", got[here], r);
        cr_assert_lt(from > here ? from - here : here - from, buffer, "moved past the buffer of %zu", buffer);
        if (!shuffle) cr_assert_eq(got[here], run[here], "no shuffle, no buffer");
      }
  }
}

Test(sampler, shard_order_laws) {
  const size_t uneven[] = {5, 9, 3, 12, 0, 7, 1, 10, 6}, tiny[] = {1, 0, 2};
  for (size_t buffer = 1; buffer <= 64; buffer *= 4) {
    for (int world = 1; world <= 5; world++) {
      check_shard_layout(uneven, 9, world, 0, buffer);
      check_shard_layout(uneven, 9, world, 1, buffer);
      check_shard_layout(tiny, 3, world, 0, buffer);
      check_shard_layout(tiny, 3, world, 1, buffer);
    }
  }
  ferry__sampler s;
  cr_assert_eq(ferry__sampler_init(&s, 10, 0, 1, 1, 0, 0), FERRY_OK);
  cr_assert_eq(ferry__sampler_use_shards(&s, uneven, 2, 8), FERRY_EINVAL, "14 samples in shards for 10");
  ferry__sampler_destroy(&s);
}

Test(loader, resume_continues_exactly, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  uint64_t full0[MAXB], full1[MAXB];
  ferry_loader *l = open_loader(&c);
  size_t n0 = epoch_digests(l, full0, MAXB);
  size_t n1 = epoch_digests(l, full1, MAXB);
  ferry_loader_close(l);

  /* Interrupted: epoch 0, then 5 batches of epoch 1, save, close. */
  l = open_loader(&c);
  uint64_t scratch[MAXB];
  epoch_digests(l, scratch, MAXB);
  for (int k = 0; k < 5; k++) {
    ferry_batch *b;
    cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK);
    ferry_batch_release(b);
  }
  ferry_loader_state saved;
  cr_assert_eq(ferry_loader_state_get(l, &saved), FERRY_OK);
  cr_assert_eq(saved.epoch, 1);
  cr_assert_eq(saved.batches_delivered, 5);
  ferry_loader_close(l);

  l = open_loader(&c);
  cr_assert_eq(ferry_loader_state_set(l, &saved), FERRY_OK);
  uint64_t rest[MAXB];
  size_t n = epoch_digests(l, rest, MAXB);
  cr_assert_eq(n + 5, n1);
  for (size_t k = 0; k < n; k++) cr_assert_eq(rest[k], full1[5 + k], "batch %zu after resume", 5 + k);
  size_t m = epoch_digests(l, rest, MAXB);
  cr_assert_eq(m, n0);
  ferry_loader_state bad = saved;
  bad.seed++;
  cr_assert_eq(ferry_loader_state_set(l, &bad), FERRY_EINVAL);
  ferry_loader_close(l);
}

Test(loader, packed_and_unpacked_give_identical_targets, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  uint64_t packed[MAXB], unpacked[MAXB];
  ferry_loader *l = open_loader(&c);
  size_t n = epoch_digests(l, packed, MAXB);
  ferry_loader_close(l);
  cr_assert_eq(ferry__loader_open_unpacked(&c, &l), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(epoch_digests(l, unpacked, MAXB), n);
  ferry_loader_close(l);
  for (size_t k = 0; k < n; k++) cr_assert_eq(packed[k], unpacked[k], "batch %zu", k);
}

/* A copy of the test set's image folder as links, with `victim` replaced by its own
 * first half (the header intact, the scan cut: "Premature end of JPEG file"), so the
 * test needs nothing from ../shared. Returns the folder. */
static const char *folder_with_corrupt_image(const ferry_loader_config *c, const char *victim) {
  static char dir[256];
  snprintf(dir, sizeof dir, "/tmp/ferry-corrupt-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "for f in '%s'/*; do ln -s \"$f\" '%s'/; done && rm '%s/%s' && "
           "head -c $(( $(stat -c %%s '%s/%s') / 2 )) '%s/%s' > '%s/%s'",
           c->images, dir, dir, victim, c->images, victim, c->images, victim, dir, victim);
  cr_assert_eq(system(cmd), 0);
  return dir;
}

static const char *first_image_name(const ferry_loader_config *c) {
  ferry_coco *coco;
  cr_assert_eq(ferry_coco_open(c->annotations, NULL, &coco), FERRY_OK);
  ferry_coco_image img;
  ferry_coco_image_at(coco, 7, &img);
  static char name[256];
  snprintf(name, sizeof name, "%s", img.file_name);
  ferry_coco_close(coco);
  return name;
}

Test(loader, fail_policy_names_the_file_and_sample, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  const char *victim = first_image_name(&c);
  c.images = folder_with_corrupt_image(&c, victim);
  ferry_loader *l = open_loader(&c);
  ferry_batch *b;
  ferry_status st;
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) ferry_batch_release(b);
  cr_assert_neq(st, FERRY_EEND, "the corrupt image went unnoticed");
  cr_assert(strstr(ferry_last_error(), victim), "the message names the file: %s", ferry_last_error());
  char file[512];
  snprintf(file, sizeof file, ", file %s): ", victim);
  cr_assert(strstr(ferry_last_error(), "dataset index 7 (image id ") && strstr(ferry_last_error(), file),
            "the message names the sample by its dataset index, image id and file: %s", ferry_last_error());
  cr_assert(strstr(ferry_last_error(), "on_error = FERRY_ON_ERROR_SKIP"), "the message names the skip policy: %s",
            ferry_last_error());
  /* The epoch is over; the next one starts and fails the same way, without hanging. */
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) ferry_batch_release(b);
  cr_assert_neq(st, FERRY_EEND);
  ferry_loader_close(l);
  remove_folder(c.images);
}

Test(loader, skip_policy_drops_and_refills, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  const char *victim = first_image_name(&c);
  c.images = folder_with_corrupt_image(&c, victim);
  c.on_error = FERRY_ON_ERROR_SKIP;
  c.fields = 0;
  for (size_t workers = 1; workers <= 2; workers++) {
    c.workers = workers;
    uint64_t skipped;
    watch_first_epoch_skips(&c, &skipped);
    ferry_loader *l = open_loader(&c);
    int seen[N] = {0};
    size_t total = 0, batches = 0, full = 0;
    ferry_batch *b;
    ferry_status st;
    while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
      for (size_t i = 0; i < ferry_batch_size(b); i++) seen[sample_index(b, i)]++;
      total += ferry_batch_size(b);
      full += ferry_batch_size(b) == 4;
      batches++;
      ferry_batch_release(b);
    }
    cr_assert_eq(st, FERRY_EEND, "%s", ferry_last_error());
    cr_assert_eq(total, N - 1);
    cr_assert_eq(full, (N - 1) / 4, "batches are refilled from the next index");
    cr_assert_eq(seen[7], 0);
    for (int i = 0; i < N; i++) if (i != 7) cr_assert_eq(seen[i], 1, "image %d", i);
    cr_assert_eq(skipped, 1);
    ferry_loader_close(l);
  }
  remove_folder(c.images);
}

Test(loader, a_slow_consumer_keeps_memory_bounded, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  c.prefetch = 2;
  c.max_outstanding = 1;
  c.workers = 4;
  ferry_loader *l = open_loader(&c);
  ferry_batch *b;
  for (int k = 0; k < 10; k++) {
    cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
    usleep(30000); /* a slow training step */
    ferry_batch_release(b);
    ferry_loader_stats s;
    ferry_loader_stats_init(&s);
    ferry_loader_stats_get(l, &s);
    cr_assert_leq(s.pool.in_use + s.pool.pending, s.arenas);
    cr_assert_leq(s.pool.peak_in_use_bytes, s.pool.peak_reserved_bytes);
  }
  ferry_loader_stats s;
  ferry_loader_stats_init(&s);
  ferry_loader_stats_get(l, &s);
  cr_assert_eq(s.arenas, 3);
  cr_assert_eq(s.pool.arenas, 3, "the pool is fixed: prefetch + max_outstanding");
  /* Holding every arena and asking for more is refused rather than deadlocking. */
  ferry_batch *held[3];
  size_t nheld = 0;
  ferry_status st = FERRY_OK;
  while (nheld < 3 && ((st = ferry_loader_next(l, &held[nheld])) == FERRY_OK || st == FERRY_EEND))
    nheld += st == FERRY_OK; /* an epoch may end on the way */
  cr_assert_eq(nheld, 3);
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_ELIMIT, "%s", ferry_last_error());
  for (size_t i = 0; i < nheld; i++) ferry_batch_release(held[i]);
  ferry_loader_close(l);
}

Test(loader, close_mid_epoch_with_batches_outstanding, .timeout = 60) {
  ferry_loader_config c;
  test_config(&c);
  c.workers = 3;
  for (int round = 0; round < 3; round++) {
    ferry_loader *l = open_loader(&c);
    ferry_batch *b;
    for (int k = 0; k < round; k++) cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK);
    ferry_loader_close(l); /* holds `round` batches; close releases them */
  }
}

Test(loader, bad_configs_and_files_are_explained) {
  ferry_loader_config c;
  test_config(&c);
  ferry_loader *l;
  c.batch_size = 0;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  test_config(&c);
  c.annotations = "/nonexistent/instances.json";
  cr_assert_neq(ferry_loader_open(&c, &l), FERRY_OK);
  cr_assert(strstr(ferry_last_error(), "/nonexistent/instances.json"), "%s", ferry_last_error());
  /* A wrong images path fails at open, naming the folder, not at the first sample. */
  test_config(&c);
  c.images = "/nonexistent-images";
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_ENOTFOUND);
  cr_assert(strstr(ferry_last_error(), "images folder /nonexistent-images: No such file or directory"), "%s",
            ferry_last_error());
  test_config(&c);
  c.images = c.annotations; /* a file */
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EIO);
  cr_assert(strstr(ferry_last_error(), "is not a folder"), "%s", ferry_last_error());
  /* An enum value the header does not define is refused at open, naming the field. */
  test_config(&c);
  c.layout = (ferry_image_layout)7;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "config.layout 7"), "%s", ferry_last_error());
  test_config(&c);
  c.on_error = (ferry_error_policy)2;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "config.on_error 2"), "%s", ferry_last_error());
  test_config(&c);
  c.box_format = (ferry_box_format)-1;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "config.box_format -1"), "%s", ferry_last_error());
  /* A batch past the bound (what "--batch -1" becomes as a size_t) is refused at open. */
  test_config(&c);
  c.batch_size = FERRY_LOADER_MAX_BATCH + 1;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "batch_size 65537 is more than 65536 (FERRY_LOADER_MAX_BATCH)"), "%s",
            ferry_last_error());
  c.batch_size = (size_t)-1;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  c.batch_size = FERRY_LOADER_MAX_BATCH;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_OK, "the bound itself is allowed: %s", ferry_last_error());
  ferry_loader_close(l);
}

/* struct_size (loader.h): a config not filled by ferry_loader_config_default is
 * refused; options a caller built against an older header does not know take their
 * defaults, whatever its memory holds there; options of a newer header are accepted
 * at zero and refused, naming the byte, when set. */
Test(loader, the_config_grows_by_struct_size) {
  ferry_loader_config c;
  test_config(&c);
  ferry_loader *l;
  c.struct_size = 0;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "ferry_loader_config_default"), "%s", ferry_last_error());
  /* An older caller: its config ends before `progress`; what lies past it is garbage
   * here, and a loader that read it would call a wild pointer. */
  test_config(&c);
  c.struct_size = offsetof(ferry_loader_config, progress);
  c.progress = (ferry_progress_fn)(uintptr_t)0x1;
  c.max_pinned_bytes = 1;
  cr_assert_eq(ferry_loader_open(&c, &l), FERRY_OK, "%s", ferry_last_error());
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
  ferry_loader_stats st;
  ferry_loader_stats_init(&st);
  ferry_loader_stats_get(l, &st);
  cr_assert_gt(st.prefetch, 1, "the default pinned budget, not 1 byte, sized the depth");
  ferry_batch_release(b);
  ferry_loader_close(l);
  /* ferry_loader_config_init writes no byte past the size it is given (an older
   * caller's struct ends there). */
  union {
    ferry_loader_config config;
    unsigned char bytes[sizeof(ferry_loader_config)];
  } older;
  memset(&older, 0xAB, sizeof older);
  size_t old_size = offsetof(ferry_loader_config, progress);
  ferry_loader_config_init(&older.config, old_size);
  cr_assert_eq(older.config.struct_size, old_size);
  cr_assert_eq(older.config.batch_size, 8);
  for (size_t i = old_size; i < sizeof older; i++) cr_assert_eq(older.bytes[i], 0xAB, "byte %zu written", i);
  /* A newer caller: 16 bytes more than this library knows. */
  union {
    ferry_loader_config config;
    unsigned char bytes[sizeof(ferry_loader_config) + 16];
  } bigger;
  memset(&bigger, 0, sizeof bigger);
  test_config(&c);
  c.struct_size = sizeof bigger;
  memcpy(bigger.bytes, &c, sizeof c);
  cr_assert_eq(ferry_loader_open(&bigger.config, &l), FERRY_OK, "%s", ferry_last_error());
  ferry_loader_close(l);
  bigger.bytes[sizeof c + 3] = 1;
  cr_assert_eq(ferry_loader_open(&bigger.config, &l), FERRY_EUNSUPPORTED);
  char want[64];
  snprintf(want, sizeof want, "byte %zu", sizeof c + 3);
  cr_assert(strstr(ferry_last_error(), want), "%s", ferry_last_error());
}

/* struct_size of the stats (loader.h, ferry_loader_stats; device.h states the rule).
 * A program built against an older header: its ferry_loader_stats ended at `decoder`,
 * before the GPU decoder's counters and batches_dropped were added. */
typedef struct loader_stats_older {
  size_t struct_size;
  uint64_t samples_decoded, samples_skipped, batches_delivered, replans;
  size_t workers, arenas;
  int rank, world_size;
  ferry_pool_stats pool;
  size_t prefetch;
  uint64_t coordinator_cpu_ns, coordinator_idle_cpu_ns, consumer_idle_cpu_ns;
  size_t peak_busy_workers;
  ferry_decode_mode decoder;
} loader_stats_older;
_Static_assert(sizeof(loader_stats_older) == offsetof(ferry_loader_stats, samples_gpu_decode),
               "the older layout is a prefix of today's");

/* One older still, that ended with the embedded pool stats. */
typedef struct loader_stats_up_to_pool {
  size_t struct_size;
  uint64_t samples_decoded, samples_skipped, batches_delivered, replans;
  size_t workers, arenas;
  int rank, world_size;
  ferry_pool_stats pool;
} loader_stats_up_to_pool;
_Static_assert(sizeof(loader_stats_up_to_pool) == offsetof(ferry_loader_stats, prefetch),
               "the older layout is a prefix of today's");

/* One built against a newer header, which appended counters this library lacks. */
typedef struct loader_stats_newer {
  ferry_loader_stats today;
  uint64_t counted_later[3];
} loader_stats_newer;

/* Room for any of them and 32 canary bytes past the largest. */
typedef union loader_stats_buffer {
  loader_stats_newer stats;
  unsigned char bytes[sizeof(loader_stats_newer) + 32];
} loader_stats_buffer;

/* The stats the caller's struct of `struct_size` bytes (in `buf`, canary past it) gets. */
static ferry_status stats_into(ferry_loader *l, loader_stats_buffer *buf, size_t struct_size) {
  canary_struct(buf, sizeof *buf, struct_size);
  return ferry_loader_stats_get(l, &buf->stats.today);
}

/* A loader on the synthetic set (3 arenas, none of the counters still moving apart
 * from the workers'). */
static ferry_loader *loader_for_stats(void) {
  ferry_loader_config c;
  test_config(&c);
  c.prefetch = 1;
  c.max_outstanding = 2;
  return open_loader(&c);
}

Test(loader, stats_of_an_older_layout_are_written_no_further) {
  ferry_loader *l = loader_for_stats();
  loader_stats_buffer buf;
  cr_assert_eq(stats_into(l, &buf, sizeof(loader_stats_older)), FERRY_OK, "%s", ferry_last_error());
  const loader_stats_older *older = (const loader_stats_older *)&buf;
  cr_assert_eq(older->struct_size, sizeof *older, "struct_size: the bytes written");
  cr_assert_eq(older->arenas, 3);
  cr_assert_eq(older->prefetch, 1);
  cr_assert_eq(older->decoder, FERRY_DECODE_CPU);
  cr_assert_eq(older->pool.struct_size, sizeof(ferry_pool_stats), "the pool stats lie within it");
  cr_assert_eq(older->pool.arenas, 3);
  expect_canary(&buf, sizeof *older, sizeof buf, "an older ferry_loader_stats");
  ferry_loader_close(l);
}

/* The embedded pool stats' struct_size is the part of them the caller's struct covers:
 * all of them for a struct that ends with them, what is left when it ends inside. */
Test(loader, stats_embedded_pool_stats_get_the_size_their_caller_covers) {
  ferry_loader *l = loader_for_stats();
  loader_stats_buffer buf;
  cr_assert_eq(stats_into(l, &buf, sizeof(loader_stats_up_to_pool)), FERRY_OK, "%s", ferry_last_error());
  const loader_stats_up_to_pool *up_to_pool = (const loader_stats_up_to_pool *)&buf;
  cr_assert_eq(up_to_pool->struct_size, sizeof *up_to_pool);
  cr_assert_eq(up_to_pool->pool.struct_size, sizeof(ferry_pool_stats));
  cr_assert_eq(up_to_pool->pool.arenas, 3);
  expect_canary(&buf, sizeof *up_to_pool, sizeof buf, "a ferry_loader_stats ending with its pool");
  size_t cut = offsetof(ferry_loader_stats, pool) + offsetof(ferry_pool_stats, in_use);
  cr_assert_eq(stats_into(l, &buf, cut), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(buf.stats.today.struct_size, cut);
  cr_assert_eq(buf.stats.today.pool.struct_size, offsetof(ferry_pool_stats, in_use), "the covered part");
  cr_assert_eq(buf.stats.today.pool.arenas, 3);
  expect_canary(&buf, cut, sizeof buf, "a ferry_loader_stats ending inside its pool");
  ferry_loader_close(l);
}

Test(loader, stats_of_a_newer_layout_get_their_unknown_counters_zeroed) {
  ferry_loader *l = loader_for_stats();
  loader_stats_buffer buf;
  cr_assert_eq(stats_into(l, &buf, sizeof buf.stats), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(buf.stats.today.struct_size, sizeof(ferry_loader_stats), "struct_size: this library's size");
  cr_assert_eq(buf.stats.today.pool.struct_size, sizeof(ferry_pool_stats));
  cr_assert_eq(buf.stats.today.arenas, 3);
  cr_assert_eq(buf.stats.today.batches_dropped, 0);
  expect_zeros(&buf, sizeof(ferry_loader_stats), sizeof buf.stats, "a newer ferry_loader_stats");
  expect_canary(&buf, sizeof buf.stats, sizeof buf, "a newer ferry_loader_stats");
  ferry_loader_close(l);
}

Test(loader, stats_never_initialised_are_refused) {
  ferry_loader *l = loader_for_stats();
  loader_stats_buffer buf;
  cr_assert_eq(stats_into(l, &buf, 0), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "ferry_loader_stats_get") && strstr(ferry_last_error(), "ferry_loader_stats_init"),
            "%s", ferry_last_error());
  cr_assert_eq(struct_size_in(&buf), 0);
  expect_canary(&buf, sizeof(size_t), sizeof buf, "a refused ferry_loader_stats");
  ferry_loader_close(l);
}

static void count_progress(const ferry_loader_progress *p, void *user) {
  int *calls = user;
  cr_assert_eq(calls[1], 0, "nothing after the end of the epoch");
  if (p->epoch_ended) {
    calls[1]++;
    cr_assert_eq(p->batches_delivered, (uint64_t)calls[0], "the end repeats the final count");
  } else {
    calls[0]++;
    cr_assert_eq(p->batches_delivered, (uint64_t)calls[0]);
  }
  cr_assert_eq(p->batches_per_epoch, NBATCH);
}

Test(loader, progress_is_reported_per_batch) {
  ferry_loader_config c;
  test_config(&c);
  int calls[2] = {0, 0}; /* batches, epoch ends */
  c.progress = count_progress;
  c.progress_user = calls;
  ferry_loader *l = open_loader(&c);
  uint64_t d[MAXB];
  epoch_digests(l, d, MAXB);
  cr_assert_eq(calls[0], NBATCH);
  cr_assert_eq(calls[1], 1, "one call when the epoch ends");
  ferry_loader_close(l);
}

/* The first batch of a loader with this config, transferred nowhere: just read. */
static ferry_batch *first_batch(ferry_loader_config *c, ferry_loader **l) {
  *l = open_loader(c);
  ferry_batch *b;
  cr_assert_eq(ferry_loader_next(*l, &b), FERRY_OK, "%s", ferry_last_error());
  return b;
}

static const void *field_of(const ferry_batch *b, const char *name, size_t i, ferry_tensor *v) {
  int f = ferry_batch_find_field(b, name);
  cr_assert_geq(f, 0, "no field %s", name);
  cr_assert_eq(ferry_batch_sample(b, (size_t)f, i, v), FERRY_OK);
  return v->data;
}

Test(loader, box_formats_describe_the_same_boxes) {
  ferry_loader_config c;
  test_config(&c);
  ferry_loader *la, *lb;
  ferry_batch *xyxy = first_batch(&c, &la);
  c.box_format = FERRY_BOXES_CXCYWH_NORM;
  ferry_batch *cxcy = first_batch(&c, &lb);
  size_t checked = 0;
  for (size_t i = 0; i < ferry_batch_size(xyxy); i++) {
    ferry_tensor va, vb;
    const float *a = field_of(xyxy, "boxes", i, &va), *b = field_of(cxcy, "boxes", i, &vb);
    cr_assert_eq(va.shape[0], vb.shape[0]);
    for (int64_t k = 0; k < va.shape[0]; k++, checked++) {
      const float *p = a + 4 * k, *q = b + 4 * k;
      float R = (float)c.resolution;
      cr_assert_float_eq(q[0], (p[0] + p[2]) / 2 / R, 1e-5);
      cr_assert_float_eq(q[1], (p[1] + p[3]) / 2 / R, 1e-5);
      cr_assert_float_eq(q[2], (p[2] - p[0]) / R, 1e-5);
      cr_assert_float_eq(q[3], (p[3] - p[1]) / R, 1e-5);
      cr_assert(p[0] >= 0 && p[2] <= R && p[0] <= p[2], "xyxy box inside the resized image");
    }
  }
  cr_assert_gt(checked, 0);
  ferry_batch_release(xyxy);
  ferry_batch_release(cxcy);
  ferry_loader_close(la);
  ferry_loader_close(lb);
}

Test(loader, u8_layout_is_the_f32_layout_before_normalising) {
  ferry_loader_config c;
  test_config(&c);
  ferry_loader *la, *lb;
  ferry_batch *f32 = first_batch(&c, &la);
  c.layout = FERRY_LAYOUT_U8_HWC;
  ferry_batch *u8 = first_batch(&c, &lb);
  const float mean[3] = FERRY_IMAGENET_MEAN, std[3] = FERRY_IMAGENET_STD;
  int R = c.resolution;
  for (size_t i = 0; i < ferry_batch_size(f32); i++) {
    ferry_tensor va, vb;
    const float *a = field_of(f32, "images", i, &va);
    const uint8_t *b = field_of(u8, "images", i, &vb);
    cr_assert_eq(vb.dtype, FERRY_U8);
    cr_assert_eq(vb.shape[2], 3, "u8 images are HWC");
    for (int ch = 0; ch < 3; ch++)
      for (int p = 0; p < R * R; p++) {
        float want = (b[3 * p + ch] / 255.0f - mean[ch]) / std[ch];
        cr_assert_float_eq(a[ch * R * R + p], want, 1e-4, "sample %zu channel %d pixel %d", i, ch, p);
      }
  }
  ferry_batch_release(f32);
  ferry_batch_release(u8);
  ferry_loader_close(la);
  ferry_loader_close(lb);
}

Test(loader, masks_and_labels_follow_the_annotations) {
  ferry_loader_config c;
  dali_config(&c); /* real photos: progressive JPEGs, RGBA PNGs, crowd polygons */
  c.shuffle = 0;
  ferry_loader *l;
  ferry_batch *b = first_batch(&c, &l);
  ferry_coco *coco;
  cr_assert_eq(ferry_coco_open(c.annotations, NULL, &coco), FERRY_OK);
  for (size_t i = 0; i < ferry_batch_size(b); i++) {
    ferry_tensor masks, labels, id;
    const uint8_t *m = field_of(b, "masks", i, &masks);
    field_of(b, "labels", i, &labels);
    const int64_t *image_id = field_of(b, "image_id", i, &id);
    ferry_coco_image img;
    cr_assert_eq(ferry_coco_image_at(coco, (size_t)sample_index(b, i), &img), FERRY_OK);
    cr_assert_eq(*image_id, img.id);
    ferry_target_options t;
    ferry_target_options_default(&t);
    t.mask_height = t.mask_width = c.resolution;
    int64_t n;
    cr_assert_eq(ferry_coco_target_count(coco, (size_t)sample_index(b, i), &t, &n), FERRY_OK);
    cr_assert_eq(masks.shape[0], n);
    uint8_t *want = calloc((size_t)(n * c.resolution * c.resolution) + 1, 1);
    int64_t *want_labels = calloc((size_t)n + 1, sizeof *want_labels);
    ferry_coco_target out = {.masks = want, .labels = want_labels};
    cr_assert_eq(ferry_coco_target_write(coco, (size_t)sample_index(b, i), &t, &out), FERRY_OK);
    cr_assert(n == 0 || memcmp(m, want, masks.nbytes) == 0, "sample %zu masks", i);
    cr_assert(n == 0 || memcmp(labels.data, want_labels, labels.nbytes) == 0, "sample %zu labels", i);
    free(want);
    free(want_labels);
  }
  ferry_coco_close(coco);
  ferry_batch_release(b);
  ferry_loader_close(l);
}

Test(loader, a_real_dataset_epoch, .timeout = 300) {
  ferry_loader_config c;
  dali_config(&c); /* 61 photos: progressive and baseline JPEGs, RGBA PNGs */
  ferry_loader *l = open_loader(&c);
  uint64_t d[MAXB];
  cr_assert_eq(epoch_digests(l, d, MAXB), 16, "61 images in batches of 4");
  ferry_loader_close(l);
}
