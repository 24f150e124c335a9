/* Accounting, asynchrony and ordering of the device backends. */
#include "../common/gate.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/canary.h"
#include "backends.h"
#include "lib/device_internal.h"

static ferry_memory_stats stats_of(ferry_device *d) {
  ferry_memory_stats s;
  ferry_memory_stats_init(&s);
  cr_assert_eq(ferry_device_memory_stats(d, &s), FERRY_OK);
  return s;
}

static void accounting_is_exact(ferry_device *d) {
  cr_assert_eq(stats_of(d).initializations, 0, "open must not initialise");
  void *a, *b, *c;
  cr_assert_eq(ferry_device_malloc(d, NULL, 1000, &a), FERRY_OK);
  cr_assert_eq(ferry_device_malloc(d, NULL, 24, &b), FERRY_OK);
  ferry_memory_stats s = stats_of(d);
  cr_assert_eq(s.live_bytes, 1024);
  cr_assert_eq(s.peak_bytes, 1024);
  cr_assert_eq(s.allocations, 2);
  cr_assert_eq(s.initializations, 1);
  cr_assert_eq(ferry_device_free(d, NULL, a), FERRY_OK);
  s = stats_of(d);
  cr_assert_eq(s.live_bytes, 24);
  cr_assert_eq(s.peak_bytes, 1024, "peak survives a free");
  cr_assert_eq(ferry_device_reset_peak(d), FERRY_OK);
  cr_assert_eq(stats_of(d).peak_bytes, 24);
  cr_assert_eq(ferry_device_malloc(d, NULL, 7, &c), FERRY_OK);
  cr_assert_eq(stats_of(d).peak_bytes, 31);
  cr_assert_eq(ferry_device_free(d, NULL, b), FERRY_OK);
  cr_assert_eq(ferry_device_free(d, NULL, c), FERRY_OK);
  s = stats_of(d);
  cr_assert_eq(s.live_bytes, 0);
  cr_assert_eq(s.live_allocations, 0);
  cr_assert_eq(s.allocations, 3);
  cr_assert_eq(ferry_device_free(d, NULL, a), FERRY_EINVAL, "double free is refused");
  void *zero = (void *)1;
  cr_assert_eq(ferry_device_malloc(d, NULL, 0, &zero), FERRY_OK);
  cr_assert_null(zero);
  cr_assert_eq(stats_of(d).allocations, 3, "size 0 counts nothing");
  ferry_device_close(d);
}
BACKEND_TESTS(device, accounting_is_exact, accounting_is_exact)

/* Device memory run out (the byte cap: ferry__device_cap_bytes): FERRY_ENOMEM, saying
 * "out of device memory", with nothing counted; what fits still allocates, and
 * lifting the cap lets the refused size through. Under CUDA the same cap holds the
 * pool to it, and a request past what the GPU has fails the same way (not verified
 * here: no GPU on the machine that wrote it). */
static void exhausted_memory_is_enomem(ferry_device *d) {
  void *a = NULL, *b = (void *)&b;
  ferry__device_cap_bytes(d, 1000);
  cr_assert_eq(ferry_device_malloc(d, NULL, 600, &a), FERRY_OK);
  cr_assert_eq(ferry_device_malloc(d, NULL, 401, &b), FERRY_ENOMEM);
  cr_expect_null(b);
  cr_expect(strstr(ferry_last_error(), "out of device memory") && strstr(ferry_last_error(), "401 bytes") &&
            strstr(ferry_last_error(), "600 of the 1000"), "%s", ferry_last_error());
  ferry_memory_stats s = stats_of(d);
  cr_expect_eq(s.live_bytes, 600);
  cr_expect_eq(s.live_allocations, 1);
  cr_expect_eq(s.allocations, 1, "a refused allocation is not counted");
  cr_assert_eq(ferry_device_malloc(d, NULL, (size_t)1 << 40, &b), FERRY_ENOMEM, "a size past the cap itself");
  cr_assert_eq(ferry_device_malloc(d, NULL, 400, &b), FERRY_OK, "exactly up to the cap");
  cr_assert_eq(ferry_device_free(d, NULL, b), FERRY_OK);
  ferry__device_cap_bytes(d, 0);
  cr_assert_eq(ferry_device_malloc(d, NULL, 401, &b), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_device_free(d, NULL, b), FERRY_OK);
  cr_assert_eq(ferry_device_free(d, NULL, a), FERRY_OK);
  if (ferry_device_get_kind(d) == FERRY_DEVICE_CUDA) {
    /* The pool itself exhausted: more than any GPU has. */
    cr_assert_eq(ferry_device_malloc(d, NULL, (size_t)1 << 50, &b), FERRY_ENOMEM, "%s", ferry_last_error());
  }
  cr_expect_eq(stats_of(d).live_bytes, 0);
  ferry_device_close(d);
}
BACKEND_TESTS(device, exhausted_memory_is_enomem, exhausted_memory_is_enomem)

