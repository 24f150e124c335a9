/* tests/coco/test_index.c - the binary index (issue 16) against the JSON it was built
 * from: every accessor, mask and target equal, on every real file of ../shared/realdata
 * and on hand-written ones (and the streamed JSON open equal to the whole-tree one); the cache (used only when fresh, built once by 8 processes
 * at a time with FERRY_COCO_INDEX=auto); byte-identical rebuilds. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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
    int64_t la, lb; /* the label: under RF-DETR's rule, the supercategories' doing */
    cr_assert_eq(ferry_coco_category_label(a, i, &la), FERRY_OK);
    cr_assert_eq(ferry_coco_category_label(b, i, &lb), FERRY_OK);
    cr_assert_eq(la, lb, "category %zu: label %lld and %lld", i, (long long)la, (long long)lb);
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

/* Open json_path as JSON and through an index built from it, under every label policy
 * (raw, remapped, RF-DETR's); 0 when the JSON itself does not open. */
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
  for (int remap = FERRY_CATEGORIES_RAW; remap <= FERRY_CATEGORIES_RFDETR; remap++) {
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
  /* a Roboflow export: an unannotated root whose name is every class's supercategory,
   * which RF-DETR's rule drops (the index keeps the supercategories) */
  "{\"images\": [{\"id\": 1, \"width\": 40, \"height\": 30, \"file_name\": \"a.jpg\"}],"
  " \"categories\": [{\"id\": 0, \"name\": \"objects\", \"supercategory\": \"none\"},"
  "  {\"id\": 1, \"name\": \"cat\", \"supercategory\": \"objects\"}, {\"id\": 2, \"name\": \"dog\", \"supercategory\": \"objects\"}],"
  " \"annotations\": [{\"id\": 1, \"image_id\": 1, \"category_id\": 2, \"bbox\": [1, 2, 10, 8], \"area\": 80}]}",
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

/* ---- files changed under a run (issue 25) ------------------------------------------------ */

/* Rewrite path in place, as `cp` does: the same inode truncated, then the new bytes. */
static void rewrite_in_place(const char *path, const unsigned char *data, size_t len) {
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f, "%s", path);
  cr_assert_eq(ftruncate(fileno(f), 0), 0);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
}

/* `cp other.ferryidx X.ferryidx` over the index an open object reads (its inode
 * truncated and rewritten with another, shorter index), then a cut to 0 bytes: every
 * accessor, mask and target still reads what the JSON gives (was SIGBUS). */
Test(index, file_rewritten_and_truncated_under_an_open_index) {
  char json[PATH_LEN], index[PATH_LEN], other_json[PATH_LEN], other[PATH_LEN];
  write_text(in_scratch("r.json", json), hand_written[0]);
  write_text(in_scratch("o.json", other_json), hand_written[3]);
  cr_assert_eq(ferry_coco_index_build(json, in_scratch("r.ferryidx", index)), FERRY_OK, "%s", ferry_last_error());
  cr_assert_eq(ferry_coco_index_build(other_json, in_scratch("o.ferryidx", other)), FERRY_OK);
  cr_assert_eq(chmod(index, 0644), 0, "writable, as a file a user made by hand is");
  setenv("FERRY_COCO_INDEX", "off", 1);
  ferry_coco *from_json = NULL, *from_index = NULL;
  cr_assert_eq(ferry_coco_open(json, NULL, &from_json), FERRY_OK);
  unsetenv("FERRY_COCO_INDEX");
  cr_assert_eq(ferry_coco_open(index, NULL, &from_index), FERRY_OK, "%s", ferry_last_error());
  size_t len;
  unsigned char *bytes = read_all(other, &len);
  rewrite_in_place(index, bytes, len);
  free(bytes);
  same_content(from_json, from_index);
  cr_assert_eq(truncate(index, 0), 0);
  same_content(from_json, from_index);
  ferry_coco_close(from_index);
  ferry_coco_close(from_json);
}

/* 1 when this process maps path shared (an 's' in /proc/self/maps' permissions). */
static int mapped_shared(const char *path) {
  FILE *f = fopen("/proc/self/maps", "r");
  cr_assert_not_null(f);
  char line[PATH_LEN + 128], perms[8];
  int shared = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, path) && sscanf(line, "%*s %7s", perms) == 1 && perms[3] == 's') shared = 1;
  fclose(f);
  return shared;
}

