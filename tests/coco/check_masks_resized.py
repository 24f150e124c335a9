#!/usr/bin/env python3
"""Whole masks at R x R: ferry's against pycocotools' full masks resized by torch's rule.

    check_masks_resized.py FERRY_COCO SYNTH_COCO [--size R]

RF-DETR's val transform builds every kept instance's mask at full size with pycocotools
(ConvertCoco) and resizes it with torchvision, which indexes as ATen's
interpolate(mode="nearest") does. ferry decodes the runs straight to R x R. For every
kept instance of synth_coco's 5,000-image val2017-shaped set (made here with
--no-images: the same annotations, no pixels) and of every real COCO file in
../shared/realdata that gives image sizes, `ferry-coco masks` must print exactly the
mask that pycocotools + tests/common/nearest.py make (that map is itself checked
against torch by check_nearest_torch.py). Issue 27: before the float32 rule, 111 of the
5,000 synth_coco images differed.
Exit 0: no differing pixel; 1: a difference or a broken run; 77: pycocotools or the
real data missing and CI not set.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))

from checklist import require_modules  # noqa: E402

np, maskUtils = require_modules("numpy", "pycocotools.mask")

from coco_masks import full_mask, images_with_annotations, kept  # noqa: E402
from nearest import resize_nearest  # noqa: E402
from realdata import realdata  # noqa: E402

# every real file with image sizes and instance annotations (result lists have neither)
REAL_FILES = [
    "dali_coco/coco/instances.json",
    "dali_coco/coco_pixelwise/instances.json",
    "dali_coco/coco_dummy/instances.json",
    "datumaro_coco/coco/annotations/instances_val.json",
    "mmpose_coco/test_coco.json",
    "panopticapi_sample/sample_data/panoptic_coco_detection_format.json",
    "golden/edgecases_seed7.json",
]


def reference_lines(data, size):
    """{(image, instance): RLE string of the R x R mask} as pycocotools + torch make it."""
    out = {}
    for index, (im, anns) in enumerate(images_with_annotations(data)):
        h, w = im["height"], im["width"]
        k = 0
        for a in anns:
            if not kept(a, h, w):
                continue
            small = resize_nearest(full_mask(a, h, w), size, size)
            out[(index, k)] = maskUtils.encode(np.asfortranarray(small))["counts"].decode()
            k += 1
    return out


def ferry_lines(tool, path, size):
    run = subprocess.run([tool, "masks", path, "--size", str(size)], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"ferry-coco masks {path}: exit {run.returncode}: {run.stderr.strip()[:500]}")
    out = {}
    for line in run.stdout.splitlines():
        image, k, counts = line.split(" ", 2)
        out[(int(image), int(k))] = counts
    return out


def compare(name, tool, path, size):
    with open(path) as f:
        data = json.load(f)
    want, got = reference_lines(data, size), ferry_lines(tool, path, size)
    if set(want) != set(got):
        print(f"FAILED {name}: ferry made {len(got)} masks, pycocotools {len(want)}")
        return 1
    differing = sorted({key[0] for key in want if want[key] != got[key]})
    pixels = 0
    for key in want:
        if want[key] != got[key]:
            a = maskUtils.decode({"size": [size, size], "counts": want[key].encode()})
            b = maskUtils.decode({"size": [size, size], "counts": got[key].encode()})
            pixels += int((a != b).sum())
    status = "ok" if not differing else "FAILED"
    print(f"{status} {name} at {size}x{size}: {len(data['images'])} images, {len(want)} masks; "
          f"{len(differing)} images and {pixels} pixels differ"
          + (f" (first images {differing[:5]})" if differing else ""))
    return 1 if differing else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry_coco")
    ap.add_argument("synth_coco")
    ap.add_argument("--size", type=int, default=312)
    args = ap.parse_args()
    real = realdata()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.synth_coco, "--out", tmp, "--images", "5000", "--seed", "1", "--no-images"],
                       check=True, capture_output=True)
        synth = os.path.join(tmp, "annotations", "instances_val2017.json")
        failures += compare("synth_coco (5000 images, seed 1)", args.ferry_coco, synth, args.size)
    for rel in REAL_FILES:
        failures += compare(rel, args.ferry_coco, os.path.join(real, rel), args.size)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
