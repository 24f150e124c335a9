"""ctypes bindings for the parts of libferry the Python package uses.

The structs below mirror include/ferry/*.h field for field; python/tests/test_loader.py
(test_ctypes_mirrors_match_the_headers) compares every size and offset with what the C compiler gives for the headers, so a
header change that is not mirrored here fails the tests instead of corrupting memory.
libferry.so is the copy installed inside this package (pip install .), or the one
named by $FERRY_LIB (a build tree, for development).
"""
import ctypes
import os
from ctypes import (POINTER, Structure, byref, c_char_p, c_int, c_int32, c_int64, c_size_t,
                    c_uint, c_uint8, c_uint16, c_uint64, c_void_p)

# ---- status codes and enums (include/ferry/error.h, loader.h, transfer.h) ------------
OK = 0
EUNSUPPORTED = -7
ENOTFOUND = -9
ECANCELED = -10
EAGAIN = -11
EEND = -12

FIELD_BOXES, FIELD_LABELS, FIELD_MASKS = 1 << 0, 1 << 1, 1 << 2
FIELD_AREA, FIELD_ISCROWD, FIELD_IMAGE_ID = 1 << 3, 1 << 4, 1 << 5
FIELD_ORIG_SIZE, FIELD_SIZE = 1 << 6, 1 << 7
FIELD_AUGMENT, FIELD_NO_IMAGES = 1 << 9, 1 << 15
FIELDS_DEFAULT = 0xFF
AUGMENT_RECORD_LEN = 10  # FERRY_AUGMENT_RECORD_LEN, include/ferry/image.h

BOXES_XYXY, BOXES_CXCYWH_NORM = 0, 1
CATEGORIES_RAW, CATEGORIES_REMAP, CATEGORIES_RFDETR = 0, 1, 2  # ferry_category_labels, coco.h
DRAFT_SIZE_RFDETR = -1  # FERRY_DRAFT_SIZE_RFDETR, include/ferry/image.h
ON_ERROR_FAIL, ON_ERROR_SKIP = 0, 1
ORDER_AUTO, ORDER_DATASET, ORDER_SHARDS = 0, 1, 2
LAYOUT_F32_CHW, LAYOUT_U8_HWC = 0, 1
NORMALIZE_NONE, NORMALIZE_F32, NORMALIZE_BF16 = 0, 1, 2
DEVICE_HOST, DEVICE_CUDA = 0, 1

# ferry_dtype -> (name, bytes per element)
DTYPES = {0: ("uint8", 1), 1: ("bool", 1), 2: ("int32", 4), 3: ("int64", 8),
          4: ("float16", 2), 5: ("bfloat16", 2), 6: ("float32", 4)}
DTYPE_BOOL = 1

# ---- structs ----------------------------------------------------------------------


class Tensor(Structure):  # ferry_tensor, include/ferry/tensor.h
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("ndim", c_int), ("shape", c_int64 * 4),
                ("nbytes", c_size_t), ("device", c_void_p), ("stream", c_void_p), ("owned", c_int)]


class ImageOptions(Structure):  # ferry_image_options, include/ferry/image.h
    _fields_ = [("dct_scaling", c_int), ("apply_exif", c_int), ("max_pixels", c_uint64),
                ("decode", c_int), ("draft_size", c_int), ("reserved", ctypes.c_uint32 * 6)]


class AugmentOptions(Structure):  # ferry_augment_options, include/ferry/image.h
    _fields_ = [("recipe", c_int), ("multi_scale", c_int), ("expanded_scales", c_int),
                ("patch_size", c_int), ("num_windows", c_int), ("scale_jitter", c_int),
                ("hflip", ctypes.c_float), ("max_size", c_int), ("crop_min", c_int),
                ("crop_max", c_int), ("resize_b", c_int * 3), ("reserved", ctypes.c_uint32 * 8)]


class SourceOptions(Structure):  # ferry_source_options, include/ferry/source.h
    _fields_ = [("retries", c_int), ("backoff_ms", c_int), ("stall_s", c_int),
                ("connect_timeout_ms", c_int), ("block_bytes", c_int64), ("cache_bytes", c_int64),
                ("room_wait_ms", c_int)]


class LoaderConfig(Structure):  # ferry_loader_config, include/ferry/loader.h
    _fields_ = [("struct_size", c_size_t), ("annotations", c_char_p), ("images", c_char_p),
                ("batch_size", c_size_t), ("workers", c_size_t), ("prefetch", c_size_t),
                ("max_outstanding", c_size_t), ("shuffle", c_int), ("seed", c_uint64),
                ("drop_last", c_int), ("rank", c_int), ("world_size", c_int),
                ("resolution", c_int), ("fields", c_uint), ("box_format", c_int),
                ("keep_crowd", c_int), ("remap_categories", c_int), ("on_error", c_int),
                ("layout", c_int), ("allow_escaping_paths", c_int), ("image", ImageOptions),
                ("device", c_void_p), ("progress", c_void_p), ("progress_user", c_void_p),
                ("max_pinned_bytes", c_size_t), ("augment", AugmentOptions),
                ("max_instances", c_size_t), ("order", c_int), ("shuffle_buffer", c_size_t),
                ("categories_from", c_char_p), ("source", SourceOptions)]


