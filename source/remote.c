/* source/remote.c - ranged GETs of http(s):// and s3:// objects through libcurl, retried
 * from the byte they stopped at (source/remote.h says what is retried and what is not).
 *
 * Owns the client: its settings (source/settings.h, resolved by the caller), credentials (copied from the environment at open,
 * wiped at close) and a stack of idle curl handles under one mutex, taken only to push
 * or pop a handle; a request runs on the caller's thread with a handle no other thread
 * holds. A stream is one thread's and owns its chunk.
 * Invariants: a read writes only [buf, buf + len); bytes are appended in order, each
 * retry asks for the first byte not yet received, so none is delivered twice or
 * skipped; no message is built from a request's headers, user name or password, only
 * from the URL as given (its user:password part cut), the range, the HTTP status and
 * curl's error string.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "lib/alloc.h"
#include "source/remote.h"
#include "source/settings.h"
#include "lib/status.h"

#define MAX_IDLE_HANDLES 64
#define MAX_BACKOFF_MS 5000

struct ferry__remote {
  pthread_mutex_t lock;
  CURL *idle[MAX_IDLE_HANDLES];
  size_t num_idle;
  long retries, backoff_ms, stall_s, connect_ms;
  char *access_key, *secret_key, *token, *endpoint;
  char sigv4[128];          /* "aws:amz:REGION:s3" */
  char region[64];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void init_curl(void) { curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT); }

int ferry__remote_is_url(const char *path) {
  return path && (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8) || !strncmp(path, "s3://", 5));
}

void ferry__remote_display(const char *url, char *out, size_t size) {
  const char *scheme_end = strstr(url, "://");
  const char *host = scheme_end ? scheme_end + 3 : url;
  const char *path = host + strcspn(host, "/?#");
  const char *at = memchr(host, '@', (size_t)(path - host));
  if (at) snprintf(out, size, "%.*s%s", (int)(host - url), url, at + 1);
  else snprintf(out, size, "%s", url);
}

/* ---- the client ------------------------------------------------------------------ */

static char *env_copy(const char *name, int *oom) {
  const char *v = getenv(name);
  if (!v || !*v) return NULL;
  char *s = ferry__strdup(v);
  if (!s) *oom = 1;
  return s;
}

static void wipe(char *s) {
  if (!s) return;
  volatile char *p = s;
  while (*p) *p++ = 0;
  ferry__free(s);
}

ferry_status ferry__remote_open(const ferry__source_settings *settings, ferry__remote **out) {
  *out = NULL;
  pthread_once(&curl_once, init_curl);
  if (curl_init_result != CURLE_OK)
    return ferry__fail(FERRY_EIO, "remote: libcurl did not initialise: %s", curl_easy_strerror(curl_init_result));
  ferry__remote *r = ferry__calloc(1, sizeof *r);
  if (!r) return ferry__fail(FERRY_ENOMEM, "remote: out of memory");
  pthread_mutex_init(&r->lock, NULL);
  r->retries = settings->retries;
  r->backoff_ms = settings->backoff_ms;
  r->stall_s = settings->stall_s;
  r->connect_ms = settings->connect_timeout_ms;
  int oom = 0;
  r->access_key = env_copy("AWS_ACCESS_KEY_ID", &oom);
  r->secret_key = env_copy("AWS_SECRET_ACCESS_KEY", &oom);
  r->token = env_copy("AWS_SESSION_TOKEN", &oom);
  r->endpoint = env_copy("AWS_ENDPOINT_URL", &oom);
  const char *region = getenv("AWS_REGION");
  if (!region || !*region) region = getenv("AWS_DEFAULT_REGION");
  snprintf(r->region, sizeof r->region, "%s", region && *region ? region : "us-east-1");
  snprintf(r->sigv4, sizeof r->sigv4, "aws:amz:%s:s3", r->region);
  if (oom) {
    ferry__remote_close(r);
    return ferry__fail(FERRY_ENOMEM, "remote: out of memory");
  }
  *out = r;
  return FERRY_OK;
}

