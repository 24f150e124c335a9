#!/usr/bin/env python3
"""Checks synth/synth_coco: determinism, structure, COCO conventions and statistics.

usage: check_synth_coco.py SYNTH_COCO_EXE

Runs the generator on small sets and verifies, independently of its code:
  - same seed -> byte-identical files, whatever the thread count; another seed differs;
  - the JSON's structure: info, licenses, images, annotations, categories; unique ids;
  - COCO's 80 category ids (1..90 without 12, 26, 29, 30, 45, 66, 68, 69, 71, 83);
  - polygons: 1-3 parts of 6-40 vertices, 2-decimal coordinates inside the image,
    bbox = the vertices' extent, area = shoelace area;
  - crowds: uncompressed RLE whose counts sum to h*w, area = foreground pixels,
    bbox = the foreground's extent;
  - JPEG headers: baseline, 3 components, 4:2:0, quality-90 quantisation tables, the
    width and height the JSON states;
  - statistics over 300 images near val2017's (instances per image, crowd share,
    bytes per pixel);
  - argument errors exit 2, an output path that cannot be a folder exits 1;
  - tiny mode (--max-side M): each image is the full-size set's image of the same id
    shrunk to a longer side of M (aspect kept), and passes every structural check
    above at that size (JPEG size = JSON size, boxes and polygons inside, crowd
    counts summing to h*w); identical files whatever the thread count; a limit no
    image reaches changes no JPEG and no annotation.
With Pillow, every JPEG is also decoded; with pycocotools, crowd areas and boxes are
recomputed by maskUtils and polygon areas compared with annToMask. Without them those
checks are skipped, unless the CI environment variable is set: then it is a failure.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ALLOWED_CATEGORY_IDS = set(range(1, 91)) - {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}

# The IJG/libjpeg standard tables (JPEG spec K.1/K.2, natural order) and the IJG rule
# mapping quality to a scale: the tables quality 90 must produce.
STD_LUMA = [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
            14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
            18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
            49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99]
STD_CHROMA = [17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
              24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32
ZIGZAG = [0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48,
          41, 34, 27, 20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15,
          23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63]

failures = []


def check(cond, message):
    if not cond:
        failures.append(message)
        if len(failures) <= 30:
            print("FAIL: " + message)
    return cond


def run(exe, *args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)


def generate(exe, out, images, seed, threads, *extra):
    p = run(exe, "--out", out, "--images", str(images), "--seed", str(seed),
            "--threads", str(threads), *extra)
    if p.returncode != 0:
        print(p.stdout + p.stderr)
        raise SystemExit(f"synth_coco exited {p.returncode} for {out}")
    return p.stdout


def tree_bytes(root):
    files = {}
    for base, _, names in os.walk(root):
        for name in names:
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files


def quality_table(std, quality):
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return [min(255, max(1, (v * scale + 50) // 100)) for v in std]


def jpeg_header(path):
    """(width, height, sampling factors, {table id: natural-order table}, baseline)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] != b"\xff\xd8":
        raise ValueError("no SOI marker")
    pos, tables, sof = 2, {}, None
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise ValueError(f"bad marker at {pos}")
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        body = data[pos + 4:pos + 2 + length]
        if marker == 0xDB:
            i = 0
            while i < len(body):
                precision, tid = body[i] >> 4, body[i] & 15
                if precision != 0:
                    raise ValueError("16-bit quantisation table")
                zz = body[i + 1:i + 65]
                natural = [0] * 64
                for k, v in enumerate(zz):
                    natural[ZIGZAG[k]] = v
                tables[tid] = natural
                i += 65
        elif marker in (0xC0, 0xC1, 0xC2):
            h, w, n = struct.unpack(">HHB", body[1:6])
            sampling = [(body[6 + 3 * c + 1] >> 4, body[6 + 3 * c + 1] & 15) for c in range(n)]
            sof = (w, h, sampling, marker == 0xC0)
        elif marker == 0xDA:
            break
        pos += 2 + length
    if sof is None:
        raise ValueError("no SOF marker")
    return sof[0], sof[1], sof[2], tables, sof[3]


def shoelace(xy):
    pts = list(zip(xy[0::2], xy[1::2]))
    s = 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:] + pts[:1]):
        s += x0 * y1 - x1 * y0
    return abs(s) / 2.0


