"""RF-DETR's training recipes (issue 24), replayed bit for bit against Pillow and torch.

Every sample the Loader yields with a recipe carries its record (targets[i]["augment"]:
flip, branch, branch B's resize, its crop, the output size). The reference
(tests/common/rfdetr_reference.py) takes the same image and annotations, and the
record's choices, through the transforms RF-DETR 1.11 applies
(rfdetr/datasets/_torchvision.py: Resize, RandomResize, RandomSizedCrop, crop,
RandomHorizontalFlip, then ToDtype and Normalize), restated from their semantics with
Pillow for the pixels, torch for boxes, areas and masks, and pycocotools for the
full-size masks (as RF-DETR's ConvertCoco makes them). ferry must give:
images equal byte for byte in the uint8 layout and to 1e-6 normalised, masks equal,
the kept instances equal and in order, boxes within 1e-4 px, areas within 1e-5
relative, sizes equal. Over 2,000 samples: the real sets in ../shared/realdata and
synth_coco images, both recipes, both multi-scale modes.

Also: the draws' frequencies (chi-square at p = 0.001 over 20,000 draws of records
alone, which decodes nothing), and batch k equal for 1, 2 and 16 workers.
"""
import json
import math
import os
import sys

import pytest

from conftest import HAVE_TORCH, ROOT, make_synth, skip_or_fail

sys.path.insert(0, os.path.join(ROOT, "tests", "common"))

import ferry  # noqa: E402

from rfdetr_reference import (FLIP, BRANCH, RESIZE_H, RESIZE_W, TOP, LEFT, CROP_H, CROP_W, OUT_H,  # noqa: E402
                              OUT_W, RESIZE_B, multi_scale_scales, shortest_side)


def need(module):
    try:
        return __import__(module)
    except ImportError as e:
        skip_or_fail(f"{module} is not importable ({e})", "FERRY_REQUIRE_TORCH")


@pytest.fixture(scope="module")
def ref():
    """The reference's libraries: torch, Pillow (13: its resize's pass order is
    ferry's, docs/images.md), pycocotools, numpy."""
    if not HAVE_TORCH:
        skip_or_fail("torch is not importable", "FERRY_REQUIRE_TORCH")
    need("pycocotools")
    import PIL
    if int(PIL.__version__.split(".")[0]) < 13:
        skip_or_fail(f"Pillow {PIL.__version__}: the reference resize is Pillow 13's", "FERRY_REQUIRE_TORCH")
    import numpy
    import torch
    from PIL import Image
    from coco_masks import images_with_annotations
    from rfdetr_reference import Sample
    return {"torch": torch, "np": numpy, "Image": Image, "Sample": Sample,
            "images_with_annotations": images_with_annotations}


# ---- the data ----------------------------------------------------------------------


def dataset(r, annotations, images_dir):
    with open(annotations) as f:
        data = json.load(f)
    return {im["id"]: (os.path.join(images_dir, im["file_name"]), im, anns)
            for im, anns in r["images_with_annotations"](data)}


def real_sets():
    folder = os.path.join(os.environ.get("FERRY_SHARED", os.path.join(ROOT, "..", "shared")), "realdata")
    sets = [("dali_coco/coco/instances.json", "dali_coco/coco/images"),
            ("dali_coco/coco_pixelwise/instances.json", "dali_coco/coco_pixelwise/images"),
            ("mmpose_coco/test_coco.json", "mmpose_coco")]
    if not os.path.isdir(folder):
        skip_or_fail(f"no real data in {folder}", "FERRY_REQUIRE_TORCH")
    return [(os.path.join(folder, a), os.path.join(folder, i)) for a, i in sets]


@pytest.fixture(scope="module")
def synth300(tmp_path_factory):
    return make_synth(str(tmp_path_factory.mktemp("synth300")), 300, 17)


# ---- the replay --------------------------------------------------------------------


