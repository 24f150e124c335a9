/* coco/categories.c - RF-DETR's category rule: which categories take a label, and which.
 *
 * Owns ferry_coco.category_labels (allocated here, freed by ferry_coco_close).
 * The rule, restated from RF-DETR 1.11 (rfdetr/datasets/coco.py, filter_parent_categories
 * and CocoDetection's remap): a category is a *parent* when another category names it
 * as its "supercategory" (a placeholder - "", "none", "null", null, absent - names no
 * parent, nor does a category's own name as its own supercategory); a parent that no
 * annotation uses is dropped, unless that would drop every category; the rest, sorted
 * by id, take labels 0, 1, ... in that order.
 * Invariants: after ferry__coco_assign_labels under FERRY_CATEGORIES_RFDETR,
 * category_labels has one entry per category (categories order), each -1 or a label,
 * the labels being distinct; every annotation's category has a label (else the open
 * failed). An opened coco's table is never written again (many threads read it).
 */
#include <string.h>

#include "coco/categories.h"
#include "coco/store.h"
#include "lib/alloc.h"
#include "lib/status.h"

static int is_placeholder(const char *super) {
  return !super[0] || !strcmp(super, "none") || !strcmp(super, "null");
}

/* Category i is named as the supercategory of some category other than itself. */
static int is_parent(const ferry_coco *coco, size_t i) {
  const ferry__coco_category *cats = coco->categories.data;
  const char *name = COCO_STRING(coco, cats[i].name);
  for (size_t k = 0; k < coco->categories.n; k++) {
    const char *super = COCO_STRING(coco, cats[k].supercategory);
    const char *other = COCO_STRING(coco, cats[k].name);
    if (!is_placeholder(super) && strcmp(super, other) != 0 && !strcmp(super, name)) return 1;
  }
  return 0;
}

/* annotated[i] = 1 when category i is used: by a shard index's list of annotated ids
 * when a stepwise open was handed one (RF-DETR's ShardIndex reads that list), else by
 * any annotation of the file, crowds included (RF-DETR reads every annotation). */
static void mark_annotated(const ferry_coco *coco, unsigned char *annotated) {
  size_t n = coco->categories.n;
  if (coco->annotated_ids) {
    for (size_t k = 0; k < json_array_size(coco->annotated_ids); k++) {
      const json_t *id = json_array_get(coco->annotated_ids, k);
      size_t i = json_is_integer(id) ? ferry__coco_id_lookup(coco->category_ids, n, json_integer_value(id)) : SIZE_MAX;
      if (i != SIZE_MAX) annotated[i] = 1;
    }
    return;
  }
  for (size_t a = 0; a < coco->anns.n; a++) {
    size_t i = ferry__coco_id_lookup(coco->category_ids, n, COCO_AT(coco->anns, ferry__coco_ann, a).pub.category_id);
    if (i != SIZE_MAX) annotated[i] = 1;
  }
}

/* The rule on this file's own categories and annotations. */
static ferry_status own_labels(const ferry_coco *coco, int64_t *labels) {
  size_t n = coco->categories.n;
  unsigned char *dropped = ferry__calloc(n ? n : 1, 2);
  if (!dropped) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for the category labels", coco->name);
  unsigned char *annotated = dropped + n;
  mark_annotated(coco, annotated);
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    dropped[i] = !annotated[i] && is_parent(coco, i);
    kept += !dropped[i];
  }
  /* In id order (category_ids is sorted by id): the k-th kept category's label is k. */
  int64_t next = 0;
  for (size_t k = 0; k < n; k++) {
    size_t i = coco->category_ids[k].index;
    labels[i] = kept && dropped[i] ? -1 : next++;
  }
  ferry__free(dropped);
  return FERRY_OK;
}

/* Each category's label in `from`, looked up by id; -1 where `from` has none. */
static ferry_status borrowed_labels(const ferry_coco *coco, const ferry_coco *from, int64_t *labels) {
  if (from->opts.remap_categories != FERRY_CATEGORIES_RFDETR || !from->category_labels)
    return ferry__fail(FERRY_EINVAL, "%s: the labels_from coco (%s) was not opened with FERRY_CATEGORIES_RFDETR",
                      coco->name, from->name);
  for (size_t i = 0; i < coco->categories.n; i++) {
    size_t j = ferry__coco_id_lookup(from->category_ids, from->categories.n,
                                     COCO_AT(coco->categories, ferry__coco_category, i).id);
    labels[i] = j == SIZE_MAX ? -1 : from->category_labels[j];
  }
  return FERRY_OK;
}

/* Every annotation's category must have a label: a dropped or foreign category would
 * otherwise give a sample no class at all, found only when its image is loaded. */
static ferry_status check_every_annotation(const ferry_coco *coco) {
  const char *from = coco->opts.labels_from ? coco->opts.labels_from->name : coco->name;
  for (size_t a = 0; a < coco->anns.n; a++) {
    const ferry__coco_ann *ann = &COCO_AT(coco->anns, ferry__coco_ann, a);
    size_t i = ferry__coco_id_lookup(coco->category_ids, coco->categories.n, ann->pub.category_id);
    if (i == SIZE_MAX || coco->category_labels[i] >= 0) continue;
    return ferry__fail(FERRY_EFORMAT, "%s: %s[%zu].category_id: category %lld has no label in the label space of %s "
                       "(RF-DETR's rule: its categories less the grouping ones no annotation uses)", coco->name,
                       ferry__coco_ann_array_name(coco), ann->pub.json_index, (long long)ann->pub.category_id, from);
  }
  return FERRY_OK;
}

ferry_status ferry__coco_assign_labels(ferry_coco *coco) {
  if (coco->opts.remap_categories != FERRY_CATEGORIES_RFDETR) return FERRY_OK;
  size_t n = coco->categories.n;
  coco->category_labels = ferry__malloc((n ? n : 1) * sizeof *coco->category_labels);
  if (!coco->category_labels) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for the category labels", coco->name);
  ferry_status st = coco->opts.labels_from ? borrowed_labels(coco, coco->opts.labels_from, coco->category_labels)
                                           : own_labels(coco, coco->category_labels);
  if (st == FERRY_OK) st = check_every_annotation(coco);
  return st;
}
