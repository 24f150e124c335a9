"""ferry.Loader(max_instances=...) (issue 25, item 11): an image with more instances
than the cap fails as a sample whose message names its file (skipped with
on_error="skip"); every other image is delivered as before."""
import collections
import json

import pytest

import ferry

R = 32


@pytest.fixture
def crowded(synth, tmp_path):
    """(annotations, images, cap, crowded image): image 0 of the synthetic set given
    more instances than any other image has, and a cap between the two."""
    annotations, images = synth
    with open(annotations, encoding="utf-8") as f:
        coco = json.load(f)
    per_image = collections.Counter(a["image_id"] for a in coco["annotations"])
    busiest = max(per_image.values())
    first = coco["images"][0]
    model = next(a for a in coco["annotations"] if a["image_id"] == first["id"] and not a["iscrowd"])
    next_id = max(a["id"] for a in coco["annotations"]) + 1
    coco["annotations"] += [dict(model, id=next_id + k) for k in range(busiest + 10)]
    out = tmp_path / "crowded.json"
    out.write_text(json.dumps(coco))
    return str(out), images, busiest + 5, first


def test_an_image_past_the_cap_is_skipped(crowded):
    annotations, images, cap, first = crowded
    with ferry.Loader(annotations, images, batch_size=4, resolution=R, workers=2, shuffle=False,
                      on_error="skip", max_instances=cap, tensor_type="numpy") as loader:
        ids = [int(t["image_id"][0]) for _, targets in loader for t in targets]
        assert loader.stats()["samples_skipped"] >= 1
    assert first["id"] not in ids
    assert len(ids) == len(set(ids)) == 23


def test_an_image_past_the_cap_fails_naming_its_file(crowded):
    annotations, images, cap, first = crowded
    with pytest.raises(ferry.FerryError, match=f"{first['file_name']}.*max_instances = {cap}"):
        with ferry.Loader(annotations, images, batch_size=4, resolution=R, workers=2,
                          max_instances=cap, tensor_type="numpy") as loader:
            for _ in loader:
                pass
