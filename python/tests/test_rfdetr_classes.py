"""ferry's training recipes against RF-DETR 1.11's own classes (issue 24).

test_augment.py replays every sample through a reference restated in
tests/common/rfdetr_reference.py; this test replays them through the code RF-DETR's
users run: rfdetr==1.11.2's CocoDetection, ConvertCoco and transform pipeline, on
torch 2 (tests/common/rfdetr_classes_check.py says what is compared and how the
record becomes RF-DETR's draws). They need a venv of their own (Debian's torch is
1.13): ./run makes build/rfdetr-venv from tests/common/rfdetr-requirements.txt and
names its interpreter in FERRY_RFDETR_PYTHON. The installed ferry package (and its
libferry.so) is handed to that interpreter through a folder holding only it.

The reduced-size decode (issue 36) is replayed on dali_coco's photos upscaled to
1920-4000 px (tests/common/large_photos.py), against RF-DETR's CocoDetection with its
draft size, through simplejpeg and through Pillow.
"""
import os
import subprocess
import sys

import ferry

from conftest import ROOT, make_synth, skip_or_fail

SHARED = os.environ.get("FERRY_SHARED", os.path.join(ROOT, "..", "shared"))
REAL_SETS = [("dali_coco/coco/instances.json", "dali_coco/coco/images"),
             ("dali_coco/coco_pixelwise/instances.json", "dali_coco/coco_pixelwise/images"),
             ("mmpose_coco/test_coco.json", "mmpose_coco")]


def test_recipes_equal_rfdetr_classes(tmp_path):
    python = os.environ.get("FERRY_RFDETR_PYTHON", "")
    if not os.access(python, os.X_OK):
        skip_or_fail(f"no RF-DETR venv (FERRY_RFDETR_PYTHON={python!r}; ./run makes build/rfdetr-venv)",
                     "FERRY_REQUIRE_TORCH")
    sets = []
    for annotations, images in REAL_SETS:
        a, i = os.path.join(SHARED, "realdata", annotations), os.path.join(SHARED, "realdata", images)
        if not os.path.isfile(a):
            skip_or_fail(f"no real data at {a}", "FERRY_REQUIRE_TORCH")
        sets += ["--set", a, i]
    sets += ["--set", *make_synth(str(tmp_path / "synth"), 300, 17)]
    large = subprocess.run([python, os.path.join(ROOT, "tests", "common", "large_photos.py"), *sets[1:3],
                            str(tmp_path / "large")], capture_output=True, text=True, check=True)
    sets += ["--draft-set", *large.stdout.splitlines()]
    package = tmp_path / "package"
    package.mkdir()
    os.symlink(os.path.dirname(os.path.abspath(ferry.__file__)), package / "ferry")
    env = dict(os.environ, PYTHONPATH=str(package), PYTHONNOUSERSITE="1")
    out = subprocess.run([python, os.path.join(ROOT, "tests", "common", "rfdetr_classes_check.py"),
                          "--epochs", "1", "--min-samples", "1200"] + sets,
                         env=env, capture_output=True, text=True, timeout=1800)
    sys.stdout.write(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "all equal" in out.stdout
    assert "reduced decode (simplejpeg)" in out.stdout and "reduced decode (pillow)" in out.stdout
