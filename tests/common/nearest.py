"""tests/common/nearest.py - torch's nearest index rule in numpy, for the Python oracles.

ATen's interpolate(mode="nearest") maps output index i of a resize in -> out to
i (out == in), i >> 1 (out == 2 * in), else min(floorf(float32(i) * float32(in / out)),
in - 1) with the scale and the product rounded to float32. The oracles that compare
ferry's masks with pycocotools' (diff_pycocotools.py, check_masks_resized.py) resize the
full mask with this map; tests/coco/check_nearest_torch.py checks it against torch itself,
so an oracle here cannot share an assumption with ferry that torch does not make.
Import it with sys.path.insert(0, <this folder>).
"""
import numpy as np


def nearest_map(size_in, size_out):
    """Source index of each of the size_out output indices (int64 array)."""
    i = np.arange(size_out, dtype=np.int64)
    if size_out == size_in:
        return i
    if size_out == 2 * size_in:
        return i >> 1
    scale = np.float32(size_in) / np.float32(size_out)
    src = np.floor(i.astype(np.float32) * scale).astype(np.int64)
    return np.minimum(src, size_in - 1)


def resize_nearest(mask, out_h, out_w):
    """A 2-D mask resized as torchvision resizes a tv_tensors.Mask."""
    h, w = mask.shape
    return np.ascontiguousarray(mask[nearest_map(h, out_h)][:, nearest_map(w, out_w)])
