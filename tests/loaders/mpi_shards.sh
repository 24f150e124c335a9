#!/usr/bin/env bash
# Two ranks under Open MPI's mpirun read their rank from the launcher's environment
# and together cover the dataset: disjointly with drop_last, completely without.
set -euo pipefail
dump=$1
if ! command -v mpirun >/dev/null; then
  if [ -n "${CI:-}" ]; then echo "mpirun is missing (./run installs openmpi-bin)"; exit 1; fi
  echo "skipped: mpirun is not installed"; exit 77
fi
. "$(dirname "$0")/../common/realdata.sh"
require_realdata
ann=$REALDATA/dali_coco/coco/instances.json
img=$REALDATA/dali_coco/coco/images
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { mpirun --allow-run-as-root --oversubscribe -np 2 "$dump" "$ann" "$img" "$tmp/$1" "$2"; }
run drop 1
run pad 0
n_images=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['images']))" "$ann")
shared=$(sort "$tmp/drop.0" | comm -12 - <(sort "$tmp/drop.1") | wc -l)
each=$(wc -l < "$tmp/drop.0")
[ "$shared" -eq 0 ] || { echo "drop_last: ranks share $shared samples"; exit 1; }
[ "$each" -eq $((n_images / 2)) ] || { echo "drop_last: rank 0 has $each samples"; exit 1; }
[ "$(wc -l < "$tmp/drop.1")" -eq "$each" ] || { echo "drop_last: ranks differ in length"; exit 1; }
union=$(cat "$tmp/pad.0" "$tmp/pad.1" | sort -un | wc -l)
[ "$union" -eq "$n_images" ] || { echo "padded: ranks cover $union of $n_images images"; exit 1; }
echo "2 ranks: disjoint halves of $each with drop_last; all $n_images images when padded"
