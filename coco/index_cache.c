/* coco/index_cache.c - opening a path (ferry_coco_open): an index file as it is, a
 * JSON through its binary index when that is fresh, else the JSON itself (coco.c).
 *
 * The index of X.json lives beside it as X.json.ferryidx, or, when FERRY_COCO_INDEX_DIR
 * is set, in that folder as <basename>.<hash of the absolute path>.ferryidx. It is used
 * only when fresh: the JSON's size and modification time equal those recorded in the
 * index, and so does the hash of its bytes; and only when owned by this user or root
 * and writable by no one else (the folder may be shared: anyone who can read the JSON
 * could plant a matching index). FERRY_COCO_INDEX selects the policy:
 *   unset, "" or "use"  a fresh index is used, otherwise the JSON is parsed;
 *   "auto"          a missing or stale index is built first (under an exclusive lock
 *                   on <index>.lock, so that 8 ranks starting together build it once,
 *                   waited for at most FERRY_COCO_INDEX_LOCK_WAIT seconds);
 *   "off"           the JSON is always parsed;
 *   anything else   FERRY_EINVAL.
 * A collecting open (options.on_problem) always parses the JSON: problems are what it
 * is for, and an index holds none.
 * Every failure to use or build an index falls back to parsing the JSON, except a
 * failure the JSON itself causes (a bad file fails as its parse would): the cache can
 * make an open faster, not change its result. A fallback the user did not expect (a
 * refused index, a lock held too long, an index-only limit) is said in one line on
 * stderr. Callers: users and loaders/ via ferry_coco_open, on the opening thread;
 * concurrency between processes is the lock's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coco/coco.h"
#include "coco/hash64.h"
#include "coco/index_format.h"
#include "coco/index_read.h"
#include "coco/index_write.h"
#include "lib/alloc.h"
#include "lib/status.h"

#define HASH_CHUNK (1u << 20)
/* Longer than building the index of train2017 (about 20 s) takes; past it, parsing the
 * JSON costs no more than waiting on. */
#define DEFAULT_LOCK_WAIT_S 120.0
#define MAX_LOCK_WAIT_S 86400

typedef enum cache_policy { CACHE_USE, CACHE_AUTO, CACHE_OFF } cache_policy;

/* FERRY_COCO_INDEX: unset, empty or "use", "auto", "off"; anything else is refused
 * rather than read as "use" (a typo must not silently change what a run does). */
static ferry_status policy_from_env(cache_policy *out) {
  const char *v = getenv("FERRY_COCO_INDEX");
  if (!v || !v[0] || strcmp(v, "use") == 0) *out = CACHE_USE;
  else if (strcmp(v, "auto") == 0) *out = CACHE_AUTO;
  else if (strcmp(v, "off") == 0) *out = CACHE_OFF;
  else return ferry__fail(FERRY_EINVAL, "FERRY_COCO_INDEX=%s: expected auto, use or off", v);
  return FERRY_OK;
}

/* FERRY_COCO_INDEX_LOCK_WAIT: the seconds an `auto` open waits for another process's
 * build lock before it parses the JSON itself. */
static ferry_status lock_wait_from_env(double *seconds) {
  const char *v = getenv("FERRY_COCO_INDEX_LOCK_WAIT");
  *seconds = DEFAULT_LOCK_WAIT_S;
  if (!v || !v[0]) return FERRY_OK;
  char *end = NULL;
  errno = 0;
  double s = strtod(v, &end);
  if (errno || end == v || *end || !(s >= 0 && s <= MAX_LOCK_WAIT_S))
    return ferry__fail(FERRY_EINVAL, "FERRY_COCO_INDEX_LOCK_WAIT=%s: expected seconds, 0 to %d", v, MAX_LOCK_WAIT_S);
  *seconds = s;
  return FERRY_OK;
}

/* A fallback is said on stderr: the open still succeeds, but the user asked for an
 * index and should learn why a run parses the JSON instead. */
static void say_fallback(const char *json_path, const char *why) {
  fprintf(stderr, "ferry: %s: parsing the JSON, not an index: %s\n", json_path, why);
}

