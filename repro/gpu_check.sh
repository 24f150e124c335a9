#!/usr/bin/env bash
# repro/gpu_check.sh - check ferry on this machine's GPU in one go:
#   1. configure and build with -Dcuda=enabled in a fresh build directory;
#   2. run the test suites that hold the CUDA variants (lib, transfer) with
#      FERRY_REQUIRE_CUDA=1, so a CUDA test that skips counts as a failure;
#   3. run cuda_peak_memory (table and --json; it must report CUDA rows);
#   4. run repro/throughput on the GPU, if that program exists, on a generated set,
#      and the training loop on CUDA with its exact-resume check.
# Everything printed goes to one file: $1, else $OUT/gpu_check.log, else
# ./gpu_check.log. Meant to finish in under 5 minutes on an H200 node.
# Exit status: 0 all passed on a GPU; 1 something failed; 2 no GPU here (the parts
# that need none ran, and passed).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log=${1:-${OUT:-.}/gpu_check.log}
budget_s=${FERRY_GPU_CHECK_BUDGET_S:-290}

failures=0
# step NAME COMMAND...: run, time and record one part.
step() {
  local name=$1 t0=$SECONDS rc
  shift
  echo "=== $name: $*"
  "$@"
  rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then failures=$((failures + 1)); fi
  return "$rc"
}

has_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# Seconds left of the budget, at least 30.
time_left() {
  local left=$((budget_s - SECONDS))
  [ "$left" -lt 30 ] && left=30
  echo "$left"
}

# CUDA tests that skipped: the Criterion message of tests/transfer and tests/lib.
count_cuda_skips() {
  grep -E -c 'no CUDA device|skipped on cuda' "$1/meson-logs/testlog.txt" 2>/dev/null || true
}

run_throughput() {
  local build=$1 data=$2
  if [ ! -x "$build/repro/throughput" ]; then
    echo "throughput: not built in this tree, skipped"
    return 0
  fi
  if [ -x "$build/repro/synth_coco" ]; then
    step synth_coco timeout 60 "$build/repro/synth_coco" --out "$data" --images 1000 --seed 0 || return 1
    step throughput timeout "$(time_left)" "$build/repro/throughput" --device cuda \
      --annotations "$data/annotations/instances_val2017.json" --images "$data/val2017" --json
  else
    step throughput timeout "$(time_left)" "$build/repro/throughput" --device cuda --json
  fi
}

main() {
  local work build gpu=0 jobs
  work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-gpu-check.XXXXXX") || return 1
  trap 'rm -rf "$work"' EXIT
  build=$work/build
  jobs=$(nproc 2>/dev/null || echo 4)
  echo "ferry gpu_check: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), source $root"
  if has_gpu; then
    gpu=1
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    export FERRY_REQUIRE_CUDA=1
  else
    echo "no GPU visible (nvidia-smi): the CUDA parts will report that they skipped"
  fi
  command -v nvcc >/dev/null && nvcc --version | tail -n 2

  step configure meson setup "$build" "$root" -Dcuda=enabled -Dbuildtype=release || return 1
  step build ninja -C "$build" -j "$jobs" || return 1

  step tests meson test -C "$build" --suite lib --suite transfer --print-errorlogs \
    --num-processes "$jobs" --timeout-multiplier 2
  local skips
  skips=$(count_cuda_skips "$build")
  echo "CUDA test variants that skipped: $skips"
  if [ "$gpu" -eq 1 ] && [ "$skips" -ne 0 ]; then
    echo "FAIL: a GPU is present but $skips CUDA test variant(s) skipped"
    failures=$((failures + 1))
  fi

  step cuda_peak_memory "$build/repro/cuda_peak_memory"
  local json
  json=$("$build/repro/cuda_peak_memory" --json --reps 10)
  local rc=$?
  echo "$json"
  if [ "$rc" -ne 0 ]; then failures=$((failures + 1)); fi
  if [ "$gpu" -eq 1 ] && ! grep -q '"backend": "cuda"' <<<"$json"; then
    echo "FAIL: cuda_peak_memory printed no CUDA rows"
    failures=$((failures + 1))
  fi

  if [ "$gpu" -eq 1 ]; then
    run_throughput "$build" "$work/synth"
    if [ -f "$work/synth/annotations/instances_val2017.json" ]; then
      step train_loop timeout "$(time_left)" "$build/docs/examples/train_loop" --device cuda \
        --epochs 3 --resume-test --annotations "$work/synth/annotations/instances_val2017.json" \
        --images "$work/synth/val2017"
    fi
  else
    echo "throughput: needs a GPU for --device cuda, skipped"
  fi

  echo "=== gpu_check: $failures failure(s) in $SECONDS s"
  if [ "$failures" -ne 0 ]; then return 1; fi
  if [ "$gpu" -eq 0 ]; then return 2; fi
  return 0
}

mkdir -p "$(dirname "$log")"
main "$@" 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