def replay_epochs(r, annotations, images_dir, epochs, **options):
    """Samples checked against the reference, over `epochs` epochs of both layouts."""
    data = dataset(r, annotations, images_dir)
    np = r["np"]
    checked = 0
    kwargs = dict(batch_size=4, workers=2, seed=5, box_format="xyxy", keep_crowd=False, **options)
    with ferry.Loader(annotations, images_dir, layout="uint8", tensor_type="torch", **kwargs) as raw, \
            ferry.Loader(annotations, images_dir, layout="f32", tensor_type="torch", **kwargs) as norm:
        for epoch in range(epochs):
            raw.set_epoch(epoch)
            norm.set_epoch(epoch)
            for (u8, targets), (f32, targets_f) in zip(raw, norm):
                for i, t in enumerate(targets):
                    rec = t["augment"].tolist()
                    assert rec == targets_f[i]["augment"].tolist()
                    path, im, anns = data[int(t["image_id"])]
                    s = r["Sample"](path, im, anns).replay(rec)
                    where = f"{os.path.basename(path)} epoch {epoch} record {rec}"
                    h, w = s.size()
                    assert t["size"].tolist() == [h, w], where
                    ours = u8[i, :, :h, :w].contiguous()
                    want = r["torch"].from_numpy(np.asarray(s.img).copy()).permute(2, 0, 1)
                    assert r["torch"].equal(ours, want), f"{where}: u8 pixels differ in " \
                        f"{int((ours != want).any(0).sum())} of {h * w}"
                    assert r["torch"].equal(f32[i, :, :h, :w], s.normalised()), f"{where}: f32 pixels"
                    assert (f32[i, :, h:, :] == 0).all() and (f32[i, :, :, w:] == 0).all(), f"{where}: padding"
                    assert t["labels"].tolist() == s.labels.tolist(), f"{where}: kept instances"
                    assert r["torch"].equal(t["masks"], s.masks), f"{where}: masks"
                    assert r["torch"].allclose(t["boxes"], s.boxes, rtol=0, atol=1e-4), f"{where}: boxes"
                    assert r["torch"].allclose(t["area"], s.area, rtol=1e-5, atol=0), f"{where}: area"
                    checked += 1
    return checked


RECIPES = [
    # RF-DETR Seg Nano's multi-scale: resolution 312, patch 12, one window: 276..360
    dict(augment="rfdetr-square", multi_scale="per-sample", resolution=312, patch_size=12, num_windows=1),
    dict(augment="rfdetr", multi_scale="per-batch", resolution=312, patch_size=12, num_windows=1),
    dict(augment="rfdetr", multi_scale="per-sample", resolution=312, patch_size=12, num_windows=1),
    dict(augment="rfdetr-square", multi_scale="per-batch", resolution=312, patch_size=12, num_windows=1),
]


def test_real_samples_replay_bit_for_bit(ref):
    checked = 0
    for annotations, images_dir in real_sets():
        for options in RECIPES:
            checked += replay_epochs(ref, annotations, images_dir, 2, **options)
    print(f"{checked} real samples replayed")
    assert checked >= 500


def test_synth_samples_replay_bit_for_bit(ref, synth300):
    checked = 0
    for k, options in enumerate(RECIPES):
        checked += replay_epochs(ref, *synth300, 1 + (k == 0), **options)
    print(f"{checked} synth_coco samples replayed")
    assert checked >= 1500


def test_validation_transforms_replay(ref, synth300):
    """val (shortest side R, capped) and val-square (today's Resize((R, R)))."""
    checked = replay_epochs(ref, *synth300, 1, augment="val", resolution=312)
    assert checked == 300


# ---- the draws ---------------------------------------------------------------------


def chi_square_sf(stat, dof):
    """P(X >= stat) for a chi-square of `dof` degrees of freedom (Wilson-Hilferty)."""
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def fits(counts, expected, what):
    """Chi-square of observed counts against expected ones (same keys)."""
    stat = sum((counts.get(k, 0) - e) ** 2 / e for k, e in expected.items())
    dof = len(expected) - 1
    p = chi_square_sf(stat, dof) if dof > 0 else 1.0
    assert p > 0.001, f"{what}: chi-square {stat:.1f} on {dof} dof, p = {p:.2g} ({dict(counts)})"
    return p


class UniformBins:
    """Draws of integers, each uniform over its own range [lo, hi], binned into 10 by
    their place in the range: the expected count of a bin adds each draw's exact
    probability of falling in it (ranges of different lengths bin unevenly)."""

    def __init__(self):
        import collections
        self.counts, self.expected = collections.Counter(), collections.Counter()

    @staticmethod
    def bin(v, lo, hi):
        return (v - lo) * 10 // (hi - lo + 1)

    def add(self, v, lo, hi):
        self.counts[self.bin(v, lo, hi)] += 1
        n = hi - lo + 1
        for b in range(10):
            self.expected[b] += sum(1 for x in range(lo, hi + 1) if self.bin(x, lo, hi) == b) / n


