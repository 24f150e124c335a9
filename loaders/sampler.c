/* loaders/sampler.c - per-epoch permutation and DistributedSampler sharding. */
#include <stdlib.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "loaders/sampler.h"

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A uniform draw from [0, bound) without modulo bias (Lemire's method). */
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
  uint64_t state = seed + (uint64_t)epoch;
  for (size_t i = 0; i < n; i++) out[i] = i;
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)below(&state, i);
    size_t t = out[i - 1];
    out[i - 1] = out[j];
    out[j] = t;
  }
}

/* DistributedSampler: per-rank length with padding or with the tail dropped. */
static size_t per_rank_count(size_t n, size_t world, int drop_last) {
  if (drop_last && n % world != 0) return n / world;
  return (n + world - 1) / world;
}

ferry_status ferry__sampler_init(ferry_sampler *s, size_t dataset_size, int rank, int world_size,
                                int shuffle, int drop_last, uint64_t seed) {
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
  s->epoch = -1;
  s->order = ferry__calloc(s->per_rank, sizeof *s->order);
  if (!s->order) return ferry__fail(FERRY_ENOMEM, "sampler: out of memory for %zu indices", s->per_rank);
  return FERRY_OK;
}

void ferry__sampler_destroy(ferry_sampler *s) {
  ferry__free(s->order);
  s->order = NULL;
}

ferry_status ferry__sampler_set_epoch(ferry_sampler *s, int64_t epoch) {
  if (s->epoch == epoch) return FERRY_OK;
  size_t n = s->dataset_size;
  size_t *perm = ferry__malloc(n * sizeof *perm);
  if (!perm) return ferry__fail(FERRY_ENOMEM, "sampler: out of memory for a permutation of %zu", n);
  if (s->shuffle) ferry__sampler_permutation(perm, n, s->seed, epoch);
  else for (size_t i = 0; i < n; i++) perm[i] = i;
  /* Position p of the padded sequence is perm[p mod n]: wrapping around as often
   * as needed, as DistributedSampler pads a dataset smaller than the world. */
  for (size_t k = 0; k < s->per_rank; k++)
    s->order[k] = perm[((size_t)s->rank + k * (size_t)s->world_size) % n];
  ferry__free(perm);
  s->epoch = epoch;
  return FERRY_OK;
}

/* An environment variable as a non-negative int; -1 when unset, -2 when malformed. */
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
