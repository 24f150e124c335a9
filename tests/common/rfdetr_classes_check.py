#!/usr/bin/env python3
"""ferry's training recipes replayed through RF-DETR 1.11's own classes (issue 24).

    rfdetr_classes_check.py --set ANNOTATIONS IMAGES [--set ...] [--draft-set ANNOTATIONS IMAGES ...]
                            [--epochs 2] [--min-samples N]

Run by the interpreter of a venv holding rfdetr==1.11.2 and its torch >= 2 (./run makes
build/rfdetr-venv; python/tests/test_rfdetr_classes.py drives this script), with
FERRY_LIB naming libferry.so and python/ on PYTHONPATH. Not an oracle written beside
ferry: the code RF-DETR's users train with. For every sample of `--epochs` epochs of
each recipe, ferry's record (targets["augment"]) is turned into the random draws
RF-DETR's classes make, in their order (RandomSelect's coin, RandomChoice's and
RandomResize's indexes, RandomSizedCrop's side, top and left, RandomHorizontalFlip's
coin: all from torch's global generator, which the replay answers instead), and the
image goes through RF-DETR's own CocoDetection (its decode and ConvertCoco: pycocotools
masks, crowd dropped, degenerate boxes dropped) and its own transform pipeline
(make_coco_transforms[_square_div_64]("train", ...)): RandomSelect/RandomResize/
RandomSizedCrop/Resize/RandomHorizontalFlip, then ToImage, ToDtype and its Normalize.

A --draft-set is replayed without masks and with the reduced-size decode RF-DETR 1.11
uses for detection training (issue 36): ferry's draft_size="rfdetr" against its
CocoDetection built with draft_size_for_transforms' size, whose __getitem__ decodes the
JPEG at 1/2, 1/4 or 1/8 scale and moves the annotations into it (scale_coco_annotation)
before ConvertCoco; once through simplejpeg, as RF-DETR's `train` extra installs it, and
once through Pillow's draft (simplejpeg hidden from RF-DETR's decoder).

Checked per sample: every draw the record implies was asked for, and no other; the
pixels before normalisation byte for byte (the PIL image after the flip against ferry's
uint8 layout); after normalisation to 1e-6 (ferry's f32 layout); the padding zero; masks
equal; labels equal and in order; boxes within 1e-4 px (xyxy) and 1e-6 (normalised
cxcywh); area within 1e-5 relative; iscrowd; size. Per batch: the padded images
tensor and ferry.pixel_mask against RF-DETR's collate (nested_tensor_from_tensor_list
with RFDETRDataModule's block size, patch_size * num_windows). Prints the count and exits 1 on the
first difference, naming the file, the epoch and the record.
"""
import argparse
import contextlib
import io
import logging
import os
import sys
import warnings

import torch

import ferry

# targets["augment"]: flip, branch, branch B's resize h, w, crop top, left, h, w, output h, w
FLIP, BRANCH, RESIZE_H, RESIZE_W, TOP, LEFT, CROP_H, CROP_W, OUT_H, OUT_W = range(10)
B_SIZES = [400, 500, 600]  # _build_train_resize_transforms' RandomResize of branch B
COCO_MAX_SIZE = 1333
REFUSED = {}  # file name -> why RF-DETR's own loading raised for it
RECIPES = [
    # RF-DETR Seg Nano's multi-scale: resolution 312, patch 12, one window: 276..360
    dict(augment="rfdetr-square", multi_scale="per-sample", resolution=312, patch_size=12, num_windows=1),
    dict(augment="rfdetr", multi_scale="per-sample", resolution=312, patch_size=12, num_windows=1),
    dict(augment="rfdetr", multi_scale="per-batch", resolution=312, patch_size=12, num_windows=1),
    dict(augment="rfdetr-square", multi_scale="off", resolution=384, patch_size=16, num_windows=2),
]
# The reduced-size decode: its draft size is 600 with scale jitter (branch B's largest
# first resize), else the largest scale the recipe resizes to (360 and 384 here).
DRAFT_RECIPES = RECIPES[:2] + [
    dict(augment="rfdetr", multi_scale="per-sample", resolution=312, patch_size=12, num_windows=1, scale_jitter=False),
    dict(augment="rfdetr-square", multi_scale="off", resolution=384, patch_size=16, num_windows=2, scale_jitter=False),
]
DECODERS = ("simplejpeg", "pillow")


