#!/usr/bin/env python3
"""Memory bounds of the test suite (issue 25): every test at most 4 GiB resident, the
whole `./run test` at most 8 GiB.

As meson's exe_wrapper (tests/meson.build's default test setup), it runs one test:

    peak_rss.py COMMAND [ARGS...]

It samples the resident memory of the test's whole process tree (the sum of VmRSS of
every descendant, every 50 ms: a test that runs a Python driver and an oracle counts
both), takes the kernel's exact peak of its largest single process at the end
(RUSAGE_CHILDREN), and prints `ferry-peak-rss: N MiB` on stderr. A test whose peak
passes FERRY_TEST_RSS_CAP_MB (default 4096) fails: killed when the sample sees it,
exit status 1 saying so. Otherwise the test's own status is passed on (a test killed by
a signal kills this wrapper with the same signal).

Over meson's logs it bounds a whole run:

    peak_rss.py --report [--cap-mb 8192] build/meson-logs/testlog.json ...

For each log (one `meson test`; ./run runs them one after another) it adds up the
peaks of the tests that ran at the same time, prints the largest such sum and the
largest tests, and exits 1 when a sum passes the cap or a test passed without a peak.
"""
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

MIB = 1 << 20
PERIOD_S = 0.05
TAG = "ferry-peak-rss:"


def tree(pid):
    """pid and every descendant (through /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def run_capped(argv, cap_bytes):
    child = subprocess.Popen(argv)
    peak = [0]
    over = threading.Event()

    def sample():
        while child.poll() is None:
            pids = tree(child.pid)
            total = sum(rss_bytes(p) for p in pids)
            peak[0] = max(peak[0], total)
            if total > cap_bytes:
                over.set()
                for p in pids:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                return
            time.sleep(PERIOD_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = child.wait()
    sampler.join()
    largest = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    peak_bytes = max(peak[0], largest)
    print(f"{TAG} {peak_bytes // MIB} MiB (cap {cap_bytes // MIB} MiB)", file=sys.stderr, flush=True)
    if over.is_set() or peak_bytes > cap_bytes:
        print(f"FAILED: {argv[0]}: resident memory reached {peak_bytes // MIB} MiB, over the "
              f"per-test cap of {cap_bytes // MIB} MiB (FERRY_TEST_RSS_CAP_MB, docs/reliability.md)",
              file=sys.stderr)
        return 1
    if code < 0:  # killed by a signal: die the same way, so meson reports it as such
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def peak_of(entry):
    for line in entry.get("stderr", "").splitlines():
        if line.startswith(TAG):
            return int(line.split()[1]) * MIB
    return None


def report(paths, cap_bytes):
    worst, problems, tests = 0, [], []
    for path in paths:
        if not os.path.exists(path):  # a suite that did not build: its failure is reported elsewhere
            print(f"{path}: no log")
            continue
        with open(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        spans = []
        for e in entries:
            peak = peak_of(e)
            if peak is None:  # killed (a timeout: failed already), or run without this wrapper
                if e.get("result") == "OK":
                    problems.append(f"{path}: {e['name']}: passed without a peak (not run through peak_rss.py)")
                continue
            spans.append((e["starttime"], e["starttime"] + e["duration"], peak))
            tests.append((peak, e["name"]))
        # The largest sum over the moments a test starts (a sum only grows at a start).
        for start, _, _ in spans:
            together = sum(p for s, end, p in spans if s <= start < end or s == start)
            worst = max(worst, together)
    tests.sort(reverse=True)
    print("largest tests: " + ", ".join(f"{n} {p // MIB} MiB" for p, n in tests[:5]))
    print(f"largest sum of tests running at once: {worst // MIB} MiB (cap {cap_bytes // MIB} MiB)")
    if worst > cap_bytes:
        problems.append(f"tests running at once reached {worst // MIB} MiB, over {cap_bytes // MIB} MiB")
    for p in problems:
        print("FAILED: " + p)
    return 1 if problems else 0


def main(argv):
    if argv and argv[0] == "--report":
        args, cap_mb = argv[1:], 8192
        if args[:1] == ["--cap-mb"]:
            cap_mb, args = int(args[1]), args[2:]
        return report(args, cap_mb * MIB)
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    return run_capped(argv, int(os.environ.get("FERRY_TEST_RSS_CAP_MB", "4096")) * MIB)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
