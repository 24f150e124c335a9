"""ferry.Loader: COCO batches as (images, targets), the DETR collate, from libferry.

One Loader owns one ferry_loader (its worker threads decode into pinned packed
batches). Each step takes the next packed batch, ferries it to the device with
ferry_transfer (the images become one [B, 3, R, R] tensor, every other field of every
sample its own allocation), waits for the copies, and hands each tensor to torch or
numpy through DLPack: no copy is made, and the array's death frees the allocation.

Invariants:
  - a packed batch is released right after its transfer is queued (the arena goes back
    to the pool once the copies have read it), so the Python side never holds an arena;
  - every tensor of a device batch is either taken out and handed over, or freed with
    the device batch: nothing is left behind, whatever raises;
  - devices are opened once per process and never closed, because tensors handed out
    may outlive every Loader and their deleters free through the device.
"""
import ctypes
import os
import threading
from ctypes import byref, c_int, c_void_p

from ferry import _capi
from ferry._capi import check, lib
from ferry._convert import converter

# The DETR target fields, in the order a target dict lists them: (key, its bit of
# ferry_loader_config.fields). The key is also the batch's field name.
TARGET_FIELDS = (("boxes", _capi.FIELD_BOXES), ("labels", _capi.FIELD_LABELS),
                 ("masks", _capi.FIELD_MASKS), ("area", _capi.FIELD_AREA),
                 ("iscrowd", _capi.FIELD_ISCROWD), ("image_id", _capi.FIELD_IMAGE_ID),
                 ("orig_size", _capi.FIELD_ORIG_SIZE), ("size", _capi.FIELD_SIZE),
                 ("augment", _capi.FIELD_AUGMENT))
# what a target holds when `fields` is not given: all but the augment record, which
# comes too when a recipe draws anything
DEFAULT_FIELDS = tuple(key for key, _ in TARGET_FIELDS if key != "augment")

BOX_FORMATS = {"cxcywh": _capi.BOXES_CXCYWH_NORM, "xyxy": _capi.BOXES_XYXY}
ON_ERROR = {"fail": _capi.ON_ERROR_FAIL, "skip": _capi.ON_ERROR_SKIP}
ORDERS = {"auto": _capi.ORDER_AUTO, "dataset": _capi.ORDER_DATASET, "shards": _capi.ORDER_SHARDS}
# layout -> (what the workers write, what the transfer makes of it)
LAYOUTS = {"f32": (_capi.LAYOUT_F32_CHW, _capi.NORMALIZE_NONE),
           "u8": (_capi.LAYOUT_U8_HWC, _capi.NORMALIZE_F32),
           "bf16": (_capi.LAYOUT_U8_HWC, _capi.NORMALIZE_BF16),
           # the pixels as they are, [B, 3, H, W] uint8 (a channel-first view of ferry's
           # [h, w, 3]): RF-DETR's gpu_postprocess normalises on the GPU itself
           "uint8": (_capi.LAYOUT_U8_HWC, _capi.NORMALIZE_NONE)}

_devices = {}
_devices_lock = threading.Lock()


def _ferry_device_name(device):
    """torch-style names ("cpu", "cuda", "cuda:1", a torch.device) to ferry's."""
    name = str(device)
    if name in ("cpu", "host"):
        return "host"
    if name == "cuda":
        try:
            import torch
            return f"cuda:{torch.cuda.current_device()}"
        except Exception:  # no torch, or no CUDA in it: ferry's own default
            return "cuda:0"
    if name.startswith("cuda:"):
        return name
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {device!r}")


def _open_device(device):
    """The process-wide ferry_device for a device name (opened on first use)."""
    name = _ferry_device_name(device)
    with _devices_lock:
        if name not in _devices:
            handle = c_void_p()
            check(lib.ferry_device_open(name.encode(), byref(handle)), f"opening device {name}")
            _devices[name] = handle
        return _devices[name]


def memory_stats(device="cpu"):
    """The device's accounting as a dict: live and peak device bytes, live allocations,
    pinned host bytes (include/ferry/device.h, ferry_memory_stats). Frees are stream
    ordered, so the device is synchronised first."""
    handle = _open_device(device)
    check(lib.ferry_device_synchronize(handle))
    stats = _capi.MemoryStats()
    check(lib.ferry_device_memory_stats(handle, byref(stats)))
    return _struct_dict(stats)


