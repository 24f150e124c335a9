#!/usr/bin/env bash
# repro/gpu_check.sh - check ferry on a GPU node, in two steps, because a GPU node has
# the driver, nvcc, python3, meson and ninja but none of Debian's -dev packages
# (libturbojpeg, libpng, jansson, criterion) and no network, so it cannot build ferry.
#
#   repro/gpu_check.sh bundle DIR        (here, on a machine that builds ferry)
#     configures and builds with -Dcuda=enabled -Dbuildtype=release in DIR/build;
#     writes DIR/tests.txt, the lib and transfer suites' tests as meson knows them,
#     with every path rewritten relative to DIR so they run from wherever DIR lands
#     (meson test itself needs the build at its configured absolute path, which a
#     GPU node does not have); copies the test scripts to DIR/scripts, the real COCO
#     sample the transfer suite reads to DIR/data, and to DIR/lib every shared
#     library that ldd lists for the test binaries, the repro programs, train_loop
#     and libferry.so, except glibc's own, the driver (libcuda, libnvidia-*: those
#     must be the node's) and anything ldd cannot find; then keeps of DIR/build only
#     what the run step executes (the bundle is run, never rebuilt), checks under
#     LD_LIBRARY_PATH=DIR/lib that every binary resolves each library to DIR or to
#     glibc, and prints the bundle's size (it fails over 64 MiB: it must be carried).
#     The Python package's sources and tests go to DIR/pkg (python/, include/,
#     tests/common's Python modules, ctypes_layout.py among them, and docs/python.md,
#     as python/tests expects them).
#
#   repro/gpu_check.sh run DIR [LOG]     (there, from any path, any working directory)
#     with LD_LIBRARY_PATH=DIR/lib, and FERRY_REQUIRE_CUDA=1 when nvidia-smi sees a
#     GPU (so a CUDA test variant that skips is a failure, and any CUDA variant
#     reported skipped counts as one too):
#       1. every test of DIR/tests.txt (the lib and transfer suites: every CUDA test);
#       1b. when the node's python3 has torch, pytest and numpy: python/tests (the
#          package from DIR/pkg over the bundle's libferry.so), CUDA variants included
#          (a python3 without them is reported, not counted as a failure; tests whose
#          other extras, pycocotools, moto or RF-DETR, are missing skip);
#       2. cuda_peak_memory (table, and --json, which must have CUDA rows);
#       3. synth_coco: a 1,000-image set (20 images without a GPU, as a smoke test);
#       4. on a GPU: the training loop's exact resume (train_loop --device cuda
#          --epochs 3 --resume-test), then a worker sweep of repro/throughput
#          --device cuda --json --processes 1 at batch 8 and 32 for 4, 8, 16 workers,
#          with --decode gpu beside cpu at 16 workers
#          (short runs; later sweep points are skipped, and say so, when the budget
#          runs out), then nvjpeg_parity: nvJPEG's pixels against the CPU decoder's
#          on the photos and the synthetic set, and its decode-only rate at batch 32
#          and 128 (where nvjpeg.h was found at bundle time).
#     Everything goes to LOG, else $OUT/gpu_check.log, else ./gpu_check.log. It budgets
#     itself to under 5 minutes (FERRY_GPU_CHECK_BUDGET_S, default 290).
#     Exit status: 0 all passed on a GPU; 1 something failed; 2 no GPU here (the parts
#     that need none ran, and passed).
#
#   repro/gpu_check.sh [LOG]             both at once: bundle into a temporary
#     directory, then run it.
#
# tests.txt: one test per line, tab-separated: name, suites (comma-separated),
# timeout in seconds, the number N of environment entries, N entries KEY=VALUE, then
# the command and its arguments. "@DIR@" in any field stands for DIR.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
budget_s=${FERRY_GPU_CHECK_BUDGET_S:-290}
failures=0

# ---- bundle -------------------------------------------------------------------

