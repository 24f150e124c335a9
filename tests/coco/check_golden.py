#!/usr/bin/env python3
"""`ferry-coco rle` must reproduce every golden file in $FERRY_SHARED/realdata/golden/
byte for byte (the masks pycocotools' reference C code makes; see golden/README.md).

usage: check_golden.py FERRY_COCO
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from realdata import realdata  # noqa: E402  (the skip rule shared by the tests)

# golden file -> the COCO file it was made from (paths under realdata/)
SOURCES = {
    "cocoapi_fakesegm100.jsonl": "cocoapi_results/instances_val2014_fakesegm100_results.json",
    "dali_coco.jsonl": "dali_coco/coco/instances.json",
    "dali_coco_pixelwise.jsonl": "dali_coco/coco_pixelwise/instances.json",
    "datumaro_instances_val.jsonl": "datumaro_coco/coco/annotations/instances_val.json",
    "edgecases_seed7.jsonl": "golden/edgecases_seed7.json",
}


def main():
    tool = sys.argv[1]
    real = realdata()
    golden_dir = os.path.join(real, "golden")
    present = sorted(f for f in os.listdir(golden_dir) if f.endswith(".jsonl"))
    unknown = [f for f in present if f not in SOURCES]
    if unknown:
        print(f"FAILED: golden files without a known source: {unknown}")
        return 1
    failures = 0
    for name in present:
        src = os.path.join(real, SOURCES[name])
        run = subprocess.run([tool, "rle", src], capture_output=True, text=True)
        with open(os.path.join(golden_dir, name)) as f:
            expected = f.read()
        if run.returncode != 0 or run.stdout != expected:
            failures += 1
            got, want = run.stdout.splitlines(), expected.splitlines()
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            print(f"FAILED {name}: rc={run.returncode} {run.stderr.strip()[:300]}; "
                  f"{len(got)} lines vs {len(want)} expected; first difference at line {first + 1}")
        else:
            print(f"ok {name}: {len(expected.splitlines())} masks identical")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
