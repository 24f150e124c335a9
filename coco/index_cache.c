/* coco/index_cache.c - opening a path (ferry_coco_open): an index file as it is, a
 * JSON through its binary index when that is fresh, else the JSON itself (coco.c).
 *
 * The index of X.json lives beside it as X.json.ferryidx, or, when FERRY_COCO_INDEX_DIR
 * is set, in that folder as <basename>.<hash of the absolute path>.ferryidx. It is used
 * only when fresh: the JSON's size and modification time equal those recorded in the
 * index, and so does the hash of its bytes. FERRY_COCO_INDEX selects the policy:
 *   unset or "use"  a fresh index is used, otherwise the JSON is parsed;
 *   "auto"          a missing or stale index is built first (under an exclusive lock
 *                   on <index>.lock, so that 8 ranks starting together build it once,
 *                   and written to a temporary name then renamed into place);
 *   "off"           the JSON is always parsed.
 * A collecting open (options.on_problem) always parses the JSON: problems are what it
 * is for, and an index holds none.
 * Every failure to use or build an index falls back to parsing the JSON, except a
 * failure the JSON itself causes (a bad file fails as its parse would): the cache can
 * make an open faster, not change its result. Callers: users and loaders/ via
 * ferry_coco_open, on the opening thread; concurrency between processes is the lock's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coco/hash64.h"
#include "coco/index_internal.h"
#include "lib/alloc.h"
#include "lib/status.h"

#define HASH_CHUNK (1u << 20)

typedef enum cache_policy { CACHE_USE, CACHE_AUTO, CACHE_OFF } cache_policy;

static cache_policy policy_from_env(void) {
  const char *v = getenv("FERRY_COCO_INDEX");
  if (v && strcmp(v, "auto") == 0) return CACHE_AUTO;
  if (v && strcmp(v, "off") == 0) return CACHE_OFF;
  return CACHE_USE;
}

ferry_status ferry__index_source_of_file(const char *path, ferry__index_source *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  char *buf = ferry__malloc(HASH_CHUNK);
  ferry_status st = buf ? FERRY_OK : ferry__fail(FERRY_ENOMEM, "%s: out of memory", path);
  if (st == FERRY_OK && fstat(fd, &sb) != 0) st = ferry__fail(FERRY_EIO, "%s: cannot stat: %s", path, strerror(errno));
  ferry__hash64_state h;
  ferry__hash64_init(&h, 0);
  uint64_t total = 0;
  while (st == FERRY_OK) {
    ssize_t got = read(fd, buf, HASH_CHUNK);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) st = ferry__fail(FERRY_EIO, "%s: read error: %s", path, strerror(errno));
    if (got <= 0) break;
    ferry__hash64_update(&h, buf, (size_t)got);
    total += (uint64_t)got;
  }
  close(fd);
  ferry__free(buf);
  if (st < 0) return st;
  out->size = total;
  out->mtime_s = (int64_t)sb.st_mtim.tv_sec;
  out->mtime_ns = (int64_t)sb.st_mtim.tv_nsec;
  out->hash = ferry__hash64_final(&h);
  return FERRY_OK;
}

/* FERRY_OK when the index records the JSON as it is now; else EFORMAT saying why. */
static ferry_status check_fresh(const ferry_coco *index, const char *index_path, const char *json_path) {
  ferry__index_source was, now;
  ferry__coco_index_source_of(index, &was);
  struct stat sb;
  if (stat(json_path, &sb) != 0) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", json_path, strerror(errno));
  if ((uint64_t)sb.st_size != was.size || (int64_t)sb.st_mtim.tv_sec != was.mtime_s ||
      (int64_t)sb.st_mtim.tv_nsec != was.mtime_ns)
    return ferry__fail(FERRY_EFORMAT, "%s: stale: built from %llu bytes of %s modified at %lld.%09lld, which now has %llu bytes modified at %lld.%09lld",
                      index_path, (unsigned long long)was.size, json_path, (long long)was.mtime_s,
                      (long long)was.mtime_ns, (unsigned long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                      (long long)sb.st_mtim.tv_nsec);
  ferry_status st = ferry__index_source_of_file(json_path, &now);
  if (st < 0) return st;
  if (now.hash != was.hash || now.size != was.size)
    return ferry__fail(FERRY_EFORMAT, "%s: stale: %s has the recorded size and time but different bytes", index_path,
                      json_path);
  return FERRY_OK;
}

/* Where the cached index of json_path lives (ferry__malloc'd). */
static char *cache_path_of(const char *json_path) {
  const char *dir = getenv("FERRY_COCO_INDEX_DIR");
  if (!dir || !dir[0]) {
    size_t n = strlen(json_path) + sizeof ".ferryidx";
    char *p = ferry__malloc(n);
    if (p) snprintf(p, n, "%s.ferryidx", json_path);
    return p;
  }
  char *abs = realpath(json_path, NULL);
  const char *key = abs ? abs : json_path;
  const char *base = strrchr(json_path, '/');
  base = base ? base + 1 : json_path;
  size_t n = strlen(dir) + strlen(base) + 40;
  char *p = ferry__malloc(n);
  if (p) snprintf(p, n, "%s/%s.%016llx.ferryidx", dir, base, (unsigned long long)ferry__hash64(key, strlen(key), 0));
  free(abs);
  return p;
}

/* The fresh index at index_path, or FERRY_ENOTFOUND (missing) / an error (stale, damaged). */
static ferry_status open_fresh(const char *index_path, const char *json_path, const ferry_coco_options *opts,
                               ferry_coco **out) {
  if (access(index_path, F_OK) != 0) return ferry__fail(FERRY_ENOTFOUND, "%s: no index", index_path);
  ferry_coco *coco = NULL;
  ferry_status st = ferry__coco_index_open(index_path, opts, &coco);
  if (st == FERRY_OK) st = check_fresh(coco, index_path, json_path);
  if (st < 0) {
    ferry_coco_close(coco);
    return st;
  }
  *out = coco;
  return FERRY_OK;
}

/* Build the index unless another process did while this one waited for the lock. */
static ferry_status build_locked(const char *index_path, const char *json_path, const ferry_coco_options *opts,
                                 ferry_coco **out) {
  size_t n = strlen(index_path) + sizeof ".lock";
  char *lock_path = ferry__malloc(n);
  if (!lock_path) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", index_path);
  snprintf(lock_path, n, "%s.lock", index_path);
  int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ferry_status st = FERRY_OK;
  if (fd < 0) st = ferry__fail(FERRY_EIO, "%s: cannot create: %s", lock_path, strerror(errno));
  else if (flock(fd, LOCK_EX) != 0) st = ferry__fail(FERRY_EIO, "%s: cannot lock: %s", lock_path, strerror(errno));
  ferry__free(lock_path);
  if (st == FERRY_OK && open_fresh(index_path, json_path, opts, out) != FERRY_OK) {
    st = ferry__coco_index_build_file(json_path, index_path);
    if (st == FERRY_OK) st = open_fresh(index_path, json_path, opts, out);
  }
  if (fd >= 0) close(fd);  /* releases the lock */
  return st;
}

/* Open a JSON path through a fresh index when there is one (or, with
 * FERRY_COCO_INDEX=auto, after building it); else parse the JSON. */
static ferry_status open_cached(const char *json_path, const ferry_coco_options *opts, ferry_coco **out) {
  cache_policy policy = policy_from_env();
  if (policy == CACHE_OFF || (opts && opts->on_problem)) return ferry__coco_open_json(json_path, opts, out);
  char *index_path = cache_path_of(json_path);
  if (!index_path) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", json_path);
  ferry_status st = open_fresh(index_path, json_path, opts, out);
  if (st < 0 && policy == CACHE_AUTO) {
    st = build_locked(index_path, json_path, opts, out);
    /* The JSON decides: a bad file fails here as it would have parsed. An unwritable
     * cache folder only costs the speed-up. */
    if (st < 0 && st != FERRY_EIO && st != FERRY_ENOMEM) {
      ferry__free(index_path);
      return st;
    }
  }
  ferry__free(index_path);
  if (st == FERRY_OK) return FERRY_OK;
  return ferry__coco_open_json(json_path, opts, out);
}

ferry_status ferry_coco_open(const char *path, const ferry_coco_options *opts, ferry_coco **out) {
  if (!path || !out) return ferry__fail(FERRY_EINVAL, "ferry_coco_open: NULL argument");
  *out = NULL;
  int is_index = 0;
  ferry_status st = ferry__coco_index_file_sniff(path, &is_index);
  if (st < 0) return st;
  if (is_index) return ferry__coco_index_open(path, opts, out);
  return open_cached(path, opts, out);
}

ferry_status ferry_coco_index_build(const char *json_path, const char *index_path) {
  if (!json_path) return ferry__fail(FERRY_EINVAL, "ferry_coco_index_build: NULL argument");
  char *beside = index_path ? NULL : cache_path_of(json_path);
  if (!index_path && !beside) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", json_path);
  ferry_status st = ferry__coco_index_build_file(json_path, index_path ? index_path : beside);
  ferry__free(beside);
  return st;
}

ferry_status ferry_coco_index_check(const char *index_path, const char *json_path) {
  if (!index_path || !json_path) return ferry__fail(FERRY_EINVAL, "ferry_coco_index_check: NULL argument");
  ferry_coco *coco = NULL;
  ferry_status st = open_fresh(index_path, json_path, NULL, &coco);
  ferry_coco_close(coco);
  return st;
}