void ferry__remote_close(ferry__remote *r) {
  if (!r) return;
  for (size_t i = 0; i < r->num_idle; i++) curl_easy_cleanup(r->idle[i]);
  wipe(r->access_key);
  wipe(r->secret_key);
  wipe(r->token);
  ferry__free(r->endpoint);
  pthread_mutex_destroy(&r->lock);
  ferry__free(r);
}

static CURL *take_handle(ferry__remote *r) {
  CURL *h = NULL;
  pthread_mutex_lock(&r->lock);
  if (r->num_idle) h = r->idle[--r->num_idle];
  pthread_mutex_unlock(&r->lock);
  return h ? h : curl_easy_init();
}

static void give_handle(ferry__remote *r, CURL *h) {
  pthread_mutex_lock(&r->lock);
  if (r->num_idle < MAX_IDLE_HANDLES) {
    r->idle[r->num_idle++] = h;
    h = NULL;
  }
  pthread_mutex_unlock(&r->lock);
  if (h) curl_easy_cleanup(h);
}

/* ---- one request ------------------------------------------------------------------- */

/* The URL a request goes to: an http(s) URL as it is; s3://BUCKET/KEY to the endpoint,
 * the key percent-encoded (SigV4 signs the encoded path). */
static char *request_url(const ferry__remote *r, const char *url) {
  if (strncmp(url, "s3://", 5) != 0) return ferry__strdup(url);
  const char *bucket = url + 5, *slash = strchr(bucket, '/');
  if (!slash || slash == bucket || !slash[1]) return NULL;
  size_t key_len = strlen(slash + 1);
  size_t cap = key_len * 3 + (size_t)(slash - bucket) + strlen(r->region) + (r->endpoint ? strlen(r->endpoint) : 0) + 64;
  char *out = ferry__malloc(cap);
  if (!out) return NULL;
  int n;
  if (r->endpoint) {
    size_t e = strlen(r->endpoint);
    while (e > 0 && r->endpoint[e - 1] == '/') e--;
    n = snprintf(out, cap, "%.*s/%.*s/", (int)e, r->endpoint, (int)(slash - bucket), bucket);
  } else {
    n = snprintf(out, cap, "https://%.*s.s3.%s.amazonaws.com/", (int)(slash - bucket), bucket, r->region);
  }
  char *p = out + n;
  for (const unsigned char *k = (const unsigned char *)slash + 1; *k; k++) {
    if ((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || strchr("-._~/", *k))
      *p++ = (char)*k;
    else
      p += sprintf(p, "%%%02X", *k);
  }
  *p = '\0';
  return out;
}

/* What one request received. */
typedef struct transfer {
  CURL *handle;
  ferry__remote_sink_fn sink;  /* takes the body's wanted bytes, in order */
  void *sink_ctx;
  size_t len, got;          /* wanted, and handed to the sink so far (over every attempt) */
  uint64_t from;            /* the attempt's first byte */
  uint64_t skip;            /* bytes to drop first: a 200 to a ranged request is the whole object */
  long status;              /* of the last attempt */
  int full;                 /* stopped on purpose: the server sent more than wanted, or the sink said so */
  char code[64];            /* an S3 error body's <Code>, if any */
  char body[512];
  size_t body_len;
  int has_range;            /* a Content-Range header came, starting at range_start */
  uint64_t range_start;
  int wrong_range;          /* a 206 for other bytes than asked: refused, never appended */
  long stall_s;             /* give up after this long without a byte */
  double last_byte;         /* when the last byte (or the attempt's start) was seen */
  int stalled;
} transfer;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* curl calls this often while bytes flow and about once a second when none do: a
 * transfer that has received nothing for stall_s is ended (and retried). */
static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
  transfer *t = user;
  if (now_s() - t->last_byte < (double)t->stall_s) return 0;
  t->stalled = 1;
  return 1;
}

/* Where a 206's bytes start (Content-Range: bytes A-B/T), so that bytes of another
 * range are never appended as if they were the ones asked for. */
