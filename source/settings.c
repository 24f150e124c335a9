/* source/settings.c - ferry_source_options and FERRY_REMOTE_* resolved into the
 * settings (source/settings.h), by one table: each field's option, variable,
 * default and range.
 *
 * Owns nothing: reads the options and the environment once per loader open.
 * Invariants: every resolved value is in its field's range, or FERRY__CACHE_DERIVED
 * for cache_bytes; an environment variable outside the range is ignored (as it always
 * was), an option outside it refused.
 */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>

#include "lib/status.h"
#include "source/settings.h"

typedef struct field {
  const char *name; /* the option's, and FERRY_REMOTE_ + its upper case */
  const char *env;
  size_t option, setting;
  int wide;              /* the option is an int64_t (else an int) */
  long fallback, lo, hi; /* the default (FERRY__CACHE_DERIVED: derived) and the range */
} field;

#define OPT(f) offsetof(ferry_source_options, f)
#define SET(f) offsetof(ferry__source_settings, f)
/* The defaults: remote.h's for the client, settings.h's for the blocks. */
static const field fields[] = {
    {"retries", "FERRY_REMOTE_RETRIES", OPT(retries), SET(retries), 0, FERRY__REMOTE_RETRIES, 0, 1000},
    {"backoff_ms", "FERRY_REMOTE_BACKOFF_MS", OPT(backoff_ms), SET(backoff_ms), 0, FERRY__REMOTE_BACKOFF_MS, 0, 60000},
    {"stall_s", "FERRY_REMOTE_STALL_S", OPT(stall_s), SET(stall_s), 0, FERRY__REMOTE_STALL_S, 1, 3600},
    {"connect_timeout_ms", "FERRY_REMOTE_CONNECT_TIMEOUT_MS", OPT(connect_timeout_ms), SET(connect_timeout_ms), 0,
     FERRY__REMOTE_CONNECT_TIMEOUT_MS, 1, 600000},
    {"block_bytes", "FERRY_REMOTE_BLOCK_BYTES", OPT(block_bytes), SET(block_bytes), 1, FERRY__BLOCK_BYTES_DEFAULT,
     64L << 10, 256L << 20},
    {"cache_bytes", "FERRY_REMOTE_CACHE_BYTES", OPT(cache_bytes), SET(cache_bytes), 1, FERRY__CACHE_DERIVED, 0,
     LONG_MAX},
    {"room_wait_ms", "FERRY_REMOTE_ROOM_WAIT_MS", OPT(room_wait_ms), SET(room_wait_ms), 0, FERRY__ROOM_WAIT_MS_DEFAULT,
     0, 3600000},
};

/* A FERRY_REMOTE_* variable as a number in [lo, hi], or `fallback` when it is unset or
 * not one (a typo in the environment keeps the option, as it always did). */
static long env_long(const char *name, long fallback, long lo, long hi) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end;
  long n = strtol(v, &end, 10);
  return *end || n < lo || n > hi ? fallback : n;
}

static int64_t option_of(const ferry_source_options *o, const field *f) {
  const char *at = (const char *)o + f->option;
  return f->wide ? *(const int64_t *)at : *(const int *)at;
}

/* The option's value (0: the default; -1: zero where zero is in the range). */
static ferry_status from_option(const ferry_source_options *o, const field *f, long *out) {
  int64_t v = o ? option_of(o, f) : 0;
  if (v == 0) *out = f->fallback;
  else if (v == -1 && f->lo == 0) *out = 0;
  else if (v >= f->lo && v <= f->hi) *out = (long)v;
  else
    return ferry__fail(FERRY_EINVAL,
                       "loader: config.source.%s is %lld: 0 (the default)%s, or %ld..%ld "
                       "(ferry/source.h)",
                       f->name, (long long)v, f->lo == 0 ? ", -1 (none)" : "", f->lo > 0 ? f->lo : 1, f->hi);
  return FERRY_OK;
}

ferry_status ferry__source_settings_resolve(const ferry_source_options *options, ferry__source_settings *out) {
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    long v = 0;
    ferry_status st = from_option(options, &fields[i], &v);
    if (st < 0) return st;
    *(long *)((char *)out + fields[i].setting) = env_long(fields[i].env, v, fields[i].lo, fields[i].hi);
  }
  return FERRY_OK;
}
