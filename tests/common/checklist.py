"""tests/common/checklist.py - the "ok:"/"FAIL:" lines the Python script tests print.

Import it with sys.path.insert(0, <this folder>). check() prints one line per check and
remembers the failures; summary() prints their count and returns the exit status.
require_modules() imports what a script needs, or ends it: skipped (77) where the
modules are missing, failed (1) under CI, which must have them.
"""
import importlib
import os
import sys

failures = []


def require_modules(*names):
    """Import the named modules, or exit 77 (1 when $CI is set) saying which is missing."""
    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        if os.environ.get("CI"):
            print(f"FAILED: {', '.join(names)} required when CI is set ({e})")
            sys.exit(1)
        print(f"skipped: {', '.join(names)} not installed ({e})")
        sys.exit(77)


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)
    return ok


def summary():
    print(f"{len(failures)} failed checks")
    return 1 if failures else 0