static size_t on_header(char *line, size_t size, size_t count, void *user) {
  transfer *t = user;
  size_t n = size * count;
  char text[128];
  unsigned long long start;
  snprintf(text, sizeof text, "%.*s", (int)(n < sizeof text - 1 ? n : sizeof text - 1), line);
  if (!strncasecmp(text, "content-range:", 14) && sscanf(text + 14, " bytes %llu-", &start) == 1) {
    t->has_range = 1;
    t->range_start = start;
  }
  return n;
}

static size_t on_body(char *data, size_t size, size_t count, void *user) {
  transfer *t = user;
  size_t n = size * count, used = 0;
  if (!t->status) {
    curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &t->status);
    t->skip = t->status == 200 ? t->from : 0;
    t->wrong_range = t->status == 206 && !(t->has_range && t->range_start == t->from);
  }
  if (t->wrong_range) return 0;
  if (t->status < 200 || t->status > 299) {  /* an error's body: kept only to find its <Code> */
    size_t k = n < sizeof t->body - 1 - t->body_len ? n : sizeof t->body - 1 - t->body_len;
    memcpy(t->body + t->body_len, data, k);
    t->body_len += k;
    t->body[t->body_len] = '\0';
    t->last_byte = now_s();
    return n;
  }
  if (t->skip) {
    used = n < t->skip ? n : (size_t)t->skip;
    t->skip -= used;
  }
  size_t k = n - used < t->len - t->got ? n - used : t->len - t->got;
  int enough = k > 0 && t->sink(t->sink_ctx, t->got, (const uint8_t *)data + used, k);
  t->got += k;
  t->last_byte = now_s();  /* after the sink: one that waited for room was not a stall */
  if (enough || used + k < n) {
    t->full = 1;
    return 0;  /* everything wanted is here; ends the transfer with CURLE_WRITE_ERROR */
  }
  return n;
}

static void find_code(transfer *t) {
  const char *open = strstr(t->body, "<Code>"), *close = open ? strstr(open, "</Code>") : NULL;
  t->code[0] = '\0';
  if (close) snprintf(t->code, sizeof t->code, " (%.*s)", (int)(close - open - 6), open + 6);
}

static void set_options(const ferry__remote *r, transfer *t, const char *target, struct curl_slist *headers,
                        const char *range, int sign) {
  CURL *h = t->handle;
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, target);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, r->connect_ms);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, t);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (range) curl_easy_setopt(h, CURLOPT_RANGE, range);
  if (headers) curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  if (sign) {
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, r->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, r->access_key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, r->secret_key);
  }
}

/* What the last attempt's outcome means. */
enum outcome { DONE, RETRY, FAIL };

static enum outcome judge(CURLcode rc, transfer *t) {
  if (t->wrong_range) return FAIL;
  if (rc == CURLE_WRITE_ERROR && t->full) return DONE;
  if (rc == CURLE_OK && t->status == 416) return DONE;  /* the range starts at or past the end */
  if (rc == CURLE_OK && t->status >= 200 && t->status <= 299) return DONE;
  if (rc == CURLE_OK) return t->status >= 500 || t->status == 429 || t->status == 408 ? RETRY : FAIL;
  switch (rc) {
    case CURLE_COULDNT_CONNECT: case CURLE_OPERATION_TIMEDOUT: case CURLE_RECV_ERROR: case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: case CURLE_GOT_NOTHING: case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_ABORTED_BY_CALLBACK:
      return RETRY;
    default:
      return FAIL;
  }
}

