"""WebDataset tar shards (issue 26): a split packed by RF-DETR's own pack_coco_to_shards loads as its folder does.

RF-DETR 1.11.2 comes from PyPI without its dependencies (./run installs it with
`pip install --no-deps rfdetr==1.11.2`); its packer (rfdetr/datasets/webdataset/pack.py and
index.py) is loaded from the installed files in a child process, with the one function of
rfdetr.datasets.coco it names (filter_parent_categories, and its helpers) taken from that
file's source, since importing the package would need torch's whole training stack.
Without rfdetr the tests are skipped, saying so (failed under CI: FERRY_REQUIRE_TORCH).

  - the coco_parity digest (every delivered byte, packed and unpacked paths) from the
    index RF-DETR wrote equals the digest from the JSON and its images folder, labels raw
    and remapped, on synth_coco and on the real sets of ../shared/realdata;
  - "remap" labels are RF-DETR's: on a Roboflow-style category list (a grouping root
    category no annotation uses), each label ferry delivers is ShardIndex.cat2label() of
    the annotation's category id;
  - shards that Python's tarfile writes with GNU and pax long names load the same;
  - what `ferry-coco pack` writes, RF-DETR's index reader and a WebDataset-style walk of
    its members read back whole, with RF-DETR's own labels; and the pack refuses what
    RF-DETR's refuses.
"""
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest

import ferry
from conftest import make_synth, skip_or_fail

RFDETR = importlib.util.find_spec("rfdetr")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.path.dirname(os.environ.get("FERRY_SYNTH_COCO", os.path.join(ROOT, "build", "synth",
                                                                                         "synth_coco"))))
COCO_PARITY = os.path.join(BUILD, "repro", "coco_parity")
REAL = os.path.join(os.environ.get("FERRY_SHARED", os.path.join(ROOT, "..", "shared")), "realdata")
REAL_SETS = {
    "dali_coco": ("dali_coco/coco/instances.json", "dali_coco/coco/images"),
    "dali_pixelwise": ("dali_coco/coco_pixelwise/instances.json", "dali_coco/coco_pixelwise/images"),
    "dali_dummy": ("dali_coco/coco_dummy/instances.json", "dali_coco/coco_dummy/images"),
    "mmpose": ("mmpose_coco/test_coco.json", "mmpose_coco"),
}

# Runs in a child: stub packages for rfdetr (no __init__ executed), the real index.py and
# pack.py, and filter_parent_categories with its helpers cut out of coco.py.
RFDETR_PACK = r'''
import ast, json, logging, os, sys, tarfile, types
mode, root = sys.argv[1:3]
for name in ("rfdetr", "rfdetr.datasets", "rfdetr.datasets.webdataset", "rfdetr.utilities"):
    module = types.ModuleType(name)
    module.__path__ = [os.path.join(root, *name.split(".")[1:])]
    sys.modules[name] = module
coco = types.ModuleType("rfdetr.datasets.coco")
wanted = {"_SUPERCATEGORY_PLACEHOLDERS", "_category_name", "_normalized_category_id", "filter_parent_categories"}
source = open(os.path.join(root, "datasets", "coco.py")).read()
tree = ast.parse(source)
body = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in wanted) or
        (isinstance(n, (ast.Assign, ast.AnnAssign)) and wanted & {t.id for t in ast.walk(n) if isinstance(t, ast.Name)})]
header = ast.parse("from __future__ import annotations\nfrom typing import Any, cast").body
exec(compile(ast.Module(body=header + body, type_ignores=[]), "coco.py", "exec"), coco.__dict__)
sys.modules["rfdetr.datasets.coco"] = coco
from rfdetr.datasets.webdataset.index import IMAGE_EXTENSIONS, read_shard_index, resolve_within
if mode == "pack":
    from rfdetr.datasets.webdataset.pack import pack_coco_to_shards
    images, annotations, out, policy, max_bytes = sys.argv[3:8]
    index = pack_coco_to_shards(images, annotations, out, split="val", max_shard_bytes=int(max_bytes),
                                category_ids=policy)
else:  # "read": the index and every sample as RF-DETR's reader takes them (load.py's _decode)
    out = sys.argv[3]
    index = read_shard_index(out, "val")
    samples = []
    for shard in index.shards:
        with tarfile.open(resolve_within(__import__("pathlib").Path(out), shard)) as tar:
            groups = {}
            for member in tar.getmembers():
                key, ext = member.name.split(".", 1)
                groups.setdefault(key, {})[ext] = tar.extractfile(member).read()
            for key, sample in groups.items():
                assert "json" in sample and any(e in sample for e in IMAGE_EXTENSIONS), (shard, key, sorted(sample))
                meta = json.loads(sample["json"])
                samples.append([meta["image_id"], meta["file_name"], len(meta["annotations"])])
    assert len(samples) == index.num_samples == sum(index.samples_per_shard)
    print(json.dumps({"samples": samples}), file=sys.stderr)
print(json.dumps({"shards": list(index.shards), "cat2label": {str(k): v for k, v in (index.cat2label() or {}).items()}}))
'''