def test_every_choice_is_drawn_uniformly(synth300):
    """20,000 records (load_images=False: nothing decoded), each choice against its
    uniform law: the flip and the branch (p = 0.5), the scale, branch B's size, the crop
    side over its range, the top and left over theirs (as fractions of the range, in
    bins). Also the per-batch scale."""
    import collections
    counts = {key: collections.Counter() for key in ("flip", "branch", "scale", "resize_b")}
    ranges = {key: UniformBins() for key in ("crop", "top", "left")}
    options = dict(augment="rfdetr-square", multi_scale="per-sample", resolution=312, patch_size=12, num_windows=1)
    scales = multi_scale_scales(312, patch_size=12, num_windows=1)
    assert scales == [276 + 12 * i for i in range(8)]
    draws = 0
    with ferry.Loader(*synth300, batch_size=50, workers=2, seed=9, fields=("augment",), load_images=False,
                      tensor_type="numpy", **options) as loader:
        epoch = 0
        while draws < 20000:
            loader.set_epoch(epoch)
            for images, targets in loader:
                assert images is None
                for t in targets:
                    rec = [int(v) for v in t["augment"]]
                    counts["flip"][rec[FLIP]] += 1
                    counts["branch"][rec[BRANCH]] += 1
                    counts["scale"][rec[OUT_H]] += 1
                    draws += 1
                    if not rec[BRANCH]:
                        continue
                    short = min(rec[RESIZE_H], rec[RESIZE_W])
                    counts["resize_b"][short] += 1
                    side, hi = rec[CROP_H], min(600, rec[RESIZE_H], rec[RESIZE_W])
                    lo = min(384, hi)
                    if hi > lo:
                        ranges["crop"].add(side, lo, hi)
                    for key, at, extent in (("top", TOP, RESIZE_H), ("left", LEFT, RESIZE_W)):
                        room = rec[extent] - side
                        if room >= 9:
                            ranges[key].add(rec[at], 0, room)
            epoch += 1
    assert draws >= 20000
    uniform = lambda c: {k: sum(c.values()) / len(c) for k in c}  # noqa: E731
    assert set(counts["flip"]) == {0, 1} and set(counts["branch"]) == {0, 1}
    assert set(counts["scale"]) == set(scales), "every scale is drawn"
    assert set(counts["resize_b"]) <= {400, 500, 600} and len(counts["resize_b"]) == 3
    for key, c in counts.items():
        fits(c, uniform(c), key)
    for key, r in ranges.items():
        assert sum(r.counts.values()) > 1000, key
        fits(r.counts, r.expected, key)


@pytest.mark.parametrize("augment", ["rfdetr", "rfdetr-square"])
def test_sizes_follow_rfdetrs_rules(synth300, augment):
    """The replay takes a record's sizes as given; here they are checked against
    RF-DETR's own rules, restated (RandomResize._get_size's rounding and its 1333 cap,
    RandomSizedCrop's range, compute_multi_scale_scales), on every image of the real
    sets and synth_coco's, records only."""
    scales = multi_scale_scales(312, patch_size=12, num_windows=1)
    checked = 0
    sets = [synth300] + ([s for s in real_sets()] if os.path.isdir(os.path.join(
        os.environ.get("FERRY_SHARED", os.path.join(ROOT, "..", "shared")), "realdata")) else [])
    for annotations, images_dir in sets:
        with ferry.Loader(annotations, images_dir, batch_size=16, workers=2, seed=3, fields=("augment", "orig_size"),
                          load_images=False, tensor_type="numpy", augment=augment, multi_scale="per-sample",
                          resolution=312, patch_size=12, num_windows=1) as loader:
            for epoch in range(3):
                loader.set_epoch(epoch)
                for _, targets in loader:
                    for t in targets:
                        rec, (h, w) = [int(v) for v in t["augment"]], [int(v) for v in t["orig_size"]]
                        out = (rec[OUT_H], rec[OUT_W])
                        where = f"{h}x{w} record {rec}"
                        if not rec[BRANCH]:
                            want = [(s, s) if augment == "rfdetr-square" else shortest_side(h, w, s, 1333)
                                    for s in scales]
                            assert out in want, where
                        else:
                            h1, w1 = rec[RESIZE_H], rec[RESIZE_W]
                            assert (h1, w1) in [shortest_side(h, w, b, None) for b in RESIZE_B], where
                            hi = min(600, h1, w1)
                            assert min(384, hi) <= rec[CROP_H] <= hi and rec[CROP_H] == rec[CROP_W], where
                            assert 0 <= rec[TOP] <= h1 - rec[CROP_H] and 0 <= rec[LEFT] <= w1 - rec[CROP_W], where
                            assert out[0] == out[1] and out[0] in scales, where
                        checked += 1
    assert checked >= 900


