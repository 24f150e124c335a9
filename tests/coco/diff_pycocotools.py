#!/usr/bin/env python3
"""Differential test: ferry's masks API against pycocotools, case by case.

Random polygons (in and out of the image, negative, fractional at many decimals,
repeated vertices, multi-part, stars, tiny and huge images), boxes, uncompressed runs
(zero-length runs included), and random masks through encode / string codec / decode / resized decode / area / bbox / merge / IoU.
Resized decodes are compared with pycocotools' full mask resized by torch's nearest rule
(tests/common/nearest.py, itself checked against torch by check_nearest_torch.py).
ferry is driven through tests/coco/mask_oracle (one command per line); every answer
must equal pycocotools' exactly. Exit 0: no mismatch; 1: mismatches or a broken run;
77: pycocotools missing and CI not set (meson's skip code).

usage: diff_pycocotools.py ORACLE [--seed N] [--polygons N] [--boxes N] [--counts N] [--masks N]
"""
import argparse
import math
import os
import random
import re
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checklist import require_modules  # noqa: E402

np, maskUtils = require_modules("numpy", "pycocotools.mask")
from nearest import resize_nearest  # noqa: E402  (torch's rule; checked against torch)


# ---------------------------------------------------------------- polygon cases

def coordinate(rng, lo, hi, style):
    v = rng.uniform(lo, hi)
    if style == "int":
        return float(round(v))
    if style == "half":
        return round(v * 2) / 2
    if style == "tenth":
        return round(v * 10) / 10
    if style == "fifth":  # exactly on the 5x grid rleFrPoly snaps to
        return round(v * 5) / 5
    return round(v, rng.randint(1, 15))


def random_part(rng, h, w, kind):
    style = rng.choice(["int", "half", "tenth", "fifth", "decimals", "decimals"])
    if kind == "star":
        k = rng.randint(5, 400)  # up to 400 vertices
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r0 = rng.uniform(1, max(h, w) / 2)
        pts = []
        for i in range(k):
            a = 2 * math.pi * i / k
            r = r0 * (1 if i % 2 == 0 else rng.uniform(0.2, 0.9))
            pts += [round(cx + r * math.cos(a), 6), round(cy + r * math.sin(a), 6)]
        return pts
    if kind == "tiny":
        k = 3
        x0, y0 = rng.uniform(-1, w + 1), rng.uniform(-1, h + 1)
        return [coordinate(rng, x0 - 0.7, x0 + 0.7, style) if i % 2 == 0 else
                coordinate(rng, y0 - 0.7, y0 + 0.7, style) for i in range(2 * k)]
    k = rng.randint(3, 24)
    if kind == "outside":
        xlo, xhi, ylo, yhi = -0.6 * w - 3, 1.6 * w + 3, -0.6 * h - 3, 1.6 * h + 3
    elif kind == "negative":
        xlo, xhi, ylo, yhi = -w - 5, w * 0.5, -h - 5, h * 0.5
    else:
        xlo, xhi, ylo, yhi = 0, w, 0, h
    pts = []
    for _ in range(k):
        pts += [coordinate(rng, xlo, xhi, style), coordinate(rng, ylo, yhi, style)]
    if kind == "repeated":
        j = rng.randrange(k)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(k)
            pts[2 * at:2 * at] = pts[2 * j:2 * j + 2]
    if rng.random() < 0.1:
        pts.append(coordinate(rng, xlo, xhi, style))  # odd trailing number: dropped
    return pts


def random_size(rng):
    r = rng.random()
    if r < 0.0025:  # near maskApi's limit: h*w just under 2^32, deltas of 7 characters
        h = rng.randint(30000, 65535)
        return h, min(65535, (2**32 - 1) // h)
    if r < 0.05:
        return rng.randint(1, 3), rng.randint(1, 3)
    if r < 0.09:
        return rng.randint(2000, 8000), rng.randint(2000, 8000)  # huge
    return rng.randint(4, 120), rng.randint(4, 120)


# Sizes at which pycocotools' merge is not used: rleMerge mallocs h*w+1 runs (16 GiB at
# 2^32 pixels), which meson's MALLOC_PERTURB_ fills, so every page becomes resident. There
# the parts' runs (pycocotools' own, from rleFrPoly) are united here, run by run.
MERGE_IN_PYTHON = 2**24


def string_to_counts(s):
    """pycocotools' compressed RLE string -> runs (rleFrString, without its int shifts)."""
    counts, p = [], 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = c & 0x20
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def counts_to_string(counts):
    """Runs -> pycocotools' compressed string (rleToString)."""
    out = []
    for i, x in enumerate(counts):
        if i > 2:
            x -= counts[i - 2]
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr((c | 0x20 if more else c) + 48))
    return "".join(out)


