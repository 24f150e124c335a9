/* coco/json_load.c - reading a JSON file into memory and parsing text with jansson
 * through ferry's allocator.
 *
 * Used by coco.c (whole-tree opens), json_stream.c (one annotation at a time) and
 * index_write.c (the source it hashes); it calls nothing else of coco/.
 * Invariant: a tree is returned only when jansson could store every byte it read
 * (a failed allocation mid-string would otherwise leave a shorter string in place).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "coco/json_load.h"
#include "lib/alloc.h"
#include "lib/status.h"

/* jansson allocates through ferry's door too, so that allocation-failure injection
 * reaches the JSON tree (tests/hardening/test_alloc_failure.c). Set once: the hooks
 * are process-wide, and jansson frees with whichever pair is current. jansson often
 * reports a failed allocation as a syntax error (or with no message at all), so the
 * hook itself notes it for this thread's parse. */
static _Thread_local int json_allocation_failed;

static void *json_alloc(size_t size) {
  void *p = ferry__malloc(size);
  if (!p) json_allocation_failed = 1;
  return p;
}

static void use_ferry_allocator(void) { json_set_alloc_funcs(json_alloc, ferry__free); }

void ferry__coco_json_use_ferry_allocator(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, use_ferry_allocator);
}

json_t *ferry__coco_json_load(const char *text, size_t len, json_error_t *err, int *out_of_memory) {
  json_allocation_failed = 0;
  json_t *tree = json_loadb(text, len, 0, err);
  *out_of_memory = json_allocation_failed;
  if (*out_of_memory && tree) { /* jansson may go on without a byte it could not store */
    json_decref(tree);
    tree = NULL;
  }
  return tree;
}

ferry_status ferry__coco_read_file(const char *path, char **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return ferry__fail(FERRY_EIO, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = ferry__malloc(cap);
  ferry_status st = buf ? FERRY_OK : ferry__fail(FERRY_ENOMEM, "%s: out of memory reading the file", path);
  while (st == FERRY_OK) {
    if (n == cap) {
      char *grown = cap <= SIZE_MAX / 2 ? ferry__realloc(buf, cap * 2) : NULL;
      if (!grown) {
        st = ferry__fail(FERRY_ENOMEM, "%s: out of memory reading the file", path);
        break;
      }
      buf = grown;
      cap *= 2;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) st = ferry__fail(FERRY_EIO, "%s: read error: %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (st < 0) {
    ferry__free(buf);
    return st;
  }
  *data = buf;
  *len = n;
  return FERRY_OK;
}