def rfdetr_pack(images, annotations, out, policy, max_bytes):
    """Pack with RF-DETR's pack_coco_to_shards; (index path, cat2label)."""
    if RFDETR is None:
        skip_or_fail("rfdetr is not installed (pip install --no-deps rfdetr==1.11.2, as ./run does)",
                     "FERRY_REQUIRE_TORCH")
    root = RFDETR.submodule_search_locations[0]
    done = subprocess.run([sys.executable, "-c", RFDETR_PACK, "pack", root, images, annotations, out, policy,
                           str(max_bytes)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["shards"]) >= 2, "the test wants a split over several shards"
    return os.path.join(out, "val-index.json"), {int(k): v for k, v in result["cat2label"].items()}


def digest(annotations, images, remap):
    if not os.access(COCO_PARITY, os.X_OK):
        pytest.fail(f"coco_parity not found at {COCO_PARITY} (set FERRY_SYNTH_COCO to build/synth/synth_coco)")
    done = subprocess.run([COCO_PARITY, "--annotations", annotations, "--images", images, "--workers", "2",
                           "--batch", "4", "--resolution", "96", "--remap-categories", str(remap), "--shuffle", "0",
                           "--json"],
                          capture_output=True, text=True, env=dict(os.environ, FERRY_COCO_INDEX="off"))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["mismatches"] == 0
    return got


def folder_bytes(images):
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(images) for n in names)


def real_set(name):
    if not os.path.isdir(REAL):
        pytest.skip(f"needs the real data in {REAL} (FERRY_SHARED)")
    annotations, images = REAL_SETS[name]
    return os.path.join(REAL, annotations), os.path.join(REAL, images)


