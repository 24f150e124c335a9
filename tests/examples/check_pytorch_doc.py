#!/usr/bin/env python3
"""Run the ctypes + DLPack script of docs/pytorch.md against the built libferry.so.

    check_pytorch_doc.py LIBFERRY_SO SYNTH_COCO PYTORCH_MD

1. The ctypes mirrors of ferry's structs in the script (Tensor, ImageOptions,
   LoaderConfig, MemoryStats) must have the C compiler's size and field offsets for
   the headers in include/ferry/ (a small C probe prints them).
2. The script must run on a 16-image synthetic set (synth_coco --seed 5), print the
   first batch's image shape, and end with 0 device bytes still allocated: every
   tensor exported through DLPack was freed by its deleter.
When PyTorch is not installed, torch.from_dlpack is stood in for by numpy.from_dlpack
(the same DLPack capsule, consumed the same way); the output says which ran.
"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from ctypes_layout import compare  # noqa: E402

STRUCTS = {"Tensor": "ferry_tensor", "ImageOptions": "ferry_image_options",
           "AugmentOptions": "ferry_augment_options", "SourceOptions": "ferry_source_options",
           "LoaderConfig": "ferry_loader_config",
           "MemoryStats": "ferry_memory_stats"}

# The ferry package's own numpy path (python/ferry/_convert.py) consumes the capsule.
TORCH_STANDIN = '''"""A stand-in for torch.from_dlpack when PyTorch is not installed (tests only)."""
import numpy

from ferry._convert import _Producer


def from_dlpack(capsule):
    return numpy.from_dlpack(_Producer(capsule))
'''


def main():
    lib, synth, doc = sys.argv[1:4]
    source_root = os.environ.get("FERRY_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
    blocks = re.findall(r"^```python\n(.*?)^```", open(doc, encoding="utf-8").read(), re.S | re.M)
    if len(blocks) != 1:
        print(f"FAIL: expected one python block in {doc}, found {len(blocks)}")
        return 1
    failures = 0
    with tempfile.TemporaryDirectory(prefix="ferry-pytorch-doc-") as tmp:
        script = os.path.join(tmp, "ferry_torch.py")
        with open(script, "w") as f:
            f.write(blocks[0])
        env = dict(os.environ, FERRY_LIB=os.path.abspath(lib))
        if importlib.util.find_spec("torch") is None:
            if importlib.util.find_spec("numpy") is None:
                if os.environ.get("CI"):
                    print("FAIL: neither torch nor numpy is installed")
                    return 1
                print("skipped: neither torch nor numpy is installed")
                return 77
            shim = os.path.join(tmp, "shim")
            os.mkdir(shim)
            with open(os.path.join(shim, "torch.py"), "w") as f:
                f.write(TORCH_STANDIN)
            env["PYTHONPATH"] = os.pathsep.join([shim, os.path.join(source_root, "python"),
                                                 env.get("PYTHONPATH", "")])
            print("note: PyTorch is not installed; numpy.from_dlpack stands in for torch.from_dlpack")

        # 1. the ctypes mirrors against the C layout (loading the script defines them;
        # its main() runs only as a program)
        sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["FERRY_LIB"] = env["FERRY_LIB"]
        spec = importlib.util.spec_from_file_location("ferry_torch", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        mirrors = {getattr(module, pyname): ctype for pyname, ctype in STRUCTS.items()}
        checked, mismatches = compare(mirrors, [os.path.join(source_root, "include")],
                                      ["ferry/ferry.h", "ferry/loader.h"])
        for mismatch in mismatches:
            print(f"FAIL: {mismatch}")
        failures += len(mismatches)
        print(f"{'ok:  ' if not failures else 'FAIL:'} {checked} sizes and offsets of the ctypes mirrors checked")

        # 2. the script itself
        data = os.path.join(tmp, "data")
        subprocess.run([synth, "--out", data, "--images", "16", "--seed", "5"], check=True,
                       stdout=subprocess.DEVNULL)
        run = subprocess.run([sys.executable, script, os.path.join(data, "annotations", "instances_val2017.json"),
                              os.path.join(data, "val2017")], env=env, capture_output=True, text=True, timeout=300)
        print(run.stdout + run.stderr)
        out = run.stdout.strip().splitlines()
        checks = [
            (run.returncode == 0, f"the script exits 0 (got {run.returncode})"),
            (bool(out) and out[0].startswith("images (8, 3, 312, 312)"), "the first batch's images are [8,3,312,312]"),
            (bool(out) and out[-1].startswith("2 batches") and out[-1].endswith("device bytes still allocated: 0"),
             "2 batches, and every exported tensor was freed by its deleter"),
        ]
        for ok, what in checks:
            print(f"{'ok:  ' if ok else 'FAIL:'} {what}")
            failures += 0 if ok else 1
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
