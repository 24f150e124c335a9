"""ferry.rfdetr: RF-DETR 1.11's own Lightning training, its train batches from ferry.

    import ferry.rfdetr
    from rfdetr import RFDETRNano

    model = RFDETRNano()
    ferry.rfdetr.train(model, dataset_dir="my-dataset", epochs=10)   # was: model.train(...)

What this module owns:
  - DataModule: rfdetr.training.RFDETRDataModule whose train_dataloader is a
    ferry.Loader built from RF-DETR's own ModelConfig and TrainConfig. Everything else
    stays RF-DETR's: setup() builds RF-DETR's datasets (class names, the checks on
    class_names, evaluation), and the validation, test and predict loaders are RF-DETR's.
  - train(detector, ...): RFDETR.train with DataModule in place of RF-DETR's data module.

Invariants:
  - the train batches follow the recipe RF-DETR's own builders pick for the same configs
    (layout, labels, square or not, multi-scale mode and scales, scale jitter, flip, JPEG
    draft, collate block size); a config whose batches ferry cannot reproduce is refused
    at construction with a ValueError naming the option, never trained on with another
    recipe;
  - the targets have the keys, dtypes and shapes RF-DETR's data module hands the model
    after its transfer_batch_to_device;
  - each rank reads ferry's shard of the epoch (rank and world size from the trainer):
    Lightning adds no sampler to an iterable that is not a DataLoader;
  - an epoch is a whole number of gradient-accumulation windows, the same count on every
    rank;
  - rfdetr.training.RFDETRDataModule is replaced only while train() runs, under a lock,
    and put back whatever happens.

This is the one module of ferry that imports rfdetr (rfdetr[train]==1.11.2, on torch 2).
docs/python.md, "Training with RF-DETR", says what is honoured, refused and different.
"""
import os
import threading

import rfdetr.training
from rfdetr.config import AugmentationBackend, MultiScale
from rfdetr.datasets.coco import compute_multi_scale_scales
from rfdetr.training.module_data import RFDETRDataModule
from rfdetr.utilities.tensors import NestedTensor

import ferry

# The ferry.Loader keywords DataModule derives itself (from the configs and the trainer);
# loader_options may not set them.
OWN_KEYWORDS = frozenset({
    "annotations", "images", "batch_size", "resolution", "device", "seed", "shuffle",
    "drop_last", "rank", "world_size", "box_format", "keep_crowd", "remap_categories",
    "categories", "categories_from", "fields", "tensor_type", "augment", "multi_scale",
    "expanded_scales", "patch_size", "num_windows", "scale_jitter", "hflip", "max_size",
    "size_divisibility", "load_images", "draft_size",
})
# ferry layouts that give the model what RF-DETR's Normalize gives: float32, normalised
FLOAT_LAYOUTS = ("f32", "u8")

# RF-DETR's non-square recipe caps the long side here (its _COCO_MAX_SIZE)
COCO_MAX_SIZE = 1333

# Where each split lies, per TrainConfig.dataset_file: (annotations, images) under
# dataset_dir. RF-DETR's build_roboflow_from_coco and build_coco read these paths.
SPLITS = {
    "roboflow": {"train": ("train/_annotations.coco.json", "train"),
                 "val": ("valid/_annotations.coco.json", "valid")},
    "coco": {"train": ("annotations/instances_train2017.json", "train2017"),
             "val": ("annotations/instances_val2017.json", "val2017")},
}


def refuse_unsupported(model_config, train_config):
    """ValueError naming the first option whose batches ferry does not reproduce."""
    tc = train_config
    if tc.dataset_file not in SPLITS:
        raise ValueError(f"dataset_file={tc.dataset_file!r}: ferry.rfdetr reads the 'roboflow' (COCO "
                         "export) and 'coco' layouts only; train with model.train(...) instead")
    if model_config.use_grouppose_keypoints:
        raise ValueError("use_grouppose_keypoints=True: ferry's recipes do not move keypoints; "
                         "train keypoint models with model.train(...)")
    if tc.aug_config:  # {} only drops the flip, which ferry honours; anything else is Albumentations
        raise ValueError(f"aug_config={tc.aug_config!r}: a custom aug_config selects RF-DETR's "
                         "Albumentations pipeline, which ferry does not restate (None or {} only)")
    if tc.pad_targets_to is not None:
        raise ValueError(f"pad_targets_to={tc.pad_targets_to!r}: ferry yields each sample's targets "
                         "unpadded; leave pad_targets_to=None")
    refuse_augmentation_backend(tc.augmentation_backend)


