"""tests/common/checklist.py - the "ok:"/"FAIL:" lines the Python script tests print.

Import it with sys.path.insert(0, <this folder>). check() prints one line per check and
remembers the failures; summary() prints their count and returns the exit status.
"""
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)
    return ok


def summary():
    print(f"{len(failures)} failed checks")
    return 1 if failures else 0
