/* coco/coco.c - opening COCO text from memory (ferry_coco_open_buffer), and the public
 * read-only accessors of an opened ferry_coco.
 *
 * Callers: users and loaders/ through include/ferry/coco.h; index_cache.c
 * (ferry_coco_open of a path, through ferry__coco_open_json) and index_write.c (the parse
 * an index is made from) through the functions below. An open runs on the calling
 * thread; once open, a ferry_coco is never written again, so any number of threads may
 * call the accessors on it together (the loader's workers build targets from one).
 * Which way a buffer is opened:
 *   - bytes starting with the index magic are a binary index (index_read.c);
 *   - otherwise a strict open (no on_problem) first tries the streamed parse
 *     (json_stream.c), which never builds the tree of "annotations";
 *   - whatever the streamed parse declines, and every collecting open, is parsed from a
 *     whole jansson tree (parse.c), which is the reference for every error message.
 * Invariants: on failure *out is NULL and nothing is left allocated; on success the
 * jansson tree is gone (root is NULL): everything kept was copied into the coco's arrays,
 * so an opened coco costs its compact form only. Accessors check every index they are
 * given against the counts and fail with FERRY_EINVAL rather than read outside.
 * Not done here: the index cache and path policy (index_cache.c), the object's storage
 * and close (store.c), any validation of the JSON (parse.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "coco/coco.h"
#include "coco/index_read.h"
#include "coco/json_load.h"
#include "coco/json_stream.h"
#include "coco/parse.h"
#include "coco/segm.h"
#include "coco/store.h"
#include "lib/alloc.h"
#include "lib/status.h"

/* ---- open / close ----------------------------------------------------------------- */

void ferry_coco_options_init(ferry_coco_options *o, size_t size) {
  if (o) memset(o, 0, size < sizeof *o ? size : sizeof *o);
}

/* What programs built before ferry_coco_options_init call (the header's macro of this
 * name stands for init since; the parentheses keep it from expanding here): their
 * struct ends before labels_from, which is read only under FERRY_CATEGORIES_RFDETR, a
 * value those programs never set. */
void(ferry_coco_options_default)(ferry_coco_options *o) {
  ferry_coco_options_init(o, offsetof(ferry_coco_options, labels_from));
}

/* The string pool starts with "" so that offset 0 means an absent string. */
static ferry_status start_string_pool(ferry_coco *coco) {
  static const char empty = '\0';
  return ferry__coco_vec_push(&coco->strings, &empty);
}

/* An empty coco ready for parsing. Each way of parsing gets a fresh one: a declined
 * streamed attempt leaves a half-filled coco behind, which is closed, not reused. */
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
  if (!out || (!json && len)) return ferry__fail(FERRY_EINVAL, "ferry_coco_open_buffer: NULL argument");
  *out = NULL;
  if (!name) name = "<buffer>";
  /* A JSON text cannot start with "FERRYIDX" (not a JSON value), so the sniff never
   * takes a JSON for an index. */
  if (ferry__coco_index_sniff(json, len)) return ferry__coco_index_open_buffer(json, len, name, opts, out);
  /* Before any jansson call: the hooks must be in place before the first allocation,
   * since jansson frees through whichever pair is current. */
  ferry__coco_json_use_ferry_allocator();
  int declined;
  ferry_status st = open_streamed(json ? json : "", len, name, opts, out, &declined);
  if (!declined) return st;
  ferry_coco *coco = NULL;
  if ((st = coco_for_parsing(name, opts, &coco)) < 0) return st;
  json_error_t err;
  int out_of_memory;
  coco->root = ferry__coco_json_load(json ? json : "", len, &err, &out_of_memory);
  /* Out of memory first: jansson often reports a failed allocation as a syntax error,
   * which would blame the file for what the machine lacked. */
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

/* The head the caller built (categories, images), then its annotations one by one as
 * `next` yields them, each freed once added: coco/sidecars.c, whose sidecars are read
 * again one at a time, so that no tree of every annotation is ever built. */