def refuse_augmentation_backend(requested):
    """ferry restates the torchvision pipeline: a backend that resolves to anything else
    (Kornia on the GPU; Albumentations, which 'cpu' picks when it is installed) is refused.
    The resolution is RF-DETR's own (AugmentationBackend.from_str), with its CUDA probe."""
    name = getattr(requested, "value", requested)
    if name in ("cpu", "auto"):
        from rfdetr.config import DEVICE  # RF-DETR's fork-safe CUDA probe
        resolved = AugmentationBackend.from_str(name, has_cuda=str(DEVICE).startswith("cuda"))
    else:
        try:
            resolved = AugmentationBackend.from_str(name)
        except ValueError:
            resolved = None
    if resolved is not AugmentationBackend.TV:
        differs = resolved is not None and resolved.value != name
        what = f" (here it resolves to {resolved.value!r})" if differs else ""
        raise ValueError(f"augmentation_backend={name!r}{what}: ferry restates RF-DETR's torchvision "
                         "pipeline only; pass augmentation_backend='torchvision' (or 'cpu' where "
                         "albumentations and kornia are not installed)")


def split_paths(train_config, split):
    """(annotations, images) of a split ("train" or "val") of train_config.dataset_dir,
    checked: FileNotFoundError naming what is missing, ValueError for a YOLO export."""
    root = train_config.dataset_dir
    if not root or not os.path.isdir(root):
        raise FileNotFoundError(f"dataset_dir {root!r} is not a folder")
    annotations, images = (os.path.join(root, part) for part in SPLITS[train_config.dataset_file][split])
    if not os.path.isfile(annotations):
        if train_config.dataset_file == "roboflow" and split == "train":
            refuse_yolo_export(root)
        raise FileNotFoundError(f"no {split} annotations: {annotations} does not exist "
                                f"(dataset_file={train_config.dataset_file!r})")
    if not os.path.isdir(images):
        raise FileNotFoundError(f"no {split} images: {images} is not a folder")
    return annotations, images


def refuse_yolo_export(root):
    """A Roboflow export in YOLO format (RF-DETR's own detection): ValueError."""
    from pathlib import Path
    from rfdetr.datasets import detect_roboflow_format
    try:
        layout = detect_roboflow_format(Path(root))
    except ValueError:  # neither layout: the caller names the missing COCO file
        return
    if layout == "yolo":
        raise ValueError(f"dataset_dir {root!r} is a Roboflow export in YOLO format: ferry.rfdetr "
                         "reads COCO exports (train/_annotations.coco.json) only")


def label_options(train_config, split):
    """How labels are numbered, as RF-DETR's builder for the layout numbers them: a
    Roboflow export by position among its kept categories (unannotated parents dropped),
    valid and test in the train split's label space; COCO by raw category id."""
    if train_config.dataset_file == "coco":
        return {"categories": "raw"}
    if split == "train":
        return {"categories": "rfdetr"}
    return {"categories": "rfdetr", "categories_from": split_paths(train_config, "train")[0]}


