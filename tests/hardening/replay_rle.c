/* The fuzz target compiled under its own name, so the replay test can call it. */
#define FUZZ_ENTRY fuzz_rle_entry
#include "tests/fuzz/fuzz_rle.c"
