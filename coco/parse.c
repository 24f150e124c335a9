/* coco/parse.c - from a jansson tree to ferry's compact form of a COCO file.
 *
 * Every element is checked where it is read, and a problem is reported with the file
 * name and the element's JSON path. In a collecting open (options.on_problem set) the
 * faulty image, category or annotation is reported and left out, and parsing goes on.
 *
 * Callers: coco.c (ferry__coco_parse, the whole tree) and json_stream.c (the same checks
 * in steps: head, each annotation, finish), on the opening thread. Both ways run the
 * same functions in the same order (categories, then images, then annotations), which
 * is why the streamed parse can promise the whole-tree parse's first error.
 * Invariants on return: what coco/store.h lists (bounded slices, sorted id tables,
 * image_anns grouped by image in file order); ids unique, except in a collecting open,
 * which reports a duplicate and keeps both elements; image sides within 0..INT32_MAX;
 * polygon parts keep len/2 vertices, as _mask.pyx's frPoly (k = int(len/2)) does with
 * an odd count.
 * Not done here: rasterising (segm.c), targets (target.c), freeing the tree (coco.c).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coco/categories.h"
#include "coco/parse.h"
#include "coco/store.h"
#include "lib/alloc.h"
#include "lib/status.h"

#define PATH_MAX_LEN 96
#define MAX_IMAGE_SIDE INT32_MAX

typedef struct parser {
  ferry_coco *coco;
  const char *name;
} parser;

/* FERRY_EFORMAT with "NAME: ELEM.FIELD: message" (".FIELD" left out when empty). */
static ferry_status bad(const parser *p, const char *elem, const char *field, const char *fmt, ...)
    FERRY_PRINTF(4, 5);
static ferry_status bad(const parser *p, const char *elem, const char *field, const char *fmt, ...) {
  char msg[FERRY_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *dot = field[0] && field[0] != '[' && elem[0] ? "." : "";
  return ferry__fail(FERRY_EFORMAT, "%s: %s%s%s: %s", p->name, elem, dot, field, msg);
}

static const char *json_kind(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
  }
  return "something else";
}

/* ---- scalar fields --------------------------------------------------------------- */

/* An integer, also written as a real with an integral value (as numpy-made files do). */
static int integer_value(const json_t *v, int64_t *out) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return 1;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    /* Up to 2^53 only: past it a double no longer holds every integer, so the value
     * read may not be the one the file wrote. */
    if (d == floor(d) && fabs(d) <= 9007199254740992.0) {
      *out = (int64_t)d;
      return 1;
    }
  }
  return 0;
}

/* Read obj[key] as an integer; *present = 0 (and OK) when absent or null and optional. */
static ferry_status get_integer(const parser *p, const char *elem, const json_t *obj, const char *key,
                                int required, int64_t *out, int *present) {
  const json_t *v = json_object_get(obj, key);
  *present = 0;
  if (!v || json_is_null(v)) return required ? bad(p, elem, key, "missing (expected an integer)") : FERRY_OK;
  if (!integer_value(v, out)) return bad(p, elem, key, "expected an integer, got %s", json_kind(v));
  *present = 1;
  return FERRY_OK;
}

static ferry_status get_optional_string(const parser *p, const char *elem, const json_t *obj, const char *key,
                                        uint64_t *out) {
  const json_t *v = json_object_get(obj, key);
  *out = 0;
  if (!v || json_is_null(v)) return FERRY_OK;
  if (!json_is_string(v)) return bad(p, elem, key, "expected a string, got %s", json_kind(v));
  return ferry__coco_intern(p->coco, json_string_value(v), strlen(json_string_value(v)), out);
}

static ferry_status get_image_side(const parser *p, const char *elem, const json_t *obj, const char *key,
                                   int64_t *out) {
  int present;
  *out = 0;
  ferry_status st = get_integer(p, elem, obj, key, 0, out, &present);
  if (st < 0) return st;
  if (*out < 0 || *out > MAX_IMAGE_SIDE)
    return bad(p, elem, key, "%lld is not a valid image size (0..%d)", (long long)*out, MAX_IMAGE_SIDE);
  return FERRY_OK;
}

/* ---- elements -------------------------------------------------------------------- */

/* memset first, here and in parse_category: the records are written to an index byte
 * for byte, so no field or padding may be left undefined. */
