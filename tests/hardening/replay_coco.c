/* The fuzz target compiled under its own name, so the replay test can call it. */
#define FUZZ_ENTRY fuzz_coco_entry
#include "tests/fuzz/fuzz_coco.c"
