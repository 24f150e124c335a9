/* shard_dump ANNOTATIONS IMAGES OUT_PREFIX DROP_LAST: run one epoch on the rank the
 * launcher gives (mpirun sets OMPI_COMM_WORLD_*), write the sample indices it saw
 * to OUT_PREFIX.<rank>, one per line. Used by mpi_shards.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "ferry/loader.h"

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: shard_dump ANNOTATIONS IMAGES OUT_PREFIX DROP_LAST\n");
    return 2;
  }
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  c.annotations = argv[1];
  c.images = argv[2];
  c.drop_last = atoi(argv[4]);
  c.resolution = 16;
  c.batch_size = 1; /* so drop_last drops only the shard tail, never a short batch */
  c.fields = 0;
  c.workers = 1;
  ferry_loader *l;
  if (ferry_loader_open(&c, &l) != FERRY_OK) {
    fprintf(stderr, "shard_dump: %s\n", ferry_last_error());
    return 1;
  }
  ferry_loader_stats stats;
  ferry_loader_stats_init(&stats);
  ferry_loader_stats_get(l, &stats);
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", argv[3], stats.rank);
  FILE *out = fopen(path, "w");
  ferry_batch *b;
  ferry_status st;
  int index_field = -1;
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
    index_field = ferry_batch_find_field(b, "sample_index");
    for (size_t i = 0; i < ferry_batch_size(b); i++) {
      ferry_tensor v;
      ferry_batch_sample(b, (size_t)index_field, i, &v);
      fprintf(out, "%lld\n", (long long)*(int64_t *)v.data);
    }
    ferry_batch_release(b);
  }
  fclose(out);
  ferry_loader_close(l);
  if (st != FERRY_EEND) {
    fprintf(stderr, "shard_dump: %s\n", ferry_last_error());
    return 1;
  }
  printf("rank %d of %d: %s\n", stats.rank, stats.world_size, path);
  return 0;
}
