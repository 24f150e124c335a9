/* tests/fuzz/fuzz_index.c - the binary index reader (coco/index_read.c).
 *
 * Input: the bytes of an index file (seeds: the coco seeds indexed by `ferry-coco
 * index`, see make_seeds.py). Inputs without the index magic are skipped: the JSON
 * reader has fuzz_coco. Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION the reader
 * ignores checksum mismatches, so mutations reach the structural checks: whatever
 * passes them is walked like a parsed file (every accessor, target and mask, through
 * fuzz_coco.c's walk), plainly and with remapped categories in a collecting open
 * (which must report nothing), and must not crash.
 */
#define FUZZ_COCO_WALK_ONLY 1
#include "tests/fuzz/fuzz_coco.c"

#define INDEX_MAGIC "FERRYIDX"

int FUZZ_ENTRY(const uint8_t *data, size_t size) {
  if (size < sizeof INDEX_MAGIC - 1 || memcmp(data, INDEX_MAGIC, sizeof INDEX_MAGIC - 1) != 0) return 0;
  for (int remap = 0; remap < 2; remap++) {
    ferry_coco_options opts;
    ferry_coco_options_default(&opts);
    opts.remap_categories = remap;
    size_t problems = 0;
    if (remap) { /* an index holds no problems to report: a collecting open reports none */
      opts.on_problem = count_problem;
      opts.problem_user = &problems;
    }
    ferry_coco *coco = NULL;
    ferry_status st = ferry_coco_open_buffer((const char *)data, size, "fuzz.ferryidx", &opts, &coco);
    if (st != FERRY_OK) {
      FUZZ_CHECK_FAILURE(st);
      FUZZ_CHECK(coco == NULL);
      FUZZ_CHECK(strstr(ferry_last_error(), "fuzz.ferryidx") != NULL);
      return 0;
    }
    FUZZ_CHECK(ferry_coco_is_index(coco) && problems == 0);
    walk(coco);
    ferry_coco_close(coco);
  }
  return 0;
}
