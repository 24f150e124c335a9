#!/usr/bin/env python3
"""ferry.rfdetr inside RF-DETR 1.11.2's own Lightning training (python/tests/test_rfdetr_train.py).

    rfdetr_train_check.py MODE --det DIR [--seg DIR] [--tiny DIR] --out DIR [--steps 2]
    MODE: train (--seg, [--run K]), labels, val, api (--tiny), ddp

Each DIR is a Roboflow COCO export (train/, valid/, test/ with _annotations.coco.json)
that the test builds from real photos: `--det` all of them, `--seg` without the images
whose 2-point polygons RF-DETR's own mask rasterisation cannot read, `--tiny` a few.
Run by the interpreter of a venv holding rfdetr[train]==1.11.2 on torch 2 (./run makes
build/rfdetr-venv), with the ferry package (and its libferry.so) on PYTHONPATH. Models
are built from random weights (pretrain_weights=None): nothing is downloaded.

  train   RFDETRModelModule and build_trainer, as RFDETR.train builds them, train a
          few steps of RFDETRNano and RFDETRSegNano from ferry.rfdetr.DataModule, in
          RF-DETR's default config (multi_scale PER_BATCH, expanded_scales) and with
          PER_SAMPLE multi-scale: every loss finite, and every batch's images, padding
          mask and targets (keys, dtypes, shapes) as RF-DETR's own data module hands
          them to the model (its first batch after transfer_batch_to_device). Nano in
          the default config at its own resolution, the other runs lower (CPU time).
  labels  ferry's labels (categories="rfdetr", categories_from the train split for
          valid) equal RF-DETR's dataset's (filter_parent_categories and
          _train_split_cat2label, through its ConvertCoco) for every image of train and
          valid; ferry's raw labels (the category ids) do not.
  val     a non-square model's validation batches from ferry equal RF-DETR's (pixels,
          padding mask, every target), twice over, and trainer.validate gives the same
          metrics (COCO's and the validation loss) through either data module on the
          same weights; a square model validates through RF-DETR's own loader.
  api     ferry.rfdetr.train(model, ...) trains through RFDETR.train with ferry's data
          module and puts rfdetr.training.RFDETRDataModule back, also when training
          raises; the configs and layouts ferry cannot honour are refused, naming the
          option or path.
  ddp     two processes under Lightning's DDP (cpu, gloo), this script re-run by
          Lightning's launcher for rank 1: each rank writes the image ids it trained on,
          its batch count and losses to --out; rank 0 waits for rank 1's file and checks
          disjoint ids, equal batch counts and finite losses.

Prints what it measured (steps, losses, the wait for each batch) and exits 1 on the
first failed check, naming it.
"""
import argparse
import json
import logging
import math
import os
import sys
import time
import warnings

# Lightning's and RF-DETR's chatter (and RF-DETR's random-init warnings) are not the check's
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402

import ferry  # noqa: E402
import ferry.rfdetr  # noqa: E402


def fail(what):
    sys.exit(f"rfdetr_train_check: {what}")


def check(condition, what):
    if not condition:
        fail(what)


def signature(batch):
    """What the model is handed, for comparison: the images' and padding mask's dtype and
    rank, and per target key its dtype and shape pattern (per-object rows as "N", a mask's
    plane as the sample's size, fixed shapes as they are)."""
    samples, targets = batch
    out = {"images": (str(samples.tensors.dtype), samples.tensors.dim()),
           "mask": (str(samples.mask.dtype), tuple(samples.mask.shape) == (samples.tensors.shape[0],
                                                                            *samples.tensors.shape[-2:]))}
    for key in sorted(targets[0]):
        value = targets[0][key]
        shape = list(value.shape)
        if key in ("boxes", "labels", "area", "iscrowd", "masks"):
            shape[0] = "N"
        if key == "masks":
            check(shape[1:] == [int(v) for v in targets[0]["size"]],
                  f"masks {list(value.shape)} are not the sample's size {targets[0]['size'].tolist()}")
            shape[1:] = ["h", "w"]
        out[key] = (str(value.dtype), tuple(shape))
    return out


