"""ferry.Loader against the C loader: shapes, bytes, determinism, resume, shards,
memory, errors. numpy variants always run; torch ones when torch is importable."""
import gc
import json
import os
import sys

import numpy
import pytest

import ferry
from ferry import _capi
from conftest import HAVE_TORCH, ROOT, c_batches, skip_or_fail

sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
from ctypes_layout import compare  # noqa: E402

R = 48  # small images keep the tests fast
FIELDS = ("boxes", "labels", "masks", "area", "iscrowd", "image_id", "orig_size", "size")


def host_bytes(array):
    """The bytes of a torch tensor (any device) or numpy array, row-major."""
    if hasattr(array, "detach"):
        array = array.detach().cpu().contiguous().numpy()
    return numpy.ascontiguousarray(array).tobytes()


def epoch_batches(loader):
    """One epoch as a list of (images bytes per sample, [{field: bytes}])."""
    out = []
    for images, targets in loader:
        per_image = [host_bytes(images[i]) for i in range(images.shape[0])]
        out.append((per_image, [{k: host_bytes(v) for k, v in t.items()} for t in targets]))
    return out


def open_loader(synth, tensor_type, **options):
    options = {"batch_size": 4, "resolution": R, "workers": 2, "seed": 3, **options}
    return ferry.Loader(*synth, tensor_type=tensor_type, **options)


def test_ctypes_mirrors_match_the_headers():
    checked, mismatches = compare(_capi.MIRRORS, [os.path.join(ROOT, "include")],
                                  _capi.MIRROR_HEADERS)
    assert mismatches == []
    assert checked > 100


def test_shapes_and_dtypes(synth, tensor_type):
    with open_loader(synth, tensor_type) as loader:
        images, targets = next(iter(loader))
    assert tuple(images.shape) == (4, 3, R, R)
    assert str(images.dtype).endswith("float32")
    assert len(targets) == 4
    instances = 0
    for t in targets:
        assert sorted(t) == sorted(FIELDS)
        n = t["labels"].shape[0]
        instances += n
        expect = {"boxes": ((n, 4), "float32"), "labels": ((n,), "int64"),
                  "masks": ((n, R, R), "bool"), "area": ((n,), "float32"),
                  "iscrowd": ((n,), "int64"), "image_id": ((1,), "int64"),
                  "orig_size": ((2,), "int64"), "size": ((2,), "int64")}
        for key, (shape, dtype) in expect.items():
            assert tuple(t[key].shape) == shape, key
            assert str(t[key].dtype).endswith(dtype), (key, t[key].dtype)
        assert host_bytes(t["size"]) == numpy.array([R, R], numpy.int64).tobytes()
        boxes = numpy.frombuffer(host_bytes(t["boxes"]), numpy.float32).reshape(n, 4)
        assert ((boxes >= 0) & (boxes <= 1)).all(), "cxcywh boxes are normalised"
    assert instances > 0
    if tensor_type == "torch":
        import torch
        assert isinstance(images, torch.Tensor) and images.device.type == "cpu"
    else:
        assert isinstance(images, numpy.ndarray)


