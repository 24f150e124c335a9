#!/usr/bin/env bash
# repro/tiny_set.sh BUILD: make BUILD/bench-tiny once and print its path. It is the
# overhead benchmarks' data set (issue #14): 600 synth_coco images, longer side 80,
# seed 0, where decoding costs almost nothing and the loader's own per-batch work
# shows. Used by worker_sweep.sh and serial_baseline/{run,lock_hold}.sh.
set -euo pipefail
build=${1:?usage: tiny_set.sh BUILD}
tiny=$build/bench-tiny
# synth_coco writes the JSON last (by rename), so its presence means a whole set
if [ ! -f "$tiny/annotations/instances_val2017.json" ]; then
  "$build/synth/synth_coco" --out "$tiny" --images 600 --max-side 80 --seed 0 > /dev/null
fi
echo "$tiny"
