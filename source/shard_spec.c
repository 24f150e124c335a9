/* source/shard_spec.c - what a shard spec names (source/shards.h): a brace pattern, one
 * ".tar" or RF-DETR's index JSON expanded to shard paths (or URLs, with their client),
 * the index's fields, and the source descriptor the loader resolves once.
 *
 * Owns the set it returns until the caller takes it (paths, client) and the index's
 * parsed document. Runs on the opening thread.
 * Invariants: a returned set has at most FERRY__SHARD_MAX_SHARDS paths and no samples;
 * every path of an index is inside the index's folder (tar.h's name rule); a URL spec
 * has a client and no query, fragment or user:password, so that the shard URLs made
 * from it are what messages show.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/alloc.h"
#include "lib/status.h"
#include "source/reader.h"
#include "source/remote.h"
#include "source/shards.h"
#include "source/tar.h"

static ferry_status add_path(ferry__shard_set *set, char *path) {
  if (!path) return ferry__fail(FERRY_ENOMEM, "shards: out of memory");
  if (set->num_shards >= FERRY__SHARD_MAX_SHARDS) {
    ferry__free(path);
    return ferry__fail(FERRY_ELIMIT, "shards: more than %d shards", FERRY__SHARD_MAX_SHARDS);
  }
  char **grown = ferry__realloc(set->paths, (set->num_shards + 1) * sizeof *grown);
  if (!grown) {
    ferry__free(path);
    return ferry__fail(FERRY_ENOMEM, "shards: out of memory");
  }
  set->paths = grown;
  set->paths[set->num_shards++] = path;
  return FERRY_OK;
}

char *ferry__shard_format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n >= 0 ? ferry__malloc((size_t)n + 1) : NULL;
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* Decimal digits of [s, end) into *v; 0 when not all digits or too long. */
static int parse_digits(const char *s, const char *end, uint64_t *v) {
  if (s == end || end - s > 18) return 0;
  for (*v = 0; s < end; s++) {
    if (*s < '0' || *s > '9') return 0;
    *v = *v * 10 + (uint64_t)(*s - '0');
  }
  return 1;
}

/* PREFIX{A..B}SUFFIX: one brace group of decimal numbers, zero-padded to the wider of
 * A and B when either starts with a 0 (as WebDataset's braceexpand writes them). */
static ferry_status expand_pattern(const char *spec, ferry__shard_set *set) {
  const char *open = strchr(spec, '{'), *close = open ? strchr(open, '}') : NULL;
  const char *dots = open ? strstr(open, "..") : NULL;
  uint64_t a, b;
  if (!close || !dots || dots > close || !parse_digits(open + 1, dots, &a) || !parse_digits(dots + 2, close, &b) ||
      strchr(close, '{') || b < a)
    return ferry__fail(FERRY_EINVAL, "%s: a shard pattern is PREFIX{A..B}SUFFIX with decimal A <= B, once", spec);
  if (b - a >= FERRY__SHARD_MAX_SHARDS)
    return ferry__fail(FERRY_ELIMIT, "%s: %llu shards, more than %d", spec, (unsigned long long)(b - a + 1),
                       FERRY__SHARD_MAX_SHARDS);
  int padded = open[1] == '0' || dots[2] == '0';
  int width = padded ? (int)((dots - open - 1) > (close - dots - 2) ? dots - open - 1 : close - dots - 2) : 0;
  for (uint64_t i = a; i <= b; i++) {
    ferry_status st = add_path(
        set, ferry__shard_format("%.*s%0*llu%s", (int)(open - spec), spec, width, (unsigned long long)i, close + 1));
    if (st < 0) return st;
  }
  return FERRY_OK;
}

static const json_t *index_array(const char *spec, const json_t *doc, const char *key, int required, ferry_status *st) {
  const json_t *v = json_object_get(doc, key);
  if (!v && !required) return NULL;
  if (!json_is_array(v)) *st = ferry__fail(FERRY_EFORMAT, "%s: \"%s\": expected an array", spec, key);
  return v;
}

/* A local index's whole text, NUL-terminated, through the reader every shard is read
 * with. */
