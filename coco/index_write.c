/* coco/index_write.c - writing a binary COCO index (format: coco/index_format.h).
 *
 * The index of a parsed ferry_coco is its arrays laid end to end behind a header that
 * records each section's place, size and checksum and the JSON it came from. A file is
 * written under a new, unique temporary name in the same folder (mkostemp: nothing
 * planted there is followed or truncated), made read-only, synced, renamed into place,
 * and the folder synced, so that a reader sees either no index or a complete one, never
 * a partial file, even after a crash.
 * Callers: ferry_coco_index_build (`ferry-coco index`) and index_cache.c's "auto" policy,
 * which holds the build lock around ferry__coco_index_build_file. The JSON is stat'ed
 * before it is read and after it is parsed: a file changed meanwhile fails (FERRY_EIO)
 * rather than recording a fingerprint that does not match the content indexed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco/hash64.h"
#include "coco/index_format.h"
#include "coco/index_read.h"
#include "coco/index_write.h"
#include "coco/json_load.h"
#include "coco/store.h"
#include "lib/alloc.h"
#include "lib/status.h"

/* Entries of image_anns in use: a result list's annotations belong to no image. */
static size_t image_anns_used(const ferry_coco *coco) {
  size_t used = 0;
  for (size_t i = 0; i < coco->images.n; i++) used += COCO_AT(coco->images, ferry__coco_image, i).num_anns;
  return used;
}

/* Where each section's elements are in a parsed coco. */
static void section_source(const ferry_coco *coco, ferry__index_section_id id, const void **data, size_t *count) {
  switch (id) {
    case SEC_IMAGES: *data = coco->images.data, *count = coco->images.n; return;
    case SEC_CATEGORIES: *data = coco->categories.data, *count = coco->categories.n; return;
    case SEC_ANNS: *data = coco->anns.data, *count = coco->anns.n; return;
    case SEC_PARTS: *data = coco->parts.data, *count = coco->parts.n; return;
    case SEC_COORDS: *data = coco->coords.data, *count = coco->coords.n; return;
    case SEC_COUNTS: *data = coco->counts.data, *count = coco->counts.n; return;
    case SEC_KEYPOINTS: *data = coco->keypoints.data, *count = coco->keypoints.n; return;
    case SEC_STRINGS: *data = coco->strings.data, *count = coco->strings.n; return;
    case SEC_IMAGE_IDS: *data = coco->image_ids, *count = coco->images.n; return;
    case SEC_CATEGORY_IDS: *data = coco->category_ids, *count = coco->categories.n; return;
    case SEC_IMAGE_ANNS: *data = coco->image_anns, *count = image_anns_used(coco); return;
    case SEC_COUNT: break;
  }
  *data = NULL, *count = 0;
}

static uint64_t align_up(uint64_t x) { return (x + FERRY_INDEX_ALIGN - 1) / FERRY_INDEX_ALIGN * FERRY_INDEX_ALIGN; }

/* Fill the header's section table; returns the file size. */
static uint64_t lay_out(const ferry_coco *coco, ferry__index_header *h) {
  uint64_t at = align_up(sizeof *h);
  for (unsigned id = 0; id < SEC_COUNT; id++) {
    const void *data;
    size_t count;
    section_source(coco, id, &data, &count);
    ferry__index_section *s = &h->sections[id];
    s->id = id;
    s->elem_size = ferry__index_elem_size(id);
    s->offset = at;
    s->count = count;
    s->checksum = ferry__hash64(data, count * s->elem_size, 0);
    at = align_up(at + count * s->elem_size);
  }
  return at;
}

/* The annotation records as they go to disk: the label is stored as the raw category
 * id (ferry__coco_label remaps on access), whatever options the coco was opened with. */
static void copy_anns(const ferry_coco *coco, char *dst) {
  if (coco->anns.n) memcpy(dst, coco->anns.data, coco->anns.n * sizeof(ferry__coco_ann));
  ferry__coco_ann *anns = (ferry__coco_ann *)dst;
  for (size_t i = 0; i < coco->anns.n; i++) anns[i].pub.label = anns[i].pub.category_id;
}