@pytest.mark.parametrize("box_format", ["cxcywh", "xyxy"])
def test_every_batch_equals_the_c_loaders(synth, tensor_type, batch_dump, tmp_path, box_format):
    reference = c_batches(batch_dump, tmp_path, *synth, batch_size=4, resolution=R, seed=3,
                          box_format=1 if box_format == "cxcywh" else 0)
    with open_loader(synth, tensor_type, box_format=box_format) as loader:
        assert len(loader) == len(reference)
        ours = epoch_batches(loader)
    assert len(ours) == len(reference)
    for k, ((images, targets), c) in enumerate(zip(ours, reference)):
        assert images == c["images"], f"batch {k}: images"
        for key in FIELDS:
            assert [t[key] for t in targets] == c[key], f"batch {k}: {key}"
    c_instances = sum(len(b) // 8 for batch in reference for b in batch["labels"])
    py_instances = sum(len(t["labels"]) // 8 for _, targets in ours for t in targets)
    assert py_instances == c_instances > 0


def test_an_epoch_iterated_twice_is_identical(synth, tensor_type):
    with open_loader(synth, tensor_type) as loader:
        loader.set_epoch(1)
        first = epoch_batches(loader)
        loader.set_epoch(1)
        second = epoch_batches(loader)
        loader.set_epoch(2)
        other = epoch_batches(loader)
    assert first == second
    assert first != other, "epochs are shuffled differently"


def test_the_next_iteration_is_the_next_epoch(synth):
    with open_loader(synth, "numpy") as loader:
        epoch0 = epoch_batches(loader)
        epoch1 = epoch_batches(loader)
        assert loader.state_dict()["epoch"] == 1
    with open_loader(synth, "numpy") as loader:
        loader.set_epoch(1)
        assert epoch_batches(loader) == epoch1 != epoch0


def test_resume_from_state_dict_mid_epoch(synth, tensor_type):
    with open_loader(synth, tensor_type) as loader:
        loader.set_epoch(2)
        uninterrupted = epoch_batches(loader)
    with open_loader(synth, tensor_type) as loader:
        loader.set_epoch(2)
        it = iter(loader)
        next(it)
        next(it)
        state = loader.state_dict()
    assert state["epoch"] == 2 and state["batches_delivered"] == 2
    with open_loader(synth, tensor_type) as resumed:
        resumed.load_state_dict(state)
        rest = epoch_batches(resumed)
    assert rest == uninterrupted[2:]


def test_shards_of_world_size_2_cover_the_epoch_once(synth, tensor_type, batch_dump, tmp_path):
    seen = []
    for rank in (0, 1):
        with open_loader(synth, tensor_type, rank=rank, world_size=2) as loader:
            assert loader.stats()["rank"] == rank and loader.stats()["world_size"] == 2
            shard = epoch_batches(loader)
        reference = c_batches(batch_dump, tmp_path, *synth, batch_size=4, resolution=R, seed=3,
                              rank=rank, world_size=2)
        assert [images for images, _ in shard] == [c["images"] for c in reference]
        seen += [int(numpy.frombuffer(t["image_id"], numpy.int64)[0])
                 for _, targets in shard for t in targets]
    with open_loader(synth, "numpy") as loader:
        everything = [int(t["image_id"][0]) for _, targets in loader for t in targets]
    assert len(seen) == len(everything) == 24
    assert sorted(seen) == sorted(everything)
    assert len(set(seen)) == 24


def test_rank_and_world_size_from_the_launcher(synth, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with open_loader(synth, "numpy") as loader:
        stats = loader.stats()
        assert (stats["rank"], stats["world_size"]) == (1, 3)
        assert stats["decoder"] == "cpu"
        assert len(loader) == 2  # 24 images / 3 ranks / batch 4


def test_stats_are_the_counters_without_struct_size(synth):
    """The stats structs start with struct_size (include/ferry/device.h), which the
    package sets to its mirror's size and leaves out of the dicts: the keys are the
    counters, nested pool and device memory included."""
    with open_loader(synth, "numpy") as loader:
        next(iter(loader))
        stats = loader.stats()
    assert "struct_size" not in stats
    assert "struct_size" not in stats["pool"] and "struct_size" not in stats["device_memory"]
    assert stats["pool"]["arenas"] == stats["arenas"] > 0
    assert stats["samples_decoded"] >= 4 and stats["batches_dropped"] >= 0
    assert "struct_size" not in ferry.memory_stats("cpu")


def test_every_tensor_is_freed_after_the_loader_and_tensors_are_dropped(synth, tensor_type):
    gc.collect()
    before = ferry.memory_stats("cpu")
    loader = open_loader(synth, tensor_type)
    kept = list(loader)
    held = ferry.memory_stats("cpu")
    assert held["live_bytes"] > before["live_bytes"], "the yielded tensors hold device memory"
    assert held["pinned_live_bytes"] > 0, "the loader's arenas are pinned"
    loader.close()
    images, targets = kept[0]
    assert host_bytes(images)  # still valid after close
    del loader, kept, images, targets
    gc.collect()
    after = ferry.memory_stats("cpu")
    assert after["live_bytes"] == 0 and after["live_allocations"] == 0
    assert after["pinned_live_bytes"] == 0


def test_a_corrupt_image_raises_with_its_file_name(corrupt, tensor_type):
    annotations, images, victim = corrupt
    with pytest.raises(ferry.FerryError, match=victim) as raised:
        with ferry.Loader(annotations, images, batch_size=4, resolution=R, workers=2,
                          tensor_type=tensor_type) as loader:
            for _ in loader:
                pass
    assert raised.value.status < 0


def test_a_corrupt_image_is_skipped_with_on_error_skip(corrupt, tensor_type):
    annotations, images, victim = corrupt
    with ferry.Loader(annotations, images, batch_size=4, resolution=R, workers=2,
                      on_error="skip", tensor_type=tensor_type) as loader:
        ids = [int(t["image_id"][0]) for _, targets in loader for t in targets]
        # counted since open: the workers may already have met it again in epoch 1
        assert loader.stats()["samples_skipped"] >= 1
    with open(annotations, encoding="utf-8") as f:
        victim_id = next(i["id"] for i in json.load(f)["images"] if i["file_name"] == victim)
    assert len(ids) == len(set(ids)) == 23
    assert victim_id not in ids


def test_errors_name_what_failed(tmp_path, synth):
    missing = str(tmp_path / "nope.json")
    with pytest.raises(ferry.FerryError, match="nope.json"):
        ferry.Loader(missing, synth[1])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 10}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, "x", 4],
                         "area": 4, "iscrowd": 0, "segmentation": [[0, 0, 4, 0, 4, 4]]}],
        "categories": [{"id": 1, "name": "a"}]}))
    with pytest.raises(ferry.FerryError, match=r"bad\.json: annotations\[0\]\.bbox\[2\]") as raised:
        ferry.Loader(str(bad), str(tmp_path))
    assert raised.value.status == -4  # FERRY_EFORMAT
    with pytest.raises(ValueError, match="box_format"):
        ferry.Loader(*synth, box_format="xywh")
    with pytest.raises(ValueError, match="device"):
        ferry.Loader(*synth, device="tpu")
    with pytest.raises(ferry.FerryError, match="decode"):
        ferry.Loader(*synth, decode="fpga")
    loader = open_loader(synth, "numpy")
    loader.close()
    with pytest.raises(ValueError, match="closed"):
        next(iter(loader))