/* 1 when an index opened at path is mapped shared in this process. */
static int opens_shared(const char *path) {
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(path, NULL, &coco), FERRY_OK, "%s", ferry_last_error());
  int shared = mapped_shared(path);
  ferry_coco_close(coco);
  return shared;
}

/* Pages are shared only where no one but root can write the file in place: read-only
 * for all and opened by a non-root user (root writes through any mode). As root, the
 * non-root case runs in a child that drops to the file's owner. */
Test(index, shared_only_when_no_one_can_rewrite_it) {
  char json[PATH_LEN], index[PATH_LEN];
  write_text(in_scratch("s.json", json), hand_written[0]);
  cr_assert_eq(ferry_coco_index_build(json, in_scratch("s.ferryidx", index)), FERRY_OK, "%s", ferry_last_error());
  struct stat sb;
  cr_assert_eq(stat(index, &sb), 0);
  cr_assert_eq(sb.st_mode & 0777, 0444, "ferry writes its indexes read-only");
  cr_assert_eq(opens_shared(index), geteuid() != 0, "read-only: shared unless root");
  cr_assert_eq(chmod(index, 0644), 0);
  cr_assert(!opens_shared(index), "writable by its owner: copied");
  if (geteuid() != 0) return;
  cr_assert_eq(chmod(index, 0444), 0);
  cr_assert_eq(chmod(scratch, 0755), 0);
  cr_assert_eq(chown(index, 65534, 65534), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    ferry_coco *coco = NULL;
    int ok = setgid(65534) == 0 && setuid(65534) == 0 && ferry_coco_open(index, NULL, &coco) == FERRY_OK &&
             mapped_shared(index);
    ferry_coco_close(coco);
    _exit(ok ? 0 : 1);
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a non-root owner's read-only index is not shared");
}

/* ---- a shared cache folder (issue 25) ------------------------------------------------------ */

/* Run open with stderr sent to a file; what it wrote there in *said (malloc'd). */
static ferry_status open_saying(const char *path, ferry_coco **coco, char **said) {
  char log[PATH_LEN];
  in_scratch("stderr.log", log);
  fflush(stderr);
  int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
  close(fd);
  ferry_status st = ferry_coco_open(path, NULL, coco);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  size_t len;
  *said = (char *)read_all(log, &len);
  (*said)[len] = '\0';
  return st;
}

/* Open json and expect it parsed (not through an index), with stderr naming `names`
 * (or saying nothing when names is NULL). */
static void opens_json_saying(const char *json, const char *names) {
  ferry_coco *coco = NULL;
  char *said = NULL;
  cr_assert_eq(open_saying(json, &coco, &said), FERRY_OK, "%s", ferry_last_error());
  cr_assert(!ferry_coco_is_index(coco), "%s: opened through an index", json);
  if (names) cr_assert(strstr(said, names) && strstr(said, json), "stderr says: \"%s\", not %s", said, names);
  else cr_assert_str_empty(said);
  ferry_coco_close(coco);
  free(said);
}

/* The old temporary name, <index>.tmp.<pid>, planted as a symlink to another file:
 * `auto` must neither follow nor truncate it, and leave a read-only index and no
 * temporary behind. */
Test(index, cache_temporary_is_new_and_unguessable) {
  char json[PATH_LEN], index[PATH_LEN], victim[PATH_LEN], planted[PATH_LEN];
  write_text(in_scratch("t.json", json), hand_written[0]);
  write_text(in_scratch("victim", victim), "precious");
  snprintf(planted, sizeof planted, "%s/t.json.ferryidx.tmp.%ld", scratch, (long)getpid());
  cr_assert_eq(symlink(victim, planted), 0);
  setenv("FERRY_COCO_INDEX", "auto", 1);
  cr_assert(opened_from_index(json), "%s", ferry_last_error());
  unsetenv("FERRY_COCO_INDEX");
  size_t len;
  char *kept = (char *)read_all(victim, &len);
  cr_assert(len == 8 && memcmp(kept, "precious", 8) == 0, "the symlink's target was written");
  free(kept);
  struct stat sb;
  cr_assert_eq(lstat(in_scratch("t.json.ferryidx", index), &sb), 0);
  cr_assert(S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == 0444, "mode %o", (unsigned)sb.st_mode);
  cr_assert_eq(entries_in_scratch(), 5, "t.json, its index, its lock, the victim and the planted link, no temporary");
}

/* Another process (here another open file description) holds the build lock: `auto`
 * waits FERRY_COCO_INDEX_LOCK_WAIT seconds, then parses the JSON and says why. */
Test(index, cache_lock_wait_is_bounded, .timeout = 30) {
  char json[PATH_LEN], lock[PATH_LEN];
  write_text(in_scratch("l.json", json), hand_written[0]);
  int fd = open(in_scratch("l.json.ferryidx.lock", lock), O_RDONLY | O_CREAT, 0644);
  cr_assert(fd >= 0 && flock(fd, LOCK_EX) == 0);
  setenv("FERRY_COCO_INDEX", "auto", 1);
  setenv("FERRY_COCO_INDEX_LOCK_WAIT", "0.2", 1);
  opens_json_saying(json, "still locked");
  close(fd);
  cr_assert(opened_from_index(json), "built once the lock is free: %s", ferry_last_error());
  setenv("FERRY_COCO_INDEX_LOCK_WAIT", "soon", 1);
  ferry_coco *coco = NULL;
  cr_assert_eq(ferry_coco_open(json, NULL, &coco), FERRY_EINVAL);
  cr_assert(strstr(ferry_last_error(), "FERRY_COCO_INDEX_LOCK_WAIT=soon"), "%s", ferry_last_error());
  unsetenv("FERRY_COCO_INDEX_LOCK_WAIT");
  unsetenv("FERRY_COCO_INDEX");
}

/* A cached index someone else could have planted (another owner) or could rewrite
 * (writable by group or others) is refused, naming it, and the JSON parsed; `auto`
 * replaces it with its own. */
Test(index, cache_refuses_indexes_others_control) {
  char json[PATH_LEN], index[PATH_LEN];
  write_text(in_scratch("p.json", json), hand_written[0]);
  cr_assert_eq(ferry_coco_index_build(json, NULL), FERRY_OK, "%s", ferry_last_error());
  in_scratch("p.json.ferryidx", index);
  cr_assert_eq(chmod(index, 0664), 0);
  opens_json_saying(json, "p.json.ferryidx: refused: writable by other users");
  cr_assert_eq(chmod(index, 0646), 0);
  opens_json_saying(json, "p.json.ferryidx: refused: writable by other users");
  cr_assert_eq(chmod(index, 0444), 0);
  cr_assert(opened_from_index(json), "its own read-only index is used");
  if (geteuid() == 0) {  /* only root can give a file away */
    cr_assert_eq(chown(index, 4321, 4321), 0);
    opens_json_saying(json, "p.json.ferryidx: refused: owned by uid 4321");
  }
  setenv("FERRY_COCO_INDEX", "auto", 1);
  cr_assert_eq(chmod(index, 0666), 0);
  cr_assert(opened_from_index(json), "auto builds its own over it: %s", ferry_last_error());
  unsetenv("FERRY_COCO_INDEX");
  struct stat sb;
  cr_assert(stat(index, &sb) == 0 && sb.st_uid == geteuid() && (sb.st_mode & 0777) == 0444);
}

/* A JSON whose index the format cannot hold (over 16,384 keypoints per category): `auto`
 * parses the JSON, saying why, instead of failing the open. */
Test(index, cache_auto_parses_what_no_index_can_hold) {
  char json[PATH_LEN];
  size_t names = 16385, cap = names * 8 + 256, at = 0;
  char *text = malloc(cap);
  at += (size_t)snprintf(text, cap, "{\"images\": [], \"categories\": [{\"id\": 1, \"keypoints\": [");
  for (size_t i = 0; i < names; i++) at += (size_t)snprintf(text + at, cap - at, "%s\"k\"", i ? ", " : "");
  snprintf(text + at, cap - at, "]}]}");
  write_text(in_scratch("k.json", json), text);
  free(text);
  setenv("FERRY_COCO_INDEX", "auto", 1);
  opens_json_saying(json, "over the index format's 16384");
  unsetenv("FERRY_COCO_INDEX");
}

/* Touches a file's modification time, a nanosecond later each time, until told to stop:
 * every look at it after a touch sees a JSON other than the one read before. */
typedef struct {
  const char *path;
  atomic_int stop;
  long touches;
} toucher;

static void *touch_until_stopped(void *arg) {
  toucher *t = arg;
  struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
  while (!atomic_load(&t->stop)) {
    times[1].tv_nsec = (times[1].tv_nsec + 1) % 1000000000;
    if (utimensat(AT_FDCWD, t->path, times, 0) == 0) t->touches++;
    usleep(50);
  }
  return NULL;
}

/* A JSON changed while `auto` indexes it (its time moves on throughout the build): the
 * index is stale the moment it is made, so the open parses the JSON and says why,
 * instead of failing (issue 25, item 7). */
Test(index, cache_auto_parses_a_json_changed_while_indexed, .timeout = 60) {
  char json[PATH_LEN];
  size_t images = 4000, cap = images * 256 + 256, at = 0; /* each image and its annotation: under 200 bytes */
  char *text = malloc(cap);
  at += (size_t)snprintf(text, cap, "{\"categories\": [{\"id\": 1, \"name\": \"a\"}], \"images\": [");
  for (size_t i = 0; i < images; i++)
    at += (size_t)snprintf(text + at, cap - at, "%s{\"id\": %zu, \"file_name\": \"%zu.jpg\", \"width\": 64, "
                           "\"height\": 48}", i ? ", " : "", i + 1, i + 1);
  at += (size_t)snprintf(text + at, cap - at, "], \"annotations\": [");
  for (size_t i = 0; i < images; i++)
    at += (size_t)snprintf(text + at, cap - at, "%s{\"id\": %zu, \"image_id\": %zu, \"category_id\": 1, "
                           "\"bbox\": [1, 2, 3, 4], \"area\": 12, \"iscrowd\": 0}", i ? ", " : "", i + 1, i + 1);
  snprintf(text + at, cap - at, "]}");
  write_text(in_scratch("moving.json", json), text);
  free(text);
  toucher t = {json, 0, 0};
  pthread_t thread;
  cr_assert_eq(pthread_create(&thread, NULL, touch_until_stopped, &t), 0);
  setenv("FERRY_COCO_INDEX", "auto", 1);
  ferry_coco *coco = NULL;
  char *said = NULL;
  ferry_status st = open_saying(json, &coco, &said);
  atomic_store(&t.stop, 1);
  pthread_join(thread, NULL);
  unsetenv("FERRY_COCO_INDEX");
  cr_assert_gt(t.touches, 0, "the JSON was never touched");
  cr_assert_eq(st, FERRY_OK, "the open failed: %s", ferry_last_error());
  cr_assert(!ferry_coco_is_index(coco), "opened through an index built from a JSON that changed");
  cr_assert_eq(ferry_coco_num_images(coco), images);
  cr_assert(strstr(said, "parsing the JSON") && strstr(said, "changed while it was being indexed"), "stderr says: \"%s\"", said);
  ferry_coco_close(coco);
  free(said);
}

/* FERRY_COCO_INDEX takes auto, use or off: a typo is an error naming it, not "use". */
Test(index, cache_policy_typo_is_an_error) {
  char json[PATH_LEN];
  write_text(in_scratch("u.json", json), hand_written[0]);
  ferry_coco *coco = NULL;
  setenv("FERRY_COCO_INDEX", "autp", 1);
  cr_assert_eq(ferry_coco_open(json, NULL, &coco), FERRY_EINVAL);
  cr_assert_null(coco);
  cr_assert(strstr(ferry_last_error(), "FERRY_COCO_INDEX=autp: expected auto, use or off"), "%s", ferry_last_error());
  setenv("FERRY_COCO_INDEX", "use", 1);
  cr_assert(!opened_from_index(json), "use: no index, the JSON");
  unsetenv("FERRY_COCO_INDEX");
}
