/* coco/sidecars.c - a split's ferry_coco from its samples' JSON sidecars, in two passes
 * (coco/sidecars.h).
 *
 * Owns the builder: the images' entries (a jansson array, the head's "images"), each
 * sample's first annotation over the split, annotation count and problem flag, every
 * annotation's category_id (for a split without categories), and the pending sample's
 * image id and file name between read and add. Runs on the opening thread.
 * Invariants: entries, ann_first, counts and problem have one element per sample
 * added, in order; a sample with a problem has count 0 and is never read again;
 * ann_first[i] is the sum of the counts before i, so parse.c's "annotations[k]" names
 * the last sample whose ann_first <= k.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coco/coco.h"
#include "coco/json_load.h"
#include "coco/sidecars.h"
#include "lib/alloc.h"
#include "lib/status.h"

struct ferry__sidecars {
  const char *spec;
  json_t *images;
  size_t num, cap;   /* samples added; the arrays' room */
  size_t *ann_first; /* each sample's first annotation over the split */
  size_t *counts;    /* its annotations */
  uint8_t *problem;
  size_t num_annotations;
  int64_t *category_ids; /* every annotation's category_id (a split without categories) */
  size_t num_category_ids, category_cap;
  int64_t max_id;
  int any_id;
  int pending; /* read, not yet added: */
  int64_t pending_id;
  json_t *pending_name; /* its file_name, or NULL */
  size_t pending_count;
};

ferry_status ferry__sidecars_new(const char *spec, ferry__sidecars **out) {
  ferry__coco_json_use_ferry_allocator();
  ferry__sidecars *b = ferry__calloc(1, sizeof *b);
  if (b) b->images = json_array();
  if (!b || !b->images) {
    ferry__free(b);
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory", spec);
  }
  b->spec = spec;
  *out = b;
  return FERRY_OK;
}

void ferry__sidecars_free(ferry__sidecars *b) {
  if (!b) return;
  json_decref(b->images);
  json_decref(b->pending_name);
  ferry__free(b->ann_first);
  ferry__free(b->counts);
  ferry__free(b->problem);
  ferry__free(b->category_ids);
  ferry__free(b);
}

/* Each annotation gets the sidecar's image_id when it has none, and must have that
 * one when it has one. */
static ferry_status own_image_ids(const char *shard, const char *member, json_t *list, int64_t id) {
  for (size_t k = 0; k < json_array_size(list); k++) {
    json_t *ann = json_array_get(list, k);
    const json_t *own = json_object_get(ann, "image_id");
    if (json_is_object(ann) && !own && json_object_set_new(ann, "image_id", json_integer(id)) != 0)
      return ferry__fail(FERRY_ENOMEM, "%s: out of memory", shard);
    if (own && !(json_is_integer(own) && json_integer_value(own) == id))
      return ferry__fail(FERRY_EFORMAT, "%s: member '%s': annotations[%zu].image_id is not the sidecar's image_id %lld",
                         shard, member, k, (long long)id);
  }
  return FERRY_OK;
}

/* The sidecar's image_id, file_name and annotations, checked. */
static ferry_status parse_sidecar(const char *shard, const char *member, const char *bytes, size_t len, int64_t *id,
                                  json_t **file_name, json_t **anns) {
  json_error_t err;
  int oom = 0;
  json_t *doc = ferry__coco_json_load(bytes, len, &err, &oom);
  if (oom) return ferry__fail(FERRY_ENOMEM, "%s: member '%s': out of memory", shard, member);
  if (!doc) return ferry__fail(FERRY_EFORMAT, "%s: member '%s': invalid JSON: %s", shard, member, err.text);
  const json_t *image_id = json_object_get(doc, "image_id"), *name = json_object_get(doc, "file_name");
  json_t *list = json_object_get(doc, "annotations");
  ferry_status st = FERRY_OK;
  if (!json_is_integer(image_id) || (name && !json_is_string(name)) || !json_is_array(list))
    st = ferry__fail(FERRY_EFORMAT,
                     "%s: member '%s': a sidecar is an object with an integer \"image_id\", a "
                     "string \"file_name\" and an array \"annotations\"",
                     shard, member);
  if (st == FERRY_OK) *id = json_integer_value(image_id);
  if (st == FERRY_OK) st = own_image_ids(shard, member, list, *id);
  if (st == FERRY_OK) {
    *file_name = name ? json_incref((json_t *)name) : NULL;
    *anns = json_incref(list);
  }
  json_decref(doc);
  return st;
}

