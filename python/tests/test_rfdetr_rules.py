"""RF-DETR's label rule and reduced-size decode through ferry.Loader's keywords (issue 36).

categories="rfdetr" (with categories_from for the valid and test splits) and
draft_size ("rfdetr" or a size) on a Roboflow-layout export made of dali_coco's real
photos (its 17 classes under an unannotated root category at id 0, as Roboflow exports
them), and on those photos upscaled to 1920-4000 px; what the keywords refuse. The
labels against RF-DETR's own dataset are test_rfdetr_train.py's (RF-DETR's venv), the
pixels against its decode test_rfdetr_classes.py's; here Pillow's own draft gives the
reduced sizes.
"""
import importlib.util
import json
import os

import pytest

import ferry
from conftest import REAL_DALI as DALI, ROOT, roboflow_export, skip_or_fail



def need_dali():
    if not os.path.isfile(os.path.join(DALI, "instances.json")):
        skip_or_fail(f"no real data at {DALI}", "FERRY_REQUIRE_TORCH")


def export(root):
    """dali_coco as a Roboflow export, its 61 images split 41/10/10 in id order."""
    with open(os.path.join(DALI, "instances.json")) as f:
        ids = sorted(i["id"] for i in json.load(f)["images"])
    return roboflow_export(root, {"train": ids[:41], "valid": ids[41:51], "test": ids[51:]})


def labels_by_image(annotations, images, **options):
    out = {}
    with ferry.Loader(annotations, images, batch_size=4, shuffle=False, tensor_type="numpy", load_images=False,
                      fields=("labels", "image_id"), **options) as loader:
        for _, targets in loader:
            for t in targets:
                out[int(t["image_id"][0])] = t["labels"].tolist()
    return out


def test_rfdetr_labels_drop_the_exports_root_and_follow_the_train_split(tmp_path):
    need_dali()
    root = export(str(tmp_path / "export"))
    train = (os.path.join(root, "train", "_annotations.coco.json"), os.path.join(root, "train"))
    raw = labels_by_image(*train)
    ours = labels_by_image(*train, categories="rfdetr")
    assert raw.keys() == ours.keys() and raw
    # the export's classes are 1..17 under the root at 0: RF-DETR's labels are 0..16
    assert all(o == [r - 1 for r in rs] for o, rs in zip(ours.values(), raw.values()))
    assert min(v for vs in ours.values() for v in vs) == 0
    valid = (os.path.join(root, "valid", "_annotations.coco.json"), os.path.join(root, "valid"))
    borrowed = labels_by_image(*valid, categories="rfdetr", categories_from=train[0])
    assert borrowed == {k: [v - 1 for v in vs] for k, vs in labels_by_image(*valid).items()}


def test_the_label_keywords_refuse_what_they_cannot_mean(tmp_path, synth):
    with pytest.raises(ValueError, match="categories must be one of"):
        ferry.Loader(*synth, categories="yolo")
    with pytest.raises(ValueError, match="categories='rfdetr'"):
        ferry.Loader(*synth, categories_from=synth[0])
    with pytest.raises(ValueError, match="remap_categories=True"):
        ferry.Loader(*synth, categories="rfdetr", remap_categories=True)
    with ferry.Loader(*synth, categories="remap", remap_categories=True, load_images=False):
        pass
    # a valid split with a category its train split does not label fails the open
    need_dali()
    root = export(str(tmp_path / "export"))
    valid = os.path.join(root, "valid", "_annotations.coco.json")
    with open(valid) as f:
        doc = json.load(f)
    doc["annotations"][0]["category_id"] = 0  # the root, which train never annotates
    with open(valid, "w") as f:
        json.dump(doc, f)
    with pytest.raises(ferry.FerryError, match=r"annotations\[0\]\.category_id: category 0 has no label"):
        ferry.Loader(valid, os.path.join(root, "valid"), categories="rfdetr",
                     categories_from=os.path.join(root, "train", "_annotations.coco.json"))


def test_images_may_be_left_out_only_for_shards(synth):
    with pytest.raises(ferry.FerryError, match="images, the folder of the images, is required"):
        ferry.Loader(synth[0])


def large_photos(tmp_path):
    need_dali()
    if importlib.util.find_spec("PIL") is None:
        skip_or_fail("Pillow is not importable", "FERRY_REQUIRE_TORCH")
    spec = importlib.util.spec_from_file_location("large_photos", os.path.join(ROOT, "tests", "common",
                                                                               "large_photos.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make(os.path.join(DALI, "instances.json"), os.path.join(DALI, "images"), str(tmp_path / "large"), 6)


@pytest.mark.parametrize("draft", [600, 360, "rfdetr"])
def test_reduced_sizes_are_pillows_drafts(tmp_path, draft):
    """orig_size (RF-DETR's: the decoded image's) is the size Image.draft gives each
    photo; a PNG keeps its size, as draft leaves it."""
    from PIL import Image
    annotations, images = large_photos(tmp_path)
    options = dict(augment="rfdetr", resolution=312, patch_size=12, num_windows=1, multi_scale="per-sample")
    size = 600 if draft == "rfdetr" else draft  # RF-DETR's rule: scale jitter's 600 over the largest scale, 360
    with ferry.Loader(annotations, images, batch_size=2, shuffle=False, tensor_type="numpy", draft_size=draft,
                      fields=("boxes", "image_id", "orig_size", "size"), **options) as loader:
        seen = {}
        for _, targets in loader:
            for t in targets:
                seen[int(t["image_id"][0])] = t["orig_size"].tolist()
    with open(annotations) as f:
        doc = json.load(f)
    reduced = 0
    for info in doc["images"]:
        with Image.open(os.path.join(images, info["file_name"])) as im:
            im.draft("RGB", (size, size))
            want = [im.size[1], im.size[0]]
        assert seen[info["id"]] == want, info["file_name"]
        reduced += want != [info["height"], info["width"]]
    assert reduced >= 4


def test_the_draft_keyword_refuses_what_it_cannot_do(synth):
    for bad in (0, -1, 2.5, "pillow", True):
        with pytest.raises(ValueError, match="draft_size must be"):
            ferry.Loader(*synth, draft_size=bad)
    with pytest.raises(ferry.FerryError, match="masks"):
        ferry.Loader(*synth, draft_size=300)  # the default fields include masks
    with ferry.Loader(*synth, draft_size="rfdetr", load_images=False):  # masks: RF-DETR's rule stands down
        pass