class Record(pl.Callback):
    """Per training step: the loss, the batch's signature and image ids, and how long the
    step waited for its batch (from the previous step's end to this step's start)."""

    def __init__(self, raise_at=None):
        self.losses, self.signatures, self.image_ids, self.waits = [], [], [], []
        self.shapes, self.datamodule, self.raise_at, self._end = [], None, raise_at, None

    def on_fit_start(self, trainer, module):
        self.datamodule = type(trainer.datamodule)

    def on_train_epoch_start(self, trainer, module):
        self._end = time.perf_counter()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.waits.append(time.perf_counter() - self._end)
        if self.raise_at == batch_idx:
            raise RuntimeError("the check's own failure, raised mid-training")
        samples, targets = batch
        self.shapes.append(tuple(samples.tensors.shape))
        self.signatures.append(signature(batch))
        self.image_ids += [int(t["image_id"]) for t in targets]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss))
        self._end = time.perf_counter()


def configs(model_class, dataset, out, resolution=None, model_options=None, **train_options):
    """The ModelConfig (random weights, at `resolution`; None: the variant's; and
    model_options) and TrainConfig that RFDETR.train would use for `model_class`, without
    building the model itself (RFDETRModelModule builds its own: one model in memory)."""
    model_options = dict(model_options or {})
    if resolution is not None:
        model_options["resolution"] = resolution
    model_config = model_class._model_config_class(pretrain_weights=None, **model_options)
    options = dict(dataset_dir=dataset, output_dir=out, batch_size=2, num_workers=0, epochs=1,
                   tensorboard=False, progress_bar=None)
    options.update(train_options)
    return model_config, model_class._train_config_class(**options)


def rfdetr_reference_batch(model_config, train_config):
    """RF-DETR's own data module's first train batch, as its transfer_batch_to_device
    hands it to the model."""
    from rfdetr.training import RFDETRDataModule
    datamodule = RFDETRDataModule(model_config, train_config)
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    return datamodule.transfer_batch_to_device(batch, torch.device("cpu"), 0)


def fit(model_config, train_config, datamodule, steps, **trainer_options):
    """RFDETRModelModule and build_trainer as RFDETR.train builds them; `steps` batches of
    one epoch, no validation."""
    from rfdetr.training import RFDETRModelModule, build_trainer
    record = Record()
    module = RFDETRModelModule(model_config, train_config)
    options = dict(accelerator="cpu", limit_train_batches=steps, limit_val_batches=0,
                   num_sanity_val_steps=0, logger=False,
                   enable_model_summary=False)
    options.update(trainer_options)
    trainer = build_trainer(train_config, model_config, **options)
    trainer.callbacks.append(record)
    trainer.fit(module, datamodule)
    return record, trainer


def peak_rss_mib():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def summary(record):
    waits = sorted(record.waits)
    return (f"{len(record.losses)} steps, losses {[round(x, 3) for x in record.losses]}, batches "
            f"{sorted(set(record.shapes))}, wait for a batch: median {waits[len(waits) // 2] * 1e3:.0f} ms, "
            f"max {waits[-1] * 1e3:.0f} ms, peak RSS {peak_rss_mib()} MiB")


# mode train's runs: (model, dataset, multi-scale mode, batch size, resolution). Nano in
# RF-DETR's default config as it is; the others at a lower resolution, for time on a CPU.
# RF-DETR 1.11.2 itself cannot train a segmentation model on samples of different sizes in
# one batch (its matcher concatenates the targets' masks), which per-sample multi-scale
# gives: batch size 1 there.
TRAIN_RUNS = [("RFDETRNano", "det", "per-batch", 2, None), ("RFDETRNano", "det", "per-sample", 2, 192),
              ("RFDETRSegNano", "seg", "per-batch", 2, 156), ("RFDETRSegNano", "seg", "per-sample", 1, 156)]