# The manifest, from meson's own list of tests; paths under DIR become @DIR@/...,
# scripts from the source tree are copied to DIR/scripts. The install test is left
# out: it checks packaging (meson install, pkg-config, a compiler), needs the source
# tree and the build at their configured paths, and has no CUDA variant; so is the
# exports test, which reads libferry.a (the bundle drops static archives) and has none
# either.
write_manifest() {
  local dir=$1
  meson introspect --tests "$dir/build" | python3 -c '
import json, os, shutil, sys
dir, root = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
def rel(path):
    real = os.path.realpath(path) if os.path.isabs(path) else path
    if real.startswith(dir + os.sep):
        return "@DIR@/" + os.path.relpath(real, dir)
    if real.startswith(root + os.sep) and os.path.isfile(real):
        copy = os.path.join(dir, "scripts", os.path.relpath(real, root))
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        shutil.copy2(real, copy)
        return "@DIR@/" + os.path.relpath(copy, dir)
    return path
for t in json.load(sys.stdin):
    suites = sorted(s.split(":")[-1] for s in t["suite"])
    if not {"lib", "transfer", "gpu", "nvjpeg"} & set(suites) or t["name"] in ("install", "exports"):
        continue
    # FERRY_* and CRITERION_* only: the rest configure sanitizers, which a release
    # bundle is built without. FERRY_SOURCE_ROOT is the source tree, not bundled.
    env = []
    for key, value in sorted(t["env"].items()):
        if key == "FERRY_SHARED":
            value = "@DIR@/data"
        if key.startswith(("FERRY_", "CRITERION_")) and key != "FERRY_SOURCE_ROOT" and value:
            env.append(key + "=" + value)
    cmd = [rel(c) for c in t["cmd"]]
    print("\t".join([t["name"], ",".join(suites), str(t["timeout"]), str(len(env))] + env + cmd))
' "$dir" "$root" >"$dir/tests.txt"
}

# The real COCO sample tests/transfer/test_loader_transfer.c reads, if this machine
# has it: without it that test skips, which a GPU run counts as a failure.
copy_test_data() {
  local dir=$1 shared=${FERRY_SHARED:-$root/../shared}
  local sample=realdata/dali_coco/coco
  if [ ! -f "$shared/$sample/instances.json" ]; then
    echo "bundle: no $shared/$sample: test_loader_transfer will skip"
    return 0
  fi
  mkdir -p "$dir/data/$(dirname "$sample")"
  cp -r "$shared/$sample" "$dir/data/$sample"
  # the photos test_resize_gpu resizes (suite gpu)
  [ -d "$shared/realdata/photos" ] && cp -r "$shared/realdata/photos" "$dir/data/realdata/photos"
  return 0
}

# Every binary the run step executes, and libferry.so.
bundle_binaries() {
  local build=$1
  find "$build/tests/lib" "$build/tests/transfer" -maxdepth 1 -type f -perm -u+x -name 'test_*'
  find "$build/tests/image" -maxdepth 1 -type f -perm -u+x \( -name 'test_resize_gpu' -o -name 'test_nvjpeg' \)
  local p
  # coco_parity and ferry-coco: the Python tests' shard cases run them (step 1b)
  for p in repro/cuda_peak_memory synth/synth_coco repro/throughput repro/coco_parity tools/ferry-coco \
    docs/examples/train_loop; do
    echo "$build/$p"
  done
  [ -x "$build/repro/nvjpeg_parity" ] && echo "$build/repro/nvjpeg_parity"
  find "$build" -maxdepth 1 -name 'libferry.so*' -type f
  return 0
}

# Everything else in the build tree goes: the run step executes only the binaries
# above and what tests.txt names (test binaries of other suites, the loaders' generated
# test data: about 17 MiB that kept the bundle over the 64 MiB a carry may hold). The
# libferry.so links stay; they point at the library itself, which is kept.
prune_build() {
  local dir=$1 keep
  keep=$(mktemp) || return 1
  {
    bundle_binaries "$dir/build"
    grep -o '@DIR@/build/[^[:space:]]*' "$dir/tests.txt" | sed "s|^@DIR@|$dir|"
  } | sort -u >"$keep"
  find "$dir/build" -type f | sort | comm -23 - "$keep" | while read -r f; do rm -f "$f"; done
  find "$dir/build" -depth -type d -empty -delete
  rm -f "$keep"
}

