#!/usr/bin/env python3
"""Masks benchmark (not a timed test): every kept instance mask of a COCO file produced at
R x R, by ferry (`ferry-coco bench`: RLE/polygon straight to R x R) and by pycocotools
(annToRLE rules, decode at full size, nearest resize by torch's float32 rule with numpy
indexing, tests/common/nearest.py), in one run, one thread each. Annotations are selected as ferry's targets do:
crowds dropped, boxes degenerate after clamping dropped.

usage: bench_masks.py FERRY_COCO [--annotations FILE] [--size R] [--repeat N]
Without --annotations a val2017-shaped polygon set (5000 images, ~36k instances, 1% crowd
RLE) is generated into a temporary file.
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
from pycocotools import mask as maskUtils

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from coco_masks import ann_to_rle, kept  # noqa: E402
from nearest import nearest_map  # noqa: E402

SIZES = [(480, 640), (427, 640), (640, 480), (640, 427), (425, 640), (512, 640), (360, 640), (640, 640)]


def blob(rng, h, w):
    """A star-shaped polygon like a COCO object outline (10-60 vertices, 2 decimals)."""
    r = min(h, w) * rng.uniform(0.03, 0.45)
    cx, cy = rng.uniform(r * 0.5, w - r * 0.5), rng.uniform(r * 0.5, h - r * 0.5)
    k = rng.randint(10, 60)
    pts = []
    for i in range(k):
        a = 2 * math.pi * i / k
        rr = r * rng.uniform(0.6, 1.0)
        pts += [round(cx + rr * math.cos(a), 2), round(cy + rr * math.sin(a), 2)]
    return pts


def column_runs(m):
    flat = m.ravel(order="F")
    edges = np.concatenate(([0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]))
    runs = np.diff(edges).tolist()
    return [0] + runs if flat[0] else runs


def synth(path, images=5000, seed=1):
    rng = random.Random(seed)
    imgs, anns = [], []
    for i in range(images):
        h, w = rng.choice(SIZES)
        imgs.append({"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "height": h, "width": w})
        for _ in range(min(int(rng.expovariate(1 / 7.3)), 60)):
            crowd = rng.random() < 0.01
            if crowd:  # COCO's crowds are uncompressed RLE
                m = np.zeros((h, w), np.uint8)
                y, x = rng.randrange(h // 2), rng.randrange(w // 2)
                m[y:y + h // 3, x:x + w // 3] = 1
                seg = {"size": [h, w], "counts": column_runs(m)}
            else:
                seg = [blob(rng, h, w) for _ in range(1 if rng.random() < 0.9 else 2)]
            rles = maskUtils.frPyObjects(seg, h, w)
            rle = maskUtils.merge(rles) if isinstance(rles, list) else rles
            x, y, bw, bh = maskUtils.toBbox(rle).tolist()
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": rng.randint(1, 90),
                         "segmentation": seg, "area": float(maskUtils.area(rle)), "bbox": [x, y, bw, bh],
                         "iscrowd": int(crowd)})
    with open(path, "w") as f:
        json.dump({"images": imgs, "annotations": anns,
                   "categories": [{"id": c, "name": str(c)} for c in range(1, 91)]}, f)


def pycocotools_pass(data, R):
    imgs = {im["id"]: im for im in data["images"]}
    by_image = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    count = 0
    t0 = time.perf_counter()
    for im in data["images"]:
        h, w = im["height"], im["width"]
        rows, cols = nearest_map(h, R), nearest_map(w, R)
        for a in by_image.get(im["id"], []):
            if not kept(a, h, w):
                continue
            seg = a.get("segmentation")
            if seg:
                m = maskUtils.decode(ann_to_rle(seg, h, w))
                small = m[rows][:, cols]
            else:
                small = np.zeros((R, R), np.uint8)
            count += 1
    assert imgs
    return count, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ferry_coco")
    ap.add_argument("--annotations")
    ap.add_argument("--size", type=int, default=312)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = None
    path = args.annotations
    if not path:
        tmp = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
        tmp.close()
        path = tmp.name
        print(f"generating a val2017-shaped polygon set into {path} ...", flush=True)
        synth(path)
    with open(path) as f:
        data = json.load(f)
    best_py, n_py = 1e30, 0
    for _ in range(args.repeat):
        n_py, t = pycocotools_pass(data, args.size)
        best_py = min(best_py, t)
    run = subprocess.run([args.ferry_coco, "bench", path, "--size", str(args.size), "--repeat", str(args.repeat)],
                         capture_output=True, text=True, check=True)
    print(run.stdout.strip())
    m = re.search(r"(\d+) masks at .*? passes ([0-9.]+) s", run.stdout)
    n_ferry, t_ferry = int(m.group(1)), float(m.group(2))
    print(f"pycocotools: {len(data['images'])} images, {n_py} masks at {args.size}x{args.size}: "
          f"best of {args.repeat} passes {best_py:.3f} s ({n_py / best_py:.0f} masks/s, 1 thread)")
    if n_py != n_ferry:
        print(f"WARNING: ferry made {n_ferry} masks, pycocotools {n_py}")
    print(f"speed-up: {best_py / t_ferry:.1f}x")
    if tmp:
        os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
