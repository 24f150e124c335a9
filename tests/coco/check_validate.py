#!/usr/bin/env python3
"""`ferry-coco validate --decode` decodes every image and reports each that fails.

    check_validate.py SYNTH_COCO FERRY_COCO

On a synthetic set (synth_coco, 16 images) with two JPEGs cut in half (their headers
intact), one file removed and one image's JSON width changed:
  - --decode reports exactly those 4 images, each line naming its JSON path and file,
    "4 problems", exit 1;
  - the report is the same on 1 and on 4 threads (the order is the images' order);
  - the intact set gives "0 problems", exit 0;
  - --decode without --images is a usage error (exit 2).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checklist import check, summary  # noqa: E402  (the lines every script test prints)


def validate(tool, ann, *args):
    p = subprocess.run([tool, "validate", ann, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout


def main():
    synth, tool = sys.argv[1:3]
    with tempfile.TemporaryDirectory(prefix="ferry-validate-") as tmp:
        good = os.path.join(tmp, "good")
        subprocess.run([synth, "--out", good, "--images", "16", "--seed", "9", "--threads", "1"],
                       check=True, stdout=subprocess.DEVNULL, timeout=300)
        ann = os.path.join(good, "annotations", "instances_val2017.json")
        rc, out = validate(tool, ann, "--images", os.path.join(good, "val2017"), "--decode")
        check(rc == 0 and out.strip().endswith("0 problems"), f"intact set: 0 problems, exit 0 ({rc}: {out.strip()})")

        with open(ann) as f:
            coco = json.load(f)
        images = os.path.join(tmp, "broken")
        shutil.copytree(os.path.join(good, "val2017"), images)
        names = [im["file_name"] for im in coco["images"]]
        for k in (2, 11):  # cut in half: the header survives, the scan does not
            path = os.path.join(images, names[k])
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[: len(data) // 2])
        os.remove(os.path.join(images, names[5]))
        coco["images"][8]["width"] += 1
        broken_ann = os.path.join(tmp, "broken.json")
        with open(broken_ann, "w") as f:
            json.dump(coco, f)

        rc, out = validate(tool, broken_ann, "--images", images, "--decode", "--threads", "4")
        lines = out.strip().splitlines()
        check(rc == 1, f"broken set: exit 1 (got {rc})")
        check(lines and lines[-1].endswith("4 problems"), f"broken set: 4 problems ({lines[-1:]})")
        for k in (2, 5, 8, 11):
            hit = [l for l in lines if f": images[{k}]" in l and names[k] in l]
            check(len(hit) == 1, f"images[{k}] ({names[k]}) is reported once, naming its file: {hit}")
        cut = [l for l in lines if "Premature end of JPEG file" in l]
        check(len(cut) == 2, f"the two cut JPEGs are reported as cut: {cut}")
        check(any("the JSON says" in l for l in lines), "the size mismatch is reported")
        rc1, out1 = validate(tool, broken_ann, "--images", images, "--decode", "--threads", "1")
        check(rc1 == rc and out1 == out, "1 thread reports exactly what 4 threads do")

        p = subprocess.run([tool, "validate", ann, "--decode"], capture_output=True, text=True)
        check(p.returncode == 2, f"--decode without --images: usage error (exit {p.returncode})")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
