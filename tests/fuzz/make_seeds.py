#!/usr/bin/env python3
"""Seed corpora for ferry's fuzzers, made at test time (nothing is copied into the repo).

    make_seeds.py KIND OUT_DIR [FERRY_COCO]

KIND is rle, polygon, coco, jpeg, png, index or tar. Index seeds are the coco seeds turned
into binary indexes by FERRY_COCO (the ferry-coco tool: `ferry-coco index`). Seeds come from $FERRY_SHARED/realdata (real
COCO files and photos, see its README) when it is there, plus a few hand-written
edge cases defined below. Without the real data only the hand-written seeds are made.
"""
import hashlib
import io
import json
import os
import struct
import sys

MAX_SEED = 64 * 1024
MAX_INDEX_SEED = 128 * 1024  # fuzz_index's -max_len


def realdata():
    root = os.environ.get("FERRY_SHARED")
    path = os.path.join(root, "realdata") if root else ""
    return path if path and os.path.isdir(path) else None


def files(exts):
    root = realdata()
    if not root:
        return []
    found = []
    for d, _, names in os.walk(root):
        found += [os.path.join(d, n) for n in names if n.lower().endswith(exts)]
    return sorted(found)


def write(out, data, limit=MAX_SEED):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > limit:
        return
    with open(os.path.join(out, hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def annotations_of(doc):
    if isinstance(doc, list):
        return [a for a in doc if isinstance(a, dict)]
    if isinstance(doc, dict):
        return [a for a in doc.get("annotations") or [] if isinstance(a, dict)]
    return []


# ---- rle: <h u16><w u16><compressed string> -------------------------------------

def rle_seeds(out):
    for path in files(".json"):
        for ann in annotations_of(load_json(path)):
            seg = ann.get("segmentation")
            if isinstance(seg, dict) and isinstance(seg.get("counts"), str):
                h, w = seg["size"]
                if h < 65536 and w < 65536:
                    write(out, struct.pack("<HH", h, w) + seg["counts"].encode())
    hand = [(0, 0, ""), (1, 1, "1"), (1, 1, "01"), (2, 3, "06"), (4, 4, "0<"),
            (3, 3, "12O0"), (10, 10, "1d1"), (65535, 65535, "lnnnnn`0"), (5, 5, "o")]
    for h, w, s in hand:
        write(out, struct.pack("<HH", h, w) + s.encode())


# ---- polygon: <h byte><w byte><flags> then one selector byte per coordinate -------

def selector(value, side):
    """The small-value selector (0..199) closest to `value` in a mask of this side."""
    return max(0, min(199, round(value / side * 160 + 20)))


def polygon_seeds(out):
    for path in files(".json"):
        doc = load_json(path)
        if not isinstance(doc, dict):
            continue
        sizes = {i.get("id"): (i.get("height"), i.get("width")) for i in doc.get("images") or []
                 if isinstance(i, dict)}
        for ann in annotations_of(doc):
            seg = ann.get("segmentation")
            H, W = sizes.get(ann.get("image_id"), (None, None))
            if not isinstance(seg, list) or not H or not W:
                continue
            hb, wb = max(1, round(H * 255 / max(H, W))), max(1, round(W * 255 / max(H, W)))
            for part in seg[:2]:
                if isinstance(part, list) and len(part) <= 4000:
                    body = bytes(selector(v / max(H, W) * 4 * max(hb, wb), 4 * max(hb, wb))
                                 for v in part if isinstance(v, (int, float)))
                    write(out, bytes([hb, wb, 1]) + body)
    # Hand-written: a triangle, a square repeated 4^3 times, then each extreme value
    # (selectors 200..247) as a vertex of an otherwise ordinary triangle, and raw doubles.
    write(out, bytes([20, 30, 0, 20, 20, 180, 20, 100, 180]))
    write(out, bytes([40, 40, 6, 30, 30, 150, 30, 150, 150, 30, 150]))
    for s in range(200, 248):
        write(out, bytes([32, 32, 0, s, 40, 120, 40, 80, s]))
        write(out, bytes([64, 64, 1, 30, 30, s, s, 160, 100]))
    for v in (1e12, -1e12, float("nan"), float("inf"), 1e8, 1e8 + 1, 2.5e7):
        write(out, bytes([50, 50, 0, 20, 20, 248]) + struct.pack("<d", v) + bytes([100, 150, 100]))


# ---- coco: whole small files, and few-image subsets of the larger ones ------------

def subset(doc, k):
    """The first k images of an instances file with their annotations."""
    images = [i for i in doc.get("images") or [] if isinstance(i, dict)][:k]
    ids = {i.get("id") for i in images}
    anns = [a for a in annotations_of(doc) if a.get("image_id") in ids]
    small = dict(doc, images=images, annotations=anns[:40])
    small.pop("licenses", None)
    return small


HOSTILE_JSON = [
    '{"images": [], "annotations": [], "categories": []}',
    '[]',
    '[{"image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "score": 0.5}]',
    '{"images": [{"id": 1, "width": 4, "height": 3, "file_name": "a.jpg"}],'
    ' "categories": [{"id": 1, "name": "x", "keypoints": ["a", "b"]}],'
    ' "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2],'
    ' "area": 4, "iscrowd": 0, "segmentation": [[0, 0, 2, 0, 2, 2]],'
    ' "keypoints": [1, 1, 2, 2, 2, 2]}]}',
    '{"images": [{"id": 1, "width": 4, "height": 3}], "categories": [{"id": 2}],'
    ' "annotations": [{"image_id": 1, "category_id": 2, "bbox": [0, 0, 4, 3], "iscrowd": 1,'
    ' "segmentation": {"size": [3, 4], "counts": [0, 5, 7]}}]}',
    '{"images": [{"id": 1, "width": 4, "height": 3}], "categories": [{"id": 2}],'
    ' "annotations": [{"image_id": 1, "category_id": 2, "bbox": [0, 0, 4, 3],'
    ' "segmentation": {"size": [3, 4], "counts": "05:0"}}]}',
    '{"images": [{"id": 1, "width": 100, "height": 100}], "categories": [{"id": 1}],'
    ' "annotations": [{"image_id": 1, "category_id": 1, "bbox": [1e300, -1e300, 1e12, -5],'
    ' "segmentation": [[1e12, -1e12, 1e8, 0, 0, 1e8, 5, 5]]}]}',
    '{"images": [{"id": 7, "width": 0, "height": -1}], "annotations": [{"image_id": 8}]}',
    '{"images": [{"id": 1}, {"id": 1}], "categories": [{"id": 3}, {"id": 3}]}',
    '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]'
    ']]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]',
]


def coco_seeds(out):
    for path in files(".json"):
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            continue
        write(out, raw)
        doc = load_json(path)
        if isinstance(doc, dict) and doc.get("images"):
            for k in (1, 3):
                write(out, json.dumps(subset(doc, k)))
        elif isinstance(doc, list):
            write(out, json.dumps(doc[:5]))
    for text in HOSTILE_JSON:
        write(out, text)


def index_seeds(out, tool):
    """The coco seeds that parse, as binary indexes (what fuzz_index reads)."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        json_dir = os.path.join(tmp, "json")
        os.makedirs(json_dir)
        coco_seeds(json_dir)
        for name in sorted(os.listdir(json_dir)):
            dest = os.path.join(tmp, name + ".ferryidx")
            done = subprocess.run([tool, "index", os.path.join(json_dir, name), "--out", dest],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if done.returncode == 0:
                with open(dest, "rb") as f:
                    write(out, f.read(), MAX_INDEX_SEED)


# ---- tar shards: what RF-DETR's packer writes, and the other formats' headers -------

def tar_seeds(out):
    """Small shards written by Python's tarfile: RF-DETR's members (%08d.jpg + .json)
    in ustar, pax and GNU formats, long names, a directory, links, a pax size."""
    import tarfile
    photo = b"\xff\xd8\xff\xd9"
    sources = [p for p in files((".jpg",)) if os.path.getsize(p) < 16 * 1024][:2]
    for path in sources:
        with open(path, "rb") as f:
            photo = f.read()
    sidecar = json.dumps({"image_id": 1, "file_name": "a.jpg", "annotations": [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], "area": 12, "iscrowd": 0}]}).encode()

    def add(tar, name, data, kind=tarfile.REGTYPE, link=""):
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime, info.type, info.linkname = len(data), 0o644, 0, kind, link
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

    for fmt in (tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        for long_names in (False, True):
            if fmt == tarfile.USTAR_FORMAT and long_names:
                continue
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
                key = ("k" * 140 + "/") if long_names else ""
                for i in range(2):
                    add(tar, f"{key}{i:08d}.jpg", photo)
                    add(tar, f"{key}{i:08d}.json", sidecar)
                if fmt != tarfile.USTAR_FORMAT:
                    add(tar, "dir", b"", tarfile.DIRTYPE)
                    add(tar, "00000002.jpg", b"", tarfile.SYMTYPE, "00000000.jpg")
            write(out, buf.getvalue())


# ---- images: small real files, and small re-encodings of real photos --------------

def photo_sources():
    return [p for p in files((".jpg", ".jpeg", ".png")) if os.path.getsize(p) < 4 * 1024 * 1024][:12]


def small_variants(fmt):
    """Small re-encodings of real photos in the modes the decoder must handle."""
    try:
        from PIL import Image
    except ImportError:
        print("make_seeds: Pillow missing, no re-encoded seeds", file=sys.stderr)
        return
    for path in photo_sources():
        try:
            im = Image.open(path)
            im.load()
        except Exception:  # a deliberately truncated file among the sources
            continue
        base = im.convert("RGB").resize((23, 17))
        if fmt == "jpeg":
            exif = Image.Exif()
            exif[0x0112] = 6
            variants = [(base, dict(quality=75)), (base, dict(progressive=True)),
                        (base.convert("L"), {}), (base, dict(subsampling=0)),
                        (base, dict(subsampling=1)), (base.convert("CMYK"), {}),
                        (base, dict(exif=exif.tobytes())), (base, dict(optimize=True, quality=20))]
        else:
            exif = Image.Exif()
            exif[0x0112] = 8
            variants = [(base, {}), (base.convert("RGBA"), {}), (base.convert("L"), {}),
                        (base.convert("LA"), {}), (base.convert("P"), dict(transparency=0)),
                        (base.convert("1"), {}), (base.convert("I;16"), {}),
                        (base, dict(exif=exif.tobytes()))]
        for image, opts in variants:
            buf = io.BytesIO()
            try:
                image.save(buf, "JPEG" if fmt == "jpeg" else "PNG", **opts)
            except (OSError, ValueError):
                continue
            yield buf.getvalue()


def image_seeds(out, fmt):
    exts = (".jpg", ".jpeg") if fmt == "jpeg" else (".png",)
    for path in files(exts):
        if os.path.getsize(path) <= MAX_SEED:
            with open(path, "rb") as f:
                write(out, f.read())
    for data in small_variants(fmt):
        write(out, data)
    if fmt == "png":
        # A header claiming 100000 x 100000 (the pixel limit must refuse it).
        ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
        write(out, b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0")


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    kind, out = sys.argv[1], sys.argv[2]
    tool = sys.argv[3] if len(sys.argv) == 4 else None
    if kind == "index" and not tool:
        sys.exit("make_seeds: index seeds need the ferry-coco tool")
    os.makedirs(out, exist_ok=True)
    makers = {"rle": rle_seeds, "polygon": polygon_seeds, "coco": coco_seeds,
              "index": lambda o: index_seeds(o, tool),
              "tar": tar_seeds,
              "jpeg": lambda o: image_seeds(o, "jpeg"), "png": lambda o: image_seeds(o, "png")}
    if kind not in makers:
        sys.exit("unknown kind %r" % kind)
    if not realdata():
        print("make_seeds: FERRY_SHARED/realdata not found: hand-written seeds only", file=sys.stderr)
    makers[kind](out)
    print("make_seeds: %s: %d seeds in %s" % (kind, len(os.listdir(out)), out), file=sys.stderr)


if __name__ == "__main__":
    main()
