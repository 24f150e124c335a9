/* tests/coco/test_index.c - the binary index (issue 16) against the JSON it was built
 * from: every accessor, mask and target equal, on every real file of ../shared/realdata
 * and on hand-written ones (and the streamed JSON open equal to the whole-tree one); the cache (used only when fresh, built once by 8 processes
 * at a time with FERRY_COCO_INDEX=auto); byte-identical rebuilds. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ferry/coco.h"
#include "tests/common/realdata.h"

#define MASK 12
#define PATH_LEN 4096

static char scratch[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void make_scratch(void) {
  snprintf(scratch, sizeof scratch, "/tmp/ferry-index-XXXXXX");
  cr_assert_not_null(mkdtemp(scratch));
}

static void drop_scratch(void) { nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(index, .init = make_scratch, .fini = drop_scratch);

static const char *in_scratch(const char *name, char *buf) {
  snprintf(buf, PATH_LEN, "%s/%s", scratch, name);
  return buf;
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
}

static unsigned char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  rewind(f);
  unsigned char *data = malloc(*len + 1);
  cr_assert_eq(fread(data, 1, *len, f), *len);
  fclose(f);
  return data;
}

/* ---- equality of two opened files -------------------------------------------------------- */

static void same_rle(const ferry_coco *a, const ferry_coco *b, size_t i) {
  ferry_rle ra = {0}, rb = {0};
  ferry_status sa = ferry_coco_annotation_rle(a, i, &ra), sb = ferry_coco_annotation_rle(b, i, &rb);
  cr_assert_eq(sa, sb, "annotation %zu: mask status %d vs %d", i, sa, sb);
  if (sa == FERRY_OK) {
    cr_assert(ra.h == rb.h && ra.w == rb.w && ra.m == rb.m, "annotation %zu: mask shape", i);
    cr_assert(ra.m == 0 || memcmp(ra.counts, rb.counts, ra.m * sizeof *ra.counts) == 0, "annotation %zu: runs", i);
  }
  ferry_rle_free(&ra);
  ferry_rle_free(&rb);
}

/* Target of image i from both, all fields, compared byte for byte. */
static void same_target(const ferry_coco *a, const ferry_coco *b, size_t i) {
  ferry_target_options o;
  ferry_target_options_default(&o);
  o.keep_crowd = 1;
  o.mask_height = o.mask_width = MASK;
  int64_t na = 0, nb = 0;
  ferry_status sa = ferry_coco_target_count(a, i, &o, &na), sb = ferry_coco_target_count(b, i, &o, &nb);
  cr_assert(sa == sb && na == nb, "image %zu: target count", i);
  if (sa != FERRY_OK) return;
  size_t n = (size_t)na, K = ferry_coco_num_keypoints(a);
  size_t sizes[5] = {n * 4 * sizeof(float), n * sizeof(int64_t), n * sizeof(float), n * MASK * MASK, n * K * 3 * sizeof(float)};
  ferry_coco_target t[2];
  for (int k = 0; k < 2; k++) {
    t[k] = (ferry_coco_target){.boxes = calloc(1, sizes[0] + 1), .labels = calloc(1, sizes[1] + 1),
                                .area = calloc(1, sizes[2] + 1), .masks = calloc(1, sizes[3] + 1),
                                .keypoints = calloc(1, sizes[4] + 1), .iscrowd = calloc(1, sizes[1] + 1)};
  }
  sa = ferry_coco_target_write(a, i, &o, &t[0]);
  sb = ferry_coco_target_write(b, i, &o, &t[1]);
  cr_assert_eq(sa, sb, "image %zu: target status", i);
  if (sa == FERRY_OK) {
    cr_assert(memcmp(t[0].boxes, t[1].boxes, sizes[0]) == 0 && memcmp(t[0].labels, t[1].labels, sizes[1]) == 0 &&
                  memcmp(t[0].area, t[1].area, sizes[2]) == 0 && memcmp(t[0].masks, t[1].masks, sizes[3]) == 0 &&
                  memcmp(t[0].keypoints, t[1].keypoints, sizes[4]) == 0 &&
                  memcmp(t[0].iscrowd, t[1].iscrowd, sizes[1]) == 0 && t[0].image_id == t[1].image_id &&
                  t[0].orig_h == t[1].orig_h && t[0].orig_w == t[1].orig_w,
              "image %zu: targets differ", i);
  }
  for (int k = 0; k < 2; k++) {
    free(t[k].boxes), free(t[k].labels), free(t[k].area), free(t[k].masks), free(t[k].keypoints), free(t[k].iscrowd);
  }
}

