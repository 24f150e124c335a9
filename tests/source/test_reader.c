/* tests/source/test_reader.c - the ranged reader (source/reader.c) over a local file:
 * ranged reads at any offset, a short read where the file ends, a read past its end,
 * its size, the tar walk's callback shape, a path that is not a regular file refused
 * naming it, a missing one FERRY_ENOTFOUND, and a URL without a client refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "source/reader.h"

#define FILE_BYTES 10000

static char path[64];

static uint8_t byte_at(size_t i) { return (uint8_t)(i * 13 + 5); }

static void make_file(void) {
  snprintf(path, sizeof path, "/tmp/ferry-reader-XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  uint8_t buf[FILE_BYTES];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = byte_at(i);
  cr_assert_eq(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
  close(fd);
}

static void remove_file(void) { unlink(path); }

TestSuite(reader, .init = make_file, .fini = remove_file);

Test(reader, ranged_reads_and_a_short_read_at_the_end) {
  ferry__reader *r = NULL;
  cr_assert_eq(ferry__reader_open(NULL, path, FERRY__READER_RANGED, &r), FERRY_OK, "%s", ferry_last_error());
  cr_expect_eq(ferry__reader_size(r), FILE_BYTES);
  cr_expect_str_eq(ferry__reader_name(r), path);
  uint8_t buf[512];
  size_t got = 0;
  const uint64_t offsets[] = {4096, 0, 777, FILE_BYTES - 512}; /* not in order: a ranged reader seeks */
  for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
    cr_assert_eq(ferry__reader_read(r, offsets[k], buf, sizeof buf, &got), FERRY_OK);
    cr_assert_eq(got, sizeof buf);
    for (size_t i = 0; i < got; i++)
      cr_assert_eq(buf[i], byte_at(offsets[k] + i), "byte %zu at %llu", i, (unsigned long long)offsets[k]);
  }
  cr_assert_eq(ferry__reader_read(r, FILE_BYTES - 100, buf, sizeof buf, &got), FERRY_OK);
  cr_expect_eq(got, 100, "a read across the end stops at it");
  cr_expect_eq(buf[99], byte_at(FILE_BYTES - 1));
  cr_assert_eq(ferry__reader_read_at(r, FILE_BYTES + 5, buf, sizeof buf, &got), FERRY_OK);
  cr_expect_eq(got, 0, "a read past the end reads nothing");
  uint8_t one;
  cr_expect_eq(ferry__reader_read_into(r, 0, 1, NULL, &one, &got), FERRY_EUNSUPPORTED, "a local file has no blocks");
  ferry__reader_close(r);
}

Test(reader, stream_mode_reads_a_local_file_alike) {
  ferry__reader *r = NULL;
  cr_assert_eq(ferry__reader_open(NULL, path, FERRY__READER_STREAM, &r), FERRY_OK, "%s", ferry_last_error());
  uint8_t buf[64];
  size_t got = 0;
  cr_assert_eq(ferry__reader_read(r, 9000, buf, sizeof buf, &got), FERRY_OK);
  cr_expect_eq(got, sizeof buf);
  cr_expect_eq(buf[0], byte_at(9000));
  ferry__reader_close(r);
}

Test(reader, a_folder_is_refused_naming_it) {
  ferry__reader *r = (ferry__reader *)1;
  cr_expect_eq(ferry__reader_open(NULL, "/tmp", FERRY__READER_RANGED, &r), FERRY_EIO);
  cr_expect_null(r);
  cr_expect(strstr(ferry_last_error(), "/tmp: not a regular file") != NULL, "%s", ferry_last_error());
}

Test(reader, a_missing_file_is_not_found) {
  ferry__reader *r = NULL;
  cr_expect_eq(ferry__reader_open(NULL, "/tmp/ferry-no-such-file.tar", FERRY__READER_RANGED, &r), FERRY_ENOTFOUND);
  cr_expect(strstr(ferry_last_error(), "/tmp/ferry-no-such-file.tar: cannot open") != NULL, "%s", ferry_last_error());
}

Test(reader, a_url_needs_a_client) {
  ferry__reader *r = NULL;
  cr_expect_eq(ferry__reader_open(NULL, "http://127.0.0.1:9/x.tar", FERRY__READER_RANGED, &r), FERRY_EINVAL);
  cr_expect(strstr(ferry_last_error(), "http://127.0.0.1:9/x.tar") != NULL, "%s", ferry_last_error());
}