def test_batch_k_is_the_same_for_1_2_and_16_workers(ref, synth300):
    torch = ref["torch"]

    def epoch(workers):
        with ferry.Loader(*synth300, batch_size=8, workers=workers, seed=1, tensor_type="torch",
                          augment="rfdetr", multi_scale="per-sample", resolution=312, patch_size=12,
                          num_windows=1) as loader:
            out = []
            for k, (images, targets) in enumerate(loader):
                out.append((images, [t["augment"] for t in targets], [t["masks"] for t in targets]))
                if k == 9:
                    break
            return out

    one = epoch(1)
    for workers in (2, 16):
        for k, (a, b) in enumerate(zip(one, epoch(workers))):
            assert torch.equal(a[0], b[0]), f"batch {k} images differ with {workers} workers"
            assert all(torch.equal(x, y) for x, y in zip(a[1], b[1])), f"batch {k} records"
            assert all(torch.equal(x, y) for x, y in zip(a[2], b[2])), f"batch {k} masks"


# ---- determinism: processes, resume, ranks ------------------------------------------

RECIPE = dict(augment="rfdetr", multi_scale="per-sample", resolution=312, patch_size=12, num_windows=1)


def digest_batches(loader, hasher, stop_after=None):
    """Fold batches into hasher (every image byte, record, mask, label and box, in
    delivery order) until the epoch ends or stop_after batches; the image ids seen."""
    ids = []
    for k, (images, targets) in enumerate(loader):
        hasher.update(images.numpy().tobytes())
        for t in targets:
            for key in ("augment", "masks", "labels", "boxes", "size", "image_id"):
                hasher.update(t[key].numpy().tobytes())
            ids.append(int(t["image_id"]))
        if stop_after is not None and k + 1 == stop_after:
            break
    return ids


def epoch_digest(annotations, images_dir, workers, epoch=1, **options):
    import hashlib
    h = hashlib.sha256()
    with ferry.Loader(annotations, images_dir, batch_size=8, workers=workers, seed=11, tensor_type="torch",
                      **{**RECIPE, **options}) as loader:
        loader.set_epoch(epoch)
        ids = digest_batches(loader, h)
    return h.hexdigest(), ids


DIGEST_CHILD = """
import sys
sys.path.insert(0, {tests!r})
from test_augment import epoch_digest
print(epoch_digest({ann!r}, {img!r}, 2)[0])
"""


def test_an_augmented_epoch_is_the_same_for_workers_processes_resume_and_ranks(ref, synth300):
    import hashlib
    import subprocess
    annotations, images_dir = synth300
    want, ids = epoch_digest(annotations, images_dir, 1)
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 300
    for workers in (2, 16):
        assert epoch_digest(annotations, images_dir, workers)[0] == want, f"{workers} workers"
    # three more processes, each its own interpreter and libferry
    child = DIGEST_CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)), ann=annotations, img=images_dir)
    for p in range(3):
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[-1] == want, f"process {p}"
    # stopped after 13 batches, state_dict saved, resumed on a new loader
    h = hashlib.sha256()
    options = dict(batch_size=8, workers=2, seed=11, tensor_type="torch", **RECIPE)
    with ferry.Loader(annotations, images_dir, **options) as first:
        first.set_epoch(1)
        digest_batches(first, h, stop_after=13)
        state = first.state_dict()
    with ferry.Loader(annotations, images_dir, **options) as resumed:
        resumed.load_state_dict(state)
        digest_batches(resumed, h)
    assert h.hexdigest() == want, "the resumed epoch differs"
    # two ranks: each image once over both, with the records the single rank drew
    records = {}
    with ferry.Loader(annotations, images_dir, **options) as whole:
        whole.set_epoch(1)
        for _, targets in whole:
            records.update({int(t["image_id"]): t["augment"].tolist() for t in targets})
    seen = []
    for rank in (0, 1):
        with ferry.Loader(annotations, images_dir, rank=rank, world_size=2, **options) as shard:
            shard.set_epoch(1)
            for _, targets in shard:
                for t in targets:
                    seen.append(int(t["image_id"]))
                    assert t["augment"].tolist() == records[seen[-1]], f"rank {rank}: image {seen[-1]}"
    assert sorted(seen) == sorted(records), "the ranks cover the epoch once"