@pytest.mark.parametrize("name", ["synth"] + sorted(REAL_SETS))
@pytest.mark.parametrize("policy", ["raw", "remap"])
def test_rfdetr_packed_shards_give_the_folders_digest(tmp_path, synth, name, policy):
    annotations, images = synth if name == "synth" else real_set(name)
    index, _ = rfdetr_pack(images, annotations, str(tmp_path / "shards"), policy, max(folder_bytes(images) // 3, 1))
    remap = int(policy == "remap")
    folder, shards = digest(annotations, images, remap), digest(index, images, remap)
    assert (shards["images"], shards["instances"]) == (folder["images"], folder["instances"])
    assert shards["digest"] == folder["digest"]


def labels_of(loader):
    out = []
    for _, targets in loader:
        for t in targets:
            out += [int(v) for v in t["labels"]]
    return out


def test_remap_labels_are_rfdetrs_with_a_grouping_category(tmp_path):
    """A Roboflow export's root category ("objects", supercategory "none", never
    annotated) takes no label: label = position among the other categories by id."""
    annotations, images = make_synth(str(tmp_path / "synth"), 16, 5)
    with open(annotations) as f:
        doc = json.load(f)
    for c in doc["categories"]:
        c["supercategory"] = "objects"
    root = min(c["id"] for c in doc["categories"]) - 1  # first by id: keeping it would shift every label
    doc["categories"].insert(0, {"id": root, "name": "objects", "supercategory": "none"})
    regrouped = str(tmp_path / "regrouped.json")
    with open(regrouped, "w") as f:
        json.dump(doc, f)
    index, cat2label = rfdetr_pack(images, regrouped, str(tmp_path / "shards"), "remap", folder_bytes(images) // 3)
    assert root not in cat2label and sorted(cat2label.values()) == list(range(len(cat2label)))
    common = dict(batch_size=4, workers=2, resolution=32, shuffle=False, load_images=False, tensor_type="numpy")
    raw = labels_of(ferry.Loader(regrouped, images, **common))
    shards = labels_of(ferry.Loader(index, **common))  # the shards hold the images: no folder
    assert raw and shards == [cat2label[c] for c in raw]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_long_member_names_from_pythons_tarfile(tmp_path, synth, fmt):
    """Keys longer than a ustar name (a 120-character folder): GNU 'L' or pax 'path'."""
    annotations, images = synth
    with open(annotations) as f:
        doc = json.load(f)
    folder = "d" * 120
    shard = tmp_path / "long-000000.tar"
    with tarfile.open(shard, "w", format=fmt) as tar:
        for i, image in enumerate(doc["images"]):
            anns = [a for a in doc["annotations"] if a["image_id"] == image["id"]]
            sidecar = json.dumps({"image_id": image["id"], "file_name": image["file_name"], "annotations": anns})
            with open(os.path.join(images, image["file_name"]), "rb") as src:
                members = ((f"{folder}/{i:08d}.jpg", src.read()), (f"{folder}/{i:08d}.json", sidecar.encode()))
            for member, data in members:
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    assert digest(str(shard), images, 0)["digest"] == digest(annotations, images, 0)["digest"]


PACK_REFUSALS = {
    "file_name with ..": ({"file_name": "../x.jpg"}, "is absolute or leaves the images folder"),
    "absolute file_name": ({"file_name": "/etc/x.jpg"}, "is absolute or leaves the images folder"),
    "not an image RF-DETR decodes": ({"file_name": "x.gif"}, "not an image RF-DETR's shard reader decodes"),
    "missing image file": ({"file_name": "missing.jpg"}, "missing.jpg: cannot read"),
    "annotation of no image": ({"id": -5}, "matches no image"),
}


@pytest.mark.parametrize("case", sorted(PACK_REFUSALS))
def test_pack_refuses_naming_the_problem(tmp_path, synth, case):
    """ferry-coco pack refuses what RF-DETR's packer refuses, and leaves no shard or index."""
    annotations, images = synth
    with open(annotations) as f:
        doc = json.load(f)
    change, message = PACK_REFUSALS[case]
    doc["images"][-1].update(change)
    bad = str(tmp_path / "bad.json")
    with open(bad, "w") as f:
        json.dump(doc, f)
    tool = os.path.join(BUILD, "tools", "ferry-coco")
    out = tmp_path / "out"
    done = subprocess.run([tool, "pack", bad, "--images", images, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert not out.exists() or not os.listdir(out), os.listdir(out)  # nothing half-written left


@pytest.mark.parametrize("policy", ["raw", "remap"])
def test_rfdetr_reads_what_ferry_coco_pack_writes(tmp_path, synth, policy):
    """One packed copy serves both: RF-DETR's read_shard_index takes ferry's index, its
    reader finds every sample (a sidecar and an image, the image id, file and annotation
    count of the JSON, in its order), and the labels it would give are those of the
    same split packed by RF-DETR itself."""
    annotations, images = synth
    if RFDETR is None:
        skip_or_fail("rfdetr is not installed (pip install --no-deps rfdetr==1.11.2, as ./run does)",
                     "FERRY_REQUIRE_TORCH")
    out = str(tmp_path / "ferry")
    tool = os.path.join(BUILD, "tools", "ferry-coco")
    subprocess.run([tool, "pack", annotations, "--images", images, "--out", out, "--split", "val",
                    "--max-shard-bytes", str(folder_bytes(images) // 3), "--category-ids", policy],
                   check=True, capture_output=True)
    root = RFDETR.submodule_search_locations[0]
    done = subprocess.run([sys.executable, "-c", RFDETR_PACK, "read", root, out], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    samples = json.loads(done.stderr.strip().splitlines()[-1])["samples"]
    with open(annotations) as f:
        doc = json.load(f)
    counts = {}
    for a in doc["annotations"]:
        counts[a["image_id"]] = counts.get(a["image_id"], 0) + 1
    assert samples == [[i["id"], i["file_name"], counts.get(i["id"], 0)] for i in doc["images"]]
    _, cat2label = rfdetr_pack(images, annotations, str(tmp_path / "rfdetr"), policy, folder_bytes(images) // 3)
    assert {int(k): v for k, v in read["cat2label"].items()} == cat2label
