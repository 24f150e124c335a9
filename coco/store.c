/* coco/store.c - the ferry_coco object in memory: its growable arrays, id tables,
 * string pool, creation and closing.
 *
 * Every other file of coco/ builds or reads a ferry_coco through these (parse.c and
 * json_stream.c fill one from JSON, index_read.c points one into an index's bytes,
 * coco.c opens a buffer and reads, index_cache.c opens a path); this file calls none of them, so coco/'s dependencies run
 * one way, down to here.
 * Invariants: a ferry__coco_vec's n <= cap and its data holds cap elements of `elem` bytes;
 * id tables are sorted by id; string offset 0 is the empty string. A coco with
 * `backing` owns no arrays (they point into the backing bytes, mapped read-only or
 * copied), so closing it frees the backing and nothing else of its arrays.
 * Not done here: parsing, validation, index formats.
 */
#include <string.h>
#include <sys/mman.h>

#include <jansson.h>

#include "coco/store.h"
#include "lib/alloc.h"
#include "lib/status.h"

/* ---- growable arrays ------------------------------------------------------------- */

ferry_status ferry__coco_vec_reserve(ferry__coco_vec *v, size_t more) {
  if (more <= v->cap - v->n) return FERRY_OK;
  size_t cap = v->cap ? v->cap : 16;
  while (cap - v->n < more) {
    if (cap > SIZE_MAX / 2 / v->elem) return ferry__fail(FERRY_ENOMEM, "array of %zu elements is too large", cap);
    cap *= 2;
  }
  void *grown = ferry__realloc(v->data, cap * v->elem);
  if (!grown) return ferry__fail(FERRY_ENOMEM, "out of memory growing an array to %zu elements", cap);
  v->data = grown;
  v->cap = cap;
  return FERRY_OK;
}

ferry_status ferry__coco_vec_push(ferry__coco_vec *v, const void *elem) {
  ferry_status st = ferry__coco_vec_reserve(v, 1);
  if (st < 0) return st;
  memcpy((char *)v->data + v->n * v->elem, elem, v->elem);
  v->n++;
  return FERRY_OK;
}

void ferry__coco_vec_free(ferry__coco_vec *v) {
  ferry__free(v->data);
  v->data = NULL;
  v->n = v->cap = 0;
}

size_t ferry__coco_id_lookup(const ferry__coco_id_entry *table, size_t n, int64_t id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (table[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && table[lo].id == id ? table[lo].index : SIZE_MAX;
}

const char *ferry__coco_ann_array_name(const ferry_coco *coco) { return coco->result_list ? "" : "annotations"; }

ferry_status ferry__coco_intern(ferry_coco *coco, const char *s, size_t len, uint64_t *offset) {
  if (len == 0) {
    *offset = 0;
    return FERRY_OK;
  }
  if (len == SIZE_MAX) return ferry__fail(FERRY_ENOMEM, "%s: string too long", coco->name);
  ferry_status st = ferry__coco_vec_reserve(&coco->strings, len + 1);
  if (st < 0) return st;
  char *pool = coco->strings.data;
  memcpy(pool + coco->strings.n, s, len);
  pool[coco->strings.n + len] = '\0';
  *offset = coco->strings.n;
  coco->strings.n += len + 1;
  return FERRY_OK;
}

int64_t ferry__coco_label(const ferry_coco *coco, const ferry__coco_ann *ann) {
  if (!coco->opts.remap_categories || coco->categories.n == 0) return ann->pub.category_id;
  size_t i = ferry__coco_id_lookup(coco->category_ids, coco->categories.n, ann->pub.category_id);
  /* RF-DETR's table: the open checked that every annotation's category has a label */
  if (coco->category_labels) return coco->category_labels[i];
  return (int64_t)i;
}

ferry_status ferry__coco_new(const char *name, const ferry_coco_options *opts, ferry_coco **out) {
  ferry_coco *coco = ferry__calloc(1, sizeof *coco);
  if (!coco) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", name);
  coco->name = ferry__strdup(name);
  if (!coco->name) {
    ferry__free(coco);
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory", name);
  }
  if (opts) coco->opts = *opts;
  coco->images.elem = sizeof(ferry__coco_image);
  coco->categories.elem = sizeof(ferry__coco_category);
  coco->anns.elem = sizeof(ferry__coco_ann);
  coco->parts.elem = sizeof(ferry__coco_part);
  coco->coords.elem = sizeof(double);
  coco->counts.elem = sizeof(uint32_t);
  coco->keypoints.elem = sizeof(float);
  coco->strings.elem = 1;
  *out = coco;
  return FERRY_OK;
}

void ferry_coco_close(ferry_coco *coco) {
  if (!coco) return;
  if (coco->backing) {
    /* The arrays point into the index's bytes: nothing of theirs to free. */
    if (coco->backing_mapped) munmap(coco->backing, coco->backing_len);
    else ferry__free(coco->backing);
  } else {
    ferry__coco_vec *vecs[] = {&coco->images, &coco->categories, &coco->anns,      &coco->parts,
                               &coco->coords, &coco->counts,     &coco->keypoints, &coco->strings};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) ferry__coco_vec_free(vecs[i]);
    ferry__free(coco->image_ids);
    ferry__free(coco->category_ids);
    ferry__free(coco->image_anns);
  }
  if (coco->root) json_decref(coco->root);
  ferry__free(coco->category_labels);
  ferry__free(coco->name);
  ferry__free(coco);
}
