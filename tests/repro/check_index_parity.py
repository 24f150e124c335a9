#!/usr/bin/env python3
"""coco_parity from a COCO JSON and from its binary index: the same batches, bit for bit.

usage: check_index_parity.py SYNTH_COCO COCO_PARITY FERRY_COCO

On a small synth_coco set and on ../shared/realdata/dali_coco (real progressive JPEGs
and RGBA PNGs; without ../shared the test ends there as skipped, unless CI is set), coco_parity's digest (SHA-256 of every delivered byte) must be the same
whether the loader opens the JSON (FERRY_COCO_INDEX=off), its index given as
cfg.annotations, or the JSON through the cache (FERRY_COCO_INDEX=auto), with no
mismatch between the packed and unpacked paths.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from realdata import realdata  # noqa: E402


def parity(tool, annotations, images, policy):
    env = dict(os.environ, FERRY_COCO_INDEX=policy)
    out = subprocess.run([tool, "--annotations", annotations, "--images", images, "--workers", "2",
                          "--batch", "4", "--json"], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_set(name, synth_tools, annotations, images, scratch):
    coco_parity, ferry_coco = synth_tools
    copy = os.path.join(scratch, name + ".json")  # the cache goes beside it, not into ../shared
    with open(annotations, "rb") as src, open(copy, "wb") as dst:
        dst.write(src.read())
    index = os.path.join(scratch, name + ".ferryidx")
    subprocess.run([ferry_coco, "index", copy, "--out", index], check=True, capture_output=True)
    runs = {
        "json": parity(coco_parity, copy, images, "off"),
        "index": parity(coco_parity, index, images, "use"),
        "json via cache": parity(coco_parity, copy, images, "auto"),
    }
    if not os.path.exists(copy + ".ferryidx"):
        return [f"{name}: FERRY_COCO_INDEX=auto built no index beside {copy}"]
    problems = []
    base = runs["json"]
    for how, got in runs.items():
        print(f"{name} from {how}: {got['images']} images, {got['instances']} instances, digest {got['digest']}")
        if got["mismatches"] != 0:
            problems.append(f"{name} from {how}: {got['mismatches']} mismatches")
        if got["digest"] != base["digest"] or got["images"] != base["images"]:
            problems.append(f"{name} from {how}: digest {got['digest']} != from JSON {base['digest']}")
    return problems


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    synth_coco, coco_parity, ferry_coco = sys.argv[1:]
    problems = []
    with tempfile.TemporaryDirectory() as scratch:
        synth = os.path.join(scratch, "synth")
        subprocess.run([synth_coco, "--out", synth, "--images", "24", "--seed", "3"], check=True,
                       capture_output=True)
        problems += check_set("synth", (coco_parity, ferry_coco),
                              os.path.join(synth, "annotations", "instances_val2017.json"),
                              os.path.join(synth, "val2017"), scratch)
        if problems:  # the synthetic set's verdict stands even where the real data is absent
            for p in problems:
                print("FAILED:", p)
            sys.exit(1)
        dali = os.path.join(realdata(), "dali_coco", "coco")  # exits 77 (skip) without ../shared
        problems += check_set("dali_coco", (coco_parity, ferry_coco), os.path.join(dali, "instances.json"),
                              os.path.join(dali, "images"), scratch)
    for p in problems:
        print("FAILED:", p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