class ScriptedDraws:
    """torch.rand(()) and torch.randint(...) answered from a list, each answer checked
    against the bounds of the call that asks for it."""

    def __init__(self):
        self.queue, self.real = [], (torch.rand, torch.randint)

    def __enter__(self):
        torch.rand, torch.randint = self.rand, self.randint
        return self

    def __exit__(self, *exc):
        torch.rand, torch.randint = self.real

    def _next(self, kind, low, high):
        if not self.queue:
            raise AssertionError(f"RF-DETR asked for a {kind} draw in [{low}, {high}) the record does not imply")
        want_kind, value = self.queue.pop(0)
        if want_kind != kind or not low <= value < high:
            raise AssertionError(f"RF-DETR asked for a {kind} draw in [{low}, {high}); the record gives "
                                 f"{want_kind} {value}")
        return value

    def rand(self, size, *a, **k):
        assert tuple(size) == () and not a and not k, "an unexpected torch.rand call"
        return torch.tensor(self._next("rand", 0.0, 1.0))

    def randint(self, *args, **k):
        low, high = (0, args[0]) if len(args) == 2 else (args[0], args[1])
        assert tuple(args[-1]) == () and not k, "an unexpected torch.randint call"
        return torch.tensor(self._next("randint", low, high))


def shortest_side(h, w, size, max_size):
    """RandomResize._get_size, by calling it: which scale gave a record's size."""
    from rfdetr.datasets._torchvision import RandomResize
    return RandomResize._get_size(h, w, size, max_size)


def draws_for(rec, h, w, scales, square, jitter=True):
    """The draws, in RF-DETR's call order, that make its classes do what the record says
    (without scale jitter RF-DETR builds branch A alone: no RandomSelect, no coin)."""
    out = []
    coin = lambda taken: ("rand", 0.0 if taken else 0.75)  # noqa: E731: RandomSelect takes A below p
    if rec[BRANCH] == 0:
        if jitter:
            out.append(coin(True))
        if square:
            index = scales.index(rec[OUT_H])
        else:
            index = next(i for i, s in enumerate(scales)
                         if shortest_side(h, w, s, COCO_MAX_SIZE) == (rec[OUT_H], rec[OUT_W]))
        if len(scales) > 1:
            out.append(("randint", index))
    else:
        out.append(coin(False))
        out.append(("randint", next(i for i, s in enumerate(B_SIZES)
                                    if shortest_side(h, w, s, None) == (rec[RESIZE_H], rec[RESIZE_W]))))
        crop_scales = scales if square else [min(s, COCO_MAX_SIZE) for s in scales]
        if len(crop_scales) > 1:
            out.append(("randint", crop_scales.index(rec[OUT_H])))
        rh, rw = rec[RESIZE_H], rec[RESIZE_W]
        max_crop = min(600, rh, rw)
        if max_crop > min(384, max_crop):
            out.append(("randint", max(rec[CROP_H], rec[CROP_W])))
        if rh > rec[CROP_H]:
            out.append(("randint", rec[TOP]))
        if rw > rec[CROP_W]:
            out.append(("randint", rec[LEFT]))
    out.append(("rand", 0.0 if rec[FLIP] else 0.75))  # RandomHorizontalFlip flips below p
    return out


