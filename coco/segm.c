/* coco/segm.c - an annotation's "segmentation" as a mask, by pycocotools' annToRLE rules:
 * polygon parts rasterised at the image's size and merged by union (a part with fewer
 * than 3 vertices is empty), RLE dicts decoded at their own "size".
 *
 * Callers: target.c (masks of targets) and coco.c (ferry_coco_annotation_rle), from any
 * thread: the coco is only read, and every call allocates its own RLEs.
 * What each rule reproduces (coco.py's annToRLE, _mask.pyx, maskApi.c):
 *   - a list is polygons: frPyObjects(segm, h, w) with h, w from the image of
 *     ann["image_id"], then merge(rles) with intersect = 0 (a union);
 *   - an uncompressed RLE ({"counts": [...]}) goes through frPyObjects too, which takes
 *     its size from the dict's own "size", not from the image: so does this file;
 *   - a compressed RLE (counts a string) is used as it is, again at its own "size".
 * A size that differs from the image is therefore not an error here; target.c, which
 * resizes to the image's frame, refuses it.
 * Deliberately different (docs/coco.md, "Mask rules"): a part with 1 or 2 vertices is an
 * empty mask, and a first part of exactly 4 numbers is a polygon, where frPyObjects takes
 * the whole list for boxes.
 * Invariants: on success *out sums to h*w with h*w < 2^32 (checked here for polygons,
 * by rle.c for RLE dicts); a failure's message names the file, the annotation's JSON
 * path and, for a polygon, the part.
 */
#include "coco/segm.h"
#include "coco/store.h"
#include "lib/alloc.h"
#include "lib/status.h"

static ferry_status polygons_rle(const ferry_coco *coco, const ferry__coco_ann *ann, ferry_rle *out) {
  const char *array = ferry__coco_ann_array_name(coco);
  size_t idx = ann->pub.json_index;
  /* annToRLE looks the image up by image_id; a result list has no images, so there is
   * no size to rasterise at (pycocotools' loadRes copies them from the ground truth). */
  if (ann->pub.image_index == SIZE_MAX)
    return ferry__fail(FERRY_EFORMAT, "%s: %s[%zu].segmentation: polygons need an image size, and a result list has no images",
                      coco->name, array, idx);
  const ferry__coco_image *img = &COCO_AT(coco->images, ferry__coco_image, ann->pub.image_index);
  if (img->height <= 0 || img->width <= 0)
    return ferry__fail(FERRY_EFORMAT, "%s: %s[%zu].segmentation: polygons need an image size, and image %lld has no height/width",
                      coco->name, array, idx, (long long)img->id);
  /* maskApi.c's run counts are 32-bit (uint): a mask of more pixels could hold a run
   * that wraps, so ferry_rle is bounded to h*w < 2^32 (docs/coco.md). */
  if ((uint64_t)img->height * (uint64_t)img->width > UINT32_MAX)
    return ferry__fail(FERRY_ELIMIT, "%s: %s[%zu].segmentation: image %lld is %lldx%lld, over 2^32-1 pixels",
                      coco->name, array, idx, (long long)img->id, (long long)img->height, (long long)img->width);
  uint32_t h = (uint32_t)img->height, w = (uint32_t)img->width;
  size_t n = ann->pub.num_polygons;
  ferry_rle *parts = ferry__calloc(n, sizeof *parts);
  if (!parts) return ferry__fail(FERRY_ENOMEM, "%s: out of memory for %zu polygon parts", coco->name, n);
  ferry_status st = FERRY_OK;
  for (size_t j = 0; j < n && st == FERRY_OK; j++) {
    const ferry__coco_part *part = &COCO_AT(coco->parts, ferry__coco_part, ann->seg_first + j);
    /* a part without a vertex pair may have no coordinates behind it at all */
    const double *xy = part->k ? &COCO_AT(coco->coords, double, part->first) : NULL;
    st = ferry_rle_from_polygon(xy, part->k, h, w, &parts[j]);
    if (st < 0) st = ferry__error_prefix(st, "%s: %s[%zu].segmentation[%zu]: ", coco->name, array, idx, j);
  }
  /* Merged even for one part, as annToRLE does; 0 = union. n == 0 (`[]`) never gets
   * here: parse.c takes an empty list for no segmentation. */
  if (st == FERRY_OK) st = ferry_rle_merge(parts, n, 0, out);
  for (size_t j = 0; j < n; j++) ferry_rle_free(&parts[j]);
  ferry__free(parts);
  return st;
}

ferry_status ferry__coco_ann_rle(const ferry_coco *coco, const ferry__coco_ann *ann, ferry_rle *out) {
  const char *array = ferry__coco_ann_array_name(coco);
  size_t idx = ann->pub.json_index;
  ferry_status st;
  switch (ann->pub.segm) {
    case FERRY_SEGM_POLYGONS:
      return polygons_rle(coco, ann, out);
    case FERRY_SEGM_RLE:
      st = ferry_rle_from_string(COCO_STRING(coco, ann->rle_string), ann->seg_len, ann->seg_h, ann->seg_w, out);
      if (st < 0) st = ferry__error_prefix(st, "%s: %s[%zu].segmentation.counts: ", coco->name, array, idx);
      return st;
    case FERRY_SEGM_RLE_COUNTS:
      st = ferry_rle_from_counts(&COCO_AT(coco->counts, uint32_t, ann->seg_first), ann->seg_len, ann->seg_h,
                                 ann->seg_w, out);
      if (st < 0) st = ferry__error_prefix(st, "%s: %s[%zu].segmentation.counts: ", coco->name, array, idx);
      return st;
    case FERRY_SEGM_NONE:
      break;
  }
  return ferry__fail(FERRY_ENOTFOUND, "%s: %s[%zu]: no segmentation", coco->name, array, idx);
}