/* The category ids of a sample's annotations, kept for a split without categories. */
static ferry_status note_categories(ferry__sidecars *b, const json_t *anns) {
  for (size_t k = 0; k < json_array_size(anns); k++) {
    const json_t *c = json_object_get(json_array_get(anns, k), "category_id");
    if (!json_is_integer(c)) continue;
    if (b->num_category_ids == b->category_cap) {
      size_t cap = b->category_cap ? 2 * b->category_cap : 1024;
      int64_t *grown = ferry__realloc(b->category_ids, cap * sizeof *grown);
      if (!grown) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
      b->category_ids = grown;
      b->category_cap = cap;
    }
    b->category_ids[b->num_category_ids++] = json_integer_value(c);
  }
  return FERRY_OK;
}

ferry_status ferry__sidecars_read(ferry__sidecars *b, const char *shard, const char *member, const char *bytes,
                                  size_t len) {
  json_decref(b->pending_name);
  b->pending_name = NULL;
  b->pending = 0;
  json_t *anns = NULL;
  ferry_status st = parse_sidecar(shard, member, bytes, len, &b->pending_id, &b->pending_name, &anns);
  if (st == FERRY_OK) st = note_categories(b, anns);
  b->pending = st == FERRY_OK || b->pending_name; /* its file name names the entry even if a later step fails */
  b->pending_count = json_array_size(anns);
  json_decref(anns);
  return st;
}

static ferry_status grow(ferry__sidecars *b) {
  if (b->num < b->cap) return FERRY_OK;
  size_t cap = b->cap ? 2 * b->cap : 1024;
  size_t *first = ferry__realloc(b->ann_first, cap * sizeof *first);
  if (first) b->ann_first = first;
  size_t *counts = ferry__realloc(b->counts, cap * sizeof *counts);
  if (counts) b->counts = counts;
  uint8_t *problem = ferry__realloc(b->problem, cap);
  if (problem) b->problem = problem;
  if (!first || !counts || !problem)
    return ferry__fail(FERRY_ENOMEM, "%s: out of memory for %zu samples", b->spec, cap);
  b->cap = cap;
  return FERRY_OK;
}

/* A problem sample's id is 0 until every id is known (place_problems). */
ferry_status ferry__sidecars_add(ferry__sidecars *b, const char *member, int problem, int width, int height) {
  ferry_status st = grow(b);
  json_t *file_name = b->pending ? b->pending_name : NULL;
  int64_t id = problem || !b->pending ? 0 : b->pending_id;
  b->pending_name = NULL;
  if (st < 0) {
    json_decref(file_name);
    return st;
  }
  size_t i = b->num++;
  b->problem[i] = problem != 0;
  b->counts[i] = problem || !b->pending ? 0 : b->pending_count;
  b->ann_first[i] = b->num_annotations;
  b->num_annotations += b->counts[i];
  b->pending = 0;
  if (problem) width = height = 1;
  else if (!b->any_id || id > b->max_id) {
    b->max_id = id;
    b->any_id = 1;
  }
  /* json_pack takes file_name ("o") and json_array_append_new the entry even when they
   * fail: nothing is left to free here. */
  json_t *img = file_name ? json_pack("{s:o, s:I, s:i, s:i}", "file_name", file_name, "id", (json_int_t)id, "width",
                                      width, "height", height)
                          : json_pack("{s:s, s:I, s:i, s:i}", "file_name", member, "id", (json_int_t)id, "width", width,
                                      "height", height);
  return json_array_append_new(b->images, img) != 0 ? ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec)
                                                    : FERRY_OK;
}

/* ---- finishing ----------------------------------------------------------------------- */

/* Samples with a problem get ids after every real one, so that none collides. */
static ferry_status place_problems(ferry__sidecars *b) {
  int64_t next = b->any_id ? b->max_id + 1 : 0;
  for (size_t i = 0; i < b->num; i++)
    if (b->problem[i] && json_object_set_new(json_array_get(b->images, i), "id", json_integer(next++)))
      return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  return FERRY_OK;
}

static int compare_int64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

/* Without an index: one category per category_id the annotations use, sorted, named by
 * nothing (the sidecars carry no names). Sorts b->category_ids. */
static ferry_status seen_categories(ferry__sidecars *b, json_t **out) {
  int64_t *ids = b->category_ids;
  size_t k = b->num_category_ids;
  *out = json_array();
  if (!*out) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  if (k) qsort(ids, k, sizeof *ids, compare_int64);
  int bad = 0;
  for (size_t i = 0; i < k; i++) {
    if (i && ids[i] == ids[i - 1]) continue;
    bad |= json_array_append_new(*out, json_pack("{s:I, s:s}", "id", (json_int_t)ids[i], "name", "")) != 0;
  }
  return bad ? ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec) : FERRY_OK;
}

