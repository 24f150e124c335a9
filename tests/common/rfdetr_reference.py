"""tests/common/rfdetr_reference.py - RF-DETR 1.11's training transforms, restated.

The oracle of ferry's recipes (issue 24) and the peer ferry is measured against: the
classes of rfdetr/datasets/_torchvision.py (Resize, RandomResize, RandomSizedCrop, crop,
RandomHorizontalFlip, RandomSelect, RandomChoice, then ToDtype and Normalize) and the
pipeline coco.py's _build_train_resize_transforms composes of them, restated from their
semantics: Pillow for the pixels, torch for boxes, areas and masks, pycocotools for the
full-size masks (as RF-DETR's ConvertCoco makes them). Written from RF-DETR's code, not
from ferry's: what ferry assumes, this file does not.

  Sample(path, image_record, anns).replay(record)   a record's chain (ferry's, or draw's)
  draw(h, w, scales, square)                        RF-DETR's random choices, its order
  multi_scale_scales(resolution, ...)               compute_multi_scale_scales

Used by python/tests/test_augment.py (the replay) and repro/torch_peer.py (the peer
DataLoader). Import it with sys.path.insert(0, <this folder>); torch, numpy, Pillow and
pycocotools are imported on first use, so the record layout below needs none of them.
"""
import functools

# ferry's record (targets[i]["augment"], FERRY_AUGMENT_* in ferry/image.h)
FLIP, BRANCH, RESIZE_H, RESIZE_W, TOP, LEFT, CROP_H, CROP_W, OUT_H, OUT_W = range(10)

COCO_MAX_SIZE = 1333            # coco.py's _COCO_MAX_SIZE
RESIZE_B = (400, 500, 600)      # branch B's RandomResize
CROP_RANGE = (384, 600)         # RandomSizedCrop's min_max_height
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@functools.lru_cache(maxsize=None)
def libs():
    import numpy
    import torch
    from PIL import Image
    from coco_masks import full_mask
    return {"torch": torch, "np": numpy, "Image": Image, "full_mask": full_mask}


