#!/usr/bin/env python3
"""check_exports.py LIBFERRY_SO LIBFERRY_A INCLUDE_DIR

What libferry exports is exactly what its public headers declare:
  1. every function or variable that libferry.so exports (nm -D) is declared with
     FERRY_API in include/ferry/*.h, and every such declaration is exported;
  2. every global symbol of libferry.a (which tests and tools link) is either public or
     carries the internal prefix ferry__, so a name alone says which it is.
"""
import pathlib
import re
import subprocess
import sys

DECL = re.compile(r"^FERRY_API\b[^;(]*?\b(ferry_[A-Za-z0-9_]+)\s*\(", re.M)
# nvcc's host stubs for functions in an anonymous namespace (hidden in the .so).
ANONYMOUS_NAMESPACE = "_GLOBAL__N_"
# What the toolchain adds beside ferry's own symbols: the sanitizers' __odr_asan.*,
# __asan_*, __ubsan_* and the like all begin with two underscores.
TOOLCHAIN_PREFIX = "__"


def declared(include_dir):
    names = set()
    for header in sorted(pathlib.Path(include_dir).glob("*.h")):
        names.update(DECL.findall(header.read_text()))
    return names


def defined_symbols(args):
    out = subprocess.run(["nm", "--defined-only", *args], check=True, capture_output=True,
                         text=True).stdout
    # "ADDRESS TYPE NAME"; upper-case types are global (T text, D/B/R data, W/V weak).
    return {f[2] for f in (line.split() for line in out.splitlines())
            if len(f) == 3 and f[1].isupper()}


def main():
    so, archive, include_dir = sys.argv[1:4]
    public = declared(include_dir)
    if len(public) < 50:
        sys.exit(f"only {len(public)} FERRY_API declarations found under {include_dir}: parser broken?")
    exported = {s for s in defined_symbols(["-D", so]) if not s.startswith(TOOLCHAIN_PREFIX)}
    failures = []
    extra = sorted(exported - public)
    missing = sorted(public - exported)
    if extra:
        failures.append(f"{so} exports {len(extra)} symbols no public header declares: {extra}")
    if missing:
        failures.append(f"{len(missing)} FERRY_API declarations are not exported: {missing}")
    unprefixed = sorted(s for s in defined_symbols(["-g", archive])
                        if s not in public and not s.startswith("ferry__")
                        and ANONYMOUS_NAMESPACE not in s and not s.startswith(TOOLCHAIN_PREFIX))
    if unprefixed:
        failures.append(f"{archive}: internal symbols without the ferry__ prefix: {unprefixed}")
    if failures:
        sys.exit("\n".join(failures))
    print(f"{len(exported)} exported symbols, all declared with FERRY_API; "
          f"internal symbols all ferry__*")


if __name__ == "__main__":
    main()