def mode_train(args):
    import rfdetr
    runs = [TRAIN_RUNS[args.run]] if args.run is not None else TRAIN_RUNS
    for model_name, dataset, multi_scale, batch_size, resolution in runs:
        model_class, dataset = getattr(rfdetr, model_name), getattr(args, dataset)
        start = time.perf_counter()
        mc, tc = configs(model_class, dataset, os.path.join(args.out, "train"), resolution,
                         multi_scale=multi_scale, batch_size=batch_size)
        name = f"{model_class.__name__} resolution {mc.resolution} multi_scale={multi_scale}"
        check(tc.expanded_scales, "RF-DETR's default expanded_scales is True")
        reference = signature(rfdetr_reference_batch(mc, tc))
        datamodule = ferry.rfdetr.DataModule(mc, tc, workers=2)
        record, _ = fit(mc, tc, datamodule, args.steps)
        check(len(record.losses) == args.steps, f"{name}: {len(record.losses)} steps, not {args.steps}")
        check(all(math.isfinite(x) for x in record.losses), f"{name}: a loss is not finite: {record.losses}")
        for k, got in enumerate(record.signatures):
            check(got == reference, f"{name}: batch {k} is {got}, RF-DETR's data module gives {reference}")
        block = mc.patch_size * mc.num_windows
        check(all(h % block == 0 and w % block == 0 for _, _, h, w in record.shapes),
              f"{name}: a batch {record.shapes} is not padded to multiples of {block}")
        if multi_scale == "per-batch":  # the dataset's fixed largest scale; the module rescales
            from rfdetr.datasets.coco import compute_multi_scale_scales
            largest = max(compute_multi_scale_scales(mc.resolution, True, mc.patch_size, mc.num_windows))
            check(set(record.shapes) == {(batch_size, 3, largest, largest)},
                  f"{name}: batches {set(record.shapes)}, RF-DETR's dataset gives {largest} x {largest}")
        print(f"{name}: {summary(record)}; targets as RF-DETR's {sorted(reference)}; "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    print("train: all equal")


def rfdetr_labels(dataset):
    """image id -> labels of RF-DETR's dataset (its ConvertCoco with the split's
    cat2label, on an image of the annotated size: the labels need no pixels)."""
    from PIL import Image
    out = {}
    for image_id in dataset.ids:
        info = dataset.coco.imgs[image_id]
        image = Image.new("RGB", (info["width"], info["height"]))
        _, target = dataset.prepare(image, {"image_id": image_id, "annotations": dataset._load_target(image_id)})
        out[image_id] = target["labels"].tolist()
    return out


def ferry_labels(annotations, images, **options):
    out = {}
    with ferry.Loader(annotations, images, batch_size=8, shuffle=False, load_images=False,
                      fields=("labels", "image_id"), tensor_type="torch", **options) as loader:
        for _, targets in loader:
            for t in targets:
                out[int(t["image_id"])] = t["labels"].tolist()
    return out


def mode_labels(args):
    from rfdetr import RFDETRNano
    from rfdetr.training import RFDETRDataModule
    mc, tc = configs(RFDETRNano, args.det, os.path.join(args.out, "labels"))
    datamodule = RFDETRDataModule(mc, tc)
    datamodule.setup("fit")
    train_file = os.path.join(args.det, "train", "_annotations.coco.json")
    for split, folder, dataset in (("train", "train", datamodule._dataset_train),
                                   ("val", "valid", datamodule._dataset_val)):
        annotations, images = os.path.join(args.det, folder, "_annotations.coco.json"), os.path.join(args.det, folder)
        want = rfdetr_labels(dataset)
        options = ferry.rfdetr.label_options(tc, split)
        want_from = None if split == "train" else os.path.realpath(train_file)
        got_from = options.get("categories_from")
        check((got_from and os.path.realpath(got_from)) == want_from, f"{split}: categories_from {options}")
        got = ferry_labels(annotations, images, **options)
        check(sorted(got) == sorted(want), f"{split}: ferry's images {sorted(got)}, RF-DETR's {sorted(want)}")
        for image_id in want:
            check(got[image_id] == want[image_id],
                  f"{split} image {image_id}: ferry's labels {got[image_id]}, RF-DETR's {want[image_id]}")
        raw = ferry_labels(annotations, images, categories="raw")
        differ = [i for i in want if want[i] and raw[i] != want[i]]
        check(differ == [i for i in want if want[i]], f"{split}: raw labels equal RF-DETR's for some images")
        print(f"{split}: {len(want)} images, {sum(map(len, want.values()))} labels equal RF-DETR's "
              f"(options {options}); raw category ids differ on all {len(differ)} annotated images")
    print("labels: all equal")


def same_batch(ours, theirs, where):
    """ferry's validation batch against RF-DETR's (after its transfer_batch_to_device)."""
    (samples, targets), (want, want_targets) = ours, theirs
    check(samples.tensors.shape == want.tensors.shape,
          f"{where}: images {tuple(samples.tensors.shape)}, RF-DETR's {tuple(want.tensors.shape)}")
    difference = float((samples.tensors - want.tensors).abs().max())
    check(difference <= 1e-5, f"{where}: pixels differ by {difference}")
    check(torch.equal(samples.mask, want.mask), f"{where}: the padding masks differ")
    check(len(targets) == len(want_targets), f"{where}: {len(targets)} targets, RF-DETR {len(want_targets)}")
    for i, (got, expected) in enumerate(zip(targets, want_targets)):
        check(sorted(got) == sorted(expected), f"{where} sample {i}: keys {sorted(got)}, RF-DETR's {sorted(expected)}")
        for key, value in expected.items():
            mine = got[key]
            equal = (mine.dtype == value.dtype and mine.shape == value.shape and
                     (torch.allclose(mine, value, rtol=1e-5, atol=1e-5) if value.is_floating_point()
                      else torch.equal(mine, value)))
            check(equal, f"{where} sample {i}: {key} {mine.dtype} {list(mine.shape)} {mine.flatten()[:8].tolist()}, "
                         f"RF-DETR's {value.dtype} {list(value.shape)} {value.flatten()[:8].tolist()}")


def mode_val(args):
    """ferry's validation loader (non-square models, one process) against RF-DETR's:
    every batch, and the metrics of the same weights through each: COCO's (zero for random
    weights) and the validation loss, which every target and pixel moves."""
    from rfdetr import RFDETRNano
    from rfdetr.training import RFDETRDataModule, RFDETRModelModule, build_trainer
    mc, tc = configs(RFDETRNano, args.det, os.path.join(args.out, "val"), square_resize_div_64=False,
                     compute_val_loss=True)
    ours, theirs = ferry.rfdetr.DataModule(mc, tc, workers=2), RFDETRDataModule(mc, tc)
    for datamodule in (ours, theirs):
        datamodule.setup("validate")
    loader = ours.val_dataloader()
    check(isinstance(loader, ferry.rfdetr.EvalBatches), f"a non-square model validates through {type(loader)}")
    reference = theirs.val_dataloader()
    check(len(loader) == len(reference), f"{len(loader)} validation batches, RF-DETR {len(reference)}")
    for rounds in range(2):  # a second pass starts from the first batch again
        for k, (batch, want) in enumerate(zip(loader, reference)):
            same_batch(batch, theirs.transfer_batch_to_device(want, torch.device("cpu"), 0),
                       f"validation batch {k} (pass {rounds})")
    print(f"validation: {len(loader)} batches equal RF-DETR's (pixels, padding mask, targets)", flush=True)
    module = RFDETRModelModule(mc, tc)
    metrics = []
    for datamodule in (theirs, ours):
        trainer = build_trainer(tc, mc, accelerator="cpu", include_training_callbacks=False, logger=False,
                                enable_model_summary=False, enable_progress_bar=False)
        metrics.append(trainer.validate(module, datamodule, verbose=False)[0])
    check(metrics[0] and sorted(metrics[0]) == sorted(metrics[1]), f"metrics {metrics}")
    check(float(metrics[0].get("val/loss", 0)) > 0, f"no validation loss in {metrics[0]}")
    for key, value in metrics[0].items():
        check(abs(float(value) - float(metrics[1][key])) <= 1e-5 * max(1.0, abs(float(value))),
              f"{key}: ferry {metrics[1][key]}, RF-DETR {value}")
    print(f"validation metrics equal RF-DETR's: { {k: round(float(v), 6) for k, v in sorted(metrics[0].items())} }")
    square_mc, square = configs(RFDETRNano, args.det, os.path.join(args.out, "val"))
    kept = ferry.rfdetr.DataModule(square_mc, square)
    kept.setup("validate")
    check(isinstance(kept.val_dataloader(), torch.utils.data.DataLoader),
          "a square model's validation is not RF-DETR's own loader")
    print("validation of square models: RF-DETR's own loader")
    print("val: all equal")


def expect_error(kinds, needle, build, what):
    try:
        build()
    except kinds as e:
        check(needle in str(e), f"{what}: the error does not name {needle!r}: {type(e).__name__}: {e}")
        print(f"refused, {what}: {type(e).__name__}: {e}")
        return
    fail(f"{what}: accepted")


def mode_api(args):
    import shutil

    import rfdetr.training
    from rfdetr import RFDETRNano
    from rfdetr.config import RFDETRKeypointPreviewConfig, RFDETRNanoConfig, TrainConfig
    original = rfdetr.training.RFDETRDataModule

    # ferry.rfdetr.train: RFDETR.train's own flow (num_classes from the data, checkpoints,
    # validation with RF-DETR's loader), ferry's data module under its trainer
    records = []

    def recording(build_trainer):
        def build(*a, **k):
            trainer = build_trainer(*a, **k)
            records.append(Record(raise_at=0 if len(records) == 1 else None))
            trainer.callbacks.append(records[-1])
            return trainer
        return build

    real_build = rfdetr.training.build_trainer
    rfdetr.training.build_trainer = recording(real_build)  # RFDETR.train imports it at call time
    try:
        model = RFDETRNano(pretrain_weights=None)
        options = dict(dataset_dir=args.tiny, epochs=1, batch_size=2, resolution=192, device="cpu",
                       num_workers=0, tensorboard=False, output_dir=os.path.join(args.out, "api"))
        start = time.perf_counter()
        ferry.rfdetr.train(model, loader_options={"workers": 2}, **options)
        check(issubclass(records[0].datamodule, ferry.rfdetr.DataModule),
              f"the trainer's data module is {records[0].datamodule}, not ferry's")
        check(rfdetr.training.RFDETRDataModule is original, "RFDETRDataModule was not put back")
        check(records[0].losses and all(math.isfinite(x) for x in records[0].losses),
              f"losses {records[0].losses}")
        print(f"ferry.rfdetr.train: {records[0].datamodule.__mro__[1].__module__}.DataModule under "
              f"RFDETR.train, {summary(records[0])}, {time.perf_counter() - start:.1f} s; "
              f"RFDETRDataModule put back", flush=True)
        try:  # the second run's callback raises at its first batch
            ferry.rfdetr.train(model, **options)
            fail("training that raises did not raise")
        except RuntimeError as e:
            check("the check's own failure" in str(e), f"unexpected error {e}")
        check(rfdetr.training.RFDETRDataModule is original, "RFDETRDataModule not put back after a raise")
        print("ferry.rfdetr.train that raises: RFDETRDataModule put back")
    finally:
        rfdetr.training.build_trainer = real_build

    # what is refused, naming the option or the path
    mc = RFDETRNanoConfig(pretrain_weights=None)

    def module(model_config=mc, **train_options):
        options = dict(dataset_dir=args.det)
        options.update(train_options)
        return lambda: ferry.rfdetr.DataModule(model_config, TrainConfig(**options))

    expect_error(ValueError, "aug_config", module(aug_config={"HorizontalFlip": {"p": 0.5}}), "aug_config")
    expect_error(ValueError, "kornia", module(augmentation_backend="kornia"), "augmentation_backend")
    expect_error(ValueError, "pad_targets_to", module(pad_targets_to=8), "pad_targets_to")
    expect_error(ValueError, "yolo", module(dataset_file="yolo"), "dataset_file")
    keypoints = RFDETRKeypointPreviewConfig(pretrain_weights=None)
    expect_error(ValueError, "use_grouppose_keypoints", module(keypoints), "keypoints")
    expect_error(ValueError, "batch_size",
                 lambda: ferry.rfdetr.DataModule(mc, TrainConfig(dataset_dir=args.det), batch_size=4),
                 "a loader option the data module sets")
    empty = os.path.join(args.out, "empty")
    os.makedirs(empty, exist_ok=True)
    expect_error(FileNotFoundError, os.path.join(empty, "train", "_annotations.coco.json"),
                 module(dataset_dir=empty), "a dataset_dir without the layout")
    no_valid = os.path.join(args.out, "no-valid")
    shutil.copytree(args.tiny, no_valid, symlinks=True, dirs_exist_ok=True)
    os.remove(os.path.join(no_valid, "valid", "_annotations.coco.json"))
    expect_error(FileNotFoundError, os.path.join(no_valid, "valid", "_annotations.coco.json"),
                 module(dataset_dir=no_valid), "a missing valid split")
    expect_error(FileNotFoundError, os.path.join(empty, "train", "_annotations.coco.json"),
                 lambda: ferry.rfdetr.train(model, **dict(options, dataset_dir=empty)),
                 "ferry.rfdetr.train on a dataset_dir without the layout")
    check(rfdetr.training.RFDETRDataModule is original, "RFDETRDataModule not put back after a refusal")
    print("api: all as expected")


def mode_ddp(args):
    """Lightning's DDP launcher runs this again for rank 1 (LOCAL_RANK=1 in its environment).
    What is checked is the sharding, so each rank trains a lighter Nano (one query group
    instead of 13, no EMA, resolution 192): about 1.6 GiB a process instead of 2.5."""
    from rfdetr import RFDETRNano
    torch.set_num_threads(1)  # two processes on the test machine's cores
    mc, tc = configs(RFDETRNano, args.det, os.path.join(args.out, "ddp"), 192, {"group_detr": 1},
                     use_ema=False)
    datamodule = ferry.rfdetr.DataModule(mc, tc, workers=1)
    record, trainer = fit(mc, tc, datamodule, args.steps, strategy="ddp", devices=2)
    rank = trainer.global_rank
    mine = {"rank": rank, "world_size": trainer.world_size, "batches": trainer.num_training_batches,
            "epoch_batches": len(trainer.train_dataloader), "image_ids": record.image_ids,
            "losses": record.losses, "waits": record.waits, "peak_rss_mib": peak_rss_mib()}
    with open(os.path.join(args.out, f"rank{rank}.json.part"), "w") as f:
        json.dump(mine, f)
    os.replace(os.path.join(args.out, f"rank{rank}.json.part"), os.path.join(args.out, f"rank{rank}.json"))
    if rank != 0:
        return
    other = os.path.join(args.out, "rank1.json")
    deadline = time.monotonic() + 120
    while not os.path.exists(other) and time.monotonic() < deadline:
        time.sleep(0.2)
    check(os.path.exists(other), "rank 1 wrote nothing within 120 s")
    ranks = [mine, json.load(open(other))]
    for r in ranks:
        check(r["world_size"] == 2, f"rank {r['rank']}: world size {r['world_size']}")
        check(len(r["losses"]) == args.steps and all(math.isfinite(x) for x in r["losses"]),
              f"rank {r['rank']}: losses {r['losses']}")
        print(f"rank {r['rank']}: {r['epoch_batches']} batches per epoch, trained {len(r['losses'])}, "
              f"images {r['image_ids']}, losses {[round(x, 3) for x in r['losses']]}, "
              f"peak RSS {r['peak_rss_mib']} MiB")
    check(ranks[0]["epoch_batches"] == ranks[1]["epoch_batches"] > 0,
          f"batches per epoch differ: {ranks[0]['epoch_batches']} and {ranks[1]['epoch_batches']}")
    shared = set(ranks[0]["image_ids"]) & set(ranks[1]["image_ids"])
    check(not shared, f"both ranks trained on images {sorted(shared)}")
    print("ddp: disjoint images, equal batch counts, finite losses")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("train", "labels", "val", "api", "ddp"))
    p.add_argument("--det", required=True)
    p.add_argument("--seg")
    p.add_argument("--tiny")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--run", type=int, choices=range(len(TRAIN_RUNS)),
                   help="train: only this run of TRAIN_RUNS (each in its own process keeps the peak low)")
    args = p.parse_args()
    from importlib.metadata import version
    print(f"rfdetr {version('rfdetr')}, pytorch_lightning {pl.__version__}, torch {torch.__version__}", flush=True)
    {"train": mode_train, "labels": mode_labels, "val": mode_val, "api": mode_api, "ddp": mode_ddp}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