static ferry_status parse_image(const parser *p, const json_t *obj, const char *elem, ferry__coco_image *img) {
  memset(img, 0, sizeof *img);
  if (!json_is_object(obj)) return bad(p, elem, "", "expected an object, got %s", json_kind(obj));
  int present;
  ferry_status st;
  if ((st = get_integer(p, elem, obj, "id", 1, &img->id, &present)) < 0) return st;
  if ((st = get_optional_string(p, elem, obj, "file_name", &img->file_name)) < 0) return st;
  if ((st = get_image_side(p, elem, obj, "width", &img->width)) < 0) return st;
  return get_image_side(p, elem, obj, "height", &img->height);
}

static ferry_status parse_category(const parser *p, const json_t *obj, const char *elem, ferry__coco_category *cat) {
  memset(cat, 0, sizeof *cat);
  if (!json_is_object(obj)) return bad(p, elem, "", "expected an object, got %s", json_kind(obj));
  int present;
  ferry_status st;
  if ((st = get_integer(p, elem, obj, "id", 1, &cat->id, &present)) < 0) return st;
  if ((st = get_optional_string(p, elem, obj, "name", &cat->name)) < 0) return st;
  /* Read for RF-DETR's rule only, which takes a supercategory that is not a string as
   * naming no parent: kept as "" rather than refused, as it always was. */
  const json_t *super = json_object_get(obj, "supercategory");
  if (json_is_string(super) &&
      (st = ferry__coco_intern(p->coco, json_string_value(super), strlen(json_string_value(super)),
                               &cat->supercategory)) < 0)
    return st;
  const json_t *kp = json_object_get(obj, "keypoints");
  if (kp && !json_is_null(kp)) {
    if (!json_is_array(kp)) return bad(p, elem, "keypoints", "expected an array of names, got %s", json_kind(kp));
    cat->num_keypoints = json_array_size(kp);
  }
  return FERRY_OK;
}

static ferry_status parse_bbox(const parser *p, const char *elem, const json_t *obj, ferry__coco_ann *ann) {
  const json_t *v = json_object_get(obj, "bbox");
  if (!v || json_is_null(v)) return FERRY_OK;
  if (!json_is_array(v) || json_array_size(v) != 4)
    return bad(p, elem, "bbox", "expected an array of 4 numbers [x, y, width, height]");
  for (size_t j = 0; j < 4; j++) {
    const json_t *x = json_array_get(v, j);
    if (!json_is_number(x)) {
      char field[32];
      snprintf(field, sizeof field, "bbox[%zu]", j);
      return bad(p, elem, field, "expected a number, got %s", json_kind(x));
    }
    ann->pub.bbox[j] = json_number_value(x);
  }
  ann->pub.has_bbox = 1;
  return FERRY_OK;
}

static ferry_status parse_crowd(const parser *p, const char *elem, const json_t *obj, ferry__coco_ann *ann) {
  const char *key = json_object_get(obj, "iscrowd") ? "iscrowd" : "is_crowd";
  const json_t *v = json_object_get(obj, key);
  int64_t x = 0;
  if (!v || json_is_null(v)) return FERRY_OK;
  if (json_is_boolean(v)) x = json_is_true(v);
  else if (!integer_value(v, &x) || (x != 0 && x != 1))
    return bad(p, elem, key, "expected 0 or 1");
  ann->pub.iscrowd = (int)x;
  return FERRY_OK;
}

static ferry_status parse_polygons(const parser *p, const char *elem, const json_t *seg, ferry__coco_ann *ann) {
  ferry_coco *coco = p->coco;
  ann->pub.segm = FERRY_SEGM_POLYGONS;
  ann->seg_first = coco->parts.n;
  ann->pub.num_polygons = json_array_size(seg);
  ferry_status st = ferry__coco_vec_reserve(&coco->parts, ann->pub.num_polygons);
  for (size_t j = 0; j < ann->pub.num_polygons && st == FERRY_OK; j++) {
    const json_t *part = json_array_get(seg, j);
    char field[64];
    snprintf(field, sizeof field, "segmentation[%zu]", j);
    if (!json_is_array(part))
      return bad(p, elem, field, "expected a polygon (an array of numbers), got %s", json_kind(part));
    size_t len = json_array_size(part);
    ferry__coco_part cp = {.first = coco->coords.n, .k = len / 2};
    if ((st = ferry__coco_vec_reserve(&coco->coords, cp.k * 2)) < 0) return st;
    for (size_t t = 0; t < cp.k * 2 + len % 2; t++) {
      const json_t *x = json_array_get(part, t);
      if (!json_is_number(x)) {
        snprintf(field, sizeof field, "segmentation[%zu][%zu]", j, t);
        return bad(p, elem, field, "expected a number, got %s", json_kind(x));
      }
      if (t < cp.k * 2) COCO_AT(coco->coords, double, coco->coords.n++) = json_number_value(x);
    }
    st = ferry__coco_vec_push(&coco->parts, &cp);
  }
  return st;
}