def recipe_options(model_config, train_config):
    """ferry.Loader's recipe for RF-DETR's training transforms under these configs.

    PER_BATCH multi-scale: RF-DETR's dataset resizes every sample to the largest of the
    multi-scale scales (its builders pass skip_random_resize for any mode but PER_SAMPLE),
    and RFDETRModelModule.on_train_batch_start interpolates each batch to a scale drawn
    from the step. So ferry gives that fixed largest scale ("off") and leaves the
    per-step interpolation to the module: rescaling here as well would do it twice."""
    mc, tc = model_config, train_config
    mode = MultiScale.from_value(tc.multi_scale)
    options = dict(augment="rfdetr-square" if tc.square_resize_div_64 else "rfdetr",
                   scale_jitter=bool(tc.scale_jitter),
                   # aug_config={} is RF-DETR's way to drop the flip (and every other extra)
                   hflip=0.0 if tc.aug_config == {} else 0.5,
                   patch_size=mc.patch_size, num_windows=mc.num_windows,
                   expanded_scales=bool(tc.expanded_scales), resolution=mc.resolution,
                   multi_scale="off")
    if mode is MultiScale.PER_SAMPLE:
        options["multi_scale"] = "per-sample"
    elif mode is MultiScale.PER_BATCH:
        scales = compute_multi_scale_scales(mc.resolution, tc.expanded_scales, mc.patch_size, mc.num_windows)
        if not scales:
            raise ValueError(f"resolution={mc.resolution}: RF-DETR's multi-scale rule gives no scale "
                             f"(patch_size={mc.patch_size}, num_windows={mc.num_windows})")
        options["resolution"] = max(scales)
    return options


def loader_device(trainer):
    """The trainer's device as ferry names it; "cpu" without a trainer (RF-DETR's
    dataset-grid render asks for the train loader before fit)."""
    if trainer is None:
        return "cpu"
    device = trainer.strategy.root_device
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return f"cuda:{device.index if device.index is not None else 0}"
    raise ValueError(f"ferry.rfdetr trains on cpu or cuda devices, not {device}")


def check_loader_options(options):
    for key in sorted(options):
        if key in OWN_KEYWORDS:
            raise ValueError(f"loader option {key}={options[key]!r}: ferry.rfdetr.DataModule sets {key} "
                             "itself from RF-DETR's configs and the trainer")
    layout = options.get("layout", "f32")
    if layout not in FLOAT_LAYOUTS:
        raise ValueError(f"loader option layout={layout!r}: RF-DETR's model takes float32 normalised "
                         f"images, which layouts {FLOAT_LAYOUTS} give")


def nested(images, targets):
    """DETR's NestedTensor of a ferry batch, flagged as RF-DETR's collate flags it when no
    sample is padded (the backbone then skips resampling an all-False mask)."""
    h, w = images.shape[-2:]
    no_padding = all(int(t["size"][0]) == h and int(t["size"][1]) == w for t in targets)
    return NestedTensor(images, ferry.pixel_mask(images, targets), no_padding)


class TrainBatches:
    """Lightning's train "dataloader": an iterable with a length (Lightning shards and
    re-samples DataLoaders only, so ferry's rank split stays in force). Each iteration is
    the trainer's current epoch, cut to `batches` (whole accumulation windows)."""

    def __init__(self, loader, batches, epoch):
        self.loader, self.batches, self.epoch = loader, batches, epoch

    def __len__(self):
        return self.batches

    def __iter__(self):
        self.loader.set_epoch(self.epoch())  # what DistributedSampler.set_epoch does
        # zip asks range first: the loader is not asked for the batch after the last one
        for _, (images, targets) in zip(range(self.batches), self.loader):
            yield nested(images, targets), targets


