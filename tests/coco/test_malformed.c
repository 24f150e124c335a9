/* tests/coco/test_malformed.c - the corpus of malformed COCO files in tests/coco/malformed/.
 *
 * EXPECTED lists every file with the stage that must fail (open, mask, target), the
 * status and a substring of the message. Each must fail there, exactly so, and with a
 * message that starts with the file's name; every file in the folder must be listed. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/coco.h"

typedef struct expectation {
  char file[128], stage[16], status[16], substring[512];
} expectation;

static const char *corpus_dir(void) {
  static char dir[1024];
  const char *root = getenv("FERRY_SOURCE_ROOT");
  cr_assert(root, "FERRY_SOURCE_ROOT is not set");
  snprintf(dir, sizeof dir, "%s/tests/coco/malformed", root);
  return dir;
}

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\n')) s[--n] = '\0';
  size_t lead = strspn(s, " ");
  memmove(s, s + lead, strlen(s + lead) + 1);
}

/* Split "a | b | c | d" into the four fields; 0 for comments and blank lines. */
static int parse_line(char *line, expectation *e) {
  if (line[0] == '#' || line[0] == '\n') return 0;
  char *fields[4];
  for (int i = 0; i < 4; i++) {
    fields[i] = line;
    char *bar = i < 3 ? strstr(line, " | ") : NULL;
    cr_assert(i == 3 || bar, "EXPECTED line without 4 fields: %s", fields[0]);
    if (bar) {
      *bar = '\0';
      line = bar + 3;
    }
    trim(fields[i]);
  }
  snprintf(e->file, sizeof e->file, "%s", fields[0]);
  snprintf(e->stage, sizeof e->stage, "%s", fields[1]);
  snprintf(e->status, sizeof e->status, "%s", fields[2]);
  snprintf(e->substring, sizeof e->substring, "%s", fields[3]);
  return 1;
}

static size_t load_expectations(expectation **out) {
  char path[1200];
  snprintf(path, sizeof path, "%s/EXPECTED", corpus_dir());
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot open %s", path);
  expectation *list = NULL;
  size_t n = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    expectation e;
    if (!parse_line(line, &e)) continue;
    list = realloc(list, (n + 1) * sizeof *list);
    list[n++] = e;
  }
  fclose(f);
  *out = list;
  return n;
}

static ferry_status status_named(const char *name) {
  static const struct { const char *name; ferry_status st; } names[] = {
      {"EFORMAT", FERRY_EFORMAT}, {"ELIMIT", FERRY_ELIMIT}, {"EIO", FERRY_EIO}, {"EINVAL", FERRY_EINVAL}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(names[i].name, name)) return names[i].st;
  cr_assert_fail("unknown status %s in EXPECTED", name);
  return FERRY_OK;
}

/* The first failure of the stage after open: decoding every mask, or every target. */
static ferry_status run_stage(const ferry_coco *coco, const char *stage) {
  if (!strcmp(stage, "mask")) {
    for (size_t i = 0; i < ferry_coco_num_annotations(coco); i++) {
      ferry_rle rle = {0};
      ferry_status st = ferry_coco_annotation_rle(coco, i, &rle);
      ferry_rle_free(&rle);
      if (st < 0 && st != FERRY_ENOTFOUND) return st;
    }
    return FERRY_OK;
  }
  ferry_target_options t;
  ferry_target_options_default(&t);
  for (size_t i = 0; i < ferry_coco_num_images(coco); i++) {
    ferry_coco_image img;
    cr_assert_eq(ferry_coco_image_at(coco, i, &img), FERRY_OK);
    size_t cap = 64 * ((size_t)img.height * img.width + 1);
    uint8_t *masks = malloc(cap);
    float boxes[256];
    ferry_coco_target target = {.boxes = boxes, .masks = masks};
    int64_t n = 0;
    ferry_status st = ferry_coco_target_count(coco, i, &t, &n);
    if (st == FERRY_OK) {
      cr_assert(n < 64);
      st = ferry_coco_target_write(coco, i, &t, &target);
    }
    free(masks);
    if (st < 0) return st;
  }
  return FERRY_OK;
}

