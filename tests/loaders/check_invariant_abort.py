#!/usr/bin/env python3
"""In the checking builds, a broken loader invariant aborts the release that lets it out.

    check_invariant_abort.py INVARIANT_ABORT ANNOTATIONS IMAGES

Runs tests/loaders/invariant_abort (which breaks the ready count under the lock and
releases it) and requires death by SIGABRT with the invariant named on stderr. Exit 77
(skipped) where the build does not check (FERRY_LOADER_CHECKS 0: the normal build).
"""
import signal
import subprocess
import sys


def main():
    run = subprocess.run(sys.argv[1:4], capture_output=True, text=True, timeout=120)
    if run.returncode == 77:
        print(run.stdout.strip())
        return 77
    died = run.returncode == -signal.SIGABRT
    named = "loader invariant broken" in run.stderr and "ready is" in run.stderr
    print(f"exit {run.returncode}; stderr: {run.stderr.strip()[:300]}")
    if died and named:
        print("ok: the release aborted, naming the broken invariant")
        return 0
    print("FAILED: expected SIGABRT and 'loader invariant broken: ... ready is ...' on stderr")
    return 1


if __name__ == "__main__":
    sys.exit(main())
