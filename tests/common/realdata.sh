# tests/common/realdata.sh - sourced by shell tests: the same rule as realdata.h.
# require_realdata sets REALDATA to $FERRY_SHARED/realdata; when that folder is absent it
# ends the test with 77 (skip) and says why, or with 1 when CI is set.
require_realdata() {
  REALDATA=${FERRY_SHARED:-\$FERRY_SHARED}/realdata
  if [ -n "${FERRY_SHARED:-}" ] && [ -d "$REALDATA" ]; then return 0; fi
  if [ -n "${CI:-}" ]; then
    echo "FAIL: CI is set but the real data is missing: no folder $REALDATA (../shared beside the repo)"
    exit 1
  fi
  echo "skipped: needs the real data in $REALDATA (../shared beside the repo, absent from this clone); with CI set this fails"
  exit 77
}
