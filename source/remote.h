/* source/remote.h - bytes of an object named by an http(s):// or s3:// URL, read with
 * ranged GETs through libcurl (internal; used by source/reader.c, the one door the
 * open-time walk and the workers read through, and source/shard_spec.c for an index
 * at a URL).
 *
 * A client (ferry__remote) holds its settings (retries, backoff, stall, connect
 * timeout: source/settings.h, from the loader's options and FERRY_REMOTE_*), the S3
 * credentials read once from the environment, and a pool of idle curl handles (each keeps its connections alive), so
 * that many threads read at once, each through its own handle. Knows nothing of tar or
 * COCO: an object is a byte range to read.
 *
 * s3://BUCKET/KEY is signed with SigV4 (CURLOPT_AWS_SIGV4) when AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY are set (AWS_SESSION_TOKEN goes in x-amz-security-token), for
 * AWS_REGION (else AWS_DEFAULT_REGION, else us-east-1), and sent to AWS_ENDPOINT_URL/
 * BUCKET/KEY (path style) when that is set, else to https://BUCKET.s3.REGION.amazonaws.com/KEY.
 *
 * Faults: a connection refused or reset, a connection not made within
 * connect_timeout_ms, no byte for stall_s seconds (a stall), a body cut short, or an
 * HTTP 5xx, 429 or 408 is retried after a backoff (backoff_ms, doubled each time, at
 * most 5 s) from the first byte not yet received (HTTP Range), at most `retries` times
 * per read; then the read
 * fails with FERRY_EIO naming the URL, the bytes and the last HTTP status or transport
 * error. Other 4xx fail at once (404: FERRY_ENOTFOUND), with S3's error code when the
 * body has one. Messages name the URL as given, less any user:password part;
 * credentials are never put in a message, and curl's verbose output is never enabled.
 */
#ifndef FERRY_SOURCE_REMOTE_H
#define FERRY_SOURCE_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/error.h"

typedef struct ferry__remote ferry__remote;


/* 1 when `path` is a URL this file reads: http://, https:// or s3://. */
int ferry__remote_is_url(const char *path);

typedef struct ferry__source_settings ferry__source_settings;
/* A client with `settings` (copied) and the environment's credentials as they are now. */
ferry_status ferry__remote_open(const ferry__source_settings *settings, ferry__remote **out);
void ferry__remote_close(ferry__remote *r);

/* Bytes [offset, offset + len) of `url` into buf; *got < len only where the object
 * ends. Thread-safe. */
ferry_status ferry__remote_read(ferry__remote *r, const char *url, uint64_t offset, void *buf, size_t len,
                                size_t *got);

/* Takes n bytes of the body that follow the `at` bytes handed before; returns 0 to go
 * on, nonzero to end the read after them. */
typedef int (*ferry__remote_sink_fn)(void *ctx, size_t at, const uint8_t *bytes, size_t n);
/* ferry__remote_read with the bytes handed to `sink` as they arrive, in order, each
 * once (a retry resumes after the last byte handed): FERRY_OK when all len bytes were
 * handed, the object ended first (*got < len) or the sink ended the read. */
ferry_status ferry__remote_read_into(ferry__remote *r, const char *url, uint64_t offset, size_t len,
                                     ferry__remote_sink_fn sink, void *sink_ctx, size_t *got);

/* The whole object, at most `max` bytes (more is FERRY_ELIMIT), NUL-terminated; free
 * *data with ferry__free. */
ferry_status ferry__remote_get(ferry__remote *r, const char *url, size_t max, char **data, size_t *len);

/* A forward reader of one object for one thread (a tar walk): it fetches ahead in
 * chunks of FERRY__REMOTE_CHUNK and keeps the last chunk fetched, so that a walk that
 * reads a header and then, a little behind it, the member it names costs one request
 * per chunk. A read behind the kept bytes is one request of its own. Memory: one
 * chunk, or the largest single read when that is larger. 8 MiB: over an object store
 * at 30-100 ms per request a 1 MiB chunk held a walk to 10-30 MB/s; 8 MiB is the size
 * object stores advise for ranged GETs, and an 8th of the requests. */
#define FERRY__REMOTE_CHUNK ((size_t)8 << 20)
typedef struct ferry__remote_stream ferry__remote_stream;
ferry_status ferry__remote_stream_open(ferry__remote *r, const char *url, ferry__remote_stream **out);
/* ferry__tar_read_fn's shape: `stream` is a ferry__remote_stream. */
ferry_status ferry__remote_stream_read(void *stream, uint64_t offset, void *buf, size_t len, size_t *got);
void ferry__remote_stream_close(ferry__remote_stream *s);

/* `url` as messages show it: without a user:password part. */
void ferry__remote_display(const char *url, char *out, size_t size);

#endif
