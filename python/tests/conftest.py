"""Fixtures for the ferry package's tests: synthetic COCO sets, the C reference dumper.

Environment:
  FERRY_SYNTH_COCO     the synth_coco program (default: build/synth/synth_coco)
  FERRY_REQUIRE_TORCH  1: a torch variant that would be skipped fails instead (CI)
  FERRY_REQUIRE_CUDA   1: a CUDA variant that would be skipped fails instead (GPU nodes)
The package under test is the installed one (`import ferry`), or $FERRY_LIB's library.
"""
import importlib.util
import json
import os
import shutil
import struct
import subprocess

import pytest

import ferry

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def skip_or_fail(reason, require_variable):
    if os.environ.get(require_variable) == "1":
        pytest.fail(f"{reason}, and {require_variable}=1")
    pytest.skip(reason)


@pytest.fixture(params=["numpy", "torch"])
def tensor_type(request):
    """Both tensor types: numpy always, torch when it is importable."""
    if request.param == "torch" and not HAVE_TORCH:
        skip_or_fail("torch is not importable", "FERRY_REQUIRE_TORCH")
    return request.param


@pytest.fixture
def cuda_device():
    if not HAVE_TORCH:
        skip_or_fail("torch is not importable", "FERRY_REQUIRE_CUDA")
    import torch
    if not torch.cuda.is_available():
        skip_or_fail("no CUDA device", "FERRY_REQUIRE_CUDA")
    return "cuda:0"


def make_synth(out, images, seed):
    program = os.environ.get("FERRY_SYNTH_COCO", os.path.join(ROOT, "build", "synth", "synth_coco"))
    if not os.access(program, os.X_OK):
        pytest.fail(f"synth_coco not found at {program} (build it, or set FERRY_SYNTH_COCO)")
    subprocess.run([program, "--out", out, "--images", str(images), "--seed", str(seed)],
                   check=True, stdout=subprocess.DEVNULL)
    return (os.path.join(out, "annotations", "instances_val2017.json"), os.path.join(out, "val2017"))


@pytest.fixture(scope="session")
def synth(tmp_path_factory):
    """(annotations, images) of a 24-image synthetic set."""
    return make_synth(str(tmp_path_factory.mktemp("synth")), 24, 11)


@pytest.fixture(scope="session")
def corrupt(tmp_path_factory, synth):
    """A copy of the synthetic set whose third image (by file name) is cut short, and
    that file's name."""
    out = str(tmp_path_factory.mktemp("corrupt"))
    annotations, images = synth
    shutil.copytree(images, os.path.join(out, "val2017"))
    shutil.copy(annotations, os.path.join(out, "instances.json"))
    victim = sorted(os.listdir(images))[2]
    path = os.path.join(out, "val2017", victim)
    with open(path, "r+b") as f:
        f.truncate(200)
    return os.path.join(out, "instances.json"), os.path.join(out, "val2017"), victim


@pytest.fixture(scope="session")
def batch_dump(tmp_path_factory):
    """The C reference program, compiled against the package's libferry.so."""
    out = str(tmp_path_factory.mktemp("batch_dump") / "batch_dump")
    library = ferry.library_path()
    subprocess.run(["cc", "-std=c11", "-I", os.path.join(ROOT, "include"),
                    os.path.join(os.path.dirname(__file__), "batch_dump.c"), "-o", out,
                    library, f"-Wl,-rpath,{os.path.dirname(os.path.abspath(library))}",
                    # its own dependencies are found at run time (a GPU bundle's lib/)
                    "-Wl,--allow-shlib-undefined"],
                   check=True)
    return out


def c_batches(program, tmp_path, annotations, images, *, batch_size, resolution, seed,
              box_format=1, layout=0, workers=2, rank=0, world_size=1, epoch=0):
    """The C loader's epoch: a list of batches, each {field: [bytes of sample i, ...]}."""
    out = str(tmp_path / f"dump-{rank}-{epoch}.bin")
    subprocess.run([program, annotations, images, out, str(batch_size), str(resolution), str(seed),
                    str(box_format), str(layout), str(workers), str(rank), str(world_size),
                    str(epoch)], check=True)
    batches = []
    with open(out, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        k, sample, length = struct.unpack_from("<QQI", data, pos)
        pos += 20
        name = data[pos:pos + length].decode()
        pos += length
        (nbytes,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        while len(batches) <= k:
            batches.append({})
        batches[k].setdefault(name, []).append(data[pos:pos + nbytes])
        pos += nbytes
    return batches


# dali_coco's 61 real photos, 17 categories with ids 0..16 (../shared/realdata/README)
REAL_DALI = os.path.join(os.environ.get("FERRY_SHARED", os.path.join(ROOT, "..", "shared")),
                         "realdata", "dali_coco", "coco")


def roboflow_export(out, splits):
    """A Roboflow COCO export of dali_coco's real photos in `out`: splits = {"train":
    [image ids], ...}, each SPLIT/_annotations.coco.json beside links to its images; a
    root category "objects" (id 0, supercategory "none", no annotation) grouping the 17
    real classes, whose ids move up by one, as Roboflow exports them."""
    with open(os.path.join(REAL_DALI, "instances.json"), encoding="utf-8") as f:
        coco = json.load(f)
    categories = [{"id": 0, "name": "objects", "supercategory": "none"}] + [
        {"id": c["id"] + 1, "name": c["name"], "supercategory": "objects"} for c in coco["categories"]]
    images = {i["id"]: i for i in coco["images"]}
    for split, ids in splits.items():
        folder = os.path.join(out, split)
        os.makedirs(folder)
        for i in ids:
            name = images[i]["file_name"]
            os.symlink(os.path.join(REAL_DALI, "images", name), os.path.join(folder, name))
        keep = set(ids)
        annotations = [dict(a, category_id=a["category_id"] + 1) for a in coco["annotations"]
                       if a["image_id"] in keep]
        with open(os.path.join(folder, "_annotations.coco.json"), "w", encoding="utf-8") as f:
            json.dump({"images": [images[i] for i in ids], "categories": categories,
                       "annotations": annotations}, f)
    return out
