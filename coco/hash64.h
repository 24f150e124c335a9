/* coco/hash64.h - a 64-bit non-cryptographic hash (the XXH64 algorithm), one-shot or
 * streamed, for the binary index's checksums and its source fingerprint (internal). */
#ifndef FERRY_COCO_HASH64_H
#define FERRY_COCO_HASH64_H

#include <stddef.h>
#include <stdint.h>

typedef struct ferry__hash64_state {
  uint64_t v[4];
  uint64_t total;
  unsigned char buf[32];
  size_t buffered;
  uint64_t seed;
} ferry__hash64_state;

void ferry__hash64_init(ferry__hash64_state *s, uint64_t seed);
void ferry__hash64_update(ferry__hash64_state *s, const void *data, size_t len);
uint64_t ferry__hash64_final(const ferry__hash64_state *s);

/* One shot: the same value as init + update + final. */
uint64_t ferry__hash64(const void *data, size_t len, uint64_t seed);

#endif