static ferry_status parse_rle_size(const parser *p, const char *elem, const json_t *seg, ferry__coco_ann *ann) {
  const json_t *size = json_object_get(seg, "size");
  int64_t hw[2];
  if (!json_is_array(size) || json_array_size(size) != 2 || !integer_value(json_array_get(size, 0), &hw[0]) ||
      !integer_value(json_array_get(size, 1), &hw[1]) || hw[0] < 0 || hw[1] < 0 || hw[0] > UINT32_MAX ||
      hw[1] > UINT32_MAX)
    return bad(p, elem, "segmentation.size", "expected [height, width] (two non-negative integers)");
  /* ferry_rle's bound (maskApi.c counts runs in 32-bit uint), checked at open so that a
   * mask fails with its JSON path rather than when a target is first made. */
  if ((uint64_t)hw[0] * (uint64_t)hw[1] > UINT32_MAX)
    return bad(p, elem, "segmentation.size", "%lldx%lld exceeds 2^32-1 pixels", (long long)hw[0], (long long)hw[1]);
  ann->seg_h = (uint32_t)hw[0];
  ann->seg_w = (uint32_t)hw[1];
  return FERRY_OK;
}

static ferry_status parse_rle_counts(const parser *p, const char *elem, const json_t *counts, ferry__coco_ann *ann) {
  ferry_coco *coco = p->coco;
  size_t m = json_array_size(counts);
  ferry_status st = ferry__coco_vec_reserve(&coco->counts, m);
  if (st < 0) return st;
  ann->pub.segm = FERRY_SEGM_RLE_COUNTS;
  ann->seg_first = coco->counts.n;
  ann->seg_len = m;
  uint64_t sum = 0;
  for (size_t j = 0; j < m; j++) {
    int64_t c;
    if (!integer_value(json_array_get(counts, j), &c) || c < 0 || c > UINT32_MAX) {
      char field[64];
      snprintf(field, sizeof field, "segmentation.counts[%zu]", j);
      return bad(p, elem, field, "expected a run length (an integer 0..4294967295)");
    }
    sum += (uint64_t)c;
    COCO_AT(coco->counts, uint32_t, coco->counts.n++) = (uint32_t)c;
  }
  /* maskApi.c's rleDecode fails on runs past h*w and leaves the tail of a short table
   * unwritten; a table that does not cover the mask exactly is refused here instead.
   * The sum is in 64 bits: runs of up to 2^32-1 cannot wrap it in any array that fits
   * in memory. */
  uint64_t expected = (uint64_t)ann->seg_h * ann->seg_w;
  if (sum != expected)
    return bad(p, elem, "segmentation.counts", "runs sum to %llu, expected height*width = %llu",
               (unsigned long long)sum, (unsigned long long)expected);
  return FERRY_OK;
}

static ferry_status parse_segmentation(const parser *p, const char *elem, const json_t *obj, ferry__coco_ann *ann) {
  const json_t *seg = json_object_get(obj, "segmentation");
  ann->pub.segm = FERRY_SEGM_NONE;
  if (!seg || json_is_null(seg) || (json_is_array(seg) && json_array_size(seg) == 0)) return FERRY_OK;
  if (json_is_array(seg)) return parse_polygons(p, elem, seg, ann);
  if (!json_is_object(seg))
    return bad(p, elem, "segmentation", "expected polygons (an array) or an RLE object, got %s", json_kind(seg));
  ferry_status st = parse_rle_size(p, elem, seg, ann);
  if (st < 0) return st;
  const json_t *counts = json_object_get(seg, "counts");
  if (json_is_string(counts)) {
    ann->pub.segm = FERRY_SEGM_RLE;
    ann->seg_len = json_string_length(counts);
    return ferry__coco_intern(p->coco, json_string_value(counts), ann->seg_len, &ann->rle_string);
  }
  if (json_is_array(counts)) return parse_rle_counts(p, elem, counts, ann);
  return bad(p, elem, "segmentation.counts", "expected a string or an array of run lengths");
}

