/* source/reader.h - one ranged reader over an object named by a path or a URL
 * (internal; used by source/shard_walk.c, the open-time walk, and
 * source/shard_source.c, the workers).
 *
 * The one place where a local file and an object at a URL part ways: a path is opened
 * with open + fstat (regular files only) and read with pread; an http(s):// or s3://
 * URL is read through the client's ranged GETs (source/remote.h), or, for a forward
 * stream (the tar walk), through the client's chunked stream. Above this header
 * nothing asks which of the two it has.
 * Invariants: a plain reader's reads are thread-safe (pread at an offset, or one GET
 * through a handle of the client's pool) and write only [buf, buf + len); a stream is
 * one thread's; *got < len only where the object ends; every error names the object
 * (a URL without its user:password part, remote.h).
 */
#ifndef FERRY_SOURCE_READER_H
#define FERRY_SOURCE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry__remote ferry__remote;
typedef struct ferry__reader ferry__reader;

/* How a reader reads: any offset from any thread, or forward only from one thread
 * (a walk: for a URL, one request per chunk instead of one per read). */
typedef enum { FERRY__READER_RANGED = 0, FERRY__READER_STREAM = 1 } ferry__reader_mode;

/* Open `name`: a URL (remote.h's ferry__remote_is_url) through `remote`, which must
 * then be given and outlive the reader, else a local path. A path that cannot be
 * opened is FERRY_ENOTFOUND (it does not exist) or FERRY_EIO, one that is not a regular
 * file FERRY_EIO, each naming the path. `name` is borrowed: it must outlive the reader. */
ferry_status ferry__reader_open(ferry__remote *remote, const char *name, ferry__reader_mode mode, ferry__reader **out);

/* A ranged reader over `fd`, an open regular file (the walk's spill, an unnamed file),
 * which it then owns (closed at close, or here on failure); `name` for messages. */
ferry_status ferry__reader_adopt_fd(int fd, const char *name, ferry__reader **out);

/* Bytes [offset, offset + len) into buf; *got < len only where the object ends. A
 * local read error names the path and the byte. */
ferry_status ferry__reader_read(ferry__reader *r, uint64_t offset, void *buf, size_t len, size_t *got);

/* ferry__reader_read in the shape of tar.h's ferry__tar_read_fn (`reader` is a
 * ferry__reader). */
ferry_status ferry__reader_read_at(void *reader, uint64_t offset, void *buf, size_t len, size_t *got);

/* Takes n bytes that follow the `at` bytes handed before; 0 to go on, nonzero to end. */
typedef int (*ferry__reader_sink_fn)(void *ctx, size_t at, const uint8_t *bytes, size_t n);
/* A URL's bytes [offset, offset + len) handed to `sink` as they arrive, in one ranged
 * GET (remote.h's ferry__remote_read_into: the block cache's fetch). FERRY_EUNSUPPORTED
 * for a path: its bytes are read where they are needed, never through blocks. */
ferry_status ferry__reader_read_into(ferry__reader *r, uint64_t offset, size_t len, ferry__reader_sink_fn sink,
                                     void *sink_ctx, size_t *got);

/* The object's size in bytes; UINT64_MAX for a URL (its end is found by reading). */
uint64_t ferry__reader_size(const ferry__reader *r);
/* The name it was opened with. */
const char *ferry__reader_name(const ferry__reader *r);
void ferry__reader_close(ferry__reader *r);

#endif