def multi_scale_scales(resolution, expanded_scales=False, patch_size=16, num_windows=4):
    """compute_multi_scale_scales: multiples of patch_size * num_windows around the
    resolution, at least two of them."""
    step = patch_size * num_windows
    offsets = range(-5, 6) if expanded_scales else range(-3, 5)
    return [s * step for s in (resolution // step + o for o in offsets) if s * step >= 2 * step]


def shortest_side(h, w, size, max_size):
    """RandomResize._get_size: (h, w) with the shortest side `size`, the longest capped at
    max_size (None: no cap), the other side rounded."""
    lo, hi = float(min(h, w)), float(max(h, w))
    if max_size is not None and hi / lo * size > max_size:
        size = int(round(max_size * lo / hi))
    if (w <= h and w == size) or (h <= w and h == size):
        return h, w
    if w < h:
        return int(round(size * h / w)), size
    return size, int(round(size * w / h))


def draw(h, w, scales, square, max_size=COCO_MAX_SIZE, hflip=0.5, scale_jitter=True):
    """One sample's choices as RF-DETR draws them from torch's generator, in its order
    (RandomSelect's coin, the RandomChoice/RandomResize indices, RandomSizedCrop's side,
    top and left, RandomHorizontalFlip's coin), as a ferry record."""
    torch = libs()["torch"]
    pick = lambda n: int(torch.randint(n, ()).item()) if n > 1 else 0  # noqa: E731
    rec = [0] * 10
    if not scale_jitter or torch.rand(()) < 0.5:          # branch A
        s = scales[pick(len(scales))]
        rec[OUT_H], rec[OUT_W] = (s, s) if square else shortest_side(h, w, s, max_size)
    else:                                                  # branch B
        rec[BRANCH] = 1
        h1, w1 = shortest_side(h, w, RESIZE_B[pick(len(RESIZE_B))], None)
        s = scales[pick(len(scales))]
        s = s if square else min(s, max_size)
        hi = min(CROP_RANGE[1], h1, w1)
        lo = min(CROP_RANGE[0], hi)
        side = int(torch.randint(lo, hi + 1, ()).item()) if hi > lo else hi
        ch, cw = min(side, h1), min(side, w1)
        top = int(torch.randint(0, h1 - ch + 1, ()).item()) if h1 > ch else 0
        left = int(torch.randint(0, w1 - cw + 1, ()).item()) if w1 > cw else 0
        rec[RESIZE_H:OUT_H] = [h1, w1, top, left, ch, cw]
        rec[OUT_H], rec[OUT_W] = s, s
    rec[FLIP] = int(torch.rand(()) < hflip)
    return rec


class Sample:
    """One image and its target as RF-DETR's ConvertCoco makes them: crowds dropped,
    boxes xywh -> xyxy in float32 clamped, degenerate boxes dropped with everything
    else of their instance, masks from pycocotools at full size."""

    def __init__(self, image_path, record, anns):
        r = self.r = libs()
        torch = r["torch"]
        self.img = r["Image"].open(image_path).convert("RGB")
        w, h = self.img.size
        assert (h, w) == (record["height"], record["width"]), f"{image_path}: not the annotated size"
        anns = [a for a in anns if not a.get("iscrowd", a.get("is_crowd", 0))]
        boxes = torch.as_tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        boxes[:, 0::2].clamp_(min=0, max=w)
        boxes[:, 1::2].clamp_(min=0, max=h)
        keep = (boxes[:, 3] > boxes[:, 1]) & (boxes[:, 2] > boxes[:, 0])
        kept = [a for a, k in zip(anns, keep.tolist()) if k]
        self.boxes = boxes[keep]
        self.labels = torch.as_tensor([a["category_id"] for a in kept], dtype=torch.int64)
        self.area = torch.as_tensor([a["area"] for a in kept], dtype=torch.float32)
        self.masks = torch.from_numpy(r["np"].stack([r["full_mask"](a, h, w) for a in kept])
                                      if kept else r["np"].zeros((0, h, w), "uint8")).bool()

    def size(self):
        return self.img.size[1], self.img.size[0]

    def resize(self, oh, ow):
        """Resize((oh, ow)): Pillow BILINEAR; boxes times the float32 ratios; area times
        their product; masks by interpolate(mode="nearest")."""
        torch, F = self.r["torch"], self.r["torch"].nn.functional
        h, w = self.size()
        self.img = self.img.resize((ow, oh), self.r["Image"].BILINEAR) if (oh, ow) != (h, w) else self.img
        if (oh, ow) != (h, w):
            self.boxes = self.boxes * torch.tensor([ow / w, oh / h, ow / w, oh / h])
        self.area = self.area * ((ow / w) * (oh / h))
        if len(self.masks):
            self.masks = F.interpolate(self.masks[None].float(), size=(oh, ow), mode="nearest")[0].bool()
        else:
            self.masks = torch.zeros((0, oh, ow), dtype=torch.bool)

    def crop(self, top, left, ch, cw):
        """crop: the pixels and masks cut; boxes shifted and clamped; empty ones dropped
        with their instance; the survivors' area is their box's."""
        torch = self.r["torch"]
        self.img = self.img.crop((left, top, left + cw, top + ch))
        boxes = self.boxes - torch.tensor([left, top, left, top], dtype=torch.float32)
        boxes[:, 0::2].clamp_(min=0, max=cw)
        boxes[:, 1::2].clamp_(min=0, max=ch)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        self.boxes = boxes[keep]
        self.labels = self.labels[keep]
        self.area = (self.boxes[:, 2] - self.boxes[:, 0]) * (self.boxes[:, 3] - self.boxes[:, 1])
        self.masks = self.masks[keep][:, top:top + ch, left:left + cw]

    def flip(self):
        h, w = self.size()
        self.img = self.img.transpose(self.r["Image"].FLIP_LEFT_RIGHT)
        flipped = self.boxes.clone()
        flipped[:, 0] = w - self.boxes[:, 2]
        flipped[:, 2] = w - self.boxes[:, 0]
        self.boxes = flipped
        self.masks = self.masks.flip(-1)

    def replay(self, rec):
        """The record's chain: branch B's resize and crop, the resize to the output, the
        flip."""
        if rec[BRANCH]:
            self.resize(rec[RESIZE_H], rec[RESIZE_W])
            self.crop(rec[TOP], rec[LEFT], rec[CROP_H], rec[CROP_W])
        self.resize(rec[OUT_H], rec[OUT_W])
        if rec[FLIP]:
            self.flip()
        return self

    def normalised(self):
        """ToImage, ToDtype(float32, scale=True) (a product with 1/255), Normalize."""
        torch = self.r["torch"]
        x = torch.from_numpy(self.r["np"].asarray(self.img).copy()).permute(2, 0, 1)
        x = x.to(torch.float32).mul_(1.0 / 255)
        mean = torch.as_tensor(MEAN, dtype=torch.float32).view(3, 1, 1)
        std = torch.as_tensor(STD, dtype=torch.float32).view(3, 1, 1)
        return x.sub_(mean).div_(std)
