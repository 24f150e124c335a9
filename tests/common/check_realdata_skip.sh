#!/usr/bin/env bash
# tests/common/check_realdata_skip.sh BINARY SUITE/TEST PYTHON_TEST ARG - a clone without
# ../shared skips what needs the real data and says why; CI=true makes it fail instead.
#
# With FERRY_SHARED pointing at a folder that does not exist, runs
#   - one test of a Criterion binary that needs the real data (tests/common/realdata.h):
#     it must pass as a skip naming the missing folder without CI, and fail under CI;
#   - a Python script test (tests/common/realdata.py): exit 77 without CI, 1 under CI;
#   - require_realdata of tests/common/realdata.sh: the same exit codes.
set -u
bin=$1 test_id=$2 script=$3 script_arg=$4
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export FERRY_SHARED=/nonexistent/ferry-shared
failures=0
fail() { cat "$log"; echo "FAIL: $*"; failures=$((failures + 1)); }

suite=${test_id%%/*} name=${test_id#*/}
env -u CI "$bin" --filter "$test_id" --verbose >"$log" 2>&1
rc=$?
if [ "$rc" != 0 ]; then fail "$test_id without CI exited $rc (a skip is 0)"
elif ! grep -qF "[SKIP] $suite::$name" "$log"; then fail "$test_id was not skipped"
elif ! grep -qF "$FERRY_SHARED/realdata (../shared beside the repo, absent from this clone)" "$log"; then
  fail "$test_id's skip does not say why"
fi
CI=true "$bin" --filter "$test_id" >"$log" 2>&1
rc=$?
if [ "$rc" = 0 ]; then fail "$test_id passed under CI without the real data"
elif ! grep -qF "CI is set but the real data is missing" "$log"; then fail "$test_id under CI: no reason given"
fi

env -u CI python3 "$script" "$script_arg" >"$log" 2>&1
rc=$?
[ "$rc" = 77 ] && grep -qF "absent from this clone" "$log" || fail "$script without CI exited $rc (want 77 and why)"
CI=true python3 "$script" "$script_arg" >"$log" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -qF "CI is set" "$log" || fail "$script under CI exited $rc (want 1)"

env -u CI bash -c '. "$1"; require_realdata; echo "not reached"' _ "$here/realdata.sh" >"$log" 2>&1
rc=$?
[ "$rc" = 77 ] && grep -qF "absent from this clone" "$log" || fail "realdata.sh without CI exited $rc (want 77)"
CI=true bash -c '. "$1"; require_realdata; echo "not reached"' _ "$here/realdata.sh" >"$log" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "realdata.sh under CI exited $rc (want 1)"

[ "$failures" = 0 ] || exit 1
echo "ok: without ../shared, C, Python and shell tests skip saying why, and fail under CI"
