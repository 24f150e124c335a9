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
    the device batch: nothing is left behind, whatever raises, a KeyboardInterrupt
    included (the C calls write into ctypes objects a try block already covers);
  - every call into the C loader is counted in `_inside` while it runs, and the C loader
    is closed only once none is: a close from a signal handler or another thread during
    a step lets the step finish (another thread's close waits for it), and at most one
    step runs at a time, on any thread (they share the conversion scratch);
  - a wait for a batch lasts at most WAIT_SLICE_MS before Python looks at its signals
    (Ctrl-C) and at a close again;
  - in a child of os.fork(), an inherited Loader refuses every call and close only
    forgets it: its threads are in the parent (the C loader refuses the same);
  - devices are opened once per process and never closed, because tensors handed out
    may outlive every Loader and their deleters free through the device.
"""
import contextlib
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
# how labels are made of category ids (include/ferry/coco.h, ferry_category_labels)
CATEGORIES = {"raw": _capi.CATEGORIES_RAW, "remap": _capi.CATEGORIES_REMAP,
              "rfdetr": _capi.CATEGORIES_RFDETR}
ON_ERROR = {"fail": _capi.ON_ERROR_FAIL, "skip": _capi.ON_ERROR_SKIP}
ORDERS = {"auto": _capi.ORDER_AUTO, "dataset": _capi.ORDER_DATASET, "shards": _capi.ORDER_SHARDS}
# layout -> (what the workers write, what the transfer makes of it)
LAYOUTS = {"f32": (_capi.LAYOUT_F32_CHW, _capi.NORMALIZE_NONE),
           "u8": (_capi.LAYOUT_U8_HWC, _capi.NORMALIZE_F32),
           "bf16": (_capi.LAYOUT_U8_HWC, _capi.NORMALIZE_BF16),
           # the pixels as they are, [B, 3, H, W] uint8 (a channel-first view of ferry's
           # [h, w, 3]): RF-DETR's gpu_postprocess normalises on the GPU itself
           "uint8": (_capi.LAYOUT_U8_HWC, _capi.NORMALIZE_NONE)}

# How long one wait for a batch lasts before Python runs its signal handlers (Ctrl-C)
# and looks for a close from another thread; then it waits again.
WAIT_SLICE_MS = 50

# What code written for torch.utils.data.DataLoader passes, refused with what to use.
DATALOADER_OPTIONS = {
    "num_workers": "ferry decodes in its own threads: pass workers=N. Mind the zero: workers=0 "
                   "(the default) is one thread per core, where num_workers=0 loads in the main process",
    "pin_memory": "ferry stages every batch in pinned memory itself and copies it to `device`: "
                  "pass device='cuda' for tensors on the GPU, device='cpu' for CPU tensors",
    "prefetch_factor": "pass prefetch=N, the batches filled ahead (None: sized from the workers)",
    "persistent_workers": "ferry's threads live as long as the Loader (close() stops them): leave it out",
    "collate_fn": "batches come collated, DETR's (images, targets): leave it out",
    "sampler": "the order is ferry's: shuffle, seed, rank/world_size and set_epoch",
}


def _refuse_dataloader_options(options):
    for key in options:
        if key in DATALOADER_OPTIONS:
            raise TypeError(f"ferry.Loader has no {key} (a DataLoader option): {DATALOADER_OPTIONS[key]}")
        raise TypeError(f"ferry.Loader got an unexpected keyword argument {key!r}")


_devices = {}
_devices_lock = threading.Lock()


def _forget_parent_devices():
    """In a fork child: the parent's devices have their stream threads in the parent,
    so the child opens its own (and the lock may have been held by a parent's thread)."""
    global _devices_lock
    _devices_lock = threading.Lock()
    _devices.clear()


os.register_at_fork(after_in_child=_forget_parent_devices)


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
    stats = _capi.sized(_capi.MemoryStats)
    check(lib.ferry_device_memory_stats(handle, byref(stats)))
    return _struct_dict(stats)


def _struct_dict(struct):
    """A mirror's fields as a dict, nested structs and arrays included. struct_size is left
    out: it is the C ABI's bookkeeping (how far the library wrote), not a figure, and the
    dicts keep the keys they had before the stats structs had it."""
    out = {}
    for name, _ in struct._fields_:
        if name == "struct_size":
            continue
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


def _labels_policy(categories, remap_categories):
    """config.remap_categories from categories= ("raw", "remap", "rfdetr"), or from the
    older remap_categories=True ("remap"); both given must agree."""
    if categories is None:
        return _capi.CATEGORIES_REMAP if remap_categories else _capi.CATEGORIES_RAW
    policy = _choice(CATEGORIES, categories, "categories")
    if remap_categories and policy != _capi.CATEGORIES_REMAP:
        raise ValueError(f"remap_categories=True is categories='remap', not {categories!r}: pass one of them")
    return policy


def _draft_size(value):
    """config.image.draft_size: None (full size), a positive size, or "rfdetr"."""
    if value is None:
        return 0
    if value == "rfdetr":
        return _capi.DRAFT_SIZE_RFDETR
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"draft_size must be None, a positive integer or 'rfdetr', not {value!r}")
    return value


def _choice(table, value, what):
    if value not in table:
        raise ValueError(f"{what} must be one of {sorted(table)}, not {value!r}")
    return table[value]


# The remote keywords whose 0 is a setting of its own (none): C's -1 (ferry/source.h,
# where 0 is the default).
_ZERO_IS_NONE = ("retries", "backoff_ms", "cache_bytes", "room_wait_ms")


def _remote_options(options, **values):
    """The remote_* keywords into a ferry_source_options: None stays the default (0)."""
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (value == 0 and name not in _ZERO_IS_NONE):
            least = 0 if name in _ZERO_IS_NONE else 1
            raise ValueError(f"remote_{name} must be an integer >= {least} (or None for the default), not {value!r}")
        setattr(options, name, -1 if value == 0 else value)


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

    Labels: categories="raw" (the default: category ids, RF-DETR's `coco` layout),
    "remap" (0..C-1 in the file's order; remap_categories=True says the same) or "rfdetr"
    (RF-DETR's rule for a Roboflow export: unannotated grouping categories take no label,
    the rest 0..C-1 by id), with categories_from naming the train split's annotations for
    the valid and test splits. draft_size="rfdetr" (or a size) decodes large JPEGs at
    RF-DETR's reduced DCT scale, boxes, areas and orig_size moved with them. images may
    be None when annotations is a shard spec (the shards hold the images). ferry.rfdetr
    sets all of these from RF-DETR's own configs.

    Shards at a URL: remote_retries, remote_backoff_ms, remote_stall_s,
    remote_connect_timeout_ms, remote_block_bytes, remote_cache_bytes and
    remote_room_wait_ms tune the client and the shared blocks (include/ferry/source.h;
    None: the default, 0 where it means none: no retry, no backoff, no blocks, no
    wait). The FERRY_REMOTE_* environment variables, when set, override them.

    Not DataLoader's options: workers=0 (the default) is one decoding thread per core,
    not torch's num_workers=0 (no worker); num_workers and pin_memory are refused with
    what to use. box_format is "cxcywh" (DETR's), where the C library's default is
    xyxy. One iteration step runs at a time (another thread's is refused); close() may
    come from a signal handler or another thread (docs/python.md, "Threads, signals,
    fork").
    """

    _loader = None    # the C handle while open; taken out atomically by _take_handle
    _closing = False
    _close_waiters = 0  # close() calls waiting for the calls inside to return

    def __init__(self, annotations, images=None, batch_size=8, workers=0, resolution=312,
                 device="cpu", seed=0, shuffle=True, drop_last=False, rank=None,
                 world_size=None, on_error="fail", layout="f32", prefetch=None, *,
                 box_format="cxcywh", keep_crowd=False, remap_categories=False,
                 categories=None, categories_from=None, draft_size=None,
                 fields=None, tensor_type=None, max_pinned_bytes=None, decode="cpu",
                 augment="none", multi_scale="off", expanded_scales=False, patch_size=16,
                 num_windows=4, scale_jitter=True, hflip=0.5, max_size=1333,
                 size_divisibility=1, load_images=True, max_instances=None, order="auto",
                 shuffle_buffer=None, remote_retries=None, remote_backoff_ms=None,
                 remote_stall_s=None, remote_connect_timeout_ms=None, remote_block_bytes=None,
                 remote_cache_bytes=None, remote_room_wait_ms=None, **dataloader_options):
        _refuse_dataloader_options(dataloader_options)
        self._guard = threading.Condition(threading.RLock())  # reentrant: signal handlers
        self._inside = {}   # thread ident -> calls of that thread into the C loader
        self._stepper = None  # the thread running an iteration step
        self._pid = os.getpid()
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
        self._paths = tuple(None if p is None else os.fsencode(p) for p in (annotations, images, categories_from))
        config.annotations, config.images, config.categories_from = self._paths
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
        config.keep_crowd = int(bool(keep_crowd))
        config.remap_categories = _labels_policy(categories, remap_categories)
        if categories_from is not None and config.remap_categories != _capi.CATEGORIES_RFDETR:
            raise ValueError("categories_from takes RF-DETR's labels from another split (its train split's): "
                             f"it needs categories='rfdetr', not {categories!r}")
        config.image.draft_size = _draft_size(draft_size)
        config.on_error = _choice(ON_ERROR, on_error, "on_error")
        config.layout = image_layout
        config.device = self._device
        if max_pinned_bytes is not None:
            config.max_pinned_bytes = max_pinned_bytes
        if max_instances is not None:
            config.max_instances = max_instances
        config.order = _choice(ORDERS, order, "order")
        config.shuffle_buffer = shuffle_buffer or 0
        _remote_options(config.source, retries=remote_retries, backoff_ms=remote_backoff_ms,
                        stall_s=remote_stall_s, connect_timeout_ms=remote_connect_timeout_ms,
                        block_bytes=remote_block_bytes, cache_bytes=remote_cache_bytes,
                        room_wait_ms=remote_room_wait_ms)
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
        with self._call() as loader:
            return int(lib.ferry_loader_batches_per_epoch(loader))

    # ---- calls into the C loader: who is inside, close, fork ---------------------------

    def _refuse_in_fork_child(self):
        """Checked before the guard is taken: a thread of the parent may have held it."""
        if os.getpid() != self._pid:
            raise _capi.FerryError(_capi.EUNSUPPORTED, (
                f"this Loader was opened in process {self._pid} before os.fork(): its threads are "
                "there, not in this child; open a new Loader in the child"))

    def _enter(self, step=False):
        """The C handle, for a call of this thread, counted in `_inside` until _leave.
        Refused in a fork child (FerryError), once closed or closing (ValueError), and
        for a step while another runs (RuntimeError). A signal handler may run between
        any two lines here: the count is stored before `_closing` is read, so a close
        in between either sees the call or is seen by it."""
        self._refuse_in_fork_child()
        me = threading.get_ident()
        with self._guard:
            self._inside[me] = self._inside.get(me, 0) + 1
            try:
                if self._loader is None or self._closing:
                    raise ValueError("the loader is closed")
                if step and self._stepper is not None:
                    raise RuntimeError(
                        "another iteration of this Loader is running (on another thread, or "
                        "interrupted by a handler on this one): a Loader yields one batch at a "
                        "time; give each thread its own Loader (with rank/world_size to split the data)")
            except BaseException:
                self._leave()
                raise
            if step:
                self._stepper = me
            return self._loader

    def _leave(self, step=False):
        """Count the call out; the last one out of a closing Loader closes it."""
        me = threading.get_ident()
        with self._guard:
            if step:
                self._stepper = None
            self._inside[me] -= 1  # never absent meanwhile: a handler sees the call or 0
            if not self._inside[me]:
                del self._inside[me]
            # a close() waiting on another thread closes; else (a handler's) this call does
            handle = None if self._close_waiters else self._take_handle()
            self._guard.notify_all()
        self._close_handle(handle)

    @contextlib.contextmanager
    def _call(self):
        loader = self._enter()
        try:
            yield loader
        finally:
            self._leave()

    def _take_handle(self):
        """Under the guard: the C handle, taken out once closing and no call is inside (one
        dict operation, which a signal handler cannot split); else None."""
        if not self._closing or any(self._inside.values()):
            return None
        return self.__dict__.pop("_loader", None)

    @staticmethod
    def _close_handle(handle):
        """Outside the guard: the C close may wait for the device's copies, and other
        threads meanwhile learn at once that the Loader is closed."""
        if handle is not None:
            lib.ferry_loader_close(handle)

    # ---- one step ------------------------------------------------------------------------

    def _next(self):
        """The next batch of the epoch as (images, targets), or None at its end."""
        loader = self._enter(step=True)
        try:
            return self._step(loader)
        finally:
            self._leave(step=True)

    def _step(self, loader):
        """Take, transfer, hand over. The packed batch and the device batch are written by
        the C calls into ctypes objects that a try block covers before the call is made,
        so an interrupt anywhere (KeyboardInterrupt) leaves neither behind."""
        batch, landed = c_void_p(), c_void_p()
        try:
            try:
                if not self._take(loader, batch):
                    return None
                status = self._queue_transfer(batch, landed)
            finally:
                if batch:  # at once: the arena waits for the copies itself
                    lib.ferry_batch_release(batch)
            check(status)
            # The copies must have landed before any consumer reads the tensors: DLPack
            # 0.6 carries no stream (docs/pytorch.md, rule 1).
            check(lib.ferry_device_batch_wait(landed))
            return self._hand_over(landed)
        finally:
            if landed:
                lib.ferry_device_batch_free(landed)  # frees only what was not handed over
            self._convert.exporter.reclaim()

    def _take(self, loader, batch):
        """Wait for the next packed batch, in slices of WAIT_SLICE_MS: between two, Python
        runs its signal handlers (the wait also ends when one ran on this thread) and this
        step gives up if the Loader is being closed. False at the epoch's end."""
        status = lib.ferry_loader_next_timed(loader, byref(batch), WAIT_SLICE_MS)
        while status == _capi.EAGAIN:
            if self._closing:
                raise ValueError("the loader was closed while waiting for a batch")
            status = lib.ferry_loader_next_timed(loader, byref(batch), WAIT_SLICE_MS)
        if status == _capi.EEND:
            return False
        check(status)
        check(lib.ferry_loader_state_get(loader, byref(self._state)))
        return True

    def _queue_transfer(self, batch, landed):
        """ferry_transfer of the packed batch; its status. On CUDA, before ferry allocates
        and copies on its own stream, the work queued on torch's current stream finishes:
        tensors the training loop dropped are freed on ferry's stream, and their memory
        must not be reused by this transfer while a queued kernel may still read it
        (docs/python.md, CUDA streams)."""
        if not self._cuda:
            return lib.ferry_transfer(self._device, None, batch, byref(self._transfer), byref(landed))
        torch = self._convert.torch
        # ferry's CUDA calls set this thread's current device: keep torch's as it was
        with torch.cuda.device(self._torch_device):
            torch.cuda.current_stream(self._torch_device).synchronize()
            return lib.ferry_transfer(self._device, None, batch, byref(self._transfer), byref(landed))

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
        DistributedSampler.set_epoch). At the epoch the loader already stands at the
        start of (just opened, or the previous epoch run to its end: the recommended
        loop), nothing prefetched is dropped."""
        with self._call() as loader:
            check(lib.ferry_loader_set_epoch(loader, epoch))
            check(lib.ferry_loader_state_get(loader, byref(self._state)))

    def state_dict(self):
        """Where the loader stands, as of the last batch it yielded: save it with the
        model after training on that batch; load_state_dict on a new Loader (same data
        and options) continues with the batch after it."""
        return _struct_dict(self._state)

    def load_state_dict(self, state):
        wanted = _capi.LoaderState(**{name: state[name] for name, _ in _capi.LoaderState._fields_})
        with self._call() as loader:
            check(lib.ferry_loader_state_set(loader, byref(wanted)))
        self._state = wanted

    def stats(self):
        """Counters since open (samples decoded and skipped, batches, re-plans), the
        worker count, the pinned pool's use, and the device's memory accounting."""
        stats = _capi.sized(_capi.LoaderStats)
        with self._call() as loader:
            check(lib.ferry_loader_stats_get(loader, byref(stats)))
        out = _struct_dict(stats)
        out["decoder"] = lib.ferry_decode_mode_name(stats.decoder).decode()
        memory = _capi.sized(_capi.MemoryStats)
        check(lib.ferry_device_memory_stats(self._device, byref(memory)))
        out["device_memory"] = _struct_dict(memory)
        return out

    # ---- lifetime ----------------------------------------------------------------------

    def close(self):
        """Stop the workers and free the arenas. Tensors already yielded stay valid.

        Safe from a signal handler (SIGTERM) and from another thread while a step runs:
        the step finishes (a batch already taken is handed over), the loader closes as it
        returns, and the next step raises ValueError. Another thread's close() waits for
        that (a wait for a batch gives up within WAIT_SLICE_MS). In a fork child, close()
        only forgets the Loader: its threads and memory are the parent's."""
        if self._loader is None:
            return
        if os.getpid() != self._pid:
            self.__dict__.pop("_loader", None)
            return
        me = threading.get_ident()
        with self._guard:
            self._closing = True
            if self._inside.get(me):
                return  # a handler inside this thread's own call: the call closes on its way out
            self._close_waiters += 1
            try:
                while any(self._inside.values()):
                    self._guard.wait()
            finally:
                self._close_waiters -= 1
            handle = self._take_handle()
        self._close_handle(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit the modules close() uses may be gone
            pass

    def __repr__(self):
        state = "closed" if self._loader is None else f"epoch {self._state.epoch}"
        return (f"ferry.Loader(batch_size={self.batch_size}, resolution={self.resolution}, "
                f"device={self.device!r}, {state})")
