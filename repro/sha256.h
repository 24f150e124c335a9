/* repro/sha256.h - SHA-256 (FIPS 180-4), for digests of everything a run delivered. */
#ifndef FERRY_REPRO_SHA256_H
#define FERRY_REPRO_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct sha256 {
  uint32_t h[8];
  uint64_t length;
  uint8_t block[64];
  size_t used;
} sha256;

void sha256_init(sha256 *s);
void sha256_update(sha256 *s, const void *data, size_t n);
void sha256_final(sha256 *s, uint8_t out[32]);

#endif