def union_string(rles, n):
    """The union of same-size RLEs as pycocotools' merge writes it, in O(runs)."""
    spans = []
    for r in rles:
        at = 0
        for i, c in enumerate(string_to_counts(r["counts"].decode())):
            if i % 2 and c:
                spans.append((at, at + c))
            at += c
    spans.sort()
    counts, end = [], 0
    for a, b in spans:
        if counts and a <= end:  # overlaps or touches the open foreground run
            if b > end:
                counts[-1] += b - end
                end = b
            continue
        counts += [a - end, b - a]
        end = b
    if end < n or not counts:
        counts.append(n - end)
    return counts_to_string(counts)


def polygon_case(rng):
    h, w = random_size(rng)
    kind = rng.choice(["inside", "inside", "outside", "negative", "repeated", "tiny", "star"])
    if h * w >= 2**29:  # keep memory small: pycocotools' rleFrPoly holds every edge point
        kind = "inside"   # (5 per pixel), which for outlines far outside 65535 columns is GBs
    nparts = 1 if rng.random() < 0.7 else rng.randint(2, 4)
    parts = [random_part(rng, h, w, kind) for _ in range(nparts)]
    rles = maskUtils.frPyObjects(parts, h, w)
    if len(rles) == 1:
        rle = rles[0]
    elif h * w >= MERGE_IN_PYTHON:
        rle = {"size": [h, w], "counts": union_string(rles, h * w).encode()}
    else:
        rle = maskUtils.merge(rles, intersect=0)
        # the union above, checked against pycocotools' own merge where that is cheap
        if union_string(rles, h * w) != rle["counts"].decode():
            raise AssertionError(f"union_string differs from pycocotools' merge at {h}x{w}")
    cmd = f"P {h} {w} {nparts} " + " ".join(
        f"{len(p) // 2} " + " ".join(repr(float(v)) for v in p[:len(p) // 2 * 2]) for p in parts)
    return cmd, summary(rle)


def box_case(rng):
    h, w = random_size(rng)
    style = rng.choice(["int", "half", "decimals"])
    bb = [coordinate(rng, -w / 2, w, style), coordinate(rng, -h / 2, h, style),
          coordinate(rng, 0, w, style), coordinate(rng, 0, h, style)]
    rle = maskUtils.frPyObjects(np.array([bb], dtype=np.double), h, w)[0]
    return f"B {h} {w} " + " ".join(repr(float(v)) for v in bb), summary(rle)


def summary(rle):
    h, w = rle["size"]
    counts = rle["counts"].decode()
    if h * w >= 2**29:
        # pycocotools' area() and toBbox() re-read the string with rleFrString, whose int
        # shifts overflow on 7-character values (deltas >= 2^29): only its encoder, and so
        # the string, is trustworthy at these sizes.
        return counts
    bb = maskUtils.toBbox(rle)
    return f"{counts} {int(maskUtils.area(rle))} " + " ".join(repr(float(v)) for v in bb)


# ---------------------------------------------------------------- mask cases

def random_mask(rng, nrng, h=None, w=None):
    if h is None:
        h, w = rng.randint(1, 48), rng.randint(1, 48)
    style = rng.choice(["noise", "rects", "empty", "full", "first", "sparse"])
    if style == "noise":
        m = nrng.random((h, w)) < rng.random()
    elif style == "sparse":
        m = nrng.random((h, w)) < 0.03
    elif style == "empty":
        m = np.zeros((h, w), bool)
    elif style == "full":
        m = np.ones((h, w), bool)
    else:
        m = np.zeros((h, w), bool)
        for _ in range(rng.randint(1, 4)):
            y0, x0 = rng.randrange(h), rng.randrange(w)
            m[y0:y0 + rng.randint(1, h), x0:x0 + rng.randint(1, w)] = True
        if style == "first":
            m[0, 0] = True
    return m.astype(np.uint8)


def encode(m):
    return maskUtils.encode(np.asfortranarray(m))


def row_runs(flat):
    n = flat.size
    if n == 0:
        return "0"
    cuts = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate(([0], cuts, [n]))
    runs = np.diff(edges).tolist()
    if flat[0]:
        runs = [0] + runs
    return " ".join(str(r) for r in runs)


def mask_cases(rng, nrng):
    m = random_mask(rng, nrng)
    h, w = m.shape
    rle = encode(m)
    s = rle["counts"].decode()
    cases = []
    cases.append((f"E {h} {w} " + (lambda r: f"{len(r.split())} {r}")(row_runs(m.ravel())), s))
    cases.append((f"S {h} {w} {s}", summary(rle) + " | " + row_runs(maskUtils.decode(rle).ravel())))
    dh, dw = rng.randint(1, 100), rng.randint(1, 100)
    full = maskUtils.decode(rle)
    small = resize_nearest(full, dh, dw)
    cases.append((f"R {h} {w} {dh} {dw} {s}", row_runs(small.ravel())))
    if rng.random() < 0.1:  # a photo-sized mask to a training size, where float32 matters
        big = random_mask(rng, nrng, rng.randint(300, 1000), rng.randint(300, 1000))
        bh, bw = big.shape
        dh, dw = rng.choice(range(276, 361, 12)), rng.randint(384, 1333)
        bs = encode(big)["counts"].decode()
        cases.append((f"R {bh} {bw} {dh} {dw} {bs}", row_runs(resize_nearest(big, dh, dw).ravel())))
    # merge and IoU against masks of the same size (and, for IoU, sometimes another size)
    others = [random_mask_of(rng, nrng, h, w) for _ in range(rng.randint(1, 3))]
    orles = [encode(o) for o in others]
    intersect = rng.randint(0, 1)
    merged = maskUtils.merge([rle] + orles, intersect=intersect)
    cases.append((f"M {intersect} {h} {w} {1 + len(orles)} " + " ".join(
        r["counts"].decode() for r in [rle] + orles), summary(merged)))
    dts = [rle] + orles[:1]
    gts = orles[1:] + [encode(random_mask_of(rng, nrng, h, w))]
    if rng.random() < 0.2:
        gts.append(encode(random_mask(rng, nrng)))
    crowd = [rng.randint(0, 1) for _ in gts]
    o = np.array(maskUtils.iou(dts, gts, crowd)).reshape(len(dts), len(gts))
    cmd = f"I {len(dts)} {len(gts)} " + " ".join(map(str, crowd)) + " " + " ".join(
        f"{r['size'][0]} {r['size'][1]} {r['counts'].decode()}" for r in dts + gts)
    expect = " ".join(repr(float(o[d, g])) for g in range(len(gts)) for d in range(len(dts)))
    cases.append((cmd, expect))
    return cases


def counts_case(rng):
    """Uncompressed runs as crowd annotations give them, zero-length runs included
    (rleToBbox reads a zero-length foreground run as the pixel before it)."""
    h, w = rng.randint(1, 60), rng.randint(1, 60)
    left, counts = h * w, []
    while left > 0 and len(counts) < 40:
        c = 0 if rng.random() < 0.2 else rng.randint(1, max(1, left // 3))
        c = min(c, left)
        counts.append(c)
        left -= c
    counts.append(left)
    rle = maskUtils.frPyObjects({"size": [h, w], "counts": counts}, h, w)
    return f"C {h} {w} {len(counts)} " + " ".join(map(str, counts)), summary(rle)


def random_mask_of(rng, nrng, h, w):
    return random_mask(rng, nrng, h, w)


# ---------------------------------------------------------------- comparison

NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?")


def normalise(answer):
    """Compare numbers as numbers (17 significant digits from C, repr from Python)."""
    return [float(tok) if NUMBER.fullmatch(tok) else tok for tok in answer.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("oracle")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--polygons", type=int, default=20000)
    ap.add_argument("--boxes", type=int, default=2000)
    ap.add_argument("--masks", type=int, default=3000)
    ap.add_argument("--counts", type=int, default=3000)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    nrng = np.random.default_rng(args.seed)
    cases = [polygon_case(rng) for _ in range(args.polygons)]
    cases += [box_case(rng) for _ in range(args.boxes)]
    cases += [counts_case(rng) for _ in range(args.counts)]
    for _ in range(args.masks):
        cases += mask_cases(rng, nrng)
    stdin = "".join(c + "\n" for c, _ in cases)
    run = subprocess.run([args.oracle], input=stdin, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAILED: oracle exited with {run.returncode}: {run.stderr[-2000:]}")
        return 1
    answers = run.stdout.split("\n")
    mismatches = 0
    kinds = {}
    for i, (cmd, expect) in enumerate(cases):
        got = answers[i] if i < len(answers) else "<missing>"
        kinds[cmd[0]] = kinds.get(cmd[0], 0) + 1
        want = normalise(expect)
        if len(want) == 1 and cmd[0] in "PB":  # string only (see summary)
            got = got.split(" ")[0]
        if normalise(got) != want:
            mismatches += 1
            if mismatches <= 5:
                print(f"MISMATCH case {i}:\n  cmd:    {cmd[:400]}\n  ferry:  {got[:400]}\n  pycoco: {expect[:400]}")
    print(f"{len(cases)} cases ({', '.join(f'{k}:{v}' for k, v in sorted(kinds.items()))}), "
          f"{mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
