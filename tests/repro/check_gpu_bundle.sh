#!/usr/bin/env bash
# tests/repro/check_gpu_bundle.sh - repro/gpu_check.sh, as a lent GPU node will meet it.
#
# A GPU is lent to few tasks, so the script that checks ferry on one runs there seldom,
# and what has rotted meanwhile costs the minutes the node is lent for. This runs both
# of its steps here, without a GPU: the bundle (a CUDA build of its own, the libraries,
# the test data, the Python package), which must fit the 64 MiB a carry may hold; then
# the run step from another path and another working directory, as the node runs it.
# Without a GPU the run step exits 2: the parts that need none ran, and passed. 1 is a
# failure, which the log says; 0 (a GPU here) is a pass too.
#
# Usage: check_gpu_bundle.sh SOURCE_ROOT. Skipped (77) without a CUDA toolkit, which
# the bundle's build needs.
set -uo pipefail

root=${1:?usage: check_gpu_bundle.sh SOURCE_ROOT}
nvcc=$(command -v nvcc || echo "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc")
if [ ! -x "$nvcc" ]; then
  echo "no CUDA toolkit (nvcc): the bundle's -Dcuda=enabled build needs one; skipped"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-gpu-bundle-test.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

if ! "$root/repro/gpu_check.sh" bundle "$work/bundle" >"$work/bundle.log" 2>&1; then
  echo "FAIL: gpu_check.sh bundle failed; its last lines:"
  tail -n 20 "$work/bundle.log"
  exit 1
fi
grep '^bundle:' "$work/bundle.log"

# The node's python3 has torch. Debian's has it here too (./run installs python3-torch
# and python3-pytest), so the run step's Python tests run as they will there; another
# python3 first on PATH would skip them.
mkdir -p "$work/bin"
if /usr/bin/python3 -c 'import torch, pytest, numpy' 2>/dev/null; then
  ln -s /usr/bin/python3 "$work/bin/python3"
fi

# Where the node puts it is not where it was made: no path may lead back to the build.
mv "$work/bundle" "$work/carried"
(cd / && PATH="$work/bin:$PATH" "$root/repro/gpu_check.sh" run "$work/carried" "$work/run.log" >/dev/null 2>&1)
rc=$?
grep -E '^=== (gpu_check|python tests)' "$work/run.log"
case $rc in
  0 | 2) echo "run step: exit $rc (2: no GPU here)" ;;
  *)
    echo "FAIL: gpu_check.sh run exited $rc; the steps that failed:"
    grep -E '^=== .*exit [1-9]|^FAILED |^ERROR ' "$work/run.log" | head -n 40
    exit 1
    ;;
esac
