/* coco/coco.c - opening a COCO file, its lifetime, and read-only accessors. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "coco/coco_internal.h"
#include "coco/index_internal.h"
#include "lib/alloc.h"
#include "lib/status.h"

/* ---- growable arrays ------------------------------------------------------------- */

ferry_status ferry__coco_vec_reserve(coco_vec *v, size_t more) {
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

ferry_status ferry__coco_vec_push(coco_vec *v, const void *elem) {
  ferry_status st = ferry__coco_vec_reserve(v, 1);
  if (st < 0) return st;
  memcpy((char *)v->data + v->n * v->elem, elem, v->elem);
  v->n++;
  return FERRY_OK;
}

void ferry__coco_vec_free(coco_vec *v) {
  ferry__free(v->data);
  v->data = NULL;
  v->n = v->cap = 0;
}

size_t ferry__coco_id_lookup(const id_entry *table, size_t n, int64_t id) {
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

int64_t ferry__coco_label(const ferry_coco *coco, const coco_ann *ann) {
  if (!coco->opts.remap_categories || coco->categories.n == 0) return ann->pub.category_id;
  return (int64_t)ferry__coco_id_lookup(coco->category_ids, coco->categories.n, ann->pub.category_id);
}

/* ---- open / close ----------------------------------------------------------------- */

void ferry_coco_options_default(ferry_coco_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

void ferry_coco_close(ferry_coco *coco) {
  if (!coco) return;
  if (coco->backing) {
    ferry__coco_index_release(coco);  /* the arrays point into it */
  } else {
    coco_vec *vecs[] = {&coco->images, &coco->categories, &coco->anns, &coco->parts,
                        &coco->coords, &coco->counts, &coco->keypoints, &coco->strings};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) ferry__coco_vec_free(vecs[i]);
    ferry__free(coco->image_ids);
    ferry__free(coco->category_ids);
    ferry__free(coco->image_anns);
  }
  if (coco->root) json_decref(coco->root);
  ferry__free(coco->name);
  ferry__free(coco);
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
  coco->images.elem = sizeof(coco_image);
  coco->categories.elem = sizeof(coco_category);
  coco->anns.elem = sizeof(coco_ann);
  coco->parts.elem = sizeof(coco_part);
  coco->coords.elem = sizeof(double);
  coco->counts.elem = sizeof(uint32_t);
  coco->keypoints.elem = sizeof(float);
  coco->strings.elem = 1;
  *out = coco;
  return FERRY_OK;
}

/* The string pool starts with "" so that offset 0 means an absent string. */
static ferry_status start_string_pool(ferry_coco *coco) {
  static const char empty = '\0';
  return ferry__coco_vec_push(&coco->strings, &empty);
}

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

/* An empty coco ready for parsing. */
static ferry_status coco_for_parsing(const char *name, const ferry_coco_options *opts, ferry_coco **out) {
  ferry_status st = ferry__coco_new(name, opts, out);
  if (st == FERRY_OK && (st = start_string_pool(*out)) < 0) {
    ferry_coco_close(*out);
    *out = NULL;
  }
  return st;
}

/* The lean way (coco/json_stream.c), for a strict open; *declined when the whole-tree
 * way must do it. A collecting open takes that way, which reports each problem once. */
static ferry_status open_streamed(const char *json, size_t len, const char *name, const ferry_coco_options *opts,
                                  ferry_coco **out, int *declined) {
  *declined = 1;
  if (opts && opts->on_problem) return FERRY_OK;
  ferry_status st = coco_for_parsing(name, opts, out);
  if (st == FERRY_OK) st = ferry__coco_parse_streamed(*out, json, len, declined);
  else *declined = 0;
  if (st < 0) {
    ferry_coco_close(*out);
    *out = NULL;
  }
  return st;
}

ferry_status ferry_coco_open_buffer(const char *json, size_t len, const char *name,
                                    const ferry_coco_options *opts, ferry_coco **out) {
  static pthread_once_t allocator_once = PTHREAD_ONCE_INIT;
  if (!out || (!json && len)) return ferry__fail(FERRY_EINVAL, "ferry_coco_open_buffer: NULL argument");
  *out = NULL;
  if (!name) name = "<buffer>";
  if (ferry__coco_index_sniff(json, len)) return ferry__coco_index_open_buffer(json, len, name, opts, out);
  pthread_once(&allocator_once, use_ferry_allocator);
  int declined;
  ferry_status st = open_streamed(json ? json : "", len, name, opts, out, &declined);
  if (!declined) return st;
  ferry_coco *coco = NULL;
  if ((st = coco_for_parsing(name, opts, &coco)) < 0) return st;
  json_error_t err;
  int out_of_memory;
  coco->root = ferry__coco_json_load(json ? json : "", len, &err, &out_of_memory);
  if (out_of_memory) {
    st = ferry__fail(FERRY_ENOMEM, "%s: out of memory parsing the JSON", name);
  } else if (!coco->root) {
    st = ferry__fail(FERRY_EFORMAT, "%s: line %d, column %d: invalid JSON: %s", name, err.line, err.column, err.text);
  } else {
    st = ferry__coco_parse(coco);
  }
  if (coco->root) {
    json_decref(coco->root);  /* everything kept has been copied out of the tree */
    coco->root = NULL;
  }
  if (st < 0) {
    ferry_coco_close(coco);
    return st;
  }
  *out = coco;
  return FERRY_OK;
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

/* Parse the JSON file at `path` (no index involved). */
ferry_status ferry__coco_open_json(const char *path, const ferry_coco_options *opts, ferry_coco **out) {
  char *data = NULL;
  size_t len = 0;
  ferry_status st = ferry__coco_read_file(path, &data, &len);
  if (st < 0) return st;
  st = ferry_coco_open_buffer(data, len, path, opts, out);
  ferry__free(data);
  return st;
}

ferry_status ferry_coco_open(const char *path, const ferry_coco_options *opts, ferry_coco **out) {
  if (!path || !out) return ferry__fail(FERRY_EINVAL, "ferry_coco_open: NULL argument");
  *out = NULL;
  int is_index = 0;
  ferry_status st = ferry__coco_index_file_sniff(path, &is_index);
  if (st < 0) return st;
  if (is_index) return ferry__coco_index_open(path, opts, out);
  return ferry__coco_open_cached(path, opts, out);
}

/* ---- accessors --------------------------------------------------------------------- */

size_t ferry_coco_num_images(const ferry_coco *coco) { return coco ? coco->images.n : 0; }
size_t ferry_coco_num_keypoints(const ferry_coco *coco) { return coco ? coco->num_keypoints : 0; }
size_t ferry_coco_num_categories(const ferry_coco *coco) { return coco ? coco->categories.n : 0; }
size_t ferry_coco_num_annotations(const ferry_coco *coco) { return coco ? coco->anns.n : 0; }
int ferry_coco_is_result_list(const ferry_coco *coco) { return coco ? coco->result_list : 0; }
int ferry_coco_is_index(const ferry_coco *coco) { return coco && coco->backing; }

ferry_status ferry_coco_image_at(const ferry_coco *coco, size_t index, ferry_coco_image *out) {
  if (!coco || !out) return ferry__fail(FERRY_EINVAL, "ferry_coco_image_at: NULL argument");
  if (index >= coco->images.n)
    return ferry__fail(FERRY_EINVAL, "%s: image index %zu out of range (%zu images)", coco->name, index, coco->images.n);
  const coco_image *img = &COCO_AT(coco->images, coco_image, index);
  out->id = img->id;
  out->file_name = COCO_STRING(coco, img->file_name);
  out->width = img->width;
  out->height = img->height;
  out->num_annotations = img->num_anns;
  return FERRY_OK;
}

ferry_status ferry_coco_find_image(const ferry_coco *coco, int64_t image_id, size_t *index) {
  if (!coco || !index) return ferry__fail(FERRY_EINVAL, "ferry_coco_find_image: NULL argument");
  *index = ferry__coco_id_lookup(coco->image_ids, coco->images.n, image_id);
  if (*index == SIZE_MAX) return ferry__fail(FERRY_ENOTFOUND, "%s: no image %lld", coco->name, (long long)image_id);
  return FERRY_OK;
}

ferry_status ferry_coco_category_at(const ferry_coco *coco, size_t index, int64_t *id, const char **name) {
  if (!coco) return ferry__fail(FERRY_EINVAL, "ferry_coco_category_at: NULL argument");
  if (index >= coco->categories.n)
    return ferry__fail(FERRY_EINVAL, "%s: category index %zu out of range (%zu categories)", coco->name, index,
                      coco->categories.n);
  const coco_category *cat = &COCO_AT(coco->categories, coco_category, index);
  if (id) *id = cat->id;
  if (name) *name = COCO_STRING(coco, cat->name);
  return FERRY_OK;
}

ferry_status ferry_coco_annotation_at(const ferry_coco *coco, size_t index, ferry_coco_annotation *out) {
  if (!coco || !out) return ferry__fail(FERRY_EINVAL, "ferry_coco_annotation_at: NULL argument");
  if (index >= coco->anns.n)
    return ferry__fail(FERRY_EINVAL, "%s: annotation index %zu out of range (%zu annotations)", coco->name, index,
                      coco->anns.n);
  const coco_ann *ann = &COCO_AT(coco->anns, coco_ann, index);
  *out = ann->pub;
  out->label = ferry__coco_label(coco, ann);
  return FERRY_OK;
}

ferry_status ferry_coco_image_annotation(const ferry_coco *coco, size_t image, size_t k, size_t *annotation) {
  if (!coco || !annotation) return ferry__fail(FERRY_EINVAL, "ferry_coco_image_annotation: NULL argument");
  if (image >= coco->images.n)
    return ferry__fail(FERRY_EINVAL, "%s: image index %zu out of range (%zu images)", coco->name, image, coco->images.n);
  const coco_image *img = &COCO_AT(coco->images, coco_image, image);
  if (k >= img->num_anns)
    return ferry__fail(FERRY_EINVAL, "%s: image %lld has %zu annotations, asked for #%zu", coco->name,
                      (long long)img->id, img->num_anns, k);
  *annotation = coco->image_anns[img->first_ann + k];
  return FERRY_OK;
}

ferry_status ferry_coco_annotation_rle(const ferry_coco *coco, size_t index, ferry_rle *out) {
  if (!coco || !out) return ferry__fail(FERRY_EINVAL, "ferry_coco_annotation_rle: NULL argument");
  if (index >= coco->anns.n)
    return ferry__fail(FERRY_EINVAL, "%s: annotation index %zu out of range (%zu annotations)", coco->name, index,
                      coco->anns.n);
  return ferry__coco_ann_rle(coco, &COCO_AT(coco->anns, coco_ann, index), out);
}
