/* source/tar.c - the tar members of a shard: the forward reader and the ustar header
 * writer (source/tar.h says what is accepted and what is refused).
 *
 * Owns nothing but the caller's ferry__tar: no allocation, every buffer on the stack
 * (a pax header or a GNU long name is at most FERRY__TAR_MAX_EXTENSION bytes, read
 * in block-sized pieces). Callers: source/shard_walk.c on the opening thread, the fuzzer
 * (tests/fuzz/fuzz_tar.c) and `ferry-coco pack` (headers).
 * Invariants: t->pos is always a block boundary and only grows; a member returned has
 * offset + size <= t->end and size <= t->max_member; its name passed ferry__tar_name_refused().
 */
#include <stdio.h>
#include <string.h>

#include "source/tar.h"
#include "lib/status.h"

enum {
  OFF_NAME = 0, LEN_NAME = 100,
  OFF_MODE = 100, LEN_MODE = 8,
  OFF_UID = 108, OFF_GID = 116, LEN_ID = 8,
  OFF_SIZE = 124, LEN_SIZE = 12,
  OFF_MTIME = 136, LEN_MTIME = 12,
  OFF_CHKSUM = 148, LEN_CHKSUM = 8,
  OFF_TYPE = 156,
  OFF_MAGIC = 257, OFF_VERSION = 263,
  OFF_PREFIX = 345, LEN_PREFIX = 155
};

/* What extension headers said about the member that follows them. */
typedef struct pending {
  char name[FERRY__TAR_NAME_MAX];
  int has_name, has_size;
  uint64_t size;
} pending;

void ferry__tar_init(ferry__tar *t, const char *shard, uint64_t end, uint64_t max_member, ferry__tar_read_fn read,
                     void *user) {
  memset(t, 0, sizeof *t);
  t->shard = shard;
  t->end = end;
  t->max_member = max_member;
  t->read = read;
  t->user = user;
}

uint64_t ferry__tar_member_bytes(uint64_t size) {
  return FERRY__TAR_BLOCK + (size + FERRY__TAR_BLOCK - 1) / FERRY__TAR_BLOCK * FERRY__TAR_BLOCK;
}

/* "SHARD: the header at byte N (after member M): " in front of every refusal that
 * comes before the member's name is known. */
static ferry_status bad_header(const ferry__tar *t, uint64_t at, const char *what) {
  return ferry__fail(FERRY_EFORMAT, "%s: the tar header at byte %llu (after member '%s'): %s", t->shard,
                     (unsigned long long)at, t->last[0] ? t->last : "(none, the first)", what);
}

static ferry_status bad_member(const ferry__tar *t, const char *name, const char *fmt, unsigned long long a,
                               unsigned long long b) FERRY_PRINTF(3, 0);
static ferry_status bad_member(const ferry__tar *t, const char *name, const char *fmt, unsigned long long a,
                               unsigned long long b) {
  char what[256];
  snprintf(what, sizeof what, fmt, a, b);
  return ferry__fail(FERRY_EFORMAT, "%s: member '%s': %s", t->shard, name, what);
}

/* A numeric field: octal digits (leading spaces allowed, ended by a space or NUL), or
 * GNU base-256 (high bit of the first byte set; negative values refused). -1 when it
 * is neither or does not fit 63 bits. */
static int parse_number(const uint8_t *field, size_t len, uint64_t *out) {
  uint64_t v = 0;
  if (field[0] & 0x80) {
    if (field[0] & 0x40) return -1;  /* negative */
    for (size_t i = 0; i < len; i++) {
      uint8_t byte = i == 0 ? (uint8_t)(field[0] & 0x7f) : field[i];
      if (v >> 55) return -1;
      v = v << 8 | byte;
    }
    *out = v;
    return 0;
  }
  size_t i = 0;
  while (i < len && field[i] == ' ') i++;
  size_t digits = 0;
  for (; i < len && field[i] >= '0' && field[i] <= '7'; i++, digits++) {
    if (v >> 60) return -1;
    v = v << 3 | (uint64_t)(field[i] - '0');
  }
  for (; i < len; i++)
    if (field[i] != ' ' && field[i] != '\0') return -1;
  *out = v;
  return 0;
}