static void pinned_memory_is_counted(ferry_device *d) {
  void *p;
  cr_assert_eq(ferry_device_host_alloc(d, 8192, &p), FERRY_OK);
  cr_assert_eq((uintptr_t)p % 4096, 0, "pinned memory is page aligned");
  memset(p, 0xab, 8192);
  ferry_memory_stats s = stats_of(d);
  cr_assert_eq(s.pinned_live_bytes, 8192);
  cr_assert_eq(s.live_bytes, 0, "pinned host bytes are not device bytes");
  ferry_device_host_free(d, p);
  cr_assert_eq(stats_of(d).pinned_live_bytes, 0);
  cr_assert_eq(stats_of(d).pinned_peak_bytes, 8192);
  ferry_device_close(d);
}
BACKEND_TESTS(device, pinned_memory_is_counted, pinned_memory_is_counted)

static void copies_complete_at_their_event(ferry_device *d) {
  ferry_stream *s;
  cr_assert_eq(ferry_stream_open(d, &s), FERRY_OK);
  enum { N = 1 << 16 };
  uint8_t *src, *back; /* pinned: asynchronous copies take nothing else */
  cr_assert_eq(ferry_device_host_alloc(d, N, (void **)&src), FERRY_OK);
  cr_assert_eq(ferry_device_host_alloc(d, N, (void **)&back), FERRY_OK);
  for (int i = 0; i < N; i++) src[i] = (uint8_t)(i * 7 + 3);
  memset(back, 0, N);
  gate g = GATE_CLOSED;
  void *dev;
  cr_assert_eq(ferry_device_malloc(d, s, N, &dev), FERRY_OK);
  cr_assert_eq(ferry_stream_call(s, wait_at_gate, &g), FERRY_OK);
  cr_assert_eq(ferry_memcpy_async(s, dev, src, N, FERRY_COPY_H2D), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_memcpy_async(s, back, dev, N, FERRY_COPY_D2H), FERRY_OK, "%s", ferry_last_error());
  ferry_event *e;
  cr_assert_eq(ferry_event_record(s, &e), FERRY_OK);
  usleep(20000);
  cr_assert_eq(ferry_event_query(e), 0, "the event cannot complete while the stream is held");
  cr_assert_eq(back[1], 0, "the copy ran before its turn");
  open_gate(&g);
  cr_assert_eq(ferry_event_synchronize(e), FERRY_OK);
  cr_assert_eq(ferry_event_query(e), 1);
  cr_assert_eq(memcmp(src, back, N), 0);
  ferry_event_destroy(e);
  cr_assert_eq(ferry_device_free(d, s, dev), FERRY_OK);
  ferry_stream_close(s);
  ferry_device_host_free(d, src);
  ferry_device_host_free(d, back);
  cr_assert_eq(stats_of(d).live_bytes, 0);
  ferry_device_close(d);
}
BACKEND_TESTS(device, copies_complete_at_their_event, copies_complete_at_their_event)

/* Refused with FERRY_EINVAL, and the message says the buffer must be pinned. */
static void expect_refused(ferry_stream *s, void *dst, const void *src, size_t n,
                           ferry_copy_kind kind, const char *what) {
  cr_assert_eq(ferry_memcpy_async(s, dst, src, n, kind), FERRY_EINVAL, "%s was accepted", what);
  cr_assert(strstr(ferry_last_error(), "not pinned memory"), "%s: %s", what, ferry_last_error());
  cr_assert(strstr(ferry_last_error(), "ferry_device_host_alloc"), "%s", ferry_last_error());
}

