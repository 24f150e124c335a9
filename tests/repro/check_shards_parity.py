#!/usr/bin/env python3
"""A split packed into WebDataset tar shards by `ferry-coco pack` loads as the folder + JSON does.

usage: check_shards_parity.py SYNTH_COCO COCO_PARITY FERRY_COCO

On a small synth_coco set and on the real sets of ../shared/realdata (dali_coco's three,
mmpose_coco; without ../shared those end as skipped, unless CI is set), coco_parity's
digest (SHA-256 of every delivered byte, packed and unpacked paths compared) must be the
same from the shard index as from the JSON and its images folder:
  - packed with --category-ids raw, against the JSON with raw category ids;
  - packed with --category-ids remap, against the JSON with --remap-categories 1 (the
    same labels when the categories are sorted by id and none is a grouping one);
  - through a brace pattern "SPLIT-{000000..N}.tar" (raw ids, no index);
with 1, 2 and 16 workers (from the index), shards cut small (--max-shard-bytes) so that a set spans
several. The shards hold every image byte for byte: each member equals its file.
"""
import glob
import json
import os
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from realdata import SKIP, realdata  # noqa: E402


def parity(tool, annotations, images, workers, remap):
    cmd = [tool, "--annotations", annotations, "--images", images, "--workers", str(workers), "--batch", "4",
           "--resolution", "96", "--remap-categories", str(remap), "--shuffle", "0", "--json"]
    out = subprocess.run(cmd, env=dict(os.environ, FERRY_COCO_INDEX="off"), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pack(ferry_coco, annotations, images, out, policy, max_bytes):
    cmd = [ferry_coco, "pack", annotations, "--images", images, "--out", out, "--split", "val",
           "--max-shard-bytes", str(max_bytes), "--category-ids", policy]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    return os.path.join(out, "val-index.json")


def members_equal_files(index, images):
    """Every image member of every shard is its file, byte for byte."""
    problems = []
    with open(index) as f:
        doc = json.load(f)
    folder = os.path.dirname(index)
    for shard in doc["shards"]:
        with tarfile.open(os.path.join(folder, shard)) as tar:
            names = tar.getnames()
            for name in names:
                if name.endswith(".json"):
                    sidecar = json.load(tar.extractfile(name))
                    key = name[: -len(".json")]
                    image = next(n for n in names if n.startswith(key + ".") and n != name)
                    with open(os.path.join(images, sidecar["file_name"]), "rb") as src:
                        if src.read() != tar.extractfile(image).read():
                            problems.append(f"{shard}: {image} differs from {sidecar['file_name']}")
    return problems


def check_set(name, tools, annotations, images, scratch):
    coco_parity, ferry_coco = tools
    problems = []
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(images, "**"), recursive=True) if os.path.isfile(p))
    max_bytes = max(size // 4, 1)  # about four shards
    raw = pack(ferry_coco, annotations, images, os.path.join(scratch, name + "-raw"), "raw", max_bytes)
    remap = pack(ferry_coco, annotations, images, os.path.join(scratch, name + "-remap"), "remap", max_bytes)
    with open(raw) as f:
        shards = json.load(f)["shards"]
    if len(shards) < 2:
        problems.append(f"{name}: packed into {len(shards)} shard(s); the test wants several")
    pattern = os.path.join(os.path.dirname(raw), f"val-{{000000..{len(shards) - 1:06d}}}.tar")
    problems += members_equal_files(raw, images)
    runs = ((0, "index raw", raw, (1, 2, 16)), (0, "pattern", pattern, (2,)), (1, "index remap", remap, (2,)))
    folders = {flag: parity(coco_parity, annotations, images, 2, flag) for flag in (0, 1)}
    for remap_flag, how, spec, worker_counts in runs:
        folder = folders[remap_flag]
        for workers in worker_counts:
            got = parity(coco_parity, spec, images, workers, remap_flag)
            print(f"{name} {how}, {workers} workers: {got['images']} images, {got['instances']} instances, "
                  f"digest {got['digest']} (folder: {folder['digest']})")
            if got["mismatches"]:
                problems.append(f"{name} {how} {workers} workers: {got['mismatches']} mismatches")
            if got["digest"] != folder["digest"] or got["images"] != folder["images"]:
                problems.append(f"{name} {how} {workers} workers: digest {got['digest']} != folder's "
                                f"{folder['digest']}")
    return problems


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    synth_coco, coco_parity, ferry_coco = sys.argv[1:]
    tools = (coco_parity, ferry_coco)
    problems = []
    with tempfile.TemporaryDirectory() as scratch:
        synth = os.path.join(scratch, "synth")
        subprocess.run([synth_coco, "--out", synth, "--images", "40", "--seed", "3"], check=True,
                       stdout=subprocess.DEVNULL)
        problems += check_set("synth", tools, os.path.join(synth, "annotations", "instances_val2017.json"),
                              os.path.join(synth, "val2017"), scratch)
        try:
            root = realdata()
        except SystemExit as e:
            if e.code != SKIP:
                raise
            root = None
        if root:
            sets = {
                "dali_coco": ("dali_coco/coco/instances.json", "dali_coco/coco/images"),
                "dali_pixelwise": ("dali_coco/coco_pixelwise/instances.json", "dali_coco/coco_pixelwise/images"),
                "dali_dummy": ("dali_coco/coco_dummy/instances.json", "dali_coco/coco_dummy/images"),
                "mmpose": ("mmpose_coco/test_coco.json", "mmpose_coco"),
            }
            for name, (ann, img) in sets.items():
                problems += check_set(name, tools, os.path.join(root, ann), os.path.join(root, img), scratch)
    for p in problems:
        print("FAIL:", p)
    if not problems and not root:
        sys.exit(SKIP)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
