"""tests/common/coco_masks.py - pycocotools' side of ferry's target masks, for the oracles.

Which annotations an image keeps (RF-DETR's ConvertCoco, as ferry_coco_target_count
applies it: crowds dropped, boxes clamped in float32 and dropped when degenerate) and
the full-size mask of each (COCO.annToRLE's rules as docs/coco.md states them: polygon
parts of fewer than 3 vertices are empty, parts merged by union, uncompressed RLE at its
own size). Used by bench_masks.py and check_masks_resized.py; import it with
sys.path.insert(0, <this folder>).
"""
import numpy as np
from pycocotools import mask as maskUtils


def kept(ann, h, w, keep_crowd=False):
    """ConvertCoco's selection in float32, as ferry_coco_target_count applies it."""
    if not keep_crowd and ann.get("iscrowd", ann.get("is_crowd", 0)):
        return False
    x, y, bw, bh = (np.float32(v) for v in ann["bbox"])
    x2, y2 = x + bw, y + bh
    cl = lambda v, hi: min(max(v, np.float32(0)), np.float32(hi))  # noqa: E731
    return cl(x2, w) > cl(x, w) and cl(y2, h) > cl(y, h)


def ann_to_rle(seg, h, w):
    """The annotation's full-size mask as a pycocotools RLE (h x w for polygons)."""
    if isinstance(seg, list):
        parts = [p for p in seg if len(p) >= 6]
        if not parts:
            return maskUtils.encode(np.asfortranarray(np.zeros((h, w), np.uint8)))
        return maskUtils.merge(maskUtils.frPyObjects(parts, h, w))
    if isinstance(seg["counts"], list):
        return maskUtils.frPyObjects(seg, *seg["size"])
    return seg


def full_mask(ann, h, w):
    """The h x w uint8 mask of an annotation (zeros without a segmentation)."""
    seg = ann.get("segmentation")
    if not seg:
        return np.zeros((h, w), np.uint8)
    return maskUtils.decode(ann_to_rle(seg, h, w))


def images_with_annotations(data):
    """[(image record, its annotations in file order)] in the file's image order."""
    by_image = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    return [(im, by_image.get(im["id"], [])) for im in data["images"]]
