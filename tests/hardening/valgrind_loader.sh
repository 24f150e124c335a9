#!/usr/bin/env bash
# tests/hardening/valgrind_loader.sh DRIVER SYNTH_COCO
#
# valgrind memcheck over three epochs of the loader (valgrind_driver) on a small
# embedded dataset: 24 images made by synth_coco in a scratch folder. Fails on any
# memory error or definite/indirect leak. Skips (77) when valgrind is missing, unless
# CI is set, where a missing valgrind is a failure.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 DRIVER SYNTH_COCO" >&2
  exit 2
fi
driver=$1 synth=$2
if ! command -v valgrind >/dev/null; then
  if [ -n "${CI:-}" ]; then
    echo "valgrind is missing (CI is set: failing)" >&2
    exit 1
  fi
  echo "skipped: valgrind is not installed"
  exit 77
fi
data=$(mktemp -d "${TMPDIR:-/tmp}/ferry-valgrind-XXXXXX")
trap 'rm -rf "$data"' EXIT
"$synth" --out "$data" --images 24 --seed 3 >/dev/null
# The sanitizer options of the test environment mean nothing to valgrind's run.
unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
# Not exec: the EXIT trap removes the data folder once valgrind is done.
valgrind --tool=memcheck --error-exitcode=1 --leak-check=full \
  --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
  --track-origins=yes --num-callers=30 \
  "$driver" "$data/annotations/instances_val2017.json" "$data/val2017"
