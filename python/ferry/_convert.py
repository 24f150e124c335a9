"""Turning ferry tensors into torch tensors or numpy arrays, without a copy.

Every tensor goes through DLPack: ferry_tensor_to_dlpack moves its ownership into a
DLManagedTensor, and torch.from_dlpack / numpy.from_dlpack take it over, so the
library that made the array frees the ferry allocation (through the deleter) when its
array dies. A capsule that no library took (from_dlpack raised) frees it itself
(_capi.Exporter). DLPack 0.6 has no bool: masks arrive as uint8 and are reinterpreted as
bool in place (a view, same bytes).
"""
import importlib.util

from ferry import _capi


def torch_available():
    return importlib.util.find_spec("torch") is not None


class _Producer:
    """What numpy.from_dlpack asks for: an object with __dlpack__ (CPU tensors only)."""

    __slots__ = ("capsule",)

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


class TorchConverter:
    name = "torch"

    def __init__(self):
        import torch
        import torch.utils.dlpack
        self.torch = torch
        self.exporter = _capi.Exporter()
        # torch.from_dlpack checks the argument's type before calling this: a capsule
        # is all it is ever given here
        self._from_dlpack = getattr(torch._C, "_from_dlpack", torch.utils.dlpack.from_dlpack)

    def __call__(self):
        """exporter.tensor as a torch tensor (the tensor is moved, not copied)."""
        is_bool = self.exporter.tensor.dtype == _capi.DTYPE_BOOL
        out = self._from_dlpack(self.exporter.capsule())
        return out.view(self.torch.bool) if is_bool else out


class NumpyConverter:
    name = "numpy"

    def __init__(self):
        import numpy
        self.numpy = numpy
        self.exporter = _capi.Exporter()
        self._from_dlpack = numpy.from_dlpack

    def __call__(self):
        """exporter.tensor as a numpy array (moved, not copied). The Loader refuses
        layout="bf16" with numpy, which has no bfloat16."""
        is_bool = self.exporter.tensor.dtype == _capi.DTYPE_BOOL
        out = self._from_dlpack(_Producer(self.exporter.capsule()))
        return out.view(self.numpy.bool_) if is_bool else out


def converter(tensor_type):
    """tensor_type None: torch when it is importable, else numpy."""
    if tensor_type is None:
        tensor_type = "torch" if torch_available() else "numpy"
    if tensor_type == "torch":
        return TorchConverter()
    if tensor_type == "numpy":
        return NumpyConverter()
    raise ValueError(f"tensor_type must be 'torch', 'numpy' or None, not {tensor_type!r}")
