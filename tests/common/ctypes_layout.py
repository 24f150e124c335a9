#!/usr/bin/env python3
"""Compare ctypes mirrors of C structs with the C compiler's layout of the headers.

    from ctypes_layout import compare
    checked, mismatches = compare({Tensor: "ferry_tensor", ...}, ["include"], ["ferry/ferry.h"])

A small C probe printing sizeof and offsetof of every mirrored struct and field is
compiled with `cc` against the given include directories and run; each value is
compared with the ctypes class's. Used by tests/examples/check_pytorch_doc.py (the
script in docs/pytorch.md) and python/tests/test_loader.py (the ferry package's mirrors,
test_ctypes_mirrors_match_the_headers).
"""
import ctypes
import os
import subprocess
import tempfile


def probe_source(mirrors, headers):
    """C source printing each mirrored struct's size and field offsets, and the values
    the ctypes mirrors give for them, in the same order."""
    lines = ["#include <stddef.h>", "#include <stdio.h>"]
    lines += [f'#include "{header}"' for header in headers]
    lines.append("int main(void) {")
    expected = []
    for cls, ctype in mirrors.items():
        lines.append(f'  printf("%zu\\n", sizeof({ctype}));')
        expected.append((f"sizeof({ctype})", ctypes.sizeof(cls)))
        for field, *_ in cls._fields_:
            lines.append(f'  printf("%zu\\n", offsetof({ctype}, {field}));')
            expected.append((f"offsetof({ctype}, {field})", getattr(cls, field).offset))
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n", expected


def compare(mirrors, include_dirs, headers, cc="cc"):
    """(number of values checked, list of mismatch descriptions)."""
    source, expected = probe_source(mirrors, headers)
    with tempfile.TemporaryDirectory(prefix="ferry-layout-") as tmp:
        probe = os.path.join(tmp, "probe.c")
        with open(probe, "w") as f:
            f.write(source)
        args = [cc, "-std=c11"] + [f"-I{d}" for d in include_dirs] + [probe, "-o", probe[:-2]]
        subprocess.run(args, check=True)
        actual = subprocess.run([probe[:-2]], check=True, capture_output=True, text=True).stdout.split()
    mismatches = [f"{what}: the ctypes mirror says {py}, C says {c}"
                  for (what, py), c in zip(expected, actual) if py != int(c)]
    if len(actual) != len(expected):
        mismatches.append(f"the probe printed {len(actual)} values, {len(expected)} expected")
    return len(expected), mismatches