def two_decimals(v):
    return abs(v * 100 - round(v * 100)) < 1e-6


def check_polygon(ann, img):
    w, h, seg = img["width"], img["height"], ann["segmentation"]
    where = f"annotation {ann['id']}"
    if not check(isinstance(seg, list) and 1 <= len(seg) <= 3, f"{where}: 1-3 polygon parts"):
        return
    xs, ys, area = [], [], 0.0
    for part in seg:
        n = len(part) // 2
        check(len(part) % 2 == 0 and 6 <= n <= 40, f"{where}: part of {len(part)} numbers")
        check(all(two_decimals(v) for v in part), f"{where}: coordinates with 2 decimals")
        xs += part[0::2]
        ys += part[1::2]
        area += shoelace(part)
    check(all(0 <= x <= w for x in xs) and all(0 <= y <= h for y in ys),
          f"{where}: vertices inside the {w}x{h} image")
    extent = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
    check(all(abs(a - b) < 0.011 for a, b in zip(ann["bbox"], extent)),
          f"{where}: bbox {ann['bbox']} != vertex extent {extent}")
    check(area > 0 and abs(ann["area"] - area) <= 1e-6 * max(1.0, area),
          f"{where}: area {ann['area']} != shoelace {area}")


def check_crowd(ann, img):
    w, h, seg = img["width"], img["height"], ann["segmentation"]
    where = f"crowd annotation {ann['id']}"
    if not check(isinstance(seg, dict) and seg.get("size") == [h, w], f"{where}: size [h, w]"):
        return
    counts = seg.get("counts")
    if not check(isinstance(counts, list) and all(isinstance(c, int) and c >= 0 for c in counts),
                 f"{where}: uncompressed counts"):
        return
    check(sum(counts) == h * w, f"{where}: counts sum {sum(counts)} != h*w {h * w}")
    check(all(c > 0 for c in counts[1:]), f"{where}: only the first run may be empty")
    pos, fg, cols, rows = 0, 0, [], []
    for k, c in enumerate(counts):
        if k % 2 == 1 and c > 0:  # foreground run, column-major
            fg += c
            first, last = pos, pos + c - 1
            cols += [first // h, last // h]
            rows += [first % h, last % h] if first // h == last // h else [0, h - 1]
        pos += c
    check(fg > 0 and ann["area"] == fg, f"{where}: area {ann['area']} != foreground {fg}")
    if fg:
        extent = [min(cols), min(rows), max(cols) - min(cols) + 1, max(rows) - min(rows) + 1]
        check(ann["bbox"] == extent, f"{where}: bbox {ann['bbox']} != foreground extent {extent}")


def check_images(coco, root, decode):
    ids = [im["id"] for im in coco["images"]]
    check(len(set(ids)) == len(ids), "image ids unique")
    luma90, chroma90 = quality_table(STD_LUMA, 90), quality_table(STD_CHROMA, 90)
    total_bytes = total_pixels = 0
    for im in coco["images"]:
        name = im["file_name"]
        check(name == "%012d.jpg" % im["id"], f"file name {name} for id {im['id']}")
        path = os.path.join(root, "val2017", name)
        if not check(os.path.isfile(path), f"{path} exists"):
            continue
        w, h, sampling, tables, baseline = jpeg_header(path)
        check((w, h) == (im["width"], im["height"]), f"{name}: SOF {w}x{h} != JSON")
        check(baseline and sampling == [(2, 2), (1, 1), (1, 1)], f"{name}: baseline 4:2:0")
        check(tables.get(0) == luma90 and tables.get(1) == chroma90, f"{name}: quality 90")
        total_bytes += os.path.getsize(path)
        total_pixels += w * h
        if decode:
            pixels = decode.open(path).convert("L")
            lo, hi = pixels.getextrema()
            check(pixels.size == (w, h) and hi - lo > 64, f"{name}: decodes, not flat")
    return total_bytes / max(1, total_pixels)


def check_structure(coco, root, decode):
    check(list(coco) == ["info", "licenses", "images", "annotations", "categories"],
          f"top-level keys {list(coco)}")
    check(isinstance(coco["info"], dict) and len(coco["licenses"]) > 0, "info and licenses")
    cats = coco["categories"]
    check(len(cats) == 80 and {c["id"] for c in cats} == ALLOWED_CATEGORY_IDS,
          "COCO's 80 category ids")
    check(len({c["name"] for c in cats}) == 80, "80 distinct category names")
    bpp = check_images(coco, root, decode)
    images = {im["id"]: im for im in coco["images"]}
    ann_ids = [a["id"] for a in coco["annotations"]]
    check(len(set(ann_ids)) == len(ann_ids), "annotation ids unique")
    for ann in coco["annotations"]:
        img = images.get(ann["image_id"])
        if not check(img is not None, f"annotation {ann['id']}: image exists"):
            continue
        check(ann["category_id"] in ALLOWED_CATEGORY_IDS, f"annotation {ann['id']}: category")
        check(ann["iscrowd"] in (0, 1), f"annotation {ann['id']}: iscrowd 0/1")
        x, y, w, h = ann["bbox"]
        check(x >= 0 and y >= 0 and w > 0 and h > 0 and x + w <= img["width"] + 1e-6
              and y + h <= img["height"] + 1e-6, f"annotation {ann['id']}: bbox inside image")
        (check_crowd if ann["iscrowd"] else check_polygon)(ann, img)
    return bpp


def statistics(coco):
    per_image = {im["id"]: 0 for im in coco["images"]}
    for ann in coco["annotations"]:
        per_image[ann["image_id"]] += 1
    counts = sorted(per_image.values())
    n = len(counts)
    median = counts[n // 2] if n % 2 else (counts[n // 2 - 1] + counts[n // 2]) / 2
    crowd = sum(a["iscrowd"] for a in coco["annotations"])
    return sum(counts) / n, median, max(counts), counts.count(0), crowd / max(1, sum(counts))


def check_with_pycocotools(root):
    from pycocotools import mask as mask_utils
    from pycocotools.coco import COCO
    coco = COCO(os.path.join(root, "annotations", "instances_val2017.json"))
    worst = 0.0
    for ann in coco.dataset["annotations"]:
        img = coco.imgs[ann["image_id"]]
        if ann["iscrowd"]:
            rle = mask_utils.frPyObjects(ann["segmentation"], img["height"], img["width"])
            check(int(mask_utils.area(rle)) == ann["area"], f"crowd {ann['id']}: maskUtils area")
            check(list(mask_utils.toBbox(rle)) == ann["bbox"], f"crowd {ann['id']}: maskUtils bbox")
        elif ann["area"] > 100:
            # shoelace area vs pycocotools' rasterisation: pixel-boundary effects only
            pixels = int(coco.annToMask(ann).sum())
            worst = max(worst, abs(pixels - ann["area"]) / ann["area"])
    check(worst < 0.15, f"polygon area vs annToMask: worst relative difference {worst:.3f}")
    print(f"pycocotools: polygon area vs annToMask worst relative difference {worst:.3f}")


def optional_module(name):
    try:
        return __import__(name)
    except ImportError:
        if os.environ.get("CI"):
            check(False, f"{name} is required when CI is set")
        else:
            print(f"skipped: {name} not installed: checks that need it are not run")
        return None


def load(root):
    with open(os.path.join(root, "annotations", "instances_val2017.json")) as f:
        return json.load(f)


def check_arguments(exe, tmp):
    check(run(exe, "--help").returncode == 0, "--help exits 0")
    for args in (["--images", "3"], ["--out", tmp, "--images", "0"],
                 ["--out", tmp, "--images", "x"], ["--out", tmp, "--seed", "-1"],
                 ["--out", tmp, "--threads", "0"], ["--out", tmp, "--bogus"], ["--out"],
                 ["--out", tmp, "--max-side", "15"], ["--out", tmp, "--max-side", "4097"]):
        p = run(exe, *args)
        check(p.returncode == 2 and "synth_coco:" in p.stderr, f"{args}: exit 2 with a message")
    blocker = os.path.join(tmp, "a_file")
    with open(blocker, "w") as f:
        f.write("x")
    p = run(exe, "--out", os.path.join(blocker, "set"), "--images", "1")
    check(p.returncode == 1 and "cannot create directory" in p.stderr,
          "an output path under a file exits 1 naming the folder")


def shrunk(w, h, side):
    """The size val2017-shaped w x h should have with --max-side side."""
    longer = max(w, h)
    if longer <= side:
        return w, h
    return tuple((2 * v * side + longer) // (2 * longer) for v in (w, h))  # nearest, exactly


def check_tiny_sizes(tiny, full, side):
    sizes = {im["id"]: (im["width"], im["height"]) for im in full["images"]}
    check([im["id"] for im in tiny["images"]] == list(sizes), f"max side {side}: same image ids")
    for im in tiny["images"]:
        w, h = im["width"], im["height"]
        check(max(w, h) <= side, f"max side {side}: image {im['id']} is {w}x{h}")
        check((w, h) == shrunk(*sizes[im["id"]], side),
              f"max side {side}: image {im['id']} {w}x{h} is not {sizes[im['id']]} shrunk")


def check_tiny(exe, tmp, decode):
    """--max-side: shrunk val2017 sizes, annotations consistent at the small size."""
    full, tiny, tiny3, edge, loose = (os.path.join(tmp, d) for d in
                                      ("full", "tiny", "tiny3", "edge", "loose"))
    generate(exe, full, 300, 12, 2)
    generate(exe, tiny, 300, 12, 1, "--max-side", "80")
    generate(exe, tiny3, 300, 12, 3, "--max-side", "80")
    check(tree_bytes(tiny) == tree_bytes(tiny3), "max side 80, 1 or 3 threads: identical files")
    coco = load(tiny)
    check_tiny_sizes(coco, load(full), 80)
    check(sum(a["iscrowd"] for a in coco["annotations"]) > 0, "max side 80: some crowds to check")
    check_structure(coco, tiny, decode)
    generate(exe, edge, 300, 12, 2, "--max-side", "16")
    check_tiny_sizes(load(edge), load(full), 16)
    check_structure(load(edge), edge, None)
    # 640 is val2017's longest side: a limit of 640 shrinks nothing
    generate(exe, loose, 300, 12, 2, "--max-side", "640")
    tf, tl = tree_bytes(full), tree_bytes(loose)
    check(all(tf[k] == tl[k] for k in tf if k.endswith(".jpg")), "max side 640: same JPEGs")
    full_coco, loose_coco = load(full), load(loose)
    check(all(full_coco[k] == loose_coco[k] for k in ("images", "annotations")),
          "max side 640: same images and annotations")


def main():
    exe = sys.argv[1]
    decode = optional_module("PIL") and __import__("PIL.Image").Image
    have_pycocotools = optional_module("pycocotools") is not None
    tmp = tempfile.mkdtemp(prefix="synth_coco_test_")
    try:
        a, b, c, big = (os.path.join(tmp, d) for d in ("a", "b", "c", "big"))
        out = generate(exe, a, 20, 5, 2)
        check("images:               20" in out, "summary names the image count")
        generate(exe, b, 20, 5, 1)
        generate(exe, c, 20, 6, 2)
        ta, tb, tc = tree_bytes(a), tree_bytes(b), tree_bytes(c)
        check(len(ta) == 21 and ta == tb, "same seed, 1 or 2 threads: identical files")
        shared = set(ta) & set(tc)
        check(all(ta[k] != tc[k] for k in shared if k.endswith(".jpg"))
              and ta["annotations/instances_val2017.json"] != tc["annotations/instances_val2017.json"],
              "another seed: different files")
        check_structure(load(a), a, decode)

        generate(exe, big, 300, 11, 2)
        coco = load(big)
        bpp = check_structure(coco, big, None)
        mean, median, most, empty, crowd = statistics(coco)
        print(f"300 images: mean {mean:.2f}, median {median}, max {most}, empty {empty}, "
              f"crowd {100 * crowd:.2f}%, {bpp:.3f} bytes/pixel")
        # val2017: mean 7.3, median 5, max 63, 1% empty, ~1% crowd; real photos at q90
        # 4:2:0 and the original files: ~0.3-0.6 bytes per pixel.
        check(6.0 <= mean <= 8.8, f"mean instances {mean} near 7.3")
        check(4 <= median <= 6, f"median instances {median} near 5")
        check(most <= 60 and most >= 25, f"max instances {most}")
        check(empty <= 12, f"{empty} empty images of 300")
        check(0.002 <= crowd <= 0.025, f"crowd share {crowd}")
        check(0.35 <= bpp <= 0.8, f"bytes per pixel {bpp}")
        if have_pycocotools:
            check_with_pycocotools(big)
        check_tiny(exe, tmp, decode)
        check_arguments(exe, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all synth_coco checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