def rfdetr_pipeline(annotations, images, options, draft):
    from rfdetr.datasets.coco import (CocoDetection, compute_multi_scale_scales, draft_size_for_transforms,
                                      make_coco_transforms, make_coco_transforms_square_div_64)
    square = options["augment"] == "rfdetr-square"
    build = make_coco_transforms_square_div_64 if square else make_coco_transforms
    multi = options["multi_scale"] != "off"
    jitter = options.get("scale_jitter", True)
    transforms = build("train", options["resolution"], multi_scale=multi, expanded_scales=False,
                       skip_random_resize=False, patch_size=options["patch_size"],
                       num_windows=options["num_windows"], scale_jitter=jitter)
    size = draft_size_for_transforms("train", options["resolution"], multi_scale=multi, expanded_scales=False,
                                     patch_size=options["patch_size"], num_windows=options["num_windows"],
                                     scale_jitter=jitter, include_masks=not draft)
    if draft and not size:
        fail(annotations, f"RF-DETR gives no draft size for {options}")
    with contextlib.redirect_stdout(io.StringIO()):
        dataset = CocoDetection(images, annotations, transforms=None, include_masks=not draft, draft_size=size)
    scales = compute_multi_scale_scales(options["resolution"], False, options["patch_size"],
                                        options["num_windows"]) if multi else [options["resolution"]]
    # the recipe (resize select, flip) and then ToImage, ToDtype, Normalize
    geometry, tensors = transforms.transforms[:2], transforms.transforms[2:]
    return dataset, geometry, tensors, scales, square, jitter


def fail(where, what):
    sys.exit(f"rfdetr_classes_check: {where}: {what}")


def check_sample(ref, i, u8, t8, f32, tf, epoch):
    dataset, geometry, tensors, scales, square, jitter = ref
    rec = t8["augment"].tolist()
    image_id = int(t8["image_id"])
    info = dataset.coco.imgs[image_id]
    where = f"{info['file_name']} epoch {epoch} record {rec}"
    try:  # RF-DETR's own item: its decode (reduced under draft_size), annotations and ConvertCoco
        img, target = dataset[dataset.ids.index(image_id)]
    except (TypeError, ValueError) as e:  # what RF-DETR itself cannot load is not compared
        REFUSED.setdefault(info["file_name"], f"{type(e).__name__}: {e}")
        return False
    if t8["orig_size"].tolist() != target["orig_size"].tolist():
        fail(where, f"orig_size: ferry {t8['orig_size'].tolist()}, RF-DETR {target['orig_size'].tolist()}")
    with ScriptedDraws() as draws:  # drawn on the decoded size, as RF-DETR's transforms see it
        draws.queue = draws_for(rec, img.height, img.width, scales, square, jitter)
        for step in geometry:
            img, target = step(img, target)
        if draws.queue:
            fail(where, f"draws the record implies that RF-DETR never asked for: {draws.queue}")
    w, h = img.size
    if t8["size"].tolist() != [h, w] or target["size"].tolist() != [h, w]:
        fail(where, f"size: ferry {t8['size'].tolist()}, RF-DETR image {[h, w]}, target {target['size'].tolist()}")
    want = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).reshape(h, w, 3).permute(2, 0, 1)
    ours = u8[i, :, :h, :w]
    if not torch.equal(ours, want):
        fail(where, f"uint8 pixels differ in {int((ours != want).any(0).sum())} of {h * w}")
    if t8["labels"].tolist() != target["labels"].tolist():
        fail(where, f"kept instances: ferry {t8['labels'].tolist()}, RF-DETR {target['labels'].tolist()}")
    if ("masks" in t8) != ("masks" in target) or ("masks" in t8 and not torch.equal(t8["masks"].bool(),
                                                                                    target["masks"])):
        fail(where, "masks differ")
    if not torch.allclose(t8["boxes"], target["boxes"], rtol=0, atol=1e-4):
        fail(where, f"boxes (xyxy px) differ by {float((t8['boxes'] - target['boxes']).abs().max())}")
    if not torch.allclose(t8["area"], target["area"], rtol=1e-5, atol=0):
        fail(where, "area differs")
    if t8["iscrowd"].tolist() != target["iscrowd"].tolist():
        fail(where, "iscrowd differs")
    img, target = img, dict(target)
    for step in tensors:
        img, target = step(img, target)
    if (f32[i, :, :h, :w] - img).abs().max() > 1e-6:
        fail(where, f"normalised pixels differ by {float((f32[i, :, :h, :w] - img).abs().max())}")
    if f32[i, :, h:, :].any() or f32[i, :, :, w:].any():
        fail(where, "the padding is not zero")
    if not torch.allclose(tf["boxes"], target["boxes"], rtol=0, atol=1e-6):
        fail(where, "normalised cxcywh boxes differ")
    return True