/* The annotations, read again one sidecar at a time. */
typedef struct annotation_stream {
  ferry__sidecars *b;
  ferry__sidecar_reread_fn reread;
  void *user;
  size_t sample; /* the next sample to read */
  json_t *anns;  /* the current sample's annotations */
  size_t k;      /* the next of them */
} annotation_stream;

/* The sidecar of `sample`, read again: its annotations, as the first reading saw them. */
static ferry_status reread_sidecar(annotation_stream *s, size_t sample) {
  const char *bytes, *shard, *label;
  size_t len;
  ferry_status st = s->reread(s->user, sample, &bytes, &len, &shard, &label);
  if (st < 0) return st;
  int64_t id;
  json_t *file_name = NULL;
  st = parse_sidecar(shard, label, bytes, len, &id, &file_name, &s->anns);
  json_decref(file_name);
  if (st == FERRY_OK && json_array_size(s->anns) != s->b->counts[sample])
    st = ferry__fail(FERRY_EFORMAT, "%s: member '%s' changed while the split was opened", shard, label);
  return st;
}

static ferry_status next_annotation(void *user, json_t **out) {
  annotation_stream *s = user;
  *out = NULL;
  while (!s->anns || s->k >= json_array_size(s->anns)) {
    json_decref(s->anns);
    s->anns = NULL;
    s->k = 0;
    if (s->sample >= s->b->num) return FERRY_OK;
    size_t sample = s->sample++;
    if (s->b->counts[sample] == 0) continue;
    ferry_status st = reread_sidecar(s, sample);
    if (st < 0) return st;
  }
  *out = json_incref(json_array_get(s->anns, s->k++));
  return FERRY_OK;
}

/* A message parse.c gave about "images[i]" or "annotations[i]" of the built object,
 * with the sample it came from. */
static ferry_status name_element(const ferry__sidecars *b, ferry__sidecar_name_fn name, void *user, ferry_status st) {
  const char *msg = ferry_last_error();
  const char *at = strstr(msg, ": images["), *ann = strstr(msg, ": annotations[");
  size_t i = 0, sample = SIZE_MAX;
  if (at && sscanf(at, ": images[%zu]", &i) == 1 && i < b->num) sample = i;
  if (ann && sscanf(ann, ": annotations[%zu]", &i) == 1) {
    for (size_t s = 0; s < b->num && b->ann_first[s] <= i; s++) sample = s;
  }
  if (sample == SIZE_MAX) return st;
  const char *shard, *member;
  name(user, sample, &shard, &member);
  return ferry__error_prefix(st, "%s, sample of member '%s': ", shard, member);
}

/* The head's categories and the ids RF-DETR's rule takes as annotated (NULL: none
 * given), and the options' label policy for an index. */
static ferry_status label_with(ferry__sidecars *b, const ferry__sidecar_labels *labels, ferry_coco_options *o,
                               json_t **categories, json_t **annotated) {
  if (!labels->from_index) return seen_categories(b, categories);
  /* An index's categories as they are; its policy says how they label: "raw" ids, or
   * RF-DETR's rule over the index's own annotated_category_ids (ShardIndex.cat2label;
   * an index without that list names no category annotated). */
  *categories = labels->categories ? json_incref((json_t *)labels->categories) : json_array();
  o->remap_categories = labels->raw ? FERRY_CATEGORIES_RAW : FERRY_CATEGORIES_RFDETR;
  o->labels_from = NULL;
  if (!labels->raw) *annotated = labels->annotated ? json_incref((json_t *)labels->annotated) : json_array();
  if (!labels->raw && !*annotated) return ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  return FERRY_OK;
}

ferry_status ferry__sidecars_finish(ferry__sidecars *b, const ferry__sidecar_labels *labels,
                                    const ferry_coco_options *opts, ferry__sidecar_reread_fn reread,
                                    ferry__sidecar_name_fn name, void *user, ferry_coco **coco) {
  *coco = NULL;
  ferry_status st = place_problems(b);
  if (st < 0) return st;
  ferry_coco_options o;
  if (opts) o = *opts;
  else ferry_coco_options_default(&o);
  json_t *categories = NULL, *annotated = NULL;
  st = label_with(b, labels, &o, &categories, &annotated);
  json_t *head = json_object();
  if (st == FERRY_OK && (!head || !categories || json_object_set(head, "categories", categories) ||
                         json_object_set(head, "images", b->images)))
    st = ferry__fail(FERRY_ENOMEM, "%s: out of memory", b->spec);
  annotation_stream stream = {.b = b, .reread = reread, .user = user};
  if (st == FERRY_OK &&
      (st = ferry__coco_open_stepwise(head, annotated, b->spec, &o, next_annotation, &stream, coco)) < 0)
    st = name_element(b, name, user, st);
  json_decref(stream.anns);
  json_decref(categories);
  json_decref(annotated);
  json_decref(head);
  return st;
}
