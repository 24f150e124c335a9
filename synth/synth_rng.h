/* synth/synth_rng.h - the synthetic generator's random numbers.
 *
 * xoshiro256** seeded through splitmix64. Every image draws from its own stream,
 * derived from (seed, stream, image index) only, so the output does not depend on
 * which thread made the image or in what order: same seed, same bytes. rand() is
 * avoided because its sequence differs between C libraries and it is shared state.
 */
#ifndef FERRY_SYNTH_RNG_H
#define FERRY_SYNTH_RNG_H

#include <stdint.h>

typedef struct synth_rng {
  uint64_t s[4];
} synth_rng;

/* Independent streams drawn for one image. */
enum { SYNTH_STREAM_PLAN = 1, SYNTH_STREAM_SCENE = 2, SYNTH_STREAM_PIXELS = 3 };

static inline uint64_t synth_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline void synth_rng_seed(synth_rng *r, uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t x = seed;
  x = synth_splitmix64(&x) ^ (stream * 0xD1B54A32D192ED03ull);
  x = synth_splitmix64(&x) ^ (index * 0xA0761D6478BD642Full);
  for (int i = 0; i < 4; i++)
    r->s[i] = synth_splitmix64(&x);
}

static inline uint64_t synth_rotl(uint64_t v, int k) { return (v << k) | (v >> (64 - k)); }

static inline uint64_t synth_next(synth_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = synth_rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = synth_rotl(s[3], 45);
  return result;
}

/* Uniform in [0, 1). */
static inline double synth_uniform(synth_rng *r) {
  return (double)(synth_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform in [lo, hi). */
static inline double synth_range(synth_rng *r, double lo, double hi) {
  return lo + (hi - lo) * synth_uniform(r);
}

/* Uniform integer in [0, n), n > 0. */
static inline int synth_below(synth_rng *r, int n) {
  return (int)(synth_uniform(r) * n);
}

#endif
