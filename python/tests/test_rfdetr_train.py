"""ferry.rfdetr inside RF-DETR 1.11.2's own Lightning training.

The work runs in tests/common/rfdetr_train_check.py (its docstring says what each mode
checks) under the RF-DETR venv's interpreter, FERRY_RFDETR_PYTHON (./run makes
build/rfdetr-venv from tests/common/rfdetr-requirements.txt: rfdetr[train]==1.11.2 on
torch 2.5; Debian's torch 1.13 here is too old), skipped when it is absent (failed under
FERRY_REQUIRE_TORCH=1). The package under test (ferry, with ferry/rfdetr.py and its
libferry.so) is handed to that interpreter through a folder holding only it.

The data: a Roboflow COCO export built here from the real photos of
../shared/realdata/dali_coco/coco (never copied: the split folders hold links), the way
Roboflow exports it: a parent category "objects" (id 0, no annotation) above the 17 real
ones, whose ids move up by one, so that RF-DETR's labels (position among the annotated
categories) are the ids minus one and raw ids are off by one. Three sets: all 61 photos
(41/10/10), the same without the three photos whose 2-point polygons RF-DETR's mask
rasterisation (pycocotools' frPyObjects) cannot read (segmentation), and a tiny one.
"""
import json
import os
import re
import subprocess
import sys

import pytest

import ferry
from conftest import REAL_DALI as REAL, ROOT, roboflow_export, skip_or_fail

CHECK = os.path.join(ROOT, "tests", "common", "rfdetr_train_check.py")
# annotations with a 2-point polygon (pycocotools cannot rasterise them)
TWO_POINT_ANNOTATIONS = {8, 69, 79}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    if not os.path.isfile(os.path.join(REAL, "instances.json")):
        skip_or_fail(f"no real data at {REAL}", "FERRY_REQUIRE_TORCH")
    with open(os.path.join(REAL, "instances.json"), encoding="utf-8") as f:
        coco = json.load(f)
    ids = sorted(i["id"] for i in coco["images"])
    unreadable = {a["image_id"] for a in coco["annotations"] if a["id"] in TWO_POINT_ANNOTATIONS}
    readable = [i for i in ids if i not in unreadable]
    root = tmp_path_factory.mktemp("rfdetr-exports")
    return {
        "det": roboflow_export(str(root / "det"), {"train": ids[:41], "valid": ids[41:51], "test": ids[51:]}),
        "seg": roboflow_export(str(root / "seg"), {"train": readable[:39], "valid": readable[39:48],
                                                   "test": readable[48:]}),
        "tiny": roboflow_export(str(root / "tiny"), {"train": readable[:6], "valid": readable[6:9],
                                                     "test": readable[9:11]}),
    }


def rfdetr_python(tmp_path):
    """The RF-DETR venv's interpreter and an environment whose PYTHONPATH holds only the
    package under test."""
    python = os.environ.get("FERRY_RFDETR_PYTHON", "")
    if not os.access(python, os.X_OK):
        skip_or_fail(f"no RF-DETR venv (FERRY_RFDETR_PYTHON={python!r}; ./run makes build/rfdetr-venv)",
                     "FERRY_REQUIRE_TORCH")
    folder = os.path.dirname(os.path.abspath(ferry.__file__))
    assert os.path.isfile(os.path.join(folder, "rfdetr.py")), (
        f"the ferry package at {folder} has no rfdetr.py: meson.build's py.install_sources must list "
        "python/ferry/rfdetr.py")
    package = tmp_path / "package"
    package.mkdir()
    os.symlink(folder, package / "ferry")
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=str(package), PYTHONNOUSERSITE="1", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="2")
    return python, env


def run_check(tmp_path, mode, exports, *more, timeout=600):
    python, env = rfdetr_python(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    args = [python, CHECK, mode, "--det", exports["det"], "--seg", exports["seg"], "--tiny", exports["tiny"],
            "--out", str(out), *more]
    run = subprocess.run(args, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(run.stdout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    return run.stdout


# rfdetr_train_check.py's TRAIN_RUNS, each in its own process (a model's training memory
# stays in its process)
TRAIN_RUNS = ["nano-per-batch", "nano-per-sample", "seg-nano-per-batch", "seg-nano-per-sample"]


@pytest.mark.parametrize("run", range(len(TRAIN_RUNS)), ids=TRAIN_RUNS)
def test_rfdetr_lightning_trains_on_ferry_batches(tmp_path, exports, run):
    """(a, b) RF-DETR's module and trainer, Nano and Seg Nano, default and per-sample
    multi-scale: finite losses, batches shaped and typed as RF-DETR's data module's."""
    assert "train: all equal" in run_check(tmp_path, "train", exports, "--run", str(run))


def test_labels_are_rfdetr_labels(tmp_path, exports):
    """(c) train and valid labels equal RF-DETR's dataset's; raw ids are off by one."""
    assert "labels: all equal" in run_check(tmp_path, "labels", exports)


def test_validation_batches_and_metrics_are_rfdetr_s(tmp_path, exports):
    """ferry's validation loader, where DataModule uses it, against RF-DETR's: every batch,
    and the same metrics on the same weights."""
    assert "val: all equal" in run_check(tmp_path, "val", exports)


def test_train_swaps_the_data_module_and_refuses_what_it_cannot_honour(tmp_path, exports):
    """(e, f) ferry.rfdetr.train under RFDETR.train, the swap undone (also on a raise);
    configs and layouts refused, naming the option or path."""
    assert "api: all as expected" in run_check(tmp_path, "api", exports)


def test_ddp_ranks_train_on_disjoint_shards(tmp_path, exports):
    """(d) two ranks under Lightning's DDP (cpu, gloo): disjoint images, equal batch counts."""
    out = run_check(tmp_path, "ddp", exports, "--steps", "2")
    assert "ddp: disjoint images, equal batch counts, finite losses" in out


def test_docs_rfdetr_block_runs(tmp_path, exports):
    """docs/python.md's RF-DETR training script, run as a user would, on the tiny export."""
    text = open(os.path.join(ROOT, "docs", "python.md"), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
              if b.startswith("# rfdetr_train.py")]
    assert len(blocks) == 1, "docs/python.md has one rfdetr_train.py block"
    script = tmp_path / "rfdetr_train.py"
    script.write_text(blocks[0])
    python, env = rfdetr_python(tmp_path)
    out = tmp_path / "output"
    run = subprocess.run([python, str(script), exports["tiny"], str(out)], env=env, cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert os.path.isfile(out / "checkpoint_best_total.pth"), sorted(os.listdir(out))
