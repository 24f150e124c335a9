/* loaders/sampler.c - per-epoch order: the dataset order (a permutation and
 * DistributedSampler sharding) and the shard order (shards permuted, contiguous runs
 * per rank, a bounded shuffle buffer).
 *
 * Owns: the sampler's `order`, this rank's per_rank dataset indices for one epoch,
 * drawn again when the epoch changes, and the shard order's copy of the shard sizes.
 * Callers: loader_open.c opens it (rank and world size from the config or the launcher's
 * environment) and loader.c destroys it on close; after open only the coordinator thread
 * draws an epoch (begin_epoch, under the loader's lock) and reads `order` (laying
 * out plans, without the lock, which it alone may do). per_rank is read anywhere.
 *
 * Invariants:
 *   - per_rank and the config fields never change after init; `order` always has
 *     per_rank entries, each < dataset_size;
 *   - `order` is a pure function of (dataset_size, rank, world_size, shuffle,
 *     drop_last, seed, epoch, and for the shard order the shard sizes and buffer):
 *     no clock, no thread, no global state enters it. That
 *     is what makes batch k of an epoch reproducible, and what lets a loader resumed
 *     from a ferry_loader_state draw the same order again;
 *   - every rank draws the same permutation (of samples, or of shards) and takes its
 *     own positions of it, so the ranks' samples are disjoint but for the padding,
 *     which repeats the start of the permuted sequence as DistributedSampler's does;
 *   - the shard order's buffer moves a sample at most buffer - 1 positions from its
 *     place in the rank's run, either way, and holds at most `buffer` samples;
 *   - a failed set_epoch (out of memory) leaves `order` and `epoch` as they were.
 * Not done here: torch.randperm's generator (the same seed gives a different order
 * than torch's, sampler.h), weighted or grouped sampling, batching.
 */
#include <stdlib.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "loaders/sampler.h"