static void backoff(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static ferry_status failure(const char *url, uint64_t from, uint64_t to, CURLcode rc, const transfer *t,
                            long retries) {
  char shown[2048], what[256], after[64] = "";
  ferry__remote_display(url, shown, sizeof shown);
  int http_error = t->status > 299 && (rc == CURLE_OK || rc == CURLE_WRITE_ERROR);
  if (t->wrong_range)
    snprintf(what, sizeof what, "HTTP 206 for other bytes (%s %llu) than asked for", t->has_range ? "from" : "no Content-Range,",
             (unsigned long long)t->range_start);
  else if (http_error) snprintf(what, sizeof what, "HTTP %ld%s", t->status, t->code);
  else if (t->stalled) snprintf(what, sizeof what, "stalled, no byte for %ld s (HTTP %ld)", t->stall_s, t->status);
  else if (t->status) snprintf(what, sizeof what, "%s (HTTP %ld)", curl_easy_strerror(rc), t->status);
  else snprintf(what, sizeof what, "%s", curl_easy_strerror(rc));
  if (retries > 0) snprintf(after, sizeof after, ", after %ld %s", retries, retries == 1 ? "retry" : "retries");
  return ferry__fail(t->status == 404 ? FERRY_ENOTFOUND : FERRY_EIO, "%s: bytes %llu-%llu: %s%s", shown,
                     (unsigned long long)from, (unsigned long long)to, what, after);
}

/* S3 wants the payload's SHA-256 in x-amz-content-sha256 (curl 7.88 does not add it but
 * signs it when given): a GET's payload is empty. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* A signed S3 request's headers: the payload hash and, with a session token, the token. */
static struct curl_slist *signed_headers(const ferry__remote *r) {
  struct curl_slist *list = curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
  if (!list || !r->token) return list;
  size_t n = strlen(r->token) + 32;
  char *line = ferry__malloc(n);
  struct curl_slist *more = NULL;
  if (line) {
    snprintf(line, n, "x-amz-security-token: %s", r->token);
    more = curl_slist_append(list, line);  /* copies the line */
    memset(line, 0, n);
    ferry__free(line);
  }
  if (!more) curl_slist_free_all(list);
  return more;
}

/* The request's fixed parts: its target and, for a signed S3 request, its headers. */
static ferry_status prepare(const ferry__remote *r, const char *url, char **target, struct curl_slist **headers,
                            int *sign) {
  char shown[2048];
  *headers = NULL;
  *sign = !strncmp(url, "s3://", 5) && r->access_key && r->secret_key;
  *target = request_url(r, url);
  ferry__remote_display(url, shown, sizeof shown);
  if (!*target)
    return strncmp(url, "s3://", 5) ? ferry__fail(FERRY_ENOMEM, "%s: out of memory", shown)
                                    : ferry__fail(FERRY_EINVAL, "%s: an S3 URL is s3://BUCKET/KEY", shown);
  if (*sign && !(*headers = signed_headers(r))) {
    ferry__free(*target);
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory", shown);
  }
  return FERRY_OK;
}

/* One GET of bytes [from, last], appended to what t holds. */
static CURLcode attempt_once(const ferry__remote *r, transfer *t, const char *target, struct curl_slist *headers,
                             int sign, uint64_t from, uint64_t last) {
  char range[64];
  snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)from, (unsigned long long)last);
  set_options(r, t, target, headers, range, sign);
  t->from = from;
  t->has_range = t->wrong_range = t->full = t->stalled = 0;
  t->range_start = 0;
  t->stall_s = r->stall_s;
  t->last_byte = now_s();
  t->status = 0;
  t->body_len = 0;
  t->body[0] = '\0';
  CURLcode rc = curl_easy_perform(t->handle);
  if (!t->status) curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &t->status);
  find_code(t);
  return rc;
}

/* ferry__remote_sink_fn of ferry__remote_read: the bytes at their place in the buffer. */
static int into_buffer(void *buf, size_t at, const uint8_t *bytes, size_t n) {
  memcpy((uint8_t *)buf + at, bytes, n);
  return 0;
}

ferry_status ferry__remote_read(ferry__remote *r, const char *url, uint64_t offset, void *buf, size_t len,
                                size_t *got) {
  return ferry__remote_read_into(r, url, offset, len, into_buffer, buf, got);
}