def check_batch(f32, targets, block, where):
    """The padded batch and ferry.pixel_mask against RF-DETR's own collate
    (nested_tensor_from_tensor_list with its block size) of the same samples."""
    from rfdetr.utilities.tensors import nested_tensor_from_tensor_list
    contents = [f32[i, :, :int(t["size"][0]), :int(t["size"][1])] for i, t in enumerate(targets)]
    nested = nested_tensor_from_tensor_list(contents, block_size=block)
    if nested.tensors.shape != f32.shape or not torch.equal(nested.tensors, f32):
        fail(where, f"the padded batch {tuple(f32.shape)} is not RF-DETR's {tuple(nested.tensors.shape)}")
    if not torch.equal(nested.mask, ferry.pixel_mask(f32, targets)):
        fail(where, "ferry.pixel_mask is not RF-DETR's NestedTensor mask")


def replay(annotations, images, options, epochs, draft=False):
    ref = rfdetr_pipeline(annotations, images, options, draft)
    block = options["patch_size"] * options["num_windows"]  # RFDETRDataModule's collate block
    fields = ("boxes", "labels", "area", "iscrowd", "image_id", "orig_size", "size", "augment")
    common = dict(batch_size=4, workers=2, seed=11, keep_crowd=False, tensor_type="torch",
                  fields=fields + (() if draft else ("masks",)), draft_size="rfdetr" if draft else None,
                  **options)
    checked = 0
    with ferry.Loader(annotations, images, layout="uint8", box_format="xyxy", **common) as raw, \
            ferry.Loader(annotations, images, layout="f32", size_divisibility=block, **common) as norm:
        for epoch in range(epochs):
            raw.set_epoch(epoch)
            norm.set_epoch(epoch)
            for k, ((u8, targets), (f32, targets_f)) in enumerate(zip(raw, norm)):
                check_batch(f32, targets_f, block, f"{os.path.basename(annotations)} epoch {epoch} batch {k}")
                for i, (t8, tf) in enumerate(zip(targets, targets_f)):
                    checked += check_sample(ref, i, u8, t8, f32, tf, epoch)
    return checked


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", nargs=2, action="append", default=[], metavar=("ANNOTATIONS", "IMAGES"))
    p.add_argument("--draft-set", nargs=2, action="append", default=[], metavar=("ANNOTATIONS", "IMAGES"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--min-samples", type=int, default=1)
    args = p.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    from importlib.metadata import version
    total = 0
    for annotations, images in args.set:
        for options in RECIPES:
            n = replay(annotations, images, options, args.epochs)
            print(f"{os.path.basename(annotations)} {options['augment']} {options['multi_scale']}: "
                  f"{n} samples equal", flush=True)
            total += n
    import rfdetr.datasets.io_utils as io_utils
    simplejpeg = io_utils.simplejpeg
    if simplejpeg is None:
        fail("setup", "simplejpeg is not installed: RF-DETR's `train` extra brings it")
    for annotations, images in args.draft_set:
        for decoder in DECODERS:
            io_utils.simplejpeg = simplejpeg if decoder == "simplejpeg" else None
            for options in DRAFT_RECIPES:
                n = replay(annotations, images, options, args.epochs, draft=True)
                print(f"{os.path.basename(annotations)} reduced decode ({decoder}) {options['augment']} "
                      f"{options['multi_scale']} scale_jitter={options.get('scale_jitter', True)}: "
                      f"{n} samples equal", flush=True)
                total += n
        io_utils.simplejpeg = simplejpeg
    for name, why in sorted(REFUSED.items()):
        print(f"not compared: RF-DETR 1.11 itself cannot load {name}: {why}")
    print(f"rfdetr {version('rfdetr')}, torch {torch.__version__}: {total} samples replayed through "
          f"RF-DETR's own classes, all equal")
    if total < args.min_samples:
        sys.exit(f"rfdetr_classes_check: only {total} samples checked, fewer than {args.min_samples}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
