"""tests/common/realdata.py - the one way a Python test finds the real files beside the repo.

The same rule as tests/common/realdata.h: $FERRY_SHARED/realdata (../shared) absent skips
the test with exit 77 and says why, unless CI is set, where it fails (exit 1).
Import it with sys.path.insert(0, <this folder>); realdata() returns the folder.
"""
import os
import sys

SKIP = 77


def realdata():
    root = os.environ.get("FERRY_SHARED")
    folder = os.path.join(root or "$FERRY_SHARED", "realdata")
    if root and os.path.isdir(folder):
        return folder
    if os.environ.get("CI"):
        print(f"FAIL: CI is set but the real data is missing: no folder {folder} (../shared beside the repo)")
        sys.exit(1)
    print(f"skipped: needs the real data in {folder} (../shared beside the repo, absent from this "
          "clone); with CI set this fails")
    sys.exit(SKIP)
