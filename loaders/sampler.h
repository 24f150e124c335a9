/* loaders/sampler.h - which samples a rank sees in an epoch, in which order.
 *
 * Two orders, both pure functions of (seed, epoch, rank, world_size, drop_last,
 * shuffle) and, for the second, the shard sizes and the buffer:
 *   - the dataset order, DistributedSampler's semantics: one permutation of the whole
 *     dataset per epoch, drawn from seed + epoch and identical on every rank; padded
 *     by wrapping around (or cut, with drop_last) to a multiple of world_size; rank r
 *     takes positions r, r + world, r + 2 world, ...
 *   - the shard order (ferry__sampler_use_shards; docs/shards.md): the shards
 *     permuted from seed + epoch (identical on every rank), their samples
 *     concatenated, padded by wrapping around (or cut) to a multiple of world_size
 *     and cut into world_size contiguous runs of per_rank samples, rank r taking run
 *     r; then, with shuffle, each run passed through a shuffle buffer of `buffer`
 *     samples drawn from (seed, epoch, rank), which moves no sample more than
 *     buffer - 1 positions from its place in the run.
 * The permutations are ferry's own (SplitMix64 and Fisher-Yates with unbiased
 * bounded draws), not torch.randperm's.
 *
 * Internal to loaders/: the loader opens one (loader_open.c) and closes it (loader.c), its coordinator
 * draws each epoch (coordinator.c), tests call the permutation and the environment
 * reader directly. A sampler has no lock: one thread at a time draws an epoch and
 * reads `order`.
 */
#ifndef FERRY_LOADERS_SAMPLER_H
#define FERRY_LOADERS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry__sampler {
  size_t dataset_size;
  int rank, world_size;
  int shuffle, drop_last;
  uint64_t seed;
  size_t per_rank;      /* samples this rank gets per epoch */
  size_t *shard_samples; /* the shard order's shard sizes (dataset indices in shard
                            order), or NULL for the dataset order */
  size_t num_shards;
  size_t buffer;        /* the shard order's shuffle buffer, in samples (>= 1) */
  size_t *order;        /* this rank's dataset indices for the current epoch */
  int64_t epoch;        /* the epoch `order` was drawn for, or -1 */
} ferry__sampler;

ferry_status ferry__sampler_init(ferry__sampler *s, size_t dataset_size, int rank, int world_size, int shuffle,
                                 int drop_last, uint64_t seed);
void ferry__sampler_destroy(ferry__sampler *s);
/* Take the shard order: shard i holds the next shard_samples[i] dataset indices (their
 * sum is dataset_size), `buffer` >= 1 samples shuffle within a rank's run. Before
 * the first set_epoch. */
ferry_status ferry__sampler_use_shards(ferry__sampler *s, const size_t *shard_samples, size_t num_shards,
                                       size_t buffer);
/* Draw this rank's order for `epoch` into s->order; nothing to do when it is already
 * drawn. FERRY_ENOMEM leaves the previous order in place. */
ferry_status ferry__sampler_set_epoch(ferry__sampler *s, int64_t epoch);

/* Rank and world size from the launcher's environment: torchrun (RANK,
 * WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_RANK/SIZE), Slurm (SLURM_PROCID/NTASKS);
 * 0 and 1 when none is set. */
ferry_status ferry__sampler_rank_from_env(int *rank, int *world_size);

/* The shared permutation of 0..n-1 for (seed, epoch), for tests and tools. */
void ferry__sampler_permutation(size_t *out, size_t n, uint64_t seed, int64_t epoch);

#endif
