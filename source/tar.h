/* source/tar.h - reading and writing the tar members of a WebDataset shard (internal;
 * used by source/shard_walk.c, loaders/fill.c for the name rule, and tools/pack.c).
 *
 * The reader walks an archive forward only, through a read-at callback whose offsets
 * never go back: a local file serves it with pread, and a stream (HTTP, S3) can serve
 * it from the bytes it has received. It yields regular members only, each with its
 * name and where its bytes are; it follows POSIX ustar, pax extended headers ("path",
 * "size") and GNU long names, and refuses, with a message naming the shard and the
 * member (or the header's byte offset when no name is known yet):
 *   - a header whose checksum is wrong, or a numeric field that is not a number;
 *   - a member whose bytes would end past the end of the shard, or that is larger than
 *     the reader's max_member (a shard is data to read, not a way to make us allocate);
 *   - a name that is empty, absolute, has a ".." component, or is longer than
 *     FERRY__TAR_NAME_MAX - 1 bytes;
 *   - links (hard, symbolic, GNU long link names), devices, FIFOs, sparse files and
 *     every other member kind but regular files, directories (skipped) and global pax
 *     headers (skipped).
 * The writer makes ustar headers as Python's tarfile does for RF-DETR's packer (mode
 * 0644, owner 0, time 0, no user or group name).
 */
#ifndef FERRY_SOURCE_TAR_H
#define FERRY_SOURCE_TAR_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

#define FERRY__TAR_BLOCK 512
#define FERRY__TAR_NAME_MAX 1024
/* The largest pax extended header or GNU long name accepted. */
#define FERRY__TAR_MAX_EXTENSION (64u << 10)

/* Read up to len bytes at offset into buf; *got < len only at the end of the data.
 * Errors are the source's (an I/O error naming the shard). */
typedef ferry_status (*ferry__tar_read_fn)(void *user, uint64_t offset, void *buf, size_t len, size_t *got);

typedef struct ferry__tar {
  ferry__tar_read_fn read;
  void *user;
  const char *shard;        /* names the archive in messages */
  uint64_t end;             /* its size; UINT64_MAX when not known (a stream) */
  uint64_t max_member;      /* a regular member larger than this is refused */
  uint64_t pos;             /* where the next header starts */
  char last[FERRY__TAR_NAME_MAX]; /* the last member returned, to say where a later header is */
} ferry__tar;

typedef struct ferry__tar_member {
  char name[FERRY__TAR_NAME_MAX];
  uint64_t offset;          /* of its first byte in the archive */
  uint64_t size;
} ferry__tar_member;

void ferry__tar_init(ferry__tar *t, const char *shard, uint64_t end, uint64_t max_member, ferry__tar_read_fn read,
                     void *user);

/* The next regular member: FERRY_OK, FERRY_EEND after the last one (two zero blocks,
 * or the end of the data at a header's place), or an error (see above). */
ferry_status ferry__tar_next(ferry__tar *t, ferry__tar_member *out);

/* The ustar header of a regular member `name` of `size` bytes. FERRY_EINVAL when the
 * name does not fit a ustar header (100 bytes, or 155 + "/" + 100 split at a slash)
 * or the size does not fit its 11 octal digits. */
ferry_status ferry__tar_header(const char *name, uint64_t size, uint8_t out[FERRY__TAR_BLOCK]);

/* NULL when `name` may name a member (or a shard beside an index); else why not: a
 * name is a path inside its folder, never empty or absolute, never climbing out with "..". */
const char *ferry__tar_name_refused(const char *name);

/* Bytes a member of `size` bytes takes in an archive: its header and its data padded
 * to a whole block. */
uint64_t ferry__tar_member_bytes(uint64_t size);

#endif
