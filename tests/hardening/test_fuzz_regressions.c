/* tests/hardening/test_fuzz_regressions.c - every input a fuzzer failed on, replayed.
 *
 * Each input goes through the very fuzz target that found it (compiled in under its
 * own name, see replay_*.c), so the target's invariants are checked again; a unit
 * that took longer than libFuzzer's -timeout is a failure too, so each replay must
 * also finish within REPLAY_SECONDS. Add new inputs here with a line saying what
 * they broke and what fixed it.
 */
#include <criterion/criterion.h>
#include <time.h>

#include "tests/hardening/fuzz_replay.h"

#define REPLAY_SECONDS 5.0

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void replay(int (*entry)(const uint8_t *, size_t), const uint8_t *data, size_t size) {
  double start = seconds_now();
  cr_assert_eq(entry(data, size), 0);
  double took = seconds_now() - start;
  cr_assert_lt(took, REPLAY_SECONDS, "the input took %.1f s", took);
}

/* fuzz_polygon, timeout (> 60 s under ASan, 8.6 s at -O2): the triangle (16, 16),
 * (3e7, 3e7), (224, 128) in a 256 x 256 mask. The walk visited every one of the
 * 3e8 grid points of the long edges although only those over the image's columns
 * can cross a pixel centre. Fixed in coco/polygon.c (walk_band): the walk skips the
 * stretches outside the image's columns and, along y-major edges, the points between
 * two changes of column; crossings unchanged (differential check against the
 * previous walk, and the pycocotools comparisons). */
Test(fuzz_regressions, polygon_far_vertex_walk) {
  static const uint8_t input[] = {0x40, 0x40, 0x01, 0x1e, 0x1e, 0xf4, 0xf4, 0xa0, 0x64};
  replay(fuzz_polygon_entry, input, sizeof input);
}

/* The same far vertex reached through an annotation file: one polygon annotation. */
Test(fuzz_regressions, coco_far_vertex_walk) {
  static const char input[] =
      "{\"images\": [{\"id\": 1, \"width\": 256, \"height\": 256}], \"categories\": [{\"id\": 1}],"
      " \"annotations\": [{\"id\": 1, \"image_id\": 1, \"category_id\": 1, \"bbox\": [16, 16, 208, 112],"
      " \"segmentation\": [[16, 16, 30000000, 30000000, 224, 128]]}]}";
  replay(fuzz_coco_entry, (const uint8_t *)input, sizeof input - 1);
}

/* fuzz_coco, UBSan "applying zero offset to null pointer" (coco/segm.c): a polygon part
 * with a single number (dropped: no vertex pair) in a file that has no other polygon
 * coordinates, so the coordinate array was never allocated and the part's address was
 * NULL + 0. Fixed in coco/segm.c (polygons_rle passes NULL for a part without
 * vertices). Fails under clang's UBSan (the build-fuzz build) without the fix. */
Test(fuzz_regressions, coco_polygon_part_without_vertices) {
  static const char input[] =
      "{\"images\": [{\"id\": 1, \"width\": 4, \"height\": 3}], \"categories\": [{\"id\": 1}],"
      " \"annotations\": [{\"image_id\": 1, \"category_id\": 1, \"bbox\": [0, 0, 2, 2],"
      " \"segmentation\": [[3657607]]}]}";
  replay(fuzz_coco_entry, (const uint8_t *)input, sizeof input - 1);
}
