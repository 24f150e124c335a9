/* source/reader.c - the ranged reader (source/reader.h): a local file by pread, or an
 * object at a URL through the remote client.
 *
 * Owns the reader: for a path its descriptor (opened at open, closed at close), for a
 * URL in stream mode its stream (remote.h's ferry__remote_stream); the client and the
 * name are the caller's. A ranged reader at a URL holds nothing but the names: each
 * read is one request through the client's pool.
 * Invariants: exactly one of fd >= 0 (a path) and remote != NULL (a URL) holds; a
 * stream exists only in stream mode at a URL.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "source/reader.h"
#include "source/remote.h"

struct ferry__reader {
  const char *name;
  int fd;                       /* a path's; -1 for a URL */
  ferry__remote *remote;        /* a URL's client; NULL for a path */
  ferry__remote_stream *stream; /* a URL read forward (FERRY__READER_STREAM) */
  uint64_t size;                /* UINT64_MAX for a URL */
};

static ferry_status open_path(ferry__reader *r) {
  r->fd = open(r->name, O_RDONLY | O_CLOEXEC);
  if (r->fd < 0)
    return ferry__fail(errno == ENOENT ? FERRY_ENOTFOUND : FERRY_EIO, "%s: cannot open: %s", r->name, strerror(errno));
  struct stat sb;
  if (fstat(r->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) return ferry__fail(FERRY_EIO, "%s: not a regular file", r->name);
  r->size = (uint64_t)sb.st_size;
  return FERRY_OK;
}

ferry_status ferry__reader_open(ferry__remote *remote, const char *name, ferry__reader_mode mode, ferry__reader **out) {
  *out = NULL;
  int url = ferry__remote_is_url(name);
  if (url && !remote)
    return ferry__fail(FERRY_EINVAL, "ferry__reader_open: %s is a URL, and no client was given", name);
  ferry__reader *r = ferry__calloc(1, sizeof *r);
  if (!r) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", name);
  *r = (ferry__reader){.name = name, .fd = -1, .size = UINT64_MAX};
  ferry_status st = FERRY_OK;
  if (!url) st = open_path(r);
  else r->remote = remote;
  if (st == FERRY_OK && url && mode == FERRY__READER_STREAM) st = ferry__remote_stream_open(remote, name, &r->stream);
  if (st < 0) {
    ferry__reader_close(r);
    return st;
  }
  *out = r;
  return FERRY_OK;
}

ferry_status ferry__reader_adopt_fd(int fd, const char *name, ferry__reader **out) {
  *out = ferry__calloc(1, sizeof **out);
  if (!*out) {
    close(fd);
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory", name);
  }
  **out = (ferry__reader){.name = name, .fd = fd, .size = UINT64_MAX};
  return FERRY_OK;
}

static ferry_status pread_all(const ferry__reader *r, uint64_t offset, void *buf, size_t len, size_t *got) {
  while (*got < len) {
    ssize_t n = pread(r->fd, (char *)buf + *got, len - *got, (off_t)(offset + *got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return ferry__fail(FERRY_EIO, "%s: read error at byte %llu: %s", r->name, (unsigned long long)offset,
                         strerror(errno));
    if (n == 0) break;
    *got += (size_t)n;
  }
  return FERRY_OK;
}

ferry_status ferry__reader_read(ferry__reader *r, uint64_t offset, void *buf, size_t len, size_t *got) {
  *got = 0;
  if (r->stream) return ferry__remote_stream_read(r->stream, offset, buf, len, got);
  if (r->remote) return ferry__remote_read(r->remote, r->name, offset, buf, len, got);
  return pread_all(r, offset, buf, len, got);
}

ferry_status ferry__reader_read_at(void *reader, uint64_t offset, void *buf, size_t len, size_t *got) {
  return ferry__reader_read(reader, offset, buf, len, got);
}

ferry_status ferry__reader_read_into(ferry__reader *r, uint64_t offset, size_t len, ferry__reader_sink_fn sink,
                                     void *sink_ctx, size_t *got) {
  *got = 0;
  if (!r->remote) return ferry__fail(FERRY_EUNSUPPORTED, "%s: a local file is not read through blocks", r->name);
  return ferry__remote_read_into(r->remote, r->name, offset, len, sink, sink_ctx, got);
}

uint64_t ferry__reader_size(const ferry__reader *r) { return r->size; }

const char *ferry__reader_name(const ferry__reader *r) { return r->name; }

void ferry__reader_close(ferry__reader *r) {
  if (!r) return;
  if (r->fd >= 0) close(r->fd);
  ferry__remote_stream_close(r->stream);
  ferry__free(r);
}