static void same_content(const ferry_coco *a, const ferry_coco *b) {
  cr_assert_eq(ferry_coco_num_images(a), ferry_coco_num_images(b));
  cr_assert_eq(ferry_coco_num_annotations(a), ferry_coco_num_annotations(b));
  cr_assert_eq(ferry_coco_num_categories(a), ferry_coco_num_categories(b));
  cr_assert_eq(ferry_coco_num_keypoints(a), ferry_coco_num_keypoints(b));
  cr_assert_eq(ferry_coco_is_result_list(a), ferry_coco_is_result_list(b));
  for (size_t i = 0; i < ferry_coco_num_categories(a); i++) {
    int64_t ia, ib;
    const char *na, *nb;
    cr_assert_eq(ferry_coco_category_at(a, i, &ia, &na), FERRY_OK);
    cr_assert_eq(ferry_coco_category_at(b, i, &ib, &nb), FERRY_OK);
    cr_assert(ia == ib && strcmp(na, nb) == 0, "category %zu", i);
  }
  for (size_t i = 0; i < ferry_coco_num_images(a); i++) {
    ferry_coco_image ia, ib;
    cr_assert_eq(ferry_coco_image_at(a, i, &ia), FERRY_OK);
    cr_assert_eq(ferry_coco_image_at(b, i, &ib), FERRY_OK);
    cr_assert(ia.id == ib.id && ia.width == ib.width && ia.height == ib.height &&
                  ia.num_annotations == ib.num_annotations && strcmp(ia.file_name, ib.file_name) == 0,
              "image %zu", i);
    size_t found;
    cr_assert(ferry_coco_find_image(b, ia.id, &found) == FERRY_OK && found == i, "image %zu: find", i);
    for (size_t k = 0; k < ia.num_annotations; k++) {
      size_t ka, kb;
      cr_assert_eq(ferry_coco_image_annotation(a, i, k, &ka), FERRY_OK);
      cr_assert_eq(ferry_coco_image_annotation(b, i, k, &kb), FERRY_OK);
      cr_assert_eq(ka, kb, "image %zu, annotation #%zu", i, k);
    }
    same_target(a, b, i);
  }
  for (size_t i = 0; i < ferry_coco_num_annotations(a); i++) {
    ferry_coco_annotation x, y;
    cr_assert_eq(ferry_coco_annotation_at(a, i, &x), FERRY_OK);
    cr_assert_eq(ferry_coco_annotation_at(b, i, &y), FERRY_OK);
    cr_assert(memcmp(&x, &y, sizeof x) == 0, "annotation %zu differs", i);
    same_rle(a, b, i);
  }
}

static void count_problem(void *user, const char *message) {
  (void)message;
  ++*(size_t *)user;
}

/* A strict open streams the annotations (coco/json_stream.c), a collecting one parses
 * the whole tree: with no problem to report, both must read the same. */
