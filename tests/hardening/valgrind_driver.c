/* tests/hardening/valgrind_driver.c - three epochs of the loader, for valgrind_loader.sh.
 *
 *   valgrind_driver ANNOTATIONS IMAGES
 *
 * Opens a loader (2 workers, batch 4, resolution 64, masks and every default field),
 * runs three full epochs, transfers each batch to the host device and frees it, then
 * closes everything. Exit status 0 when all went well; valgrind's own exit code
 * reports memory errors and leaks.
 */
#include <stdio.h>

#include "ferry/ferry.h"
#include "ferry/loader.h"

#define EPOCHS 3

static int fail(const char *what) {
  fprintf(stderr, "valgrind_driver: %s: %s\n", what, ferry_last_error());
  return 1;
}

static ferry_status transfer_and_free(ferry_device *dev, ferry_batch *batch) {
  ferry_device_batch *out = NULL;
  ferry_status st = ferry_transfer(dev, NULL, batch, NULL, &out);
  if (st != FERRY_OK) return st;
  st = ferry_device_batch_wait(out);
  ferry_device_batch_free(out);
  return st;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s ANNOTATIONS IMAGES\n", argv[0]);
    return 2;
  }
  ferry_loader_config cfg;
  ferry_loader_config_default(&cfg);
  cfg.annotations = argv[1];
  cfg.images = argv[2];
  cfg.batch_size = 4;
  cfg.resolution = 64;
  cfg.workers = 2;
  cfg.rank = 0;
  cfg.world_size = 1;
  ferry_device *dev = NULL;
  if (ferry_device_open("host", &dev) != FERRY_OK) return fail("host device");
  ferry_loader *loader = NULL;
  if (ferry_loader_open(&cfg, &loader) != FERRY_OK) return fail("open");
  size_t samples = 0;
  int status = 0;
  for (int epoch = 0; epoch < EPOCHS && status == 0; epoch++) {
    for (;;) {
      ferry_batch *batch = NULL;
      ferry_status st = ferry_loader_next(loader, &batch);
      if (st == FERRY_EEND) break;
      if (st != FERRY_OK) {
        status = fail("next");
        break;
      }
      samples += ferry_batch_size(batch);
      st = transfer_and_free(dev, batch);
      ferry_batch_release(batch);
      if (st != FERRY_OK) {
        status = fail("transfer");
        break;
      }
    }
  }
  ferry_loader_close(loader);
  ferry_device_close(dev);
  if (status == 0) printf("valgrind_driver: %d epochs, %zu samples\n", EPOCHS, samples);
  return status;
}
