/* coco/hash64.c - XXH64 (Yann Collet's algorithm, written here from its specification):
 * fast enough to checksum an index at memory speed, and the same value whether the
 * input comes in one piece or streamed in chunks of any size. Little-endian reads.
 * Callers: index_write.c and index_read.c (section and header checksums), index_cache.c
 * (the fingerprint of a JSON, hashed in 1 MiB chunks). No state outside the caller's
 * ferry__hash64_state, so any thread may hash. The values are part of the index format:
 * a change here makes every index on disk fail its checksums. */
#include "coco/hash64.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static uint64_t read64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;  /* the index format is little-endian only (coco/index_format.h) */
}

static uint32_t read32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static uint64_t round64(uint64_t acc, uint64_t input) {
  acc += input * P2;
  return rotl(acc, 31) * P1;
}

static uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round64(0, val);
  return acc * P1 + P4;
}

void ferry__hash64_init(ferry__hash64_state *s, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->seed = seed;
  s->v[0] = seed + P1 + P2;
  s->v[1] = seed + P2;
  s->v[2] = seed;
  s->v[3] = seed - P1;
}

static void stripe(uint64_t v[4], const unsigned char *p) {
  for (int i = 0; i < 4; i++) v[i] = round64(v[i], read64(p + 8 * i));
}

void ferry__hash64_update(ferry__hash64_state *s, const void *data, size_t len) {
  const unsigned char *p = data;
  if (len == 0) return;  /* data may be NULL (an empty section) */
  s->total += len;
  if (s->buffered) {
    size_t take = 32 - s->buffered < len ? 32 - s->buffered : len;
    memcpy(s->buf + s->buffered, p, take);
    s->buffered += take;
    p += take;
    len -= take;
    if (s->buffered < 32) return;
    stripe(s->v, s->buf);
    s->buffered = 0;
  }
  uint64_t v[4] = {s->v[0], s->v[1], s->v[2], s->v[3]};
  for (; len >= 32; p += 32, len -= 32) stripe(v, p);
  memcpy(s->v, v, sizeof v);
  memcpy(s->buf, p, len);
  s->buffered = len;
}

uint64_t ferry__hash64_final(const ferry__hash64_state *s) {
  uint64_t h;
  if (s->total >= 32) {
    const uint64_t *v = s->v;
    h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    for (int i = 0; i < 4; i++) h = merge_round(h, v[i]);
  } else {
    h = s->seed + P5;
  }
  h += s->total;
  const unsigned char *p = s->buf;
  size_t len = s->buffered;
  for (; len >= 8; p += 8, len -= 8) h = rotl(h ^ round64(0, read64(p)), 27) * P1 + P4;
  if (len >= 4) {
    h = rotl(h ^ (uint64_t)read32(p) * P1, 23) * P2 + P3;
    p += 4;
    len -= 4;
  }
  for (; len; p++, len--) h = rotl(h ^ *p * P5, 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  return h ^ (h >> 32);
}

uint64_t ferry__hash64(const void *data, size_t len, uint64_t seed) {
  ferry__hash64_state s;
  ferry__hash64_init(&s, seed);
  ferry__hash64_update(&s, data, len);
  return ferry__hash64_final(&s);
}