static void check_one(const expectation *e) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s", corpus_dir(), e->file);
  ferry_status want = status_named(e->status);
  ferry_coco *coco = NULL;
  ferry_status st = ferry_coco_open(path, NULL, &coco);
  if (strcmp(e->stage, "open") != 0) {
    cr_assert_eq(st, FERRY_OK, "%s: open should succeed, got %s", e->file, ferry_last_error());
    st = run_stage(coco, e->stage);
    ferry_coco_close(coco);
  } else {
    cr_assert_null(coco, "%s: a failed open must leave *out NULL", e->file);
  }
  const char *msg = ferry_last_error();
  cr_expect_eq(st, want, "%s: expected status %s (%d), got %d: %s", e->file, e->status, want, st, msg);
  cr_expect(strncmp(msg, path, strlen(path)) == 0, "%s: message does not start with the file name: %s", e->file, msg);
  cr_expect(strstr(msg, e->substring) != NULL, "%s: message lacks \"%s\": %s", e->file, e->substring, msg);
}

Test(coco_malformed, every_file_fails_as_expected) {
  expectation *list;
  size_t n = load_expectations(&list);
  cr_assert_gt(n, 50, "the corpus lists only %zu files", n);
  for (size_t i = 0; i < n; i++) check_one(&list[i]);
  free(list);
}

Test(coco_malformed, every_file_is_listed) {
  expectation *list;
  size_t n = load_expectations(&list);
  DIR *d = opendir(corpus_dir());
  cr_assert(d);
  struct dirent *ent;
  size_t files = 0;
  while ((ent = readdir(d))) {
    if (ent->d_name[0] == '.' || !strcmp(ent->d_name, "EXPECTED")) continue;
    files++;
    int listed = 0;
    for (size_t i = 0; i < n && !listed; i++) listed = !strcmp(list[i].file, ent->d_name);
    cr_expect(listed, "%s is in the corpus but not in EXPECTED", ent->d_name);
  }
  closedir(d);
  cr_expect_eq(files, n, "EXPECTED lists %zu files, the folder has %zu", n, files);
  free(list);
}

/* Validate-style opening sees every problem of a file at once, with its path. */
static void count_problem(void *user, const char *message) {
  (void)message;
  (*(int *)user)++;
}

/* `json` opened collecting its problems: each one goes to on_problem(user, message). */
static ferry_coco *open_collecting(const char *json, void (*on_problem)(void *, const char *), void *user) {
  ferry_coco_options o;
  ferry_coco_options_default(&o);
  o.on_problem = on_problem;
  o.problem_user = user;
  ferry_coco *coco;
  cr_assert_eq(ferry_coco_open_buffer(json, strlen(json), "c.json", &o, &coco), FERRY_OK);
  return coco;
}

Test(coco_malformed, collecting_open_reports_each_problem) {
  const char *json =
      "{\"images\": [{\"id\": 1, \"width\": 4, \"height\": 4}, {\"id\": \"x\"}],"
      " \"categories\": [{\"id\": 1}],"
      " \"annotations\": [{\"id\": 1, \"image_id\": 9, \"category_id\": 1},"
      "                   {\"id\": 2, \"image_id\": 1, \"category_id\": 1, \"bbox\": [0, 0, 1]},"
      "                   {\"id\": 3, \"image_id\": 1, \"category_id\": 1, \"bbox\": [0, 0, 1, 1]}]}";
  int problems = 0;
  ferry_coco *coco = open_collecting(json, count_problem, &problems);
  cr_expect_eq(problems, 3);
  cr_expect_eq(ferry_coco_num_images(coco), 1);
  cr_expect_eq(ferry_coco_num_annotations(coco), 1);
  ferry_coco_annotation a;
  cr_assert_eq(ferry_coco_annotation_at(coco, 0, &a), FERRY_OK);
  cr_expect_eq(a.id, 3);
  cr_expect_eq(a.json_index, 2);
  ferry_coco_close(coco);
}

/* A duplicate id is named by the elements' places in the file, also when an element
 * before them was left out (collecting open keeps going past it). */
typedef struct problem_log {
  int count;
  char last[512];
} problem_log;

static void log_problem(void *user, const char *message) {
  problem_log *log = user;
  log->count++;
  snprintf(log->last, sizeof log->last, "%s", message);
}

Test(coco_malformed, duplicate_ids_are_named_by_file_position_after_a_skipped_element) {
  const char *json =
      "{\"images\": [{\"id\": \"x\"}, {\"id\": 1, \"width\": 4, \"height\": 4},"
      "              {\"id\": 7, \"width\": 4, \"height\": 4}, {\"id\": 1, \"width\": 4, \"height\": 4}],"
      " \"categories\": [{\"id\": 1}], \"annotations\": []}";
  problem_log log = {0};
  ferry_coco *coco = open_collecting(json, log_problem, &log);
  cr_expect_eq(log.count, 2, "the bad id and the duplicate");
  cr_expect(strstr(log.last, "images[3].id: duplicate id 1 (also images[1])"), "%s", log.last);
  ferry_coco_close(coco);
}
