/* batch_dump: the C loader's batches of one epoch, byte for byte, for the Python tests.
 *
 *   batch_dump ANNOTATIONS IMAGES OUT BATCH RESOLUTION SEED BOX_FORMAT LAYOUT WORKERS
 *              RANK WORLD_SIZE EPOCH
 *
 * Opens a loader with those options (every DETR field, shuffled, the rest defaults),
 * moves it to EPOCH, and writes every sample's slice of every field of every batch,
 * read straight from the packed batch (no transfer, no DLPack), to OUT as records:
 *   u64 batch, u64 sample, u32 name length, name, u64 nbytes, the bytes.
 * python/tests/ compiles it against the ferry package's libferry.so and compares the
 * Python Loader's tensors with it. Exit 0 at the epoch's end, 1 with ferry's message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/loader.h"

static int fail(const char *what) {
  fprintf(stderr, "batch_dump: %s: %s\n", what, ferry_last_error());
  return 1;
}

static void write_record(FILE *out, uint64_t batch, uint64_t sample, const char *name,
                         const ferry_tensor *view) {
  uint32_t len = (uint32_t)strlen(name);
  uint64_t nbytes = view->nbytes;
  fwrite(&batch, sizeof batch, 1, out);
  fwrite(&sample, sizeof sample, 1, out);
  fwrite(&len, sizeof len, 1, out);
  fwrite(name, 1, len, out);
  fwrite(&nbytes, sizeof nbytes, 1, out);
  if (nbytes) fwrite(view->data, 1, nbytes, out);
}

static ferry_status dump_batch(FILE *out, uint64_t k, const ferry_batch *b) {
  for (size_t f = 0; f < ferry_batch_num_fields(b); f++) {
    const char *name = ferry_batch_field_spec(b, f)->name;
    for (size_t i = 0; i < ferry_batch_size(b); i++) {
      ferry_tensor view;
      ferry_status st = ferry_batch_sample(b, f, i, &view);
      if (st != FERRY_OK) return st;
      write_record(out, k, i, name, &view);
    }
  }
  return FERRY_OK;
}

int main(int argc, char **argv) {
  if (argc != 13) {
    fprintf(stderr, "usage: batch_dump ANNOTATIONS IMAGES OUT BATCH RESOLUTION SEED BOX_FORMAT "
                    "LAYOUT WORKERS RANK WORLD_SIZE EPOCH\n");
    return 2;
  }
  ferry_loader_config c;
  ferry_loader_config_default(&c);
  c.annotations = argv[1];
  c.images = argv[2];
  c.batch_size = (size_t)atoi(argv[4]);
  c.resolution = atoi(argv[5]);
  c.seed = strtoull(argv[6], NULL, 10);
  c.box_format = (ferry_box_format)atoi(argv[7]);
  c.layout = (ferry_image_layout)atoi(argv[8]);
  c.workers = (size_t)atoi(argv[9]);
  c.rank = atoi(argv[10]);
  c.world_size = atoi(argv[11]);
  ferry_loader *l;
  if (ferry_loader_open(&c, &l) != FERRY_OK) return fail("open");
  ferry_status st = ferry_loader_set_epoch(l, strtoll(argv[12], NULL, 10));
  FILE *out = st == FERRY_OK ? fopen(argv[3], "wb") : NULL;
  if (!out) {
    int code = st != FERRY_OK ? fail("set_epoch") : (perror(argv[3]), 1);
    ferry_loader_close(l);
    return code;
  }
  ferry_batch *b;
  uint64_t k = 0;
  while ((st = ferry_loader_next(l, &b)) == FERRY_OK) {
    st = dump_batch(out, k++, b);
    ferry_batch_release(b);
    if (st != FERRY_OK) break;
  }
  ferry_loader_close(l);
  if (fclose(out) != 0 || st != FERRY_EEND) return fail("next");
  return 0;
}