/* The sum of the header's bytes with the checksum field taken as spaces, unsigned (POSIX)
 * and signed (what some old tars wrote); either may match. */
static int checksum_ok(const uint8_t *h) {
  uint64_t recorded;
  if (parse_number(h + OFF_CHKSUM, LEN_CHKSUM, &recorded) < 0) return 0;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (int i = 0; i < FERRY__TAR_BLOCK; i++) {
    int in_field = i >= OFF_CHKSUM && i < OFF_CHKSUM + LEN_CHKSUM;
    unsigned_sum += in_field ? ' ' : h[i];
    signed_sum += in_field ? ' ' : (int8_t)h[i];
  }
  return (uint64_t)unsigned_sum == recorded || signed_sum == (int64_t)recorded;
}

static int all_zero(const uint8_t *h) {
  for (int i = 0; i < FERRY__TAR_BLOCK; i++)
    if (h[i]) return 0;
  return 1;
}

const char *ferry__tar_name_refused(const char *name) {
  if (!name[0]) return "an empty name";
  if (name[0] == '/') return "an absolute name";
  for (const char *p = name; *p;) {
    const char *slash = strchr(p, '/');
    size_t len = slash ? (size_t)(slash - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') return "a name with a '..' component";
    if (!slash) break;
    p = slash + 1;
  }
  return NULL;
}

/* The name a ustar header gives: prefix "/" name when POSIX ustar has a prefix. */
static void header_name(const uint8_t *h, char *out) {
  size_t name_len = strnlen((const char *)h + OFF_NAME, LEN_NAME);
  size_t prefix_len = memcmp(h + OFF_MAGIC, "ustar\0", 6) == 0 ? strnlen((const char *)h + OFF_PREFIX, LEN_PREFIX) : 0;
  size_t n = 0;
  if (prefix_len) {
    memcpy(out, h + OFF_PREFIX, prefix_len);
    out[prefix_len] = '/';
    n = prefix_len + 1;
  }
  memcpy(out + n, h + OFF_NAME, name_len);
  out[n + name_len] = '\0';
}

/* The data of an extension header (pax 'x' or GNU 'L') at offset, of size bytes, into
 * buf (FERRY__TAR_MAX_EXTENSION + 1), NUL-terminated. */
static ferry_status read_extension(ferry__tar *t, uint64_t at, uint64_t offset, uint64_t size, char *buf) {
  if (size > FERRY__TAR_MAX_EXTENSION) {
    char what[128];
    snprintf(what, sizeof what, "an extended header of %llu bytes (at most %u)", (unsigned long long)size,
             FERRY__TAR_MAX_EXTENSION);
    return bad_header(t, at, what);
  }
  size_t got = 0;
  ferry_status st = t->read(t->user, offset, buf, (size_t)size, &got);
  if (st < 0) return st;
  if (got < size) return bad_header(t, at, "the shard ends inside an extended header");
  buf[size] = '\0';
  return FERRY_OK;
}

/* A pax extended header: records "LEN key=value\n", LEN counting the whole record.
 * "path" and "size" are kept for the next member; other keys are ignored. */
static ferry_status parse_pax(ferry__tar *t, uint64_t at, char *data, size_t len, pending *p) {
  size_t i = 0;
  while (i < len) {
    size_t rec = 0, j = i;
    while (j < len && data[j] >= '0' && data[j] <= '9' && rec <= len) rec = rec * 10 + (size_t)(data[j++] - '0');
    if (j == i || j >= len || data[j] != ' ' || rec < 2 || rec > len - i || data[i + rec - 1] != '\n')
      return bad_header(t, at, "a pax extended header whose records do not parse");
    char *key = data + j + 1, *end = data + i + rec - 1;
    char *eq = memchr(key, '=', (size_t)(end - key));
    if (!eq) return bad_header(t, at, "a pax record without '='");
    *end = '\0';
    *eq = '\0';
    const char *value = eq + 1;
    if (strcmp(key, "path") == 0) {
      if (strlen(value) >= FERRY__TAR_NAME_MAX) return bad_header(t, at, "a pax path longer than the names ferry reads");
      snprintf(p->name, sizeof p->name, "%s", value);
      p->has_name = 1;
    } else if (strcmp(key, "size") == 0) {
      uint64_t v = 0;
      const char *c = value;
      for (; *c >= '0' && *c <= '9' && v < (UINT64_MAX >> 4); c++) v = v * 10 + (uint64_t)(*c - '0');
      if (c == value || *c) return bad_header(t, at, "a pax size that is not a decimal number");
      p->size = v;
      p->has_size = 1;
    }
    i += rec;
  }
  return FERRY_OK;
}

/* What to do with a header of this type flag. */
typedef enum { KIND_REGULAR, KIND_SKIP, KIND_PAX, KIND_GNU_NAME, KIND_REFUSED } member_kind;

static member_kind kind_of(uint8_t flag, const char **why) {
  switch (flag) {
    case '0': case '\0': case '7': return KIND_REGULAR;
    case '5': case 'g': return KIND_SKIP;
    case 'x': return KIND_PAX;
    case 'L': return KIND_GNU_NAME;
    case '1': *why = "a hard link (links are refused: a shard holds its own bytes)"; return KIND_REFUSED;
    case '2': *why = "a symbolic link (links are refused: a shard holds its own bytes)"; return KIND_REFUSED;
    case 'K': *why = "a GNU long link name (links are refused)"; return KIND_REFUSED;
    default: *why = "a member type ferry does not read (device, FIFO, sparse, ...)"; return KIND_REFUSED;
  }
}

/* What a pax header or a GNU long name at `at` says about the next member, into p. */
static ferry_status read_extension_header(ferry__tar *t, uint64_t at, member_kind kind, uint64_t data, uint64_t size,
                                          pending *p) {
  char buf[FERRY__TAR_MAX_EXTENSION + 1];
  ferry_status st = read_extension(t, at, data, size, buf);
  if (st < 0) return st;
  if (kind == KIND_PAX) return parse_pax(t, at, buf, (size_t)size, p);
  if (strlen(buf) >= FERRY__TAR_NAME_MAX) return bad_header(t, at, "a GNU long name longer than the names ferry reads");
  snprintf(p->name, sizeof p->name, "%s", buf);
  p->has_name = 1;
  return FERRY_OK;
}

/* The data of the member whose header is at `at` must lie inside the shard and within
 * the size limit. */
static ferry_status check_extent(const ferry__tar *t, const char *name, uint64_t offset, uint64_t size, int regular) {
  if (regular && size > t->max_member)
    return bad_member(t, name, "%llu bytes, more than the %llu a member may have", (unsigned long long)size,
                      (unsigned long long)t->max_member);
  if (t->end != UINT64_MAX && (size > t->end || offset > t->end - size))
    return bad_member(t, name, "%llu bytes that would end past the end of the shard (%llu bytes)",
                      (unsigned long long)size, (unsigned long long)t->end);
  return FERRY_OK;
}

/* One header at t->pos: a regular member (*done = 1), or an extension/skipped member
 * folded into p. */
static ferry_status step(ferry__tar *t, pending *p, ferry__tar_member *out, int *done) {
  uint8_t h[FERRY__TAR_BLOCK];
  uint64_t at = t->pos;
  size_t got = 0;
  ferry_status st = t->read(t->user, at, h, sizeof h, &got);
  if (st < 0) return st;
  if (got == 0 || (got == sizeof h && all_zero(h))) {
    if (p->has_name || p->has_size) return bad_header(t, at, "the shard ends after an extended header");
    return FERRY_EEND;
  }
  if (got < sizeof h) return bad_header(t, at, "the shard ends inside a header");
  if (!checksum_ok(h)) return bad_header(t, at, "the header's checksum is wrong");
  uint64_t size;
  if (parse_number(h + OFF_SIZE, LEN_SIZE, &size) < 0) return bad_header(t, at, "the size field is not a number");
  const char *why = NULL;
  member_kind kind = kind_of(h[OFF_TYPE], &why);
  char name[FERRY__TAR_NAME_MAX];
  if (p->has_name) memcpy(name, p->name, sizeof name);
  else header_name(h, name);
  if (p->has_size && kind == KIND_REGULAR) size = p->size;
  uint64_t data = at + FERRY__TAR_BLOCK;
  if (kind == KIND_REFUSED)
    return ferry__fail(FERRY_EFORMAT, "%s: member '%s': %s", t->shard, name[0] ? name : "(no name)", why);
  const char *refused = kind == KIND_PAX || kind == KIND_GNU_NAME || h[OFF_TYPE] == 'g' ? NULL : ferry__tar_name_refused(name);
  if (refused) return ferry__fail(FERRY_EFORMAT, "%s: member '%s': %s is refused", t->shard, name, refused);
  if ((st = check_extent(t, name, data, size, kind == KIND_REGULAR)) < 0) return st;
  if ((kind == KIND_PAX || kind == KIND_GNU_NAME) && (st = read_extension_header(t, at, kind, data, size, p)) < 0)
    return st;
  t->pos = data + (size + FERRY__TAR_BLOCK - 1) / FERRY__TAR_BLOCK * FERRY__TAR_BLOCK;
  /* A directory uses up what the extension headers before it said. */
  if (h[OFF_TYPE] == '5') memset(p, 0, sizeof *p);
  if (kind != KIND_REGULAR) return FERRY_OK;
  memcpy(out->name, name, sizeof name);
  out->offset = data;
  out->size = size;
  memcpy(t->last, name, sizeof name);
  *done = 1;
  return FERRY_OK;
}

ferry_status ferry__tar_next(ferry__tar *t, ferry__tar_member *out) {
  pending p;
  memset(&p, 0, sizeof p);
  int done = 0;
  while (!done) {
    ferry_status st = step(t, &p, out, &done);
    if (st != FERRY_OK) return st;
  }
  return FERRY_OK;
}

/* Octal digits, NUL-terminated, right-aligned with leading zeros, in a field of len. */
static void put_octal(uint8_t *field, size_t len, uint64_t v) {
  snprintf((char *)field, len, "%0*llo", (int)len - 1, (unsigned long long)v);
}

ferry_status ferry__tar_header(const char *name, uint64_t size, uint8_t out[FERRY__TAR_BLOCK]) {
  memset(out, 0, FERRY__TAR_BLOCK);
  size_t len = strlen(name);
  const char *base = name;
  if (len > LEN_NAME) {
    /* Split at a slash: prefix (<= 155) "/" name (<= 100). */
    const char *slash = NULL;
    for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/'))
      if ((size_t)(s - name) <= LEN_PREFIX && strlen(s + 1) <= LEN_NAME) slash = s;
    if (!slash || slash == name)
      return ferry__fail(FERRY_EINVAL, "tar: the name '%s' does not fit a ustar header", name);
    memcpy(out + OFF_PREFIX, name, (size_t)(slash - name));
    base = slash + 1;
  }
  if (size >= (1ull << 33)) return ferry__fail(FERRY_EINVAL, "tar: member '%s' of %llu bytes is too large for ustar", name, (unsigned long long)size);
  memcpy(out + OFF_NAME, base, strlen(base));
  put_octal(out + OFF_MODE, LEN_MODE, 0644);
  put_octal(out + OFF_UID, LEN_ID, 0);
  put_octal(out + OFF_GID, LEN_ID, 0);
  put_octal(out + OFF_SIZE, LEN_SIZE, size);
  put_octal(out + OFF_MTIME, LEN_MTIME, 0);
  out[OFF_TYPE] = '0';
  memcpy(out + OFF_MAGIC, "ustar\0", 6);
  memcpy(out + OFF_VERSION, "00", 2);
  memset(out + OFF_CHKSUM, ' ', LEN_CHKSUM);
  unsigned sum = 0;
  for (int i = 0; i < FERRY__TAR_BLOCK; i++) sum += out[i];
  /* Python's tarfile: six octal digits, NUL, space. */
  snprintf((char *)out + OFF_CHKSUM, 7, "%06o", sum);
  out[OFF_CHKSUM + 6] = '\0';
  out[OFF_CHKSUM + 7] = ' ';
  return FERRY_OK;
}