static ferry_status parse_keypoints(const parser *p, const char *elem, const json_t *obj, ferry__coco_ann *ann) {
  ferry_coco *coco = p->coco;
  const json_t *kp = json_object_get(obj, "keypoints");
  if (!kp || json_is_null(kp)) return FERRY_OK;
  if (!json_is_array(kp)) return bad(p, elem, "keypoints", "expected an array of numbers, got %s", json_kind(kp));
  size_t len = json_array_size(kp);
  if (len % 3) return bad(p, elem, "keypoints", "%zu numbers is not a multiple of 3 (x, y, visibility)", len);
  if (coco->num_keypoints && len / 3 > coco->num_keypoints)
    return bad(p, elem, "keypoints", "%zu keypoints, but the categories name at most %zu", len / 3,
               coco->num_keypoints);
  ferry_status st = ferry__coco_vec_reserve(&coco->keypoints, len);
  if (st < 0) return st;
  ann->kp_first = coco->keypoints.n;
  ann->pub.num_keypoints = len / 3;
  for (size_t j = 0; j < len; j++) {
    const json_t *x = json_array_get(kp, j);
    if (!json_is_number(x)) {
      char field[48];
      snprintf(field, sizeof field, "keypoints[%zu]", j);
      return bad(p, elem, field, "expected a number, got %s", json_kind(x));
    }
    COCO_AT(coco->keypoints, float, coco->keypoints.n++) = (float)json_number_value(x);
  }
  return FERRY_OK;
}

/* image_id and category_id, resolved against the file's images and categories. */
static ferry_status parse_references(const parser *p, const char *elem, const json_t *obj, ferry__coco_ann *ann) {
  ferry_coco *coco = p->coco;
  int present, result = coco->result_list;
  ferry_status st = get_integer(p, elem, obj, "image_id", 1, &ann->pub.image_id, &present);
  if (st < 0) return st;
  ann->pub.image_index = SIZE_MAX;
  if (!result) {
    ann->pub.image_index = ferry__coco_id_lookup(coco->image_ids, coco->images.n, ann->pub.image_id);
    if (ann->pub.image_index == SIZE_MAX)
      return bad(p, elem, "image_id", "no image %lld", (long long)ann->pub.image_id);
  }
  if ((st = get_integer(p, elem, obj, "category_id", !result, &ann->pub.category_id, &present)) < 0) return st;
  ann->pub.label = ann->pub.category_id;  /* remapped on access: ferry__coco_label */
  if (present) coco->any_category_id = 1;
  /* Without categories (a bare annotation list, a result list) there is nothing to
   * check an id against: labels are the ids as written, unless asked to remap. */
  if (!present || coco->categories.n == 0) {
    if (coco->opts.remap_categories && present)
      return bad(p, elem, "category_id", "cannot remap category ids: the file has no categories");
    return FERRY_OK;
  }
  size_t cat = ferry__coco_id_lookup(coco->category_ids, coco->categories.n, ann->pub.category_id);
  if (cat == SIZE_MAX) return bad(p, elem, "category_id", "no category %lld", (long long)ann->pub.category_id);
  return FERRY_OK;
}

static ferry_status parse_annotation(const parser *p, const json_t *obj, const char *elem, ferry__coco_ann *ann) {
  if (!json_is_object(obj)) return bad(p, elem, "", "expected an object, got %s", json_kind(obj));
  int present;
  ferry_status st = get_integer(p, elem, obj, "id", 0, &ann->pub.id, &present);
  if (st < 0) return st;
  ann->pub.has_id = present;
  if ((st = parse_references(p, elem, obj, ann)) < 0) return st;
  if ((st = parse_bbox(p, elem, obj, ann)) < 0) return st;
  const json_t *area = json_object_get(obj, "area");
  if (area && !json_is_null(area)) {
    if (!json_is_number(area)) return bad(p, elem, "area", "expected a number, got %s", json_kind(area));
    ann->pub.area = json_number_value(area);
  }
  if ((st = parse_crowd(p, elem, obj, ann)) < 0) return st;
  if ((st = parse_segmentation(p, elem, obj, ann)) < 0) return st;
  return parse_keypoints(p, elem, obj, ann);
}

/* ---- arrays ----------------------------------------------------------------------- */

/* A problem in one element: fatal unless collecting (and never for out-of-memory). */
static ferry_status element_problem(const parser *p, ferry_status st) {
  const ferry_coco_options *o = &p->coco->opts;
  if (!o->on_problem || st == FERRY_ENOMEM) return st;
  o->on_problem(o->problem_user, ferry_last_error());
  return FERRY_OK;
}