static ferry_status read_local(const char *spec, char **text, size_t *len) {
  ferry__reader *r = NULL;
  ferry_status st = ferry__reader_open(NULL, spec, FERRY__READER_RANGED, &r);
  if (st < 0) return st;
  uint64_t size = ferry__reader_size(r);
  if (size >= SIZE_MAX || !(*text = ferry__malloc((size_t)size + 1)))
    st = ferry__fail(FERRY_ENOMEM, "%s: out of memory reading the file", spec);
  if (st == FERRY_OK) st = ferry__reader_read(r, 0, *text, (size_t)size, len);
  if (st == FERRY_OK) (*text)[*len] = '\0';
  ferry__reader_close(r);
  return st;
}

/* The index's document: jansson's through ferry's allocator (coco/ installs it), a
 * failed allocation told from a syntax error by jansson's error code. */
static ferry_status load_index(const char *spec, const ferry__shard_set *set, json_t **doc) {
  char *text = NULL;
  size_t len = 0;
  ferry_status st = set->remote ? ferry__remote_get(set->remote, spec, FERRY__SHARD_MAX_SIDECAR, &text, &len)
                                : read_local(spec, &text, &len);
  if (st < 0) {
    ferry__free(text);
    return st;
  }
  json_error_t err;
  *doc = json_loadb(text, len, 0, &err);
  ferry__free(text);
  if (!*doc && json_error_code(&err) == json_error_out_of_memory)
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory parsing the JSON", spec);
  if (!*doc)
    return ferry__fail(FERRY_EFORMAT, "%s: line %d, column %d: invalid JSON: %s", spec, err.line, err.column, err.text);
  return FERRY_OK;
}

/* version, category_ids and num_samples, checked. */
static ferry_status index_scalars(const char *spec, ferry__shard_index *ix) {
  const json_t *version = json_object_get(ix->doc, "version"), *policy = json_object_get(ix->doc, "category_ids");
  const json_t *num = json_object_get(ix->doc, "num_samples");
  if (!json_is_integer(version) || json_integer_value(version) != 1)
    return ferry__fail(FERRY_EFORMAT, "%s: \"version\": expected 1 (RF-DETR's shard index version 1)", spec);
  if (policy && !(json_is_string(policy) &&
                  (!strcmp(json_string_value(policy), "remap") || !strcmp(json_string_value(policy), "raw"))))
    return ferry__fail(FERRY_EFORMAT, "%s: \"category_ids\": expected \"remap\" or \"raw\"", spec);
  if (!json_is_integer(num) || json_integer_value(num) < 0)
    return ferry__fail(FERRY_EFORMAT, "%s: \"num_samples\": expected a count", spec);
  ix->raw = policy && !strcmp(json_string_value(policy), "raw");
  ix->num_samples = json_integer_value(num);
  return FERRY_OK;
}

/* The index's fields (RF-DETR's ShardIndex.to_json) and its shard paths, each relative
 * to the index's folder and refused if it would leave it. */
static ferry_status read_index(const char *spec, ferry__shard_index *ix, ferry__shard_set *set) {
  ferry_status st = load_index(spec, set, &ix->doc);
  if (st == FERRY_OK) st = index_scalars(spec, ix);
  if (st < 0) return st;
  const json_t *shards = index_array(spec, ix->doc, "shards", 1, &st);
  if (st == FERRY_OK) ix->categories = index_array(spec, ix->doc, "categories", 0, &st);
  if (st == FERRY_OK) ix->annotated = index_array(spec, ix->doc, "annotated_category_ids", 0, &st);
  if (st == FERRY_OK) ix->per_shard = index_array(spec, ix->doc, "samples_per_shard", 0, &st);
  if (st < 0) return st;
  if (ix->per_shard && json_array_size(ix->per_shard) == 0) ix->per_shard = NULL; /* an older index */
  if (ix->per_shard && json_array_size(ix->per_shard) != json_array_size(shards))
    return ferry__fail(FERRY_EFORMAT, "%s: \"samples_per_shard\" has %zu counts for %zu shards", spec,
                       json_array_size(ix->per_shard), json_array_size(shards));
  const char *slash = strrchr(spec, '/');
  int dir_len = slash ? (int)(slash - spec) : 1;
  const char *dir = slash ? spec : ".";
  for (size_t i = 0; st == FERRY_OK && i < json_array_size(shards); i++) {
    const json_t *name = json_array_get(shards, i);
    const char *why = json_is_string(name) ? ferry__tar_name_refused(json_string_value(name)) : "not a string";
    if (why)
      return ferry__fail(FERRY_EFORMAT, "%s: shards[%zu]: %s (a shard must be inside the index's folder)", spec, i,
                         why);
    st = add_path(set, ferry__shard_format("%.*s/%s", dir_len, dir, json_string_value(name)));
  }
  return st;
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && !strcmp(s + n - k, tail);
}

