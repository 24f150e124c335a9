/* tests/fuzz/fuzz_tar.c - the tar reader of shards (source/tar.c).
 *
 * Input: the bytes of a tar archive (seeds: small shards written by Python's tarfile in
 * the formats RF-DETR's packer and other writers use, ustar, pax and GNU, long names,
 * links and directories included; see make_seeds.py). The archive is read twice: with
 * its size known (a local shard, read with pread) and as a stream of unknown length
 * (the read-at callback then only learns the end when it reaches it). Every member the
 * reader returns must lie inside the data, be at most max_member bytes, carry a name it
 * would accept, and come after the one before; the walk must end (FERRY_EEND or a
 * failure with a message naming the shard), and both readings must agree.
 */
#include <stdint.h>
#include <string.h>

#include "source/tar.h"
#include "ferry/ferry.h"
#include "tests/fuzz/fuzz_check.h"

typedef struct input {
  const uint8_t *data;
  size_t size;
} input;

static ferry_status read_at(void *user, uint64_t offset, void *buf, size_t len, size_t *got) {
  const input *in = user;
  *got = offset >= in->size ? 0 : (size_t)(in->size - offset < len ? in->size - offset : len);
  if (*got) memcpy(buf, in->data + offset, *got);
  return FERRY_OK;
}

/* Walk the whole archive; the number of members, or -1 after a failure. */
static long walk(const input *in, uint64_t end, uint64_t *last_end) {
  ferry__tar tar;
  ferry__tar_init(&tar, "fuzz.tar", end, 1u << 20, read_at, (void *)in);
  ferry__tar_member m;
  ferry_status st;
  long members = 0;
  uint64_t previous = 0;
  while ((st = ferry__tar_next(&tar, &m)) == FERRY_OK) {
    FUZZ_CHECK(m.offset >= previous && m.offset % FERRY__TAR_BLOCK == 0);
    FUZZ_CHECK(m.size <= (1u << 20));
    FUZZ_CHECK(end == UINT64_MAX || m.offset + m.size <= in->size);
    FUZZ_CHECK(ferry__tar_name_refused(m.name) == NULL);
    previous = m.offset + m.size;
    members++;
  }
  *last_end = previous;
  if (st == FERRY_EEND) return members;
  FUZZ_CHECK_FAILURE(st);
  FUZZ_CHECK(strstr(ferry_last_error(), "fuzz.tar") != NULL);
  return -1;
}

int FUZZ_ENTRY(const uint8_t *data, size_t size) {
  input in = {data, size};
  uint64_t known_end, stream_end;
  long known = walk(&in, size, &known_end);
  long streamed = walk(&in, UINT64_MAX, &stream_end);
  /* A stream learns of a short archive only when it reads past the end: it may return
   * the members before a size-past-the-end failure, never others. */
  if (known >= 0) FUZZ_CHECK(streamed == known && stream_end == known_end);
  return 0;
}