static void streamed_same_as_whole_tree(const char *json_path, const ferry_coco *streamed) {
  size_t problems = 0;
  ferry_coco_options o;
  ferry_coco_options_default(&o);
  o.on_problem = count_problem;
  o.problem_user = &problems;
  ferry_coco *whole = NULL;
  cr_assert_eq(ferry_coco_open(json_path, &o, &whole), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(problems, 0, "%s: a strict open succeeded, a collecting one found problems", json_path);
  same_content(streamed, whole);
  ferry_coco_close(whole);
}

/* Open json_path as JSON and through an index built from it, with and without
 * remapped categories; 0 when the JSON itself does not open. */
static int check_json_vs_index(const char *json_path) {
  char index[PATH_LEN];
  in_scratch("check.ferryidx", index);
  ferry_coco_options o;
  ferry_coco_options_default(&o);
  ferry_coco *json = NULL;
  setenv("FERRY_COCO_INDEX", "off", 1);
  ferry_status st = ferry_coco_open(json_path, &o, &json);
  unsetenv("FERRY_COCO_INDEX");
  if (st != FERRY_OK) return 0;
  streamed_same_as_whole_tree(json_path, json);
  ferry_coco_close(json);
  cr_assert_eq(ferry_coco_index_build(json_path, index), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_coco_index_verify(index), FERRY_OK, "%s", ferry_last_error());
  for (int remap = 0; remap < 2; remap++) {
    o.remap_categories = remap;
    ferry_coco *from_json = NULL, *from_index = NULL;
    setenv("FERRY_COCO_INDEX", "off", 1);
    ferry_status sj = ferry_coco_open(json_path, &o, &from_json);
    unsetenv("FERRY_COCO_INDEX");
    ferry_status si = ferry_coco_open(index, &o, &from_index);
    cr_assert_eq(sj, si, "%s (remap %d): JSON %d, index %d: %s", json_path, remap, sj, si, ferry_last_error());
    if (sj == FERRY_OK) {
      cr_assert(ferry_coco_is_index(from_index) && !ferry_coco_is_index(from_json));
      same_content(from_json, from_index);
    }
    ferry_coco_close(from_json);
    ferry_coco_close(from_index);
  }
  return 1;
}

static const char *const hand_written[] = {
  /* every record kind */
  "{\"images\": [{\"id\": 1, \"width\": 40, \"height\": 30, \"file_name\": \"a/b.jpg\"},"
  " {\"id\": 9, \"width\": 2, \"height\": 2}],"
  " \"categories\": [{\"id\": 3, \"name\": \"p\", \"keypoints\": [\"x\", \"y\"]}, {\"id\": 1}],"
  " \"annotations\": [{\"id\": 5, \"image_id\": 1, \"category_id\": 3, \"bbox\": [1.5, 2, 10, 8],"
  "  \"segmentation\": [[1.25, 2, 11, 2, 11, 10.75, 1, 10], [1, 1, 3]], \"keypoints\": [1, 2, 2, 3, 4, 2], \"area\": 7.5},"
  "  {\"id\": 6, \"image_id\": 9, \"category_id\": 1, \"bbox\": [0, 0, 1, 1], \"iscrowd\": 1,"
  "   \"segmentation\": {\"size\": [2, 2], \"counts\": [1, 2, 1]}},"
  "  {\"image_id\": 9, \"category_id\": 1, \"bbox\": [0, 0, 2, 2], \"segmentation\": {\"size\": [2, 2], \"counts\": \"04\"}},"
  "  {\"id\": 8, \"image_id\": 1, \"category_id\": 3, \"bbox\": [0, 0, 0, 2]}]}",
  /* a result list */
  "[{\"image_id\": 4, \"category_id\": 2, \"bbox\": [1, 2, 3, 4], \"score\": 0.5},"
  " {\"image_id\": 4, \"category_id\": 7, \"segmentation\": {\"size\": [3, 1], \"counts\": [0, 3]}}]",
  /* a result list with polygons: valid JSON (pycocotools' loadRes rasterises them at the
   * ground truth's sizes); its masks fail alike from the JSON and from the index */
  "[{\"image_id\": 1, \"category_id\": 1, \"segmentation\": [[0, 0, 5, 0, 5, 5]], \"score\": 0.9}]",
  /* empty */
  "{\"images\": []}",
};

Test(index, hand_written_files_same_as_json) {
  char path[PATH_LEN];
  for (size_t i = 0; i < sizeof hand_written / sizeof hand_written[0]; i++) {
    write_text(in_scratch("hand.json", path), hand_written[i]);
    cr_assert(check_json_vs_index(path), "case %zu does not open: %s", i, ferry_last_error());
  }
}

static size_t real_checked;

static int check_real(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)ftw;
  size_t n = strlen(path);
  if (flag == FTW_F && n > 5 && strcmp(path + n - 5, ".json") == 0) real_checked += (size_t)check_json_vs_index(path);
  return 0;
}

Test(index, real_files_same_as_json, .timeout = 300) {
  char root[PATH_LEN];
  snprintf(root, sizeof root, "%s", realdata_path(""));
  cr_assert_eq(nftw(root, check_real, 16, FTW_PHYS), 0, "%s", root);
  cr_assert_geq(real_checked, 20, "only %zu real COCO files opened", real_checked);
}