ferry_status ferry__coco_open_stepwise(json_t *head, const json_t *annotated_ids, const char *name,
                                       const ferry_coco_options *opts, ferry__coco_annotation_fn next, void *user,
                                       ferry_coco **out) {
  ferry_coco *coco = NULL;
  ferry_status st = coco_for_parsing(name, opts, &coco);
  if (st < 0) return st;
  coco->root = head;
  coco->annotated_ids = annotated_ids;
  st = ferry__coco_parse_head(coco);
  for (size_t i = 0; st == FERRY_OK; i++) {
    json_t *annotation = NULL;
    if ((st = next(user, &annotation)) < 0 || !annotation) break;
    st = ferry__coco_add_annotation(coco, annotation, i);
    json_decref(annotation);
  }
  if (st == FERRY_OK) st = ferry__coco_parse_finish(coco);
  coco->root = NULL;
  coco->annotated_ids = NULL;
  if (st < 0) {
    ferry_coco_close(coco);
    return st;
  }
  *out = coco;
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

/* ---- accessors --------------------------------------------------------------------- */

/* The counts accept NULL (0) so that a caller can size loops before checking an open;
 * the accessors returning a status name the failing call instead. An index-backed coco
 * answers all of them from its backing bytes, exactly as a parsed one would. */

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
  const ferry__coco_image *img = &COCO_AT(coco->images, ferry__coco_image, index);
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
  const ferry__coco_category *cat = &COCO_AT(coco->categories, ferry__coco_category, index);
  if (id) *id = cat->id;
  if (name) *name = COCO_STRING(coco, cat->name);
  return FERRY_OK;
}

ferry_status ferry_coco_category_label(const ferry_coco *coco, size_t index, int64_t *label) {
  if (!coco || !label) return ferry__fail(FERRY_EINVAL, "ferry_coco_category_label: NULL argument");
  if (index >= coco->categories.n)
    return ferry__fail(FERRY_EINVAL, "%s: category index %zu out of range (%zu categories)", coco->name, index,
                      coco->categories.n);
  if (coco->category_labels) *label = coco->category_labels[index];
  else if (coco->opts.remap_categories) *label = (int64_t)index;
  else *label = COCO_AT(coco->categories, ferry__coco_category, index).id;
  return FERRY_OK;
}

ferry_status ferry_coco_annotation_at(const ferry_coco *coco, size_t index, ferry_coco_annotation *out) {
  if (!coco || !out) return ferry__fail(FERRY_EINVAL, "ferry_coco_annotation_at: NULL argument");
  if (index >= coco->anns.n)
    return ferry__fail(FERRY_EINVAL, "%s: annotation index %zu out of range (%zu annotations)", coco->name, index,
                      coco->anns.n);
  const ferry__coco_ann *ann = &COCO_AT(coco->anns, ferry__coco_ann, index);
  *out = ann->pub;
  /* The stored label is not used: it depends on the options of this open (remapped
   * categories or not), and an index built once serves opens with either. */
  out->label = ferry__coco_label(coco, ann);
  return FERRY_OK;
}

ferry_status ferry_coco_image_annotation(const ferry_coco *coco, size_t image, size_t k, size_t *annotation) {
  if (!coco || !annotation) return ferry__fail(FERRY_EINVAL, "ferry_coco_image_annotation: NULL argument");
  if (image >= coco->images.n)
    return ferry__fail(FERRY_EINVAL, "%s: image index %zu out of range (%zu images)", coco->name, image, coco->images.n);
  const ferry__coco_image *img = &COCO_AT(coco->images, ferry__coco_image, image);
  if (k >= img->num_anns)
    return ferry__fail(FERRY_EINVAL, "%s: image %lld has %zu annotations, asked for #%zu", coco->name,
                      (long long)img->id, img->num_anns, k);
  /* k < num_anns was checked, and parse/index_read guarantee first_ann + num_anns lies
   * inside image_anns. */
  *annotation = coco->image_anns[img->first_ann + k];
  return FERRY_OK;
}

ferry_status ferry_coco_annotation_rle(const ferry_coco *coco, size_t index, ferry_rle *out) {
  if (!coco || !out) return ferry__fail(FERRY_EINVAL, "ferry_coco_annotation_rle: NULL argument");
  if (index >= coco->anns.n)
    return ferry__fail(FERRY_EINVAL, "%s: annotation index %zu out of range (%zu annotations)", coco->name, index,
                      coco->anns.n);
  return ferry__coco_ann_rle(coco, &COCO_AT(coco->anns, ferry__coco_ann, index), out);
}
