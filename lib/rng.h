/* lib/rng.h - draws that are a pure function of their key (internal).
 *
 * An augmentation must draw the same choices for sample i of epoch e whatever thread
 * draws them, in whatever order, after however many other draws, and after a resume:
 * so nothing here has state. A draw is a function of (key, slot): the key names
 * whose draws these are (seed, epoch, dataset index, or batch index), the slot which
 * choice (the flip, the branch, the crop's top...), and every choice has its own slot,
 * so adding a choice never moves another one. The mixer is SplitMix64's finaliser
 * (Steele, Lea and Flood, "Fast splittable pseudorandom number generators"), a
 * bijection of 64-bit words whose outputs pass BigCrush for counter inputs.
 *
 * Uniform integers use Lemire's multiply-and-reject ("Fast random integer generation
 * in an interval", 2019): exact, no modulo bias, rejections drawn from further words of
 * the same slot. tests/loaders checks the frequencies of every choice with chi-square.
 */
#ifndef FERRY_LIB_RNG_H
#define FERRY_LIB_RNG_H

#include <stdint.h>

static inline uint64_t ferry__mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15u;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* A key from up to four words (each mixed in turn, so no two tuples collide by
 * rearrangement). */
static inline uint64_t ferry__rng_key(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return ferry__mix64(ferry__mix64(ferry__mix64(ferry__mix64(a) ^ b) ^ c) ^ d);
}

/* Word `n` of slot `slot` under `key`. */
static inline uint64_t ferry__rng_word(uint64_t key, uint32_t slot, uint32_t n) {
  return ferry__mix64(key ^ ferry__mix64(((uint64_t)slot << 32) | n));
}

/* A uniform integer in [0, n), n >= 1. */
static inline uint64_t ferry__rng_below(uint64_t key, uint32_t slot, uint64_t n) {
  uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
  for (uint32_t attempt = 0;; attempt++) {
    unsigned __int128 m = (unsigned __int128)ferry__rng_word(key, slot, attempt) * n;
    if ((uint64_t)m >= threshold) return (uint64_t)(m >> 64);
  }
}

/* A uniform float in [0, 1) with 24 random bits: every value k / 2^24. */
static inline float ferry__rng_unit(uint64_t key, uint32_t slot) {
  return (float)(ferry__rng_word(key, slot, 0) >> 40) * 0x1p-24f;
}

#endif