/* A top-level array. An optional one may be absent, but not null: pycocotools iterates
 * over whatever the key holds and fails on null, so a file with "annotations": null is
 * not the empty set it may look like to a reader. */
static const json_t *top_array(const parser *p, const char *key, int required, ferry_status *st) {
  const json_t *v = json_object_get(p->coco->root, key);
  *st = FERRY_OK;
  if (!v) {
    if (required) *st = bad(p, key, "", "missing (expected an array)");
    return NULL;
  }
  if (!json_is_array(v))
    *st = bad(p, key, "", "expected an array%s, got %s", required ? "" : " (or no such key)", json_kind(v));
  return json_is_array(v) ? v : NULL;
}

/* Ties broken by position: qsort is not stable, and a duplicate must always be reported
 * on the later element, naming the earlier one. */
static int compare_ids(const void *a, const void *b) {
  const ferry__coco_id_entry *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* Sorted id table of n elements read by `id_of`; duplicate ids are problems, named by
 * their positions in the file's array (json_pos[i] for stored element i: they differ
 * once a faulty element was reported and left out). */
static ferry_status build_id_table(const parser *p, const char *array, const ferry__coco_vec *v, size_t id_offset,
                                   const size_t *json_pos, ferry__coco_id_entry **out) {
  ferry__coco_id_entry *t = ferry__malloc((v->n ? v->n : 1) * sizeof *t);
  if (!t) return ferry__fail(FERRY_ENOMEM, "%s: out of memory indexing %s", p->name, array);
  for (size_t i = 0; i < v->n; i++) {
    memcpy(&t[i].id, (const char *)v->data + i * v->elem + id_offset, sizeof(int64_t));
    t[i].index = i;
  }
  qsort(t, v->n, sizeof *t, compare_ids);
  *out = t;
  for (size_t i = 1; i < v->n; i++) {
    if (t[i].id != t[i - 1].id) continue;
    char elem[PATH_MAX_LEN];
    snprintf(elem, sizeof elem, "%s[%zu]", array, json_pos[t[i].index]);
    ferry_status st = bad(p, elem, "id", "duplicate id %lld (also %s[%zu])", (long long)t[i].id, array,
                          json_pos[t[i - 1].index]);
    if ((st = element_problem(p, st)) < 0) return st;
  }
  return FERRY_OK;
}

/* One element parser of an id-keyed top-level array ("categories", "images"). */
typedef ferry_status (*element_parser)(const parser *p, const json_t *obj, const char *elem, void *out);

static ferry_status category_element(const parser *p, const json_t *obj, const char *elem, void *out) {
  return parse_category(p, obj, elem, out);
}

static ferry_status image_element(const parser *p, const json_t *obj, const char *elem, void *out) {
  return parse_image(p, obj, elem, out);
}

/* Parse every element of top-level `array` into `vec` (a faulty element is reported
 * and skipped when the options allow it), then index the elements by id. */
static ferry_status parse_id_array(const parser *p, const char *array, int required, element_parser parse,
                                   ferry__coco_vec *vec, size_t id_offset, ferry__coco_id_entry **ids) {
  ferry_status st;
  const json_t *arr = top_array(p, array, required, &st);
  if (st < 0 && (st = element_problem(p, st)) < 0) return st;
  ferry__coco_vec json_pos = {.elem = sizeof(size_t)}; /* of each element kept */
  for (size_t i = 0; arr && i < json_array_size(arr); i++) {
    char elem[PATH_MAX_LEN];
    snprintf(elem, sizeof elem, "%s[%zu]", array, i);
    union {
      ferry__coco_category category;
      ferry__coco_image image;
    } value;
    st = parse(p, json_array_get(arr, i), elem, &value);
    if (st == FERRY_OK) {
      if ((st = ferry__coco_vec_push(vec, &value)) == FERRY_OK) st = ferry__coco_vec_push(&json_pos, &i);
    } else {
      st = element_problem(p, st);
    }
    if (st < 0) break;
  }
  if (st >= 0) st = build_id_table(p, array, vec, id_offset, json_pos.data, ids);
  ferry__coco_vec_free(&json_pos);
  return st;
}

static ferry_status parse_categories(const parser *p) {
  ferry_coco *coco = p->coco;
  ferry_status st = parse_id_array(p, "categories", 0, category_element, &coco->categories,
                                   offsetof(ferry__coco_category, id), &coco->category_ids);
  for (size_t i = 0; st == FERRY_OK && i < coco->categories.n; i++) {
    size_t k = COCO_AT(coco->categories, ferry__coco_category, i).num_keypoints;
    if (k > coco->num_keypoints) coco->num_keypoints = k;
  }
  return st;
}