static void async_copies_need_pinned_memory(ferry_device *d) {
  enum { N = 8192 };
  static uint8_t pageable_static[N];
  ferry_device *other = NULL;
  ferry_stream *s;
  void *dev;
  uint8_t *pinned, *foreign, *pageable = malloc(N);
  cr_assert_eq(ferry_device_open(ferry_device_name(d), &other), FERRY_OK);
  cr_assert_eq(ferry_stream_open(d, &s), FERRY_OK);
  cr_assert_eq(ferry_device_malloc(d, s, N, &dev), FERRY_OK);
  cr_assert_eq(ferry_device_host_alloc(d, N, (void **)&pinned), FERRY_OK);
  cr_assert_eq(ferry_device_host_alloc(other, N, (void **)&foreign), FERRY_OK);
  gate g = GATE_CLOSED; /* refusals must come back at once, even behind a held stream */
  cr_assert_eq(ferry_stream_call(s, wait_at_gate, &g), FERRY_OK);
  expect_refused(s, dev, pageable, N, FERRY_COPY_H2D, "an H2D copy from malloc'd memory");
  expect_refused(s, pageable_static, dev, N, FERRY_COPY_D2H, "a D2H copy into a static array");
  expect_refused(s, dev, foreign, N, FERRY_COPY_H2D, "another device's pinned memory");
  expect_refused(s, dev, pinned + N - 100, 101, FERRY_COPY_H2D, "a slice running past the end");
  cr_assert(strstr(ferry_last_error(), "ferry_memcpy"), "the message names the way out");
  /* Interior slices of a pinned allocation, as the transfer stage copies arenas. */
  for (int i = 0; i < N; i++) pinned[i] = (uint8_t)(i * 13 + 1);
  cr_assert_eq(ferry_memcpy_async(s, dev, pinned + 100, 1000, FERRY_COPY_H2D), FERRY_OK, "%s",
               ferry_last_error());
  cr_assert_eq(ferry_memcpy_async(s, pinned + 5000, dev, 1000, FERRY_COPY_D2H), FERRY_OK, "%s",
               ferry_last_error());
  open_gate(&g);
  cr_assert_eq(ferry_stream_synchronize(s), FERRY_OK);
  cr_assert_eq(memcmp(pinned + 5000, pinned + 100, 1000), 0, "the slice made the round trip");
  /* ferry_memcpy takes pageable memory and has finished when it returns. */
  memset(pageable, 0, N);
  cr_assert_eq(ferry_memcpy(s, pageable, dev, 1000, FERRY_COPY_D2H), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(memcmp(pageable, pinned + 100, 1000), 0);
  ferry_device_host_free(d, pinned);
  ferry_device_host_free(other, foreign);
  cr_assert_eq(ferry_device_free(d, s, dev), FERRY_OK);
  ferry_stream_close(s);
  ferry_device_close(other);
  ferry_device_close(d);
  free(pageable);
}
BACKEND_TESTS(device, async_copies_need_pinned_memory, async_copies_need_pinned_memory)

static atomic_int order_cursor;
static int order_seen[64];
static void record_order(void *arg) {
  order_seen[atomic_fetch_add(&order_cursor, 1)] = (int)(intptr_t)arg;
}

static void host_functions_run_in_stream_order(ferry_device *d) {
  ferry_stream *s;
  cr_assert_eq(ferry_stream_open(d, &s), FERRY_OK);
  atomic_store(&order_cursor, 0);
  for (intptr_t i = 0; i < 64; i++) cr_assert_eq(ferry_stream_call(s, record_order, (void *)i), FERRY_OK);
  cr_assert_eq(ferry_stream_synchronize(s), FERRY_OK);
  cr_assert_eq(atomic_load(&order_cursor), 64);
  for (int i = 0; i < 64; i++) cr_assert_eq(order_seen[i], i);
  ferry_stream_close(s);
  ferry_device_close(d);
}
BACKEND_TESTS(device, host_functions_run_in_stream_order, host_functions_run_in_stream_order)

static void *race_init(void *arg) {
  ferry_device_init(arg);
  return NULL;
}

Test(device, lazy_initialisation_runs_once, .description = "8 threads racing on a fresh device") {
  ferry_device *d = open_device("host");
  pthread_t t[8];
  for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, race_init, d);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  cr_assert_eq(stats_of(d).initializations, 1);
  ferry_device_close(d);
}

