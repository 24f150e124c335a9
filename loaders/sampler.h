/* loaders/sampler.h - which samples a rank sees in an epoch, in which order.
 *
 * DistributedSampler's semantics: one permutation of the whole dataset per epoch,
 * drawn from seed + epoch and identical on every rank; padded by wrapping around
 * (or cut, with drop_last) to a multiple of world_size; rank r takes positions
 * r, r + world, r + 2 world, ... The permutation is ferry's own (SplitMix64 and
 * Fisher-Yates with unbiased bounded draws), not torch.randperm's.
 *
 * Internal to loaders/: the loader opens and closes one (loader.c), its coordinator
 * draws each epoch (coordinator.c), tests call the permutation and the environment
 * reader directly. A sampler has no lock: one thread at a time draws an epoch and
 * reads `order`.
 */
#ifndef FERRY_LOADERS_SAMPLER_H
#define FERRY_LOADERS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry_sampler {
  size_t dataset_size;
  int rank, world_size;
  int shuffle, drop_last;
  uint64_t seed;
  size_t per_rank;      /* samples this rank gets per epoch */
  size_t *order;        /* this rank's dataset indices for the current epoch */
  int64_t epoch;        /* the epoch `order` was drawn for, or -1 */
} ferry_sampler;

ferry_status ferry__sampler_init(ferry_sampler *s, size_t dataset_size, int rank, int world_size,
                                int shuffle, int drop_last, uint64_t seed);
void ferry__sampler_destroy(ferry_sampler *s);
/* Draw this rank's order for `epoch` into s->order; nothing to do when it is already
 * drawn. FERRY_ENOMEM leaves the previous order in place. */
ferry_status ferry__sampler_set_epoch(ferry_sampler *s, int64_t epoch);

/* Rank and world size from the launcher's environment: torchrun (RANK,
 * WORLD_SIZE), Open MPI (OMPI_COMM_WORLD_RANK/SIZE), Slurm (SLURM_PROCID/NTASKS);
 * 0 and 1 when none is set. */
ferry_status ferry__sampler_rank_from_env(int *rank, int *world_size);

/* The shared permutation of 0..n-1 for (seed, epoch), for tests and tools. */
void ferry__sampler_permutation(size_t *out, size_t n, uint64_t seed, int64_t epoch);

#endif