class EvalBatches:
    """Lightning's validation "dataloader": every batch of the split, in order, at each
    iteration."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        self.loader.set_epoch(0)  # from the first batch again, whatever the last pass left
        for images, targets in self.loader:
            yield nested(images, targets), targets


class DataModule(RFDETRDataModule):
    """RF-DETR's data module with train batches from ferry.Loader.

    DataModule(model_config, train_config, **loader_options): loader_options are further
    ferry.Loader keywords (workers, prefetch, on_error, layout "f32"/"u8", decode,
    max_pinned_bytes, max_instances, ...); a keyword this class sets itself is refused
    with a ValueError naming it. Refused at construction, naming the option (ValueError):
    a dataset_file other than "roboflow" (COCO export) and "coco", keypoint models, a
    non-empty aug_config, an augmentation_backend that does not resolve to torchvision,
    pad_targets_to. A missing dataset_dir, split file or image folder: FileNotFoundError
    naming the path (train and valid, which fit builds).

    The loader: the recipe of recipe_options(); batch_size = _resolve_batch_size();
    shuffle, drop_last; seed = train_config.seed, or 0 when it is None (ferry draws its
    own augmentations from (seed, epoch, image), so RF-DETR's default of 42 for torch's
    generator has no counterpart to match); rank, world size and device from the trainer
    (rank 0 of 1 on the cpu without one); the images padded to a multiple of
    patch_size * num_windows (RF-DETR's collate block); JPEGs decoded at RF-DETR's draft
    size (none with masks); masks only for segmentation models. ferry's `workers`
    default is one decoding thread per core; TrainConfig.num_workers (processes) applies
    only to the loaders that stay RF-DETR's. loader_options apply to the validation
    loader too, but for on_error (a skipped validation image would change the metrics).

    Differences from RF-DETR's train loader, by design:
      - an epoch is len(loader) // accumulate_grad_batches whole accumulation windows:
        the batches after the last whole window are not yielded, where RF-DETR pads the
        data set with repeated samples to fill it (GradAccumAlignedDataset);
      - no minimum epoch: RF-DETR samples tiny sets with replacement up to 5 accumulation
        windows per epoch (its _MIN_TRAIN_BATCHES); ferry reads the set once per epoch,
        and a rank that would get no batch at all is a ValueError;
      - validation: ferry's loader only where its batches were checked equal to RF-DETR's
        (python/tests/test_rfdetr_train.py: pixels, padding mask, every target, and the
        same metrics, COCO's and the validation loss, on the same weights): the non-square
        "val" transform
        (square_resize_div_64=False) in one process. The square models' validation (ferry's
        "val-square" leaves `area` as annotated where RF-DETR's Resize scales it), DDP
        (RF-DETR's evaluation corrects for DistributedSampler's padding) and the test and
        predict loaders stay RF-DETR's own.
    """

    def __init__(self, model_config, train_config, **loader_options):
        super().__init__(model_config, train_config)
        check_loader_options(loader_options)
        refuse_unsupported(model_config, train_config)
        self._loader_options = dict(loader_options)
        self._recipe = recipe_options(model_config, train_config)
        for split in ("train", "val"):  # fit builds both: name what is missing now
            split_paths(train_config, split)
        self._loader = self._val_loader = None

    def common_keywords(self):
        """The keywords the train and validation loaders share."""
        mc = self.model_config
        fields = ["boxes", "labels", "area", "iscrowd", "image_id", "orig_size", "size"]
        if mc.segmentation_head:
            fields.append("masks")
        return dict(device=loader_device(self.trainer), box_format="cxcywh", keep_crowd=False,
                    fields=tuple(fields), tensor_type="torch", max_size=COCO_MAX_SIZE,
                    size_divisibility=mc.patch_size * mc.num_windows)  # RF-DETR's collate block

    def loader_keywords(self):
        """Every ferry.Loader keyword of the train loader (loader_options included)."""
        tc, trainer = self.train_config, self.trainer
        annotations, images = split_paths(tc, "train")
        keywords = dict(
            annotations=annotations, images=images, batch_size=self._resolve_batch_size(),
            seed=tc.seed if tc.seed is not None else 0, shuffle=True, drop_last=True,
            rank=trainer.global_rank if trainer is not None else 0,
            world_size=trainer.world_size if trainer is not None else 1,
            draft_size="rfdetr",  # ferry applies RF-DETR's rule to the recipe (none with masks)
            **self.common_keywords(), **label_options(tc, "train"), **self._recipe)
        keywords.update(self._loader_options)
        return keywords

    def val_keywords(self):
        """The validation loader's keywords, or None where RF-DETR's own loader stays (see
        the class's docstring): RF-DETR's val transform for non-square models,
        `RandomResize([resolution], max_size=1333)` ("val"), every image once, in order,
        at the eval batch size, decoded at full size."""
        trainer = self.trainer
        if self.train_config.square_resize_div_64 or (trainer is not None and trainer.world_size > 1):
            return None
        annotations, images = split_paths(self.train_config, "val")
        keywords = dict(
            annotations=annotations, images=images, batch_size=self._resolve_eval_batch_size(),
            shuffle=False, drop_last=False, rank=0, world_size=1, augment="val",
            resolution=self.model_config.resolution, **self.common_keywords(),
            **label_options(self.train_config, "val"))
        # every image is scored, as RF-DETR's loader does: a corrupt one fails
        keywords.update({k: v for k, v in self._loader_options.items() if k != "on_error"})
        return keywords

    def setup(self, stage):
        # RF-DETR's datasets stay built: class names, the class_names check, evaluation
        super().setup(stage)

    def train_dataloader(self):
        self.close_loader()  # a second call (reload_dataloaders_every_n_epochs) reopens
        keywords = self.loader_keywords()
        annotations, images = keywords.pop("annotations"), keywords.pop("images")
        self._loader = ferry.Loader(annotations, images, **keywords)
        window = self._effective_grad_accum_steps()
        batches = len(self._loader) // window * window
        if batches == 0:
            self.close_loader()
            size = len(self._dataset_train) if self._dataset_train is not None else "unknown"
            raise ValueError(
                f"no training batch for rank {keywords['rank']}: {size} images in {annotations}, batch "
                f"size {keywords['batch_size']}, world size {keywords['world_size']}, gradient "
                f"accumulation {window} (ferry drops a short last batch and does not repeat samples)")
        trainer = self.trainer
        return TrainBatches(self._loader, batches, lambda: trainer.current_epoch if trainer is not None else 0)

    def val_dataloader(self):
        keywords = self.val_keywords()
        if keywords is None:
            return super().val_dataloader()
        if self._val_loader is not None:
            self._val_loader.close()
        annotations, images = keywords.pop("annotations"), keywords.pop("images")
        self._val_loader = ferry.Loader(annotations, images, **keywords)
        return EvalBatches(self._val_loader)

    def close_loader(self):
        """Close the train loader (the validation loader closes at teardown)."""
        if self._loader is not None:
            self._loader.close()
            self._loader = None

    def teardown(self, stage):
        self.close_loader()
        if self._val_loader is not None:
            self._val_loader.close()
            self._val_loader = None
        super().teardown(stage)


# train()'s loader_options while it runs (under _swap_lock), for the data module RFDETR.train
# builds. A module-level class rather than one made per call: spawn-based DDP pickles the
# data module, and pickle finds a class by its module and name.
_swap_lock = threading.RLock()
_bound_options = {}


class TrainDataModule(DataModule):
    """What rfdetr.training.RFDETRDataModule names while train() runs: DataModule with
    train()'s loader_options, built as RFDETR.train builds its data module."""

    def __init__(self, model_config, train_config):
        super().__init__(model_config, train_config, **_bound_options)


def train(detector, *, loader_options=None, **kwargs):
    """detector.train(**kwargs) with ferry's DataModule feeding the train batches.

    RFDETR.train imports rfdetr.training.RFDETRDataModule when it is called and builds
    its data module from it, so for the length of the call that name is TrainDataModule,
    bound to `loader_options` (ferry.Loader keywords: workers, prefetch, on_error, ...).
    The lock keeps two threads from swapping it at once; the original name and options
    are put back when training returns or raises. Returns what detector.train returns."""
    global _bound_options
    options = dict(loader_options or {})
    check_loader_options(options)
    with _swap_lock:
        before = rfdetr.training.RFDETRDataModule, _bound_options
        rfdetr.training.RFDETRDataModule, _bound_options = TrainDataModule, options
        try:
            return detector.train(**kwargs)
        finally:
            rfdetr.training.RFDETRDataModule, _bound_options = before
