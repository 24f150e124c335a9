"""ferry: COCO detection batches for PyTorch training loops, from libferry.

    import ferry
    for images, targets in ferry.Loader("instances_train2017.json", "train2017",
                                        batch_size=8, device="cuda"):
        ...

docs/python.md has the whole story; the C library's is in docs/api.md.
"""
from ferry._capi import FerryError, library_path
from ferry.loader import Loader, memory_stats, pixel_mask

__version__ = "0.1.0"
__all__ = ["Loader", "FerryError", "memory_stats", "pixel_mask", "library_path", "__version__"]