def test_u8_layout_is_normalised_on_the_device(synth, tensor_type):
    with open_loader(synth, tensor_type) as f32, open_loader(synth, tensor_type, layout="u8") as u8:
        (a, _), (b, _) = next(iter(f32)), next(iter(u8))
    a = numpy.frombuffer(host_bytes(a), numpy.float32)
    b = numpy.frombuffer(host_bytes(b), numpy.float32)
    assert str(b.dtype) == "float32" and a.shape == b.shape
    assert numpy.abs(a - b).max() < 1e-5


def test_bf16_layout_gives_bfloat16_images(synth):
    if not HAVE_TORCH:
        skip_or_fail("torch is not importable", "FERRY_REQUIRE_TORCH")
    import torch
    with open_loader(synth, "torch") as f32, open_loader(synth, "torch", layout="bf16") as bf16:
        (a, _), (b, _) = next(iter(f32)), next(iter(bf16))
    assert b.dtype == torch.bfloat16 and b.shape == a.shape
    assert torch.allclose(b.float(), a, atol=0.02, rtol=0.01)
    with pytest.raises(ValueError, match="bf16"):
        open_loader(synth, "numpy", layout="bf16")


def test_cuda_batches_equal_the_host_ones(synth, cuda_device):
    import torch
    with open_loader(synth, "torch") as host, open_loader(synth, "torch", device=cuda_device) as gpu:
        for (hi, ht), (gi, gt) in zip(host, gpu):
            assert gi.device.type == "cuda"
            assert torch.equal(hi, gi.cpu())
            for a, b in zip(ht, gt):
                for key in FIELDS:
                    assert b[key].device.type == "cuda"
                    assert torch.equal(a[key], b[key].cpu()), key
            del gi, gt
    gc.collect()
    torch.cuda.synchronize()
    assert ferry.memory_stats(cuda_device)["live_bytes"] == 0


def test_cuda_tensors_are_freed_when_torch_frees_them(synth, cuda_device):
    import torch
    gc.collect()
    torch.cuda.synchronize()
    loader = open_loader(synth, "torch", device=cuda_device)
    kept = list(loader)
    assert ferry.memory_stats(cuda_device)["live_bytes"] > 0
    loader.close()
    del loader, kept
    gc.collect()
    after = ferry.memory_stats(cuda_device)
    assert after["live_bytes"] == 0 and after["live_allocations"] == 0
    assert after["pinned_live_bytes"] == 0


def test_rank_and_world_size_from_torch_distributed(synth, monkeypatch):
    if not HAVE_TORCH:
        skip_or_fail("torch is not importable", "FERRY_REQUIRE_TORCH")
    import torch.distributed as dist
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setenv("RANK", "0")  # torch.distributed, once initialised, wins
    monkeypatch.setenv("WORLD_SIZE", "3")
    with open_loader(synth, "torch") as loader:
        stats = loader.stats()
        assert (stats["rank"], stats["world_size"]) == (1, 2)
        assert len(loader) == 3  # 24 images / 2 ranks / batch 4


def test_a_sample_without_instances_gives_empty_tensors(synth, tensor_type, tmp_path):
    annotations, images = synth
    with open(annotations, encoding="utf-8") as f:
        coco = json.load(f)
    empty_id = coco["images"][0]["id"]
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] != empty_id]
    stripped = tmp_path / "stripped.json"
    stripped.write_text(json.dumps(coco))
    with ferry.Loader(str(stripped), images, batch_size=24, resolution=R, workers=2,
                      tensor_type=tensor_type) as loader:
        (_, targets), = list(loader)
    empty = [t for t in targets if int(t["image_id"][0]) == empty_id]
    assert len(empty) == 1
    assert tuple(empty[0]["boxes"].shape) == (0, 4)
    assert tuple(empty[0]["masks"].shape) == (0, R, R)
    assert tuple(empty[0]["labels"].shape) == (0,)
    assert sum(len(t["labels"]) for t in targets) > 0
