/* tests/coco/test_index_run.c - an index file changed under a running loader (issue 25):
 * `cp other.ferryidx X.ferryidx` (the inode a run reads truncated and rewritten) and a
 * cut to 0 bytes while workers fill batches from it change no batch: every epoch equals
 * the one a loader over the JSON gives. The one coco test that links the whole library
 * (a loader is what reads an index for hours). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ferry/coco.h"
#include "tests/loaders/loader_fixture.h"

#define EPOCHS 3
#define MAXB 64

static char scratch[256];

static void make_scratch(void) {
  snprintf(scratch, sizeof scratch, "/tmp/ferry-index-run-XXXXXX");
  cr_assert_not_null(mkdtemp(scratch));
}

static void drop_scratch(void) {
  char path[512];
  const char *names[] = {"run.ferryidx", "other.json", "other.ferryidx"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", scratch, names[i]);
    unlink(path);
  }
  rmdir(scratch);
}

TestSuite(index_run, .init = make_scratch, .fini = drop_scratch);

/* Digests of EPOCHS epochs; `between` runs after the first batch of each epoch. */
static void run_epochs(ferry_loader *l, uint64_t out[EPOCHS][MAXB], size_t counts[EPOCHS],
                       void (*between)(int epoch)) {
  for (int e = 0; e < EPOCHS; e++) {
    ferry_batch *b;
    cr_assert_eq(ferry_loader_next(l, &b), FERRY_OK, "%s", ferry_last_error());
    out[e][0] = batch_digest(b);
    ferry_batch_release(b);
    if (between) between(e);
    counts[e] = 1 + epoch_digests(l, out[e] + 1, MAXB - 1);
  }
}

static char index_path[512], other_index[512];

/* Epoch 0: another index copied over this one in place; epoch 1: cut to 0 bytes. */
static void change_the_index(int epoch) {
  if (epoch == 0) {
    FILE *from = fopen(other_index, "rb"), *to = fopen(index_path, "r+b");
    cr_assert(from && to);
    cr_assert_eq(ftruncate(fileno(to), 0), 0);
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, from)) > 0;) cr_assert_eq(fwrite(buf, 1, n, to), n);
    fclose(from);
    cr_assert_eq(fclose(to), 0);
  } else if (epoch == 1) {
    cr_assert_eq(truncate(index_path, 0), 0);
  }
}

Test(index_run, index_rewritten_and_truncated_under_a_running_loader, .timeout = 120) {
  ferry_loader_config c;
  test_config(&c);
  c.shuffle = 1;
  static uint64_t want[EPOCHS][MAXB], got[EPOCHS][MAXB];
  size_t want_n[EPOCHS], got_n[EPOCHS];
  setenv("FERRY_COCO_INDEX", "off", 1);
  ferry_loader *l = open_loader(&c);
  run_epochs(l, want, want_n, NULL);
  ferry_loader_close(l);
  unsetenv("FERRY_COCO_INDEX");

  char other_json[512];
  snprintf(index_path, sizeof index_path, "%s/run.ferryidx", scratch);
  snprintf(other_json, sizeof other_json, "%s/other.json", scratch);
  snprintf(other_index, sizeof other_index, "%s/other.ferryidx", scratch);
  FILE *f = fopen(other_json, "w");
  cr_assert_not_null(f);
  fputs("{\"images\": [{\"id\": 1, \"width\": 9, \"height\": 9, \"file_name\": \"x.jpg\"}]}", f);
  cr_assert_eq(fclose(f), 0);
  cr_assert_eq(ferry_coco_index_build(c.annotations, index_path), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_coco_index_build(other_json, other_index), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(chmod(index_path, 0644), 0, "writable, as `cp` finds a file a user made");
  c.annotations = index_path;
  l = open_loader(&c);
  run_epochs(l, got, got_n, change_the_index);
  ferry_loader_close(l);
  for (int e = 0; e < EPOCHS; e++) {
    cr_assert_eq(got_n[e], want_n[e], "epoch %d: %zu batches, %zu from the JSON", e, got_n[e], want_n[e]);
    for (size_t i = 0; i < got_n[e]; i++) cr_assert_eq(got[e][i], want[e][i], "epoch %d, batch %zu differs", e, i);
  }
}
