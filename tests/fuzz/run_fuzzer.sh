#!/usr/bin/env bash
# tests/fuzz/run_fuzzer.sh FUZZER KIND MAX_LEN DEFAULT_SECONDS WORK_DIR [SEED_TOOL]
#
# Runs one libFuzzer target for $FERRY_FUZZ_SECONDS (else DEFAULT_SECONDS) seconds on
# seeds made now from ../shared/realdata (make_seeds.py) plus the corpus that earlier
# runs grew in WORK_DIR/corpus-KIND. Fails on any crash, leak, sanitizer report,
# unit slower than 60 s or use of more than 2.5 GB; the failing input is saved as
# WORK_DIR/crash-KIND-* (replay it with `FUZZER FILE`; add it to
# tests/fuzz/regressions/KIND/ once fixed). Prints libFuzzer's final statistics
# (executions, coverage) that docs/reliability.md records. SEED_TOOL is passed on to
# make_seeds.py (the index seeds are made by ferry-coco).
set -euo pipefail
if [ $# -ne 5 ] && [ $# -ne 6 ]; then
  echo "usage: $0 FUZZER KIND MAX_LEN DEFAULT_SECONDS WORK_DIR [SEED_TOOL]" >&2
  exit 2
fi
fuzzer=$1 kind=$2 max_len=$3 default_seconds=$4 work=$5 seed_tool=${6:-}
here=$(cd "$(dirname "$0")" && pwd)
seconds=${FERRY_FUZZ_SECONDS:-$default_seconds}
seeds=$work/seeds-$kind corpus=$work/corpus-$kind
mkdir -p "$corpus"
rm -rf "$seeds"
python3 "$here/make_seeds.py" "$kind" "$seeds" ${seed_tool:+"$seed_tool"}
# The image fuzzers allocate up to their pixel limit; leaks are checked at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "fuzzing $kind for $seconds s (max_len $max_len)"
exec "$fuzzer" -max_total_time="$seconds" -max_len="$max_len" -timeout=60 -rss_limit_mb=2560 \
  -print_final_stats=1 -artifact_prefix="$work/crash-$kind-" "$corpus" "$seeds"