static ferry_status parse_images(const parser *p) {
  ferry_coco *coco = p->coco;
  return parse_id_array(p, "images", 1, image_element, &coco->images, offsetof(ferry__coco_image, id),
                        &coco->image_ids);
}

/* Annotation i of the file: appended, or (collecting) reported and left out. */
static ferry_status add_annotation(const parser *p, const json_t *obj, size_t i) {
  ferry_coco *coco = p->coco;
  char elem[PATH_MAX_LEN];
  snprintf(elem, sizeof elem, "%s[%zu]", ferry__coco_ann_array_name(coco), i);
  ferry__coco_ann ann;
  memset(&ann, 0, sizeof ann);
  ann.pub.json_index = i;
  size_t marks[5] = {coco->parts.n, coco->coords.n, coco->counts.n, coco->keypoints.n, coco->strings.n};
  ferry_status st = parse_annotation(p, obj, elem, &ann);
  if (st == FERRY_OK) return ferry__coco_vec_push(&coco->anns, &ann);
  coco->parts.n = marks[0];  /* drop what the faulty annotation appended */
  coco->coords.n = marks[1];
  coco->counts.n = marks[2];
  coco->keypoints.n = marks[3];
  coco->strings.n = marks[4];
  return element_problem(p, st);
}

static ferry_status parse_annotations(const parser *p, const json_t *arr) {
  ferry_status st;
  for (size_t i = 0; arr && i < json_array_size(arr); i++)
    if ((st = add_annotation(p, json_array_get(arr, i), i)) < 0) return st;
  return FERRY_OK;
}

ferry_status ferry__coco_add_annotation(ferry_coco *coco, const json_t *obj, size_t i) {
  parser p = {.coco = coco, .name = coco->name};
  return add_annotation(&p, obj, i);
}

/* Group annotation indices by image (a counting sort keeps file order within each). */
static ferry_status build_image_index(ferry_coco *coco) {
  size_t n = coco->anns.n;
  coco->image_anns = ferry__malloc((n ? n : 1) * sizeof(size_t));
  if (!coco->image_anns) return ferry__fail(FERRY_ENOMEM, "%s: out of memory indexing annotations", coco->name);
  ferry__coco_image *imgs = coco->images.data;
  for (size_t i = 0; i < n; i++) {
    size_t img = COCO_AT(coco->anns, ferry__coco_ann, i).pub.image_index;
    if (img != SIZE_MAX) imgs[img].num_anns++;
  }
  size_t offset = 0;
  for (size_t i = 0; i < coco->images.n; i++) {
    imgs[i].first_ann = offset;
    offset += imgs[i].num_anns;
    imgs[i].num_anns = 0;
  }
  for (size_t i = 0; i < n; i++) {
    size_t img = COCO_AT(coco->anns, ferry__coco_ann, i).pub.image_index;
    if (img != SIZE_MAX) coco->image_anns[imgs[img].first_ann + imgs[img].num_anns++] = i;
  }
  return FERRY_OK;
}

ferry_status ferry__coco_parse_head(ferry_coco *coco) {
  parser p = {.coco = coco, .name = coco->name};
  ferry_status st;
  if (!json_is_object(coco->root)) return ferry__fail(FERRY_EFORMAT, "%s: expected a COCO object at the top level", coco->name);
  if ((st = parse_categories(&p)) < 0) return st;
  return parse_images(&p);
}

ferry_status ferry__coco_parse_finish(ferry_coco *coco) {
  ferry_status st = build_image_index(coco);
  return st < 0 ? st : ferry__coco_assign_labels(coco);
}

ferry_status ferry__coco_parse(ferry_coco *coco) {
  parser p = {.coco = coco, .name = coco->name};
  ferry_status st;
  if (json_is_array(coco->root)) {
    coco->result_list = 1;
    if ((st = parse_annotations(&p, coco->root)) < 0) return st;
  } else if (json_is_object(coco->root)) {
    if ((st = ferry__coco_parse_head(coco)) < 0) return st;
    const json_t *anns = top_array(&p, "annotations", 0, &st);
    if (st < 0 && (st = element_problem(&p, st)) < 0) return st;
    if ((st = parse_annotations(&p, anns)) < 0) return st;
  } else {
    return ferry__fail(FERRY_EFORMAT, "%s: expected a COCO object or a result list (array) at the top level", coco->name);
  }
  return ferry__coco_parse_finish(coco);
}