ferry_status ferry__remote_read_into(ferry__remote *r, const char *url, uint64_t offset, size_t len,
                                     ferry__remote_sink_fn sink, void *sink_ctx, size_t *got) {
  *got = 0;
  if (len == 0) return FERRY_OK;
  char *target;
  struct curl_slist *headers;
  int sign;
  ferry_status st = prepare(r, url, &target, &headers, &sign);
  if (st < 0) return st;
  transfer t = {.handle = take_handle(r), .sink = sink, .sink_ctx = sink_ctx, .len = len};
  if (!t.handle) st = ferry__fail(FERRY_ENOMEM, "remote: curl_easy_init failed");
  for (long attempt = 0; st == FERRY_OK; attempt++) {
    CURLcode rc = attempt_once(r, &t, target, headers, sign, offset + t.got, offset + len - 1);
    enum outcome o = judge(rc, &t);
    if (o == DONE) break;
    if (o == FAIL || attempt >= r->retries) {
      st = failure(url, offset + t.got, offset + len - 1, rc, &t, attempt);
      break;
    }
    long wait = r->backoff_ms << (attempt < 16 ? attempt : 16);
    backoff(wait < MAX_BACKOFF_MS ? wait : MAX_BACKOFF_MS);
  }
  if (t.handle) give_handle(r, t.handle);
  curl_slist_free_all(headers);
  ferry__free(target);
  *got = t.got;
  return st;
}

ferry_status ferry__remote_get(ferry__remote *r, const char *url, size_t max, char **data, size_t *len) {
  *data = NULL;
  *len = 0;
  char *buf = NULL;
  size_t size = 0;
  ferry_status st = FERRY_OK;
  for (;;) {
    size_t want = FERRY__REMOTE_CHUNK, got = 0;
    char *grown = ferry__realloc(buf, size + want + 1);
    if (!grown) {
      st = ferry__fail(FERRY_ENOMEM, "remote: out of memory");
      break;
    }
    buf = grown;
    if ((st = ferry__remote_read(r, url, size, buf + size, want, &got)) < 0) break;
    size += got;
    if (size > max) {
      char shown[2048];
      ferry__remote_display(url, shown, sizeof shown);
      st = ferry__fail(FERRY_ELIMIT, "%s: larger than %zu bytes", shown, max);
      break;
    }
    if (got < want) break;
  }
  if (st < 0) {
    ferry__free(buf);
    return st;
  }
  buf[size] = '\0';
  *data = buf;
  *len = size;
  return FERRY_OK;
}

/* ---- a forward stream --------------------------------------------------------------- */

struct ferry__remote_stream {
  ferry__remote *remote;
  char *url;
  uint8_t *chunk;           /* bytes [start, start + have) of the object */
  uint64_t start;
  size_t have;
  int ends;                 /* the object ends at start + have */
};

ferry_status ferry__remote_stream_open(ferry__remote *r, const char *url, ferry__remote_stream **out) {
  ferry__remote_stream *s = ferry__calloc(1, sizeof *s);
  if (s) s->url = ferry__strdup(url);
  if (s) s->chunk = ferry__malloc(FERRY__REMOTE_CHUNK);
  if (!s || !s->url || !s->chunk) {
    ferry__remote_stream_close(s);
    return ferry__fail(FERRY_ENOMEM, "remote: out of memory");
  }
  s->remote = r;
  *out = s;
  return FERRY_OK;
}

void ferry__remote_stream_close(ferry__remote_stream *s) {
  if (!s) return;
  ferry__free(s->url);
  ferry__free(s->chunk);
  ferry__free(s);
}

ferry_status ferry__remote_stream_read(void *stream, uint64_t offset, void *buf, size_t len, size_t *got) {
  ferry__remote_stream *s = stream;
  *got = 0;
  int inside = offset >= s->start && offset - s->start <= s->have;
  if (!inside || (offset - s->start + len > s->have && !s->ends)) {
    /* behind the chunk, or larger than one: a request of its own; else the next chunk */
    if (offset < s->start || len >= FERRY__REMOTE_CHUNK) return ferry__remote_read(s->remote, s->url, offset, buf, len, got);
    s->have = 0;
    s->ends = 0;
    s->start = offset;
    ferry_status st = ferry__remote_read(s->remote, s->url, offset, s->chunk, FERRY__REMOTE_CHUNK, &s->have);
    if (st < 0) {
      s->have = 0;
      return st;
    }
    s->ends = s->have < FERRY__REMOTE_CHUNK;
  }
  size_t at = (size_t)(offset - s->start), n = s->have - at < len ? s->have - at : len;
  memcpy(buf, s->chunk + at, n);
  *got = n;
  return FERRY_OK;
}