static int is_pattern(const char *path) {
  const char *open = strchr(path, '{');
  return open && strstr(open, "..") && strchr(open, '}');
}

/* A local file whose JSON object starts with the key "version" or "shards". */
static int is_index(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char head[64] = {0};
  size_t n = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  head[n] = '\0';
  const char *p = head;
  while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
  if (*p++ != '{') return 0;
  while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
  return !strncmp(p, "\"version\"", 9) || !strncmp(p, "\"shards\"", 8);
}

ferry_status ferry__source_resolve(const char *annotations, const ferry_source_options *options,
                                   ferry__source_desc *out) {
  *out = (ferry__source_desc){.kind = FERRY__SOURCE_JSON, .annotations = annotations};
  if (!annotations) {
  } else if (ferry__remote_is_url(annotations)) {
    out->kind = FERRY__SOURCE_SHARDS_URL; /* ferry reads only shards from a URL */
  } else if (is_pattern(annotations) || ends_with(annotations, ".tar") || is_index(annotations)) {
    out->kind = FERRY__SOURCE_SHARDS_LOCAL;
  }
  return ferry__source_settings_resolve(options, &out->settings);
}

void ferry__shard_set_free(ferry__shard_set *set) {
  if (!set) return;
  for (size_t i = 0; i < set->num_shards; i++) ferry__free(set->paths[i]);
  ferry__remote_close(set->remote);
  for (size_t i = 0; i < set->num_samples; i++) {
    ferry__free(set->samples[i].member);
    ferry__free(set->samples[i].problem);
  }
  ferry__free(set->paths);
  ferry__free(set->samples);
  ferry__free(set);
}

void ferry__shard_index_free(ferry__shard_index *index) {
  json_decref(index->doc);
  *index = (ferry__shard_index){0};
}

/* A URL's client. A query string (a presigned URL) would not survive the shard names
 * being made from the index's URL, and a user:password would be in every message that
 * names a shard: both are refused. */
static ferry_status open_remote(const char *spec, const ferry__source_settings *settings, ferry__shard_set *set) {
  char shown[2048];
  ferry__remote_display(spec, shown, sizeof shown);
  if (strpbrk(spec, "?#"))
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: a shard URL with a query or fragment is not supported", shown);
  if (strcmp(shown, spec) != 0) /* shard URLs appear in messages: they must hold no password */
    return ferry__fail(FERRY_EUNSUPPORTED, "%s: a user name or password in a shard URL is not supported", shown);
  return ferry__remote_open(settings, &set->remote);
}

ferry_status ferry__shard_spec_open(const char *spec, const ferry__source_settings *settings, ferry__shard_set **out,
                                    ferry__shard_index *ix) {
  *out = NULL;
  *ix = (ferry__shard_index){0};
  ferry__shard_set *set = ferry__calloc(1, sizeof *set);
  ferry_status st = set ? FERRY_OK : ferry__fail(FERRY_ENOMEM, "%s: out of memory", spec);
  if (st == FERRY_OK && ferry__remote_is_url(spec)) st = open_remote(spec, settings, set);
  if (st == FERRY_OK && is_pattern(spec)) st = expand_pattern(spec, set);
  else if (st == FERRY_OK && ends_with(spec, ".tar")) st = add_path(set, ferry__strdup(spec));
  else if (st == FERRY_OK) st = read_index(spec, ix, set);
  if (st < 0) {
    ferry__shard_set_free(set);
    ferry__shard_index_free(ix);
    return st;
  }
  *out = set;
  return FERRY_OK;
}
