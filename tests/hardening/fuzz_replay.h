/* tests/hardening/fuzz_replay.h - the fuzz targets as plain functions (replay_*.c). */
#ifndef FERRY_TESTS_FUZZ_REPLAY_H
#define FERRY_TESTS_FUZZ_REPLAY_H

#include <stddef.h>
#include <stdint.h>

int fuzz_rle_entry(const uint8_t *data, size_t size);
int fuzz_polygon_entry(const uint8_t *data, size_t size);
int fuzz_coco_entry(const uint8_t *data, size_t size);
int fuzz_image_entry(const uint8_t *data, size_t size);

#endif