def _struct_dict(struct):
    out = {}
    for name, _ in struct._fields_:
        value = getattr(struct, name)
        if hasattr(value, "_fields_"):
            value = _struct_dict(value)
        elif hasattr(value, "_length_"):  # a C array: samples_cpu_fallback
            value = list(value)
        out[name] = value
    return out


def _distributed_default(rank, world_size):
    """rank/world_size when not given: torch.distributed's when it is initialised, else
    -1, which lets the C loader read RANK/WORLD_SIZE, OMPI_COMM_WORLD_* or SLURM_*."""
    if rank is not None and world_size is not None:
        return rank, world_size
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return (dist.get_rank() if rank is None else rank,
                    dist.get_world_size() if world_size is None else world_size)
    except ImportError:
        pass
    return (-1 if rank is None else rank), (-1 if world_size is None else world_size)


def _parse(parser, value, what):
    """A C enum from its name (ferry_augment_parse, ferry_multi_scale_parse)."""
    out = c_int()
    check(parser(str(value).encode(), byref(out)), what)
    return out.value


def _choice(table, value, what):
    if value not in table:
        raise ValueError(f"{what} must be one of {sorted(table)}, not {value!r}")
    return table[value]


def pixel_mask(images, targets):
    """DETR's padding mask of a batch: bool [B, H, W], True where a pixel is padding
    (outside the sample's content, targets[i]["size"] = (h, w))."""
    b, h, w = images.shape[0], images.shape[-2], images.shape[-1]
    if hasattr(images, "new_ones"):  # torch
        import torch
        mask = torch.ones((b, h, w), dtype=torch.bool, device=images.device)
    else:
        import numpy
        mask = numpy.ones((b, h, w), dtype=bool)
    for i, target in enumerate(targets):
        ch, cw = (int(v) for v in target["size"])
        mask[i, :ch, :cw] = False
    return mask


