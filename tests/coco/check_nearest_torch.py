#!/usr/bin/env python3
"""ferry's nearest index maps against torch's own interpolate(mode="nearest") (issue 27).

    check_nearest_torch.py LIBFERRY_SO

For every input size 1..4096 and every output size in OUTS (1..64, multi-scale's 276..360,
RF-DETR's 384..1333 family), the map ferry_nearest_index_map returns must equal the source
indices torch picks when it resizes a uint8 mask, as torchvision resizes a tv_tensors.Mask
(2-D nearest on uint8; the index is carried in two byte channels). The numpy restatement
every Python oracle uses (tests/common/nearest.py) is checked against torch the same way,
so the oracles cannot share an assumption with ferry that torch does not make.

torch comes from Debian (python3-torch, which ./run installs for /usr/bin/python3): when
this interpreter lacks it the script runs itself again under /usr/bin/python3. Without
torch it is skipped (exit 77), or fails when CI is set.
"""
import ctypes
import os
import sys
import time

DEBIAN_PYTHON = "/usr/bin/python3"


def import_torch_or_reexec():
    try:
        import torch  # noqa: F401
        return
    except ImportError as e:
        why = e
    if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON) \
            and not os.environ.get("FERRY_NEAREST_REEXEC"):
        os.environ["FERRY_NEAREST_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
    if os.environ.get("CI"):
        print(f"FAILED: torch is required when CI is set ({why})")
        sys.exit(1)
    print(f"skipped: torch not installed ({why})")
    sys.exit(77)


import_torch_or_reexec()
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from nearest import nearest_map  # noqa: E402

MAX_IN = 4096
OUTS = sorted(set(list(range(1, 65)) + list(range(276, 361)) + list(range(384, 641))
                  + list(range(641, 1333, 7)) + [1333, 2 * 640, 4096, 8192]))


def torch_maps(size_in):
    """{out: torch's source index of each output index} for one input size."""
    idx = torch.arange(size_in, dtype=torch.int64)
    x = torch.stack([idx % 256, idx // 256]).to(torch.uint8).view(1, 2, size_in, 1)
    maps = {}
    for out in OUTS:
        y = torch._C._nn.upsample_nearest2d(x, [out, 1]).view(2, out).to(torch.int64)
        maps[out] = (y[0] + 256 * y[1]).numpy()
    return maps


def main():
    lib = ctypes.CDLL(sys.argv[1])
    fn = lib.ferry_nearest_index_map
    fn.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    # the op above is the one F.interpolate and torchvision reach: check once that it is
    x = torch.zeros(1, 1, 428, 3, dtype=torch.uint8)
    x[0, 0, :, 0] = torch.arange(428) % 256
    via_interpolate = torch.nn.functional.interpolate(x, size=(312, 3), mode="nearest")[0, 0, :, 0]
    assert torch.equal(via_interpolate, torch._C._nn.upsample_nearest2d(x, [312, 3])[0, 0, :, 0])
    buf = np.zeros(max(OUTS), dtype=np.uint32)
    t0 = time.time()
    pairs = ferry_bad = oracle_bad = exact_differs = 0
    for size_in in range(1, MAX_IN + 1):
        for out, want in torch_maps(size_in).items():
            pairs += 1
            if fn(size_in, out, buf.ctypes.data) != 0:
                print(f"FAILED: ferry_nearest_index_map({size_in}, {out}) returned an error")
                return 1
            got = buf[:out].astype(np.int64)
            if not np.array_equal(got, want):
                ferry_bad += 1
                if ferry_bad <= 5:
                    i = int(np.flatnonzero(got != want)[0])
                    print(f"MISMATCH ferry {size_in} -> {out}: output {i} takes {got[i]}, torch {want[i]}")
            if not np.array_equal(nearest_map(size_in, out), want):
                oracle_bad += 1
                if oracle_bad <= 5:
                    print(f"MISMATCH tests/common/nearest.py {size_in} -> {out}")
            exact = (np.arange(out, dtype=np.int64) * size_in) // out
            exact_differs += not np.array_equal(exact, want)
    print(f"{pairs} (in, out) pairs, in = 1..{MAX_IN}, {len(OUTS)} output sizes, torch {torch.__version__}, "
          f"{time.time() - t0:.0f} s: ferry differs in {ferry_bad}, the numpy oracle in {oracle_bad} "
          f"(exact integers would differ in {exact_differs})")
    if exact_differs == 0:
        print("FAILED: exact integers agree with torch everywhere: the check cannot tell the rules apart")
        return 1
    return 1 if ferry_bad or oracle_bad else 0


if __name__ == "__main__":
    sys.exit(main())