/* SplitMix64 (the constants of Vigna's reference code): a 64-bit state that only
 * counts, and an output that mixes it well enough that states one apart, as
 * seed + epoch and seed + epoch + 1 are, give unrelated-looking streams. */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A uniform draw from [0, bound) without modulo bias (Lemire's method). The draw is
 * the high word of random * bound; the products whose low word falls below
 * 2^64 mod bound are the ones that would bias it, and are drawn again. That
 * remainder is computed only when low < bound, which is rare for small bounds. */
static uint64_t below(uint64_t *state, uint64_t bound) {
  __uint128_t m = (__uint128_t)splitmix64(state) * bound;
  uint64_t low = (uint64_t)m;
  if (low < bound) {
    uint64_t threshold = -bound % bound;
    while (low < threshold) {
      m = (__uint128_t)splitmix64(state) * bound;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

void ferry__sampler_permutation(size_t *out, size_t n, uint64_t seed, int64_t epoch) {
  /* DistributedSampler seeds with seed + epoch */
  uint64_t state = seed + (uint64_t)epoch;
  for (size_t i = 0; i < n; i++) out[i] = i;
  /* Fisher-Yates from the top: position i-1 takes a uniform pick of the i not yet
   * placed. The draws depend on (seed, epoch, n) alone, so every rank computes the
   * same permutation without talking to the others. */
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)below(&state, i);
    size_t t = out[i - 1];
    out[i - 1] = out[j];
    out[j] = t;
  }
}

/* DistributedSampler: per-rank length with padding or with the tail dropped. Its
 * drop_last length, ceil((n - world) / world), is n / world when world does not
 * divide n (0 when n < world); otherwise both branches give n / world. */
static size_t per_rank_count(size_t n, size_t world, int drop_last) {
  if (drop_last && n % world != 0) return n / world;
  return (n + world - 1) / world;
}

ferry_status ferry__sampler_init(ferry__sampler *s, size_t dataset_size, int rank, int world_size, int shuffle,
                                 int drop_last, uint64_t seed) {
  memset(s, 0, sizeof *s);
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return ferry__fail(FERRY_EINVAL, "sampler: rank %d is not in 0..world_size-1 (world_size %d)", rank, world_size);
  if (dataset_size == 0) return ferry__fail(FERRY_EINVAL, "sampler: the dataset has no images");
  s->dataset_size = dataset_size;
  s->rank = rank;
  s->world_size = world_size;
  s->shuffle = shuffle;
  s->drop_last = drop_last;
  s->seed = seed;
  s->per_rank = per_rank_count(dataset_size, (size_t)world_size, drop_last);
  /* no epoch drawn yet: the first set_epoch draws whatever it is given */
  s->epoch = -1;
  s->order = ferry__calloc(s->per_rank, sizeof *s->order);
  if (!s->order) return ferry__fail(FERRY_ENOMEM, "sampler: out of memory for %zu indices", s->per_rank);
  return FERRY_OK;
}

void ferry__sampler_destroy(ferry__sampler *s) {
  ferry__free(s->order);
  ferry__free(s->shard_samples);
  s->order = NULL;
  s->shard_samples = NULL;
}

ferry_status ferry__sampler_use_shards(ferry__sampler *s, const size_t *shard_samples, size_t num_shards,
                                       size_t buffer) {
  size_t total = 0;
  for (size_t i = 0; i < num_shards; i++) total += shard_samples[i];
  if (total != s->dataset_size || buffer == 0)
    return ferry__fail(FERRY_EINVAL, "sampler: %zu shards of %zu samples for a dataset of %zu, buffer %zu",
                       num_shards, total, s->dataset_size, buffer);
  s->shard_samples = ferry__malloc(num_shards * sizeof *s->shard_samples);
  if (!s->shard_samples) return ferry__fail(FERRY_ENOMEM, "sampler: out of memory for %zu shards", num_shards);
  memcpy(s->shard_samples, shard_samples, num_shards * sizeof *s->shard_samples);
  s->num_shards = num_shards;
  s->buffer = buffer;
  return FERRY_OK;
}

/* The dataset order: rank r's positions r, r + world, ... of the permutation, drawn
 * into perm (dataset_size entries). */
static void dataset_order(ferry__sampler *s, size_t *perm, int64_t epoch) {
  size_t n = s->dataset_size;
  if (s->shuffle) ferry__sampler_permutation(perm, n, s->seed, epoch);
  else for (size_t i = 0; i < n; i++) perm[i] = i;
  /* Position p of the padded sequence is perm[p mod n]: wrapping around as often
   * as needed, as DistributedSampler pads a dataset smaller than the world. */
  for (size_t k = 0; k < s->per_rank; k++)
    s->order[k] = perm[((size_t)s->rank + k * (size_t)s->world_size) % n];
}

/* The epoch's sample sequence in shard order into seq (dataset_size entries): the
 * shards permuted from seed + epoch (the dataset order's stream, over shards), each
 * shard's samples in member order. `first` and `perm` are scratch of num_shards. */
static void shard_sequence(const ferry__sampler *s, size_t *seq, size_t *first, size_t *perm, int64_t epoch) {
  for (size_t i = 0, at = 0; i < s->num_shards; at += s->shard_samples[i++]) first[i] = at;
  if (s->shuffle) ferry__sampler_permutation(perm, s->num_shards, s->seed, epoch);
  else for (size_t i = 0; i < s->num_shards; i++) perm[i] = i;
  size_t at = 0;
  for (size_t i = 0; i < s->num_shards; i++)
    for (size_t j = 0; j < s->shard_samples[perm[i]]; j++) seq[at++] = first[perm[i]] + j;
}

/* The shuffle buffer over a rank's run (m samples) into s->order, `slot` (m) and
 * `buf` (min(buffer, m)) scratch. Before output position t the buffer has taken in
 * the run's positions up to t + buffer - 1; position t takes a uniform pick of what
 * it holds, except that the sample at run position t - buffer + 1, if still held,
 * leaves now (its deadline). So no sample moves more than buffer - 1 positions either
 * way and at most `buffer` are held: a rank reads from the few shards around its
 * place in the run. Drawn from (seed, epoch, rank): a stream of its own per rank. */
static void buffer_shuffle(ferry__sampler *s, const size_t *run, size_t *slot, size_t *buf, int64_t epoch) {
  size_t m = s->per_rank, held = 0, taken = 0;
  uint64_t mix = s->seed + (uint64_t)epoch;
  uint64_t state = splitmix64(&mix) + (uint64_t)s->rank * 0xD1B54A32D192ED03ull;
  for (size_t t = 0; t < m; t++) {
    for (; taken < m && taken < t + s->buffer; taken++) {
      slot[taken] = held;
      buf[held++] = taken;
    }
    size_t due = t + 1 >= s->buffer ? t + 1 - s->buffer : SIZE_MAX;
    size_t j = due != SIZE_MAX && slot[due] != SIZE_MAX ? slot[due] : (size_t)below(&state, held);
    size_t pos = buf[j];
    buf[j] = buf[--held]; /* the last held fills the hole */
    slot[buf[j]] = j;
    slot[pos] = SIZE_MAX; /* after: pos may be that last one */
    s->order[t] = run[pos];
  }
}

/* The shard order: rank r's run is positions r * per_rank ... of the shard sequence,
 * padded by wrapping (or cut, drop_last) as the dataset order is. */
static ferry_status shard_order(ferry__sampler *s, int64_t epoch) {
  size_t n = s->dataset_size, m = s->per_rank, b = s->buffer < m ? s->buffer : m;
  size_t words = n + 2 * s->num_shards + 2 * m + b;
  size_t *seq = ferry__malloc(words * sizeof *seq);
  if (!seq) return ferry__fail(FERRY_ENOMEM, "sampler: out of memory for the shard order of %zu samples", n);
  size_t *first = seq + n, *perm = first + s->num_shards, *run = perm + s->num_shards, *slot = run + m;
  shard_sequence(s, seq, first, perm, epoch);
  for (size_t k = 0; k < m; k++) run[k] = seq[((size_t)s->rank * m + k) % n];
  if (s->shuffle && b > 1) buffer_shuffle(s, run, slot, slot + m, epoch);
  else memcpy(s->order, run, m * sizeof *run);
  ferry__free(seq);
  return FERRY_OK;
}

ferry_status ferry__sampler_set_epoch(ferry__sampler *s, int64_t epoch) {
  /* The coordinator begins an epoch again after a restart (set_epoch, state_set):
   * the same epoch needs no new draw. */
  if (s->epoch == epoch) return FERRY_OK;
  if (s->shard_samples) {
    ferry_status st = shard_order(s, epoch);
    if (st != FERRY_OK) return st;
  } else {
    /* The whole dataset's permutation lives only here: one allocation per epoch, so
     * that between epochs only this rank's share is kept. */
    size_t *perm = ferry__malloc(s->dataset_size * sizeof *perm);
    if (!perm) return ferry__fail(FERRY_ENOMEM, "sampler: out of memory for a permutation of %zu", s->dataset_size);
    dataset_order(s, perm, epoch);
    ferry__free(perm);
  }
  s->epoch = epoch;
  return FERRY_OK;
}

/* An environment variable as a non-negative int; -1 when unset, -2 when malformed.
 * Past 2^20 is no launcher's rank or size: malformed too, which also keeps the
 * value inside int. */
static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  char *end;
  long n = strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 20) return -2;
  return (int)n;
}

ferry_status ferry__sampler_rank_from_env(int *rank, int *world_size) {
  static const char *pairs[][2] = {{"RANK", "WORLD_SIZE"},
                                   {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   {"SLURM_PROCID", "SLURM_NTASKS"}};
  /* The first launcher whose variables are set wins, torchrun's first: a Slurm or
   * MPI job that starts torchrun has both, and torchrun's numbers are those of the
   * processes that load. Half a pair, or a rank outside the world, is an error
   * rather than a guess: a wrong rank would train on another rank's shard. */
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    int r = env_int(pairs[i][0]), w = env_int(pairs[i][1]);
    if (r == -1 && w == -1) continue;
    if (r < 0 || w < 1 || r >= w)
      return ferry__fail(FERRY_EINVAL, "launcher environment: %s=%s and %s=%s do not make a rank and world size",
                        pairs[i][0], getenv(pairs[i][0]) ? getenv(pairs[i][0]) : "(unset)",
                        pairs[i][1], getenv(pairs[i][1]) ? getenv(pairs[i][1]) : "(unset)");
    *rank = r;
    *world_size = w;
    return FERRY_OK;
  }
  *rank = 0;
  *world_size = 1;
  return FERRY_OK;
}