Test(device, names) {
  ferry_device *d = open_device("host");
  cr_assert_str_eq(ferry_device_name(d), "host");
  cr_assert_eq(ferry_device_get_kind(d), FERRY_DEVICE_HOST);
  ferry_device_close(d);
  cr_assert_eq(ferry_device_open("host:1", &d), FERRY_EINVAL);
  cr_assert_eq(ferry_device_open("cuda:-1", &d), FERRY_EINVAL);
}

/* struct_size (device.h, above ferry_memory_stats). A program built against an older
 * header: its ferry_memory_stats lacked the last three counters. */
typedef struct memory_stats_older {
  size_t struct_size;
  uint64_t live_bytes, peak_bytes, allocations, live_allocations, pinned_live_bytes, pinned_peak_bytes;
} memory_stats_older;
_Static_assert(sizeof(memory_stats_older) == offsetof(ferry_memory_stats, pool_witness),
               "the older layout is a prefix of today's");

/* One built against a newer header, which appended counters this library lacks. */
typedef struct memory_stats_newer {
  ferry_memory_stats today;
  uint64_t counted_later[3];
} memory_stats_newer;

/* A device holding 1000 bytes, for the counters to have something to say. */
static ferry_device *device_holding_1000_bytes(void **p) {
  ferry_device *d = open_device("host");
  cr_assert_eq(ferry_device_malloc(d, NULL, 1000, p), FERRY_OK);
  return d;
}

static void close_holding(ferry_device *d, void *p) {
  cr_assert_eq(ferry_device_free(d, NULL, p), FERRY_OK);
  ferry_device_close(d);
}

Test(device, memory_stats_of_an_older_layout_are_written_no_further) {
  void *p;
  ferry_device *d = device_holding_1000_bytes(&p);
  union {
    memory_stats_older stats;
    unsigned char bytes[sizeof(ferry_memory_stats) + 32];
  } older;
  canary_struct(&older, sizeof older, sizeof older.stats);
  cr_assert_eq(ferry_device_memory_stats(d, (ferry_memory_stats *)&older), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(older.stats.struct_size, sizeof older.stats, "struct_size: the bytes written");
  cr_assert_eq(older.stats.live_bytes, 1000);
  cr_assert_eq(older.stats.live_allocations, 1);
  cr_assert_eq(older.stats.pinned_live_bytes, 0);
  expect_canary(&older, sizeof older.stats, sizeof older, "an older ferry_memory_stats");
  close_holding(d, p);
}

Test(device, memory_stats_of_a_newer_layout_get_their_unknown_counters_zeroed) {
  void *p;
  ferry_device *d = device_holding_1000_bytes(&p);
  union {
    memory_stats_newer stats;
    unsigned char bytes[sizeof(memory_stats_newer) + 32];
  } newer;
  canary_struct(&newer, sizeof newer, sizeof newer.stats);
  cr_assert_eq(ferry_device_memory_stats(d, &newer.stats.today), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(newer.stats.today.struct_size, sizeof(ferry_memory_stats), "struct_size: this library's size");
  cr_assert_eq(newer.stats.today.live_bytes, 1000);
  cr_assert_eq(newer.stats.today.initializations, 1);
  expect_zeros(&newer, sizeof(ferry_memory_stats), sizeof newer.stats, "a newer ferry_memory_stats");
  expect_canary(&newer, sizeof newer.stats, sizeof newer, "a newer ferry_memory_stats");
  /* What came back may be passed again as it is. */
  cr_assert_eq(ferry_device_memory_stats(d, &newer.stats.today), FERRY_OK);
  cr_assert_eq(newer.stats.today.struct_size, sizeof(ferry_memory_stats));
  close_holding(d, p);
}

Test(device, memory_stats_never_initialised_are_refused) {
  ferry_device *d = open_device("host");
  union {
    ferry_memory_stats stats;
    unsigned char bytes[sizeof(ferry_memory_stats)];
  } unset;
  canary_struct(&unset, sizeof unset, 0);
  cr_assert_eq(ferry_device_memory_stats(d, &unset.stats), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "ferry_device_memory_stats") && strstr(ferry_last_error(), "ferry_memory_stats_init"),
            "%s", ferry_last_error());
  cr_assert_eq(struct_size_in(&unset), 0);
  expect_canary(&unset, sizeof(size_t), sizeof unset, "a refused ferry_memory_stats");
  ferry_device_close(d);
}