class LoaderState(Structure):  # ferry_loader_state, include/ferry/loader.h
    _fields_ = [("epoch", c_int64), ("batches_delivered", c_uint64), ("cursor", c_uint64),
                ("seed", c_uint64)]


# The stats structs grow: struct_size first, set with sized() (include/ferry/device.h,
# above ferry_memory_stats, says how the library honours it).
class PoolStats(Structure):  # ferry_pool_stats, include/ferry/device.h
    _fields_ = [("struct_size", c_size_t), ("arenas", c_size_t), ("in_use", c_size_t),
                ("pending", c_size_t), ("acquisitions", c_uint64), ("growths", c_uint64),
                ("reserved_bytes", c_uint64), ("peak_reserved_bytes", c_uint64),
                ("in_use_bytes", c_uint64), ("peak_in_use_bytes", c_uint64)]


class LoaderStats(Structure):  # ferry_loader_stats, include/ferry/loader.h
    _fields_ = [("struct_size", c_size_t), ("samples_decoded", c_uint64),
                ("samples_skipped", c_uint64), ("batches_delivered", c_uint64),
                ("replans", c_uint64), ("workers", c_size_t), ("arenas", c_size_t), ("rank", c_int), ("world_size", c_int), ("pool", PoolStats),
                ("prefetch", c_size_t), ("coordinator_cpu_ns", c_uint64),
                ("coordinator_idle_cpu_ns", c_uint64), ("consumer_idle_cpu_ns", c_uint64),
                ("peak_busy_workers", c_size_t), ("decoder", c_int),
                ("samples_gpu_decode", c_uint64),
                ("samples_cpu_fallback", c_uint64 * 8),  # FERRY_LOADER_FALLBACK_SLOTS
                ("batches_dropped", c_uint64)]


class MemoryStats(Structure):  # ferry_memory_stats, include/ferry/device.h
    _fields_ = [("struct_size", c_size_t), ("live_bytes", c_uint64), ("peak_bytes", c_uint64),
                ("allocations", c_uint64), ("live_allocations", c_uint64),
                ("pinned_live_bytes", c_uint64), ("pinned_peak_bytes", c_uint64),
                ("pool_witness", c_int),
                ("pool_used_high", c_uint64), ("initializations", c_uint64)]


def sized(cls):
    """A stats mirror to pass to its getter: struct_size set to this mirror's size, as the
    header's init macro (ferry_loader_stats_init, ...) sets it to the header's."""
    return cls(struct_size=ctypes.sizeof(cls))


class TransferOptions(Structure):  # ferry_transfer_options, include/ferry/transfer.h
    _fields_ = [("image_field", c_char_p), ("normalize", c_int),
                ("mean", ctypes.c_float * 3), ("std", ctypes.c_float * 3), ("hooks", c_void_p),
                ("nhooks", c_size_t), ("pad_multiple", c_size_t)]


class DLDevice(Structure):  # DLDevice, <dlpack/dlpack.h> 0.6
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):  # DLDataType
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):  # DLTensor
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):  # DLManagedTensor
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


# C type name of each mirror, for the layout test (and the headers declaring them).
MIRRORS = {Tensor: "ferry_tensor", ImageOptions: "ferry_image_options",
           AugmentOptions: "ferry_augment_options", SourceOptions: "ferry_source_options",
           LoaderConfig: "ferry_loader_config", LoaderState: "ferry_loader_state",
           PoolStats: "ferry_pool_stats", LoaderStats: "ferry_loader_stats",
           MemoryStats: "ferry_memory_stats", TransferOptions: "ferry_transfer_options",
           DLDevice: "DLDevice", DLDataType: "DLDataType", DLTensor: "DLTensor",
           DLManagedTensor: "DLManagedTensor"}
MIRROR_HEADERS = ["ferry/ferry.h", "ferry/dlpack.h"]

# ---- the library --------------------------------------------------------------------


def library_path():
    """$FERRY_LIB, else the libferry.so installed next to this file."""
    return os.environ.get("FERRY_LIB") or os.path.join(os.path.dirname(__file__), "libferry.so")


lib = ctypes.CDLL(library_path())
handle = POINTER(c_void_p)

