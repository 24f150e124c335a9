#!/usr/bin/env python3
"""Large real photos for the reduced-size decode (issue 36): real ones, upscaled.

    large_photos.py SOURCE_ANNOTATIONS SOURCE_IMAGES OUT [--count N] [--baseline]

RF-DETR 1.11 decodes a training JPEG at 1/2, 1/4 or 1/8 scale when it is at least twice
the size its transforms need (600 with scale jitter), which the photos under
shared/realdata (at most 1280 px) never are. This writes the first N JPEGs of a real
set and one of its PNGs, upscaled by 1.5, 2.5 and 3.125 in turn (1920 to 4000 px: each
reduction factor 2 and 4 occurs), baseline and progressive JPEGs alternating (quality
90; with --baseline all baseline, as cameras write them), with their annotations
scaled to match (bbox, area, polygons; RLE is left out), into OUT/instances.json and
OUT/images/. Pillow's BILINEAR makes the pixels: the test
needs photos of that size, not any particular ones.
"""
import argparse
import json
import os

from PIL import Image

FACTORS = (1.5, 2.5, 3.125)


def scaled_annotation(a, sx, sy):
    b = a["bbox"]
    a = dict(a, bbox=[b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy], area=a["area"] * sx * sy)
    if isinstance(a.get("segmentation"), list):
        a["segmentation"] = [[v * (sx if j % 2 == 0 else sy) for j, v in enumerate(p)] for p in a["segmentation"]]
    else:
        a.pop("segmentation", None)
    return a


def make(annotations, images, out, count, baseline=False):
    with open(annotations) as f:
        doc = json.load(f)
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    jpegs = [i for i in doc["images"] if i["file_name"].lower().endswith(".jpg")][:count]
    pngs = [i for i in doc["images"] if i["file_name"].lower().endswith(".png")][:1]
    kept, anns = [], []
    for k, info in enumerate(jpegs + pngs):
        f = FACTORS[k % len(FACTORS)]
        w, h = round(info["width"] * f), round(info["height"] * f)
        with Image.open(os.path.join(images, info["file_name"])) as im:
            big = im.convert("RGB").resize((w, h), Image.BILINEAR)
        name = info["file_name"]
        if info in pngs:
            big.save(os.path.join(out, "images", name))
        else:
            big.save(os.path.join(out, "images", name), quality=90, progressive=not baseline and k % 2 == 1)
        kept.append(dict(info, width=w, height=h))
        sx, sy = w / info["width"], h / info["height"]
        anns += [scaled_annotation(a, sx, sy) for a in doc["annotations"] if a["image_id"] == info["id"]]
    with open(os.path.join(out, "instances.json"), "w") as f:
        json.dump(dict(images=kept, annotations=anns, categories=doc["categories"]), f)
    return os.path.join(out, "instances.json"), os.path.join(out, "images")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("annotations")
    p.add_argument("images")
    p.add_argument("out")
    p.add_argument("--count", type=int, default=12, help="how many JPEGs (one PNG is added)")
    p.add_argument("--baseline", action="store_true", help="no progressive JPEG")
    args = p.parse_args()
    print(*make(args.annotations, args.images, args.out, args.count, args.baseline), sep="\n")


if __name__ == "__main__":
    main()