# glibc's own libraries and the driver's: these must come from the node.
from_the_node() {
  case $1 in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | \
      librt.so* | libresolv.so* | libutil.so* | libanl.so* | libmvec.so* | libnsl.so* | \
      libcuda.so* | libnvidia-*.so*) return 0 ;;
  esac
  return 1
}

copy_libraries() {
  local dir=$1 bin name path
  mkdir -p "$dir/lib"
  while read -r bin; do
    # "libfoo.so.1 => /usr/lib/.../libfoo.so.1 (0x...)"; "not found" is the node's business.
    ldd "$bin" | while read -r name _ path _; do
      [ -n "$path" ] && [ -f "$path" ] || continue
      from_the_node "$name" && continue
      case $path in "$dir"/*) continue ;; esac
      cp -L -n "$path" "$dir/lib/$name"
    done
  done < <(bundle_binaries "$dir/build")
  # libnvjpeg is opened with dlopen (image/gpu/nvjpeg_api.c), so ldd never lists it: PyPI's
  # nvidia-nvjpeg, where installed, goes along (test_nvjpeg then requires it to load).
  local nvjpeg
  nvjpeg=$(python3 -c 'import importlib.metadata as m; print(m.distribution("nvidia-nvjpeg").locate_file("nvidia/cu13/lib/libnvjpeg.so.13"))' 2>/dev/null)
  [ -n "$nvjpeg" ] && [ -f "$nvjpeg" ] && cp -L -n "$nvjpeg" "$dir/lib/"
  return 0
}

# Under LD_LIBRARY_PATH=DIR/lib every library must come from DIR or be glibc's/the
# driver's (or be missing here and present on the node: the driver).
check_self_contained() {
  local dir=$1 bin name path bad=0
  while read -r bin; do
    while read -r name _ path _; do
      [ -n "$path" ] || continue
      from_the_node "$name" && continue
      case $path in "$dir"/*) ;; *)
        echo "bundle: $bin: $name resolves to $path, outside the bundle"
        bad=1 ;;
      esac
    done < <(LD_LIBRARY_PATH="$dir/lib" ldd "$bin")
  done < <(bundle_binaries "$dir/build")
  return "$bad"
}

# The Python package (python/ferry) and its tests, laid out as python/tests expects.
copy_python_package() {
  local dir=$1
  rm -rf "$dir/pkg"
  mkdir -p "$dir/pkg/docs" "$dir/pkg/tests/common"
  cp -r "$root/python" "$root/include" "$dir/pkg/"
  # the RF-DETR reference test_augment replays, and ctypes_layout.py test_loader compares with
  cp "$root"/tests/common/*.py "$dir/pkg/tests/common/"
  cp "$root/docs/python.md" "$dir/pkg/docs/" # its training loop is one of the tests
  # the layout test compiles ferry/dlpack.h, and the node has no libdlpack-dev
  if [ -d /usr/include/dlpack ]; then cp -r /usr/include/dlpack "$dir/pkg/include/"; fi
  find "$dir/pkg" -name __pycache__ -type d -prune -exec rm -rf {} +
}

bundle() {
  local dir=${1:?usage: gpu_check.sh bundle DIR}
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
  rm -rf "$dir/build" "$dir/lib" "$dir/scripts" "$dir/data"
  # meson finds nvcc on PATH only; the toolkit's usual home will do.
  command -v nvcc >/dev/null || PATH=$PATH:${CUDA_PATH:-/usr/local/cuda}/bin
  meson setup "$dir/build" "$root" -Dcuda=enabled -Dbuildtype=release || return 1
  ninja -C "$dir/build" -j "$(nproc 2>/dev/null || echo 2)" || return 1
  write_manifest "$dir" || return 1
  copy_test_data "$dir" || return 1
  copy_python_package "$dir" || return 1
  copy_libraries "$dir" || return 1
  prune_build "$dir" || return 1
  check_self_contained "$dir" || return 1
  echo "bundle: $(wc -l <"$dir/tests.txt") tests in $dir/tests.txt, $(ls "$dir/lib" | wc -l) libraries in $dir/lib"
  local kib
  kib=$(du -sk "$dir" | cut -f1)
  echo "bundle: size $((kib / 1024)) MiB ($dir); run it with: $0 run $dir [LOG]"
  if [ "$kib" -gt $((64 * 1024)) ]; then
    echo "bundle: over 64 MiB, too big to carry to the GPU machine"
    return 1
  fi
}

# ---- run ----------------------------------------------------------------------

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

# run_test DIR GPU TIMEOUT NENV ENV... COMMAND...: one test of tests.txt, run in
# DIR/build as meson would. A CUDA test reported skipped (a *_cuda variant, or a
# skip that names CUDA) is a failure on a GPU node, whatever the exit status.
run_test() {
  local dir=$1 gpu=$2 timeout_s=$3 n=$4 out rc skips
  shift 4
  out=$(cd "$dir/build" && env "${@:1:n}" timeout "$timeout_s" "${@:n+1}" 2>&1)
  rc=$?
  echo "$out"
  skips=$(grep -E '^\[SKIP\] ' <<<"$out" | grep -v 'Test is disabled' | grep -Eic '_cuda:|cuda')
  if [ "$gpu" -eq 1 ] && [ "$skips" -ne 0 ]; then
    echo "FAIL: $skips CUDA test(s) skipped on a GPU node"
    rc=1
  fi
  return "$rc"
}

run_tests() {
  local dir=$1 gpu=$2 line
  local -a f
  [ -s "$dir/tests.txt" ] || { echo "no tests in $dir/tests.txt"; failures=$((failures + 1)); return; }
  while IFS= read -r line; do
    IFS=$'\t' read -r -a f <<<"${line//@DIR@/$dir}"
    step "test ${f[0]} (${f[1]})" run_test "$dir" "$gpu" "${f[@]:2}"
  done <"$dir/tests.txt"
}

peak_memory() {
  local dir=$1 gpu=$2 json rc
  step cuda_peak_memory "$dir/build/repro/cuda_peak_memory"
  json=$("$dir/build/repro/cuda_peak_memory" --json --reps 10)
  rc=$?
  echo "$json"
  if [ "$rc" -ne 0 ]; then failures=$((failures + 1)); fi
  if [ "$gpu" -eq 1 ] && ! grep -q '"backend": "cuda"' <<<"$json"; then
    echo "FAIL: cuda_peak_memory printed no CUDA rows"
    failures=$((failures + 1))
  fi
}

# Short runs (a few seconds each on 16 cores): a sweep, not the recorded benchmark.
# At 16 workers the GPU decoder (--decode gpu, issue 15) runs beside the CPU one; each
# row carries the 16-thread decode-only limit of the same round.
sweep() {
  local dir=$1 data=$2 batch workers warmup batches decode
  for batch in 8 32; do
    for workers in 4 8 16; do
      for decode in cpu gpu; do
        [ "$decode" = gpu ] && [ "$workers" -ne 16 ] && continue
        if [ $((budget_s - SECONDS)) -lt 40 ]; then
          echo "=== throughput batch $batch workers $workers decode $decode: skipped, under 40 s of budget left"
          continue
        fi
        if [ "$batch" -eq 8 ]; then warmup=4 batches=40; else warmup=2 batches=12; fi
        step "throughput batch $batch workers $workers decode $decode" timeout "$(time_left)" \
          "$dir/build/repro/throughput" --device cuda --json --processes 1 --batch "$batch" \
          --workers "$workers" --warmup "$warmup" --batches "$batches" --decode "$decode" \
          --annotations "$data/annotations/instances_val2017.json" --images "$data/val2017"
      done
    done
  done
}

# python/tests against the bundle's libferry.so, when this python3 can run them.
# Torch is checked here, and FERRY_REQUIRE_CUDA (set on a GPU) fails a CUDA variant
# that would skip; FERRY_REQUIRE_TORCH stays unset, because it fails every test whose
# extra is missing too, and pycocotools, moto and RF-DETR (which ./run installs for
# CI) cannot be installed on a node without a network: those tests skip, with -rs
# saying which and why.
python_tests() {
  local dir=$1 lib
  if ! python3 -c 'import torch, pytest, numpy' 2>/dev/null; then
    echo "=== python tests: not run, python3 here lacks torch, pytest or numpy"
    return 0
  fi
  lib=$(find "$dir/build/" -maxdepth 1 -name 'libferry.so*' -type f | head -n 1)
  step "python tests" env FERRY_LIB="$lib" PYTHONPATH="$dir/pkg/python" \
    FERRY_SYNTH_COCO="$dir/build/synth/synth_coco" \
    timeout "$(time_left)" python3 -m pytest -q -rs -p no:cacheprovider "$dir/pkg/python/tests"
}

# nvJPEG against the CPU decoder on the shared photos and the synthetic set (pixel
# differences per channel, the routes), then its batched decode-only rate (issue 15).
nvjpeg_check() {
  local dir=$1 data=$2 batch
  [ -x "$dir/build/repro/nvjpeg_parity" ] || { echo "=== nvjpeg_parity: not built (no nvjpeg.h)"; return; }
  step nvjpeg_parity timeout "$(time_left)" "$dir/build/repro/nvjpeg_parity" \
    "$dir"/data/realdata/photos/* "$data/val2017"
  for batch in 32 128; do
    step "nvjpeg rate batch $batch" timeout "$(time_left)" "$dir/build/repro/nvjpeg_parity" --json \
      --rate 2048 --batch "$batch" "$data/val2017"
  done
}

run() {
  local dir=${1:?usage: gpu_check.sh run DIR [LOG]} gpu=0 work
  dir=$(cd "$dir" && pwd) || return 1
  SECONDS=0 # the budget is the run's, not the bundle's before it
  work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-gpu-check.XXXXXX") || return 1
  trap 'rm -rf "$work"' EXIT
  export LD_LIBRARY_PATH=$dir/lib
  echo "ferry gpu_check run: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname 2>/dev/null), bundle $dir"
  if has_gpu; then
    gpu=1
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    export FERRY_REQUIRE_CUDA=1
  else
    echo "no GPU visible (nvidia-smi): CUDA variants skip, the GPU-only parts do not run"
  fi

  run_tests "$dir" "$gpu"
  python_tests "$dir"
  peak_memory "$dir" "$gpu"
  local images=20
  [ "$gpu" -eq 1 ] && images=1000
  if step synth_coco timeout 120 "$dir/build/synth/synth_coco" --out "$work/synth" \
    --images "$images" --seed 0 && [ "$gpu" -eq 1 ]; then
    step train_loop timeout "$(time_left)" "$dir/build/docs/examples/train_loop" --device cuda \
      --epochs 3 --resume-test --annotations "$work/synth/annotations/instances_val2017.json" \
      --images "$work/synth/val2017"
    sweep "$dir" "$work/synth"
    nvjpeg_check "$dir" "$work/synth"
  fi

  echo "=== gpu_check: $failures failure(s) in $SECONDS s"
  if [ "$failures" -ne 0 ]; then return 1; fi
  if [ "$gpu" -eq 0 ]; then return 2; fi
  return 0
}

# run's output goes to the log as well as to the terminal.
run_logged() {
  local log=${2:-${OUT:-.}/gpu_check.log}
  mkdir -p "$(dirname "$log")"
  run "$1" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

case ${1:-} in
  bundle) bundle "${2:-}" ;;
  run) run_logged "${2:-}" "${3:-}" ;;
  *)
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-gpu-bundle.XXXXXX") || exit 1
    trap 'rm -rf "$tmp"' EXIT
    bundle "$tmp" || exit 1
    run_logged "$tmp" "${1:-}"
    ;;
esac