/* The fingerprint of the file at path now (size, mtime, hash of its bytes). */
static ferry_status source_of_file(const char *path, ferry__index_source *out) {
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
  ferry__index_source was, now = {0}; /* now: set when source_of_file succeeds; zeroed for the compiler */
  ferry__coco_index_source_of(index, &was);
  struct stat sb;
  if (stat(json_path, &sb) != 0) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", json_path, strerror(errno));
  if ((uint64_t)sb.st_size != was.size || (int64_t)sb.st_mtim.tv_sec != was.mtime_s ||
      (int64_t)sb.st_mtim.tv_nsec != was.mtime_ns)
    return ferry__fail(FERRY_EFORMAT, "%s: stale: built from %llu bytes of %s modified at %lld.%09lld, which now has %llu bytes modified at %lld.%09lld",
                      index_path, (unsigned long long)was.size, json_path, (long long)was.mtime_s,
                      (long long)was.mtime_ns, (unsigned long long)sb.st_size, (long long)sb.st_mtim.tv_sec,
                      (long long)sb.st_mtim.tv_nsec);
  ferry_status st = source_of_file(json_path, &now);
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

/* The fresh index at index_path, or FERRY_ENOTFOUND (missing) / an error (stale,
 * damaged: FERRY_EFORMAT; refused or unreadable: FERRY_EIO). */
static ferry_status open_fresh(const char *index_path, unsigned flags, const char *json_path,
                               const ferry_coco_options *opts, ferry_coco **out) {
  if (access(index_path, F_OK) != 0) return ferry__fail(FERRY_ENOTFOUND, "%s: no index", index_path);
  ferry_coco *coco = NULL;
  ferry_status st = ferry__coco_index_open(index_path, flags, opts, &coco);
  if (st == FERRY_OK) st = check_fresh(coco, index_path, json_path);
  if (st < 0) {
    ferry_coco_close(coco);
    return st;
  }
  *out = coco;
  return FERRY_OK;
}

static double seconds_since(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* An exclusive flock on fd within wait_s seconds, else FERRY_EAGAIN: anyone who can
 * read the lock file can hold it, so no wait may be unbounded. Polled, backing off
 * from 1 ms to 100 ms. */
static ferry_status lock_within(int fd, const char *lock_path, double wait_s) {
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long pause_ns = 1000000;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return FERRY_OK;
    if (errno != EWOULDBLOCK && errno != EINTR)
      return ferry__fail(FERRY_EIO, "%s: cannot lock: %s", lock_path, strerror(errno));
    if (seconds_since(&start) >= wait_s)
      return ferry__fail(FERRY_EAGAIN, "%s: still locked by another process after %.3g s (FERRY_COCO_INDEX_LOCK_WAIT)",
                        lock_path, wait_s);
    struct timespec pause = {0, pause_ns};
    nanosleep(&pause, NULL);
    if (pause_ns < 100000000) pause_ns *= 2;
  }
}

/* Build the index unless another process did while this one waited for the lock.
 * *json_failed as ferry__coco_index_build_file's. */
static ferry_status build_locked(const char *index_path, const char *json_path, const ferry_coco_options *opts,
                                 double wait_s, ferry_coco **out, int *json_failed) {
  size_t n = strlen(index_path) + sizeof ".lock";
  char *lock_path = ferry__malloc(n);
  if (!lock_path) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", index_path);
  snprintf(lock_path, n, "%s.lock", index_path);
  /* Read-only suffices for flock, so users sharing the folder can all open it;
   * O_NOFOLLOW: a planted symlink is refused, not followed. */
  int fd = open(lock_path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  ferry_status st = FERRY_OK;
  if (fd < 0) st = ferry__fail(FERRY_EIO, "%s: cannot create: %s", lock_path, strerror(errno));
  else st = lock_within(fd, lock_path, wait_s);
  ferry__free(lock_path);
  if (st == FERRY_OK && open_fresh(index_path, FERRY__INDEX_CACHED, json_path, opts, out) != FERRY_OK) {
    st = ferry__coco_index_build_file(json_path, index_path, json_failed);
    if (st == FERRY_OK) st = open_fresh(index_path, FERRY__INDEX_CACHED, json_path, opts, out);
  }
  if (fd >= 0) close(fd);  /* releases the lock */
  return st;
}

/* Open a JSON path through a fresh index when there is one (or, with
 * FERRY_COCO_INDEX=auto, after building it); else parse the JSON. */
static ferry_status open_cached(const char *json_path, const ferry_coco_options *opts, ferry_coco **out) {
  cache_policy policy = CACHE_USE;
  double wait_s = 0;
  ferry_status st = policy_from_env(&policy);
  if (st == FERRY_OK && policy == CACHE_AUTO) st = lock_wait_from_env(&wait_s);
  if (st < 0) return st;
  if (policy == CACHE_OFF || (opts && opts->on_problem)) return ferry__coco_open_json(json_path, opts, out);
  char *index_path = cache_path_of(json_path);
  if (!index_path) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", json_path);
  st = open_fresh(index_path, FERRY__INDEX_CACHED, json_path, opts, out);
  /* Missing or stale is the cache's normal state; anything else (refused, unreadable)
   * the user should hear of. `auto` builds a new index over it and says only if that fails. */
  if (st < 0 && policy == CACHE_USE && st != FERRY_ENOTFOUND && st != FERRY_EFORMAT)
    say_fallback(json_path, ferry_last_error());
  if (st < 0 && policy == CACHE_AUTO) {
    int json_failed = 0;
    st = build_locked(index_path, json_path, opts, wait_s, out, &json_failed);
    /* The JSON decides: a bad file fails here as it would have parsed. Anything else
     * (a lock held too long, an index-only limit, a JSON changed while indexed, an
     * unwritable folder) only costs the speed-up. */
    if (st < 0 && json_failed) {
      ferry__free(index_path);
      return st;
    }
    if (st < 0) say_fallback(json_path, ferry_last_error());
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
  if (is_index) return ferry__coco_index_open(path, 0, opts, out);
  return open_cached(path, opts, out);
}

ferry_status ferry_coco_index_build(const char *json_path, const char *index_path) {
  if (!json_path) return ferry__fail(FERRY_EINVAL, "ferry_coco_index_build: NULL argument");
  char *beside = index_path ? NULL : cache_path_of(json_path);
  if (!index_path && !beside) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", json_path);
  ferry_status st = ferry__coco_index_build_file(json_path, index_path ? index_path : beside, NULL);
  ferry__free(beside);
  return st;
}

ferry_status ferry_coco_index_check(const char *index_path, const char *json_path) {
  if (!index_path || !json_path) return ferry__fail(FERRY_EINVAL, "ferry_coco_index_check: NULL argument");
  ferry_coco *coco = NULL;
  ferry_status st = open_fresh(index_path, 0, json_path, NULL, &coco);
  ferry_coco_close(coco);
  return st;
}
