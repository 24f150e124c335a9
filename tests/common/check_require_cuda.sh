#!/bin/sh
# tests/common/check_require_cuda.sh BINARY SUITE/TEST - FERRY_REQUIRE_CUDA=1 is honoured.
#
# Runs one CUDA variant of a Criterion test binary (SUITE/TEST, e.g.
# device/copies_complete_at_their_event_cuda) twice:
#   - without FERRY_REQUIRE_CUDA it must pass (run, or skip for want of a GPU), and must
#     really have been selected, so a stale name cannot pass vacuously;
#   - with FERRY_REQUIRE_CUDA=1 it must FAIL when this machine has no GPU (nvidia-smi -L
#     lists none), and pass when it has one.
# So a GPU check that sets the variable cannot pass on CUDA variants that only skipped.
set -u
bin=$1
test_id=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT

if ! env -u FERRY_REQUIRE_CUDA "$bin" --filter "$test_id" --verbose >"$log" 2>&1; then
  cat "$log"
  echo "FAIL: $test_id fails without FERRY_REQUIRE_CUDA"
  exit 1
fi
suite=${test_id%%/*}
name=${test_id#*/}
if ! grep -qF "[RUN ] $suite::$name" "$log"; then
  cat "$log"
  echo "FAIL: $bin has no test $test_id"
  exit 1
fi

if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then gpu=1; else gpu=0; fi
FERRY_REQUIRE_CUDA=1 "$bin" --filter "$test_id" >"$log" 2>&1
rc=$?
if [ "$gpu" = 1 ] && [ "$rc" != 0 ]; then
  cat "$log"
  echo "FAIL: a GPU is visible but $test_id failed with FERRY_REQUIRE_CUDA=1"
  exit 1
fi
if [ "$gpu" = 0 ] && [ "$rc" = 0 ]; then
  cat "$log"
  echo "FAIL: no GPU, yet $test_id passed with FERRY_REQUIRE_CUDA=1 (it must fail, not skip)"
  exit 1
fi
echo "ok: $test_id with FERRY_REQUIRE_CUDA=1 and gpu=$gpu exited $rc"