/* The whole index of coco as bytes (ferry__malloc'd), recording `source`. */
static ferry_status index_serialize(const ferry_coco *coco, const ferry__index_source *source, char **data,
                                    size_t *len) {
  if (coco->num_keypoints > FERRY_INDEX_MAX_KEYPOINTS)
    return ferry__fail(FERRY_ELIMIT, "%s: %zu keypoints per instance, over the index format's %u", coco->name,
                      coco->num_keypoints, FERRY_INDEX_MAX_KEYPOINTS);
  ferry__index_header h;
  memset(&h, 0, sizeof h);
  memcpy(h.magic, FERRY_INDEX_MAGIC, FERRY_INDEX_MAGIC_LEN);
  h.version = FERRY_INDEX_VERSION;
  h.header_size = sizeof h;
  h.source_size = source->size;
  h.source_mtime_s = source->mtime_s;
  h.source_mtime_ns = source->mtime_ns;
  h.source_hash = source->hash;
  h.num_keypoints = coco->num_keypoints;
  h.flags = (coco->result_list ? FERRY_INDEX_FLAG_RESULT_LIST : 0) |
            (coco->any_category_id ? FERRY_INDEX_FLAG_CATEGORY_IDS : 0);
  h.num_sections = SEC_COUNT;
  h.file_size = lay_out(coco, &h);
  char *out = ferry__calloc(1, h.file_size);
  if (!out) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for a %llu-byte index", coco->name,
                              (unsigned long long)h.file_size);
  for (unsigned id = 0; id < SEC_COUNT; id++) {
    const void *src;
    size_t count;
    section_source(coco, id, &src, &count);
    if (id == SEC_ANNS) copy_anns(coco, out + h.sections[id].offset);
    else if (count) memcpy(out + h.sections[id].offset, src, count * h.sections[id].elem_size);
  }
  h.sections[SEC_ANNS].checksum =
      ferry__hash64(out + h.sections[SEC_ANNS].offset, coco->anns.n * sizeof(ferry__coco_ann), 0);
  h.checksum = ferry__hash64(&h, offsetof(ferry__index_header, checksum), 0);
  memcpy(out, &h, sizeof h);
  *data = out;
  *len = h.file_size;
  return FERRY_OK;
}

/* The temporary's name pattern beside the index (for mkostemp). */
static char *temp_template(const char *index_path) {
  size_t n = strlen(index_path) + sizeof ".tmp.XXXXXX";
  char *tmp = ferry__malloc(n);
  if (tmp) snprintf(tmp, n, "%s.tmp.XXXXXX", index_path);
  return tmp;
}

static ferry_status write_fd(int fd, const char *path, const char *data, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ferry__fail(FERRY_EIO, "%s: write error: %s", path, strerror(errno));
    done += (size_t)n;
  }
  /* Read-only for everyone: index_read.c shares the pages of a file nobody can write. */
  if (fchmod(fd, 0444) != 0 || fsync(fd) != 0) return ferry__fail(FERRY_EIO, "%s: write error: %s", path, strerror(errno));
  return FERRY_OK;
}

/* fsync the folder holding path, so that a rename into it survives a crash. */
static ferry_status sync_folder_of(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *from = !slash ? "." : slash == path ? "/" : path;
  size_t n = slash && slash != path ? (size_t)(slash - path) : 1;
  char *dir = ferry__malloc(n + 1);
  if (!dir) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", path);
  memcpy(dir, from, n);
  dir[n] = '\0';
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  /* Some file systems cannot sync a folder (EINVAL, ENOTSUP): the rename stands. */
  int synced = fd >= 0 && (fsync(fd) == 0 || errno == EINVAL || errno == ENOTSUP);
  ferry_status st = synced ? FERRY_OK
                           : ferry__fail(FERRY_EIO, "%s: cannot sync the folder %s: %s", path, dir, strerror(errno));
  if (fd >= 0) close(fd);
  ferry__free(dir);
  return st;
}

/* Write a new file of a unique name beside the index (mkostemp: O_CREAT|O_EXCL, so
 * nothing planted there, symlink or not, is followed or truncated), sync it, rename
 * it into place and sync the folder. */