_SIGNATURES = {
    "ferry_last_error": (c_char_p,),
    "ferry_strerror": (c_char_p, c_int),
    "ferry_decode_mode_parse": (c_int, c_char_p, POINTER(c_int)),
    "ferry_decode_mode_name": (c_char_p, c_int),
    "ferry_augment_parse": (c_int, c_char_p, POINTER(c_int)),
    "ferry_multi_scale_parse": (c_int, c_char_p, POINTER(c_int)),
    "ferry_device_open": (c_int, c_char_p, handle),
    "ferry_device_close": (None, c_void_p),
    "ferry_device_get_kind": (c_int, c_void_p),
    "ferry_device_synchronize": (c_int, c_void_p),
    "ferry_device_memory_stats": (c_int, c_void_p, POINTER(MemoryStats)),
    "ferry_loader_config_init": (None, POINTER(LoaderConfig), c_size_t),
    "ferry_loader_open": (c_int, POINTER(LoaderConfig), handle),
    "ferry_loader_next": (c_int, c_void_p, handle),
    "ferry_loader_next_timed": (c_int, c_void_p, handle, c_int),
    "ferry_loader_set_epoch": (c_int, c_void_p, c_int64),
    "ferry_loader_state_get": (c_int, c_void_p, POINTER(LoaderState)),
    "ferry_loader_state_set": (c_int, c_void_p, POINTER(LoaderState)),
    "ferry_loader_stats_get": (c_int, c_void_p, POINTER(LoaderStats)),
    "ferry_loader_batches_per_epoch": (c_uint64, c_void_p),
    "ferry_loader_samples_per_epoch": (c_uint64, c_void_p),
    "ferry_loader_close": (None, c_void_p),
    "ferry_batch_release": (None, c_void_p),
    "ferry_transfer": (c_int, c_void_p, c_void_p, c_void_p, POINTER(TransferOptions), handle),
    "ferry_device_batch_wait": (c_int, c_void_p),
    "ferry_device_batch_size": (c_size_t, c_void_p),
    "ferry_device_batch_num_fields": (c_size_t, c_void_p),
    "ferry_device_batch_field_name": (c_char_p, c_void_p, c_size_t),
    "ferry_device_batch_take": (c_int, c_void_p, c_size_t, c_char_p, POINTER(Tensor)),
    "ferry_device_batch_take_images": (c_int, c_void_p, POINTER(Tensor)),
    "ferry_device_batch_free": (None, c_void_p),
    "ferry_tensor_free": (None, POINTER(Tensor)),
    # the DLManagedTensor comes back as a plain address, handed on to PyCapsule_New
    "ferry_tensor_to_dlpack": (c_int, POINTER(Tensor), POINTER(c_void_p)),
}
for _name, (_restype, *_argtypes) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _restype, _argtypes

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [c_void_p, c_char_p, c_void_p]
# The destructor gets a capsule whose references are gone: a plain address, never a
# py_object (which would count a reference to it again).
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype, _capsule_is_valid.argtypes = c_int, [c_void_p, c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = c_void_p, [c_void_p, c_char_p]
_DELETER = ctypes.CFUNCTYPE(None, c_void_p)


def _delete_managed(address):
    """Call a DLManagedTensor's own deleter: what frees the ferry tensor inside it."""
    managed = DLManagedTensor.from_address(address)
    if managed.deleter:
        _DELETER(managed.deleter)(address)


@ctypes.PYFUNCTYPE(None, c_void_p)
def _free_unconsumed(capsule):
    """The DLPack rule: a capsule still named "dltensor" when it dies was never taken
    (the consumer renames it "used_dltensor"), so its tensor is freed here; a failing
    from_dlpack, or an interrupt before it, leaks nothing."""
    if _capsule_is_valid(capsule, b"dltensor"):
        _delete_managed(_capsule_pointer(capsule, b"dltensor"))


_CAPSULE_DESTRUCTOR = ctypes.cast(_free_unconsumed, c_void_p)


class FerryError(RuntimeError):
    """A ferry call failed. str() is ferry's message (the file, JSON path or sample);
    .status is the ferry_status code (include/ferry/error.h)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def check(status, what=None):
    """Raise FerryError for a failing status, with the message ferry left on this thread."""
    if status != OK:
        message = (lib.ferry_last_error() or b"").decode("utf-8", "replace")
        if not message:
            message = lib.ferry_strerror(status).decode()
        raise FerryError(status, f"{what}: {message}" if what else message)
    return status


class Exporter:
    """Moves ferry tensors into DLPack capsules ("dltensor"), which their consumer then
    owns. One per thread of use (the Loader lets one step run at a time): it reuses its
    ctypes arguments, since a step hands over dozens of tensors and building them is
    most of the cost.

    A tensor is never unowned on the way: it is in the device batch, then in
    self.tensor (taken), then in self._managed (exported), then in a capsule whose
    destructor frees it unless a consumer took it. An interrupt (KeyboardInterrupt)
    between two of those calls leaves it in self.tensor or self._managed, and reclaim()
    frees it: no Python bytecode that could raise runs between the read of
    self._managed and the capsule's creation."""

    def __init__(self):
        self.tensor = Tensor()
        self.tensor_ref = byref(self.tensor)
        self._managed = c_void_p()
        self._managed_ref = byref(self._managed)

    def capsule(self):
        """self.tensor, moved into a new capsule (self.tensor is cleared)."""
        status = lib.ferry_tensor_to_dlpack(self.tensor_ref, self._managed_ref)
        if status != OK:
            check(status)
        managed = self._managed.value
        self._managed.value = None
        return _capsule_new(managed, b"dltensor", _CAPSULE_DESTRUCTOR)

    def reclaim(self):
        """Free what an interrupted hand-over left behind (nothing, normally)."""
        lib.ferry_tensor_free(self.tensor_ref)  # a cleared tensor: nothing to do
        managed = self._managed.value
        if managed:
            self._managed.value = None
            _delete_managed(managed)