Test(index, rebuild_is_byte_identical) {
  char json[PATH_LEN], a[PATH_LEN], b[PATH_LEN];
  write_text(in_scratch("d.json", json), hand_written[0]);
  cr_assert_eq(ferry_coco_index_build(json, in_scratch("a.ferryidx", a)), FERRY_OK);
  cr_assert_eq(ferry_coco_index_build(json, in_scratch("b.ferryidx", b)), FERRY_OK);
  size_t la, lb;
  unsigned char *da = read_all(a, &la), *db = read_all(b, &lb);
  cr_assert(la == lb && memcmp(da, db, la) == 0, "two builds of one file differ");
  free(da);
  free(db);
}

/* ---- the cache ----------------------------------------------------------------------- */

static int opened_from_index(const char *json) {
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(json, NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  int is_index = ferry_coco_is_index(coco);
  ferry_coco_close(coco);
  return is_index;
}

static size_t entries_in_scratch(void) {
  DIR *d = opendir(scratch);
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

Test(index, cache_used_only_when_fresh) {
  char json[PATH_LEN], index[PATH_LEN];
  write_text(in_scratch("c.json", json), hand_written[0]);
  in_scratch("c.json.ferryidx", index);
  cr_assert(!opened_from_index(json), "no index yet");
  cr_assert_eq(access(index, F_OK), -1, "the default policy does not build");
  cr_assert_eq(ferry_coco_index_build(json, NULL), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(access(index, F_OK), 0, "built beside the JSON");
  cr_assert(opened_from_index(json), "a fresh index is used");
  setenv("FERRY_COCO_INDEX", "off", 1);
  cr_assert(!opened_from_index(json), "FERRY_COCO_INDEX=off");
  unsetenv("FERRY_COCO_INDEX");
  write_text(json, hand_written[1]);  /* the JSON changes */
  cr_assert(!opened_from_index(json), "a stale index is not used");
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(json, NULL, &coco), FERRY_OK);
  cr_assert(ferry_coco_is_result_list(coco), "the new content is read");
  ferry_coco_close(coco);
  setenv("FERRY_COCO_INDEX", "auto", 1);
  cr_assert(opened_from_index(json), "auto rebuilds a stale index");
  unsetenv("FERRY_COCO_INDEX");
  cr_assert_eq(ferry_coco_index_check(index, json), FERRY_OK, "%s", ferry_last_error());
}

Test(index, cache_folder) {
  char json[PATH_LEN], dir[PATH_LEN];
  write_text(in_scratch("e.json", json), hand_written[0]);
  cr_assert_eq(mkdir(in_scratch("cache", dir), 0755), 0);
  setenv("FERRY_COCO_INDEX_DIR", dir, 1);
  setenv("FERRY_COCO_INDEX", "auto", 1);
  cr_assert(opened_from_index(json));
  unsetenv("FERRY_COCO_INDEX");
  cr_assert(opened_from_index(json), "found again in the folder");
  unsetenv("FERRY_COCO_INDEX_DIR");
  DIR *d = opendir(dir);
  size_t indexes = 0;
  for (struct dirent *e; (e = readdir(d));) indexes += strstr(e->d_name, "e.json.") && strstr(e->d_name, ".ferryidx") && !strstr(e->d_name, ".lock");
  closedir(d);
  cr_assert_eq(indexes, 1);
}

/* Eight processes open one JSON at once with FERRY_COCO_INDEX=auto: each gets the
 * index, and what is left is the JSON, its index and the lock file (no temporary). */
Test(index, eight_processes_build_once, .timeout = 120) {
  char json[PATH_LEN];
  write_text(in_scratch("f.json", json), hand_written[0]);
  setenv("FERRY_COCO_INDEX", "auto", 1);
  pid_t pids[8];
  for (int i = 0; i < 8; i++) {
    pids[i] = fork();
    cr_assert_geq(pids[i], 0);
    if (pids[i] == 0) {
      ferry_coco *coco = NULL;
      int ok = ferry_coco_open(json, NULL, &coco) == FERRY_OK && ferry_coco_is_index(coco);
      ferry_coco_close(coco);
      _exit(ok ? 0 : 1);
    }
  }
  unsetenv("FERRY_COCO_INDEX");
  for (int i = 0; i < 8; i++) {
    int status;
    cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process %d did not open the index", i);
  }
  cr_assert_eq(entries_in_scratch(), 3, "expected f.json, its index and its lock");
}