static ferry_status write_atomically(const char *index_path, const char *data, size_t len) {
  char *tmp = temp_template(index_path);
  if (!tmp) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", index_path);
  int fd = mkostemp(tmp, O_CLOEXEC);
  ferry_status st = fd >= 0 ? FERRY_OK : ferry__fail(FERRY_EIO, "%s: cannot create: %s", tmp, strerror(errno));
  if (st == FERRY_OK) {
    st = write_fd(fd, tmp, data, len);
    if (close(fd) != 0 && st == FERRY_OK) st = ferry__fail(FERRY_EIO, "%s: write error: %s", tmp, strerror(errno));
    if (st == FERRY_OK && rename(tmp, index_path) != 0)
      st = ferry__fail(FERRY_EIO, "%s: cannot rename %s into place: %s", index_path, tmp, strerror(errno));
    if (st < 0) unlink(tmp);
  }
  if (st == FERRY_OK) st = sync_folder_of(index_path);
  ferry__free(tmp);
  return st;
}

static void source_from_stat(const struct stat *sb, ferry__index_source *out) {
  out->size = (uint64_t)sb->st_size;
  out->mtime_s = (int64_t)sb->st_mtim.tv_sec;
  out->mtime_ns = (int64_t)sb->st_mtim.tv_nsec;
}

/* 1 when json_path still has the size and time it had before it was read (json_len
 * bytes): the bytes parsed are the ones fingerprinted. */
static int json_unchanged(const char *json_path, const struct stat *before, size_t json_len) {
  struct stat now;
  return stat(json_path, &now) == 0 && now.st_size == before->st_size && now.st_mtim.tv_sec == before->st_mtim.tv_sec &&
         now.st_mtim.tv_nsec == before->st_mtim.tv_nsec && (uint64_t)json_len == (uint64_t)before->st_size;
}

/* Read and parse json_path; *coco on success. *json_failed = 1 when the failure is the
 * JSON's own (unreadable, or invalid and unchanged while read): parsing it again would
 * fail the same way. */
static ferry_status parse_for_index(const char *json_path, ferry__index_source *source, ferry_coco **coco,
                                    int *json_failed) {
  struct stat before;
  *json_failed = 1;
  if (stat(json_path, &before) != 0) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", json_path, strerror(errno));
  char *json = NULL;
  size_t json_len = 0;
  ferry_status st = ferry__coco_read_file(json_path, &json, &json_len);
  if (st < 0) return st;
  if (ferry__coco_index_sniff(json, json_len)) {
    ferry__free(json);
    return ferry__fail(FERRY_EINVAL, "%s: is already a binary index", json_path);
  }
  source_from_stat(&before, source);
  source->hash = ferry__hash64(json, json_len, 0);
  st = ferry_coco_open_buffer(json, json_len, json_path, NULL, coco);
  ferry__free(json);
  /* The fingerprint is the stat taken before reading; if the file changed by the time it
   * is parsed, the bytes indexed (or refused) may not be the ones fingerprinted. */
  if (!json_unchanged(json_path, &before, json_len)) {
    ferry_coco_close(*coco);
    *coco = NULL;
    *json_failed = 0;
    return ferry__fail(FERRY_EIO, "%s: changed while it was being indexed", json_path);
  }
  if (st == FERRY_OK) *json_failed = 0;
  return st;
}

ferry_status ferry__coco_index_build_file(const char *json_path, const char *index_path, int *json_failed) {
  int own = 0;
  ferry__index_source source = {0}; /* set when the parse succeeds; zeroed for the compiler */
  ferry_coco *coco = NULL;
  ferry_status st = parse_for_index(json_path, &source, &coco, &own);
  /* Out of memory is not the JSON's fault: the plain open may need less. */
  if (json_failed) *json_failed = own && st != FERRY_ENOMEM;
  char *index = NULL;
  size_t index_len = 0;
  if (st == FERRY_OK) st = index_serialize(coco, &source, &index, &index_len);
  ferry_coco_close(coco);
  if (st == FERRY_OK) st = write_atomically(index_path, index, index_len);
  ferry__free(index);
  return st;
}