class Loader:
    """COCO detection batches, ready for a DETR/RF-DETR training step.

    Iterating yields (images, targets) for one epoch: images a [B, 3, R, R] tensor,
    targets a list of B dicts (boxes, labels, masks, area, iscrowd, image_id,
    orig_size, size). With a training recipe (augment="rfdetr-square" or "rfdetr":
    RF-DETR's flips, multi-scale and crops, drawn per sample from seed, epoch and
    index), samples have their own sizes: images [B, 3, Hmax, Wmax] zero-padded at the
    bottom and right, targets[i]["size"] the content's (h, w), masks [N, h, w], and
    targets[i]["augment"] the sample's record. The next iteration continues where the
    loader stands: the rest of the epoch, or the next epoch (reshuffled from seed +
    epoch). docs/python.md.
    """

    def __init__(self, annotations, images, batch_size=8, workers=0, resolution=312,
                 device="cpu", seed=0, shuffle=True, drop_last=False, rank=None,
                 world_size=None, on_error="fail", layout="f32", prefetch=None, *,
                 box_format="cxcywh", keep_crowd=False, remap_categories=False,
                 fields=None, tensor_type=None, max_pinned_bytes=None, decode="cpu",
                 augment="none", multi_scale="off", expanded_scales=False, patch_size=16,
                 num_windows=4, scale_jitter=True, hflip=0.5, max_size=1333,
                 size_divisibility=1, load_images=True, max_instances=None, order="auto",
                 shuffle_buffer=None):
        self._loader = None
        self.batch_size, self.resolution, self.device = batch_size, resolution, str(device)
        self._convert = converter(tensor_type)
        image_layout, normalize = _choice(LAYOUTS, layout, "layout")
        self._channels_last = layout == "uint8"  # ferry's u8 images are [h, w, 3]
        if normalize == _capi.NORMALIZE_BF16 and self._convert.name == "numpy":
            raise ValueError("layout='bf16' needs torch tensors (numpy has no bfloat16)")
        if not isinstance(size_divisibility, int) or size_divisibility < 1:
            raise ValueError(f"size_divisibility must be an integer >= 1, not {size_divisibility!r}")
        self.size_divisibility, self._images = size_divisibility, bool(load_images)
        recipe = _parse(lib.ferry_augment_parse, augment, "augment")
        wanted = list(fields) if fields is not None else \
            list(DEFAULT_FIELDS) + (["augment"] if recipe != 0 else [])
        unknown = sorted(set(wanted) - {key for key, _ in TARGET_FIELDS})
        if unknown:
            raise ValueError(f"unknown target fields {unknown}")
        self._fields = [(key, key.encode()) for key, _ in TARGET_FIELDS if key in wanted]
        self._device = _open_device(device)
        self._cuda = lib.ferry_device_get_kind(self._device) == _capi.DEVICE_CUDA
        if self._cuda:
            if self._convert.name != "torch":
                raise ValueError("CUDA tensors need torch (numpy arrays live on the CPU)")
            self._torch_device = self._convert.torch.device(_ferry_device_name(device))

        rank, world_size = _distributed_default(rank, world_size)
        config = _capi.LoaderConfig()
        lib.ferry_loader_config_init(byref(config), ctypes.sizeof(config))
        # ctypes keeps no reference to the bytes a c_char_p field points at
        self._paths = (os.fsencode(annotations), os.fsencode(images))
        config.annotations, config.images = self._paths
        config.batch_size, config.workers = batch_size, workers
        config.prefetch = prefetch or 0
        config.shuffle, config.seed, config.drop_last = int(bool(shuffle)), seed, int(bool(drop_last))
        config.rank, config.world_size = rank, world_size
        config.resolution = resolution
        config.fields = sum(bit for key, bit in TARGET_FIELDS if key in wanted)
        if not self._images:
            config.fields |= _capi.FIELD_NO_IMAGES
        a = config.augment
        a.recipe = recipe
        a.multi_scale = _parse(lib.ferry_multi_scale_parse, multi_scale, "multi_scale")
        a.expanded_scales, a.scale_jitter = int(bool(expanded_scales)), int(bool(scale_jitter))
        a.patch_size, a.num_windows, a.hflip, a.max_size = patch_size, num_windows, hflip, max_size
        config.box_format = _choice(BOX_FORMATS, box_format, "box_format")
        config.keep_crowd, config.remap_categories = int(bool(keep_crowd)), int(bool(remap_categories))
        config.on_error = _choice(ON_ERROR, on_error, "on_error")
        config.layout = image_layout
        config.device = self._device
        if max_pinned_bytes is not None:
            config.max_pinned_bytes = max_pinned_bytes
        if max_instances is not None:
            config.max_instances = max_instances
        config.order = _choice(ORDERS, order, "order")
        config.shuffle_buffer = shuffle_buffer or 0
        decode_mode = c_int()
        check(lib.ferry_decode_mode_parse(str(decode).encode(), byref(decode_mode)), "decode")
        config.image.decode = decode_mode.value
        # Images of different sizes come as one batch tensor padded by the transfer's
        # own copies (DETR's NestedTensor), rounded up to size_divisibility.
        self._transfer = _capi.TransferOptions(normalize=normalize, pad_multiple=self.size_divisibility)

        loader = c_void_p()
        check(lib.ferry_loader_open(byref(config), byref(loader)))
        self._loader = loader
        self._state = _capi.LoaderState()
        check(lib.ferry_loader_state_get(self._loader, byref(self._state)))

    # ---- iteration -------------------------------------------------------------------

    def __iter__(self):
        while True:
            landed = self._next()
            if landed is None:
                return
            yield landed
            del landed  # not held across the next batch's transfer (device peak)

    def __len__(self):
        """Batches per epoch on this rank (nominal: before any skipped sample)."""
        return int(lib.ferry_loader_batches_per_epoch(self._open()))

    def _open(self):
        if self._loader is None:
            raise ValueError("the loader is closed")
        return self._loader

    def _next(self):
        """The next batch of the epoch as (images, targets), or None at its end."""
        loader = self._open()
        batch = c_void_p()
        status = lib.ferry_loader_next(loader, byref(batch))
        if status == _capi.EEND:
            return None
        check(status)
        lib.ferry_loader_state_get(loader, byref(self._state))
        if self._cuda:
            torch = self._convert.torch
            # ferry's CUDA calls set this thread's current device: keep torch's as it was
            with torch.cuda.device(self._torch_device):
                return self._transfer_after_torch(batch)
        return self._transfer_and_hand_over(batch)

    def _transfer_after_torch(self, batch):
        """Before ferry allocates and copies on its own CUDA stream, let the work queued
        on torch's current stream finish: tensors the training loop dropped are freed on
        ferry's stream, and their memory must not be reused by this transfer while a
        queued kernel may still read it (docs/python.md, CUDA streams)."""
        try:
            self._convert.torch.cuda.current_stream(self._torch_device).synchronize()
        except BaseException:
            lib.ferry_batch_release(batch)
            raise
        return self._transfer_and_hand_over(batch)

    def _transfer_and_hand_over(self, batch):
        """Ferry the packed batch to the device (releasing it), then hand it over."""
        landed = c_void_p()
        status = lib.ferry_transfer(self._device, None, batch, byref(self._transfer), byref(landed))
        lib.ferry_batch_release(batch)  # at once: the arena waits for the copies itself
        check(status)
        try:
            # The copies must have landed before any consumer reads the tensors: DLPack
            # 0.6 carries no stream (docs/pytorch.md, rule 1).
            check(lib.ferry_device_batch_wait(landed))
            return self._hand_over(landed)
        finally:
            lib.ferry_device_batch_free(landed)  # frees only what was not handed over

    def _hand_over(self, landed):
        """Every tensor of the device batch, taken out and converted: (images, targets)."""
        convert = self._convert
        tensor = convert.exporter.tensor_ref
        take = lib.ferry_device_batch_take
        n = lib.ferry_device_batch_size(landed)
        images = None
        if self._images:
            # one tensor, padded by the transfer when the sizes differ (pad_multiple)
            check(lib.ferry_device_batch_take_images(landed, tensor), "the images")
            images = self._channels_first(convert(), 1)
        targets = []
        for i in range(n):
            sample = {}
            for key, name in self._fields:
                status = take(landed, i, name, tensor)
                if status != _capi.OK:
                    check(status, f"sample {i}, field {key}")
                sample[key] = convert()
            targets.append(sample)
        return images, targets

    def _channels_first(self, images, batch_dims):
        """[..., h, w, 3] as [..., 3, h, w] (a view) for the uint8 layout."""
        if not self._channels_last:
            return images
        order = tuple(range(batch_dims)) + (batch_dims + 2, batch_dims, batch_dims + 1)
        if self._convert.name == "torch":
            return images.permute(*order)
        return images.transpose(order)

    # ---- epochs, resume, statistics ----------------------------------------------------

    def set_epoch(self, epoch):
        """Drop what is in flight and start `epoch` from its first batch (as
        DistributedSampler.set_epoch)."""
        check(lib.ferry_loader_set_epoch(self._open(), epoch))
        check(lib.ferry_loader_state_get(self._loader, byref(self._state)))

    def state_dict(self):
        """Where the loader stands, as of the last batch it yielded: save it with the
        model after training on that batch; load_state_dict on a new Loader (same data
        and options) continues with the batch after it."""
        return _struct_dict(self._state)

    def load_state_dict(self, state):
        wanted = _capi.LoaderState(**{name: state[name] for name, _ in _capi.LoaderState._fields_})
        check(lib.ferry_loader_state_set(self._open(), byref(wanted)))
        self._state = wanted

    def stats(self):
        """Counters since open (samples decoded and skipped, batches, re-plans), the
        worker count, the pinned pool's use, and the device's memory accounting."""
        stats = _capi.LoaderStats()
        check(lib.ferry_loader_stats_get(self._open(), byref(stats)))
        out = _struct_dict(stats)
        out["decoder"] = lib.ferry_decode_mode_name(stats.decoder).decode()
        memory = _capi.MemoryStats()
        check(lib.ferry_device_memory_stats(self._device, byref(memory)))
        out["device_memory"] = _struct_dict(memory)
        return out

    # ---- lifetime ----------------------------------------------------------------------

    def close(self):
        """Stop the workers and free the arenas. Tensors already yielded stay valid."""
        if self._loader is not None:
            lib.ferry_loader_close(self._loader)
            self._loader = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def __repr__(self):
        state = "closed" if self._loader is None else f"epoch {self._state.epoch}"
        return (f"ferry.Loader(batch_size={self.batch_size}, resolution={self.resolution}, "
                f"device={self.device!r}, {state})")
