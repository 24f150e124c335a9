#!/usr/bin/env python3
"""peak_rss.py's cap bites (issue 25): a test whose process tree passes the cap fails,
also when no single process does (a driver and its child, as diff_pycocotools.py and
its oracle); one under it passes with its own exit status; a run's report sums the
tests that ran at once. usage: check_peak_rss.py PEAK_RSS_PY"""
import json
import os
import subprocess
import sys
import tempfile

HOLD = "import sys, time; b = bytearray({mb} << 20); b[::4096] = b'x' * len(b[::4096]); {then}"


def holder(mb, then="time.sleep(1.5)"):
    return [sys.executable, "-c", HOLD.format(mb=mb, then=then)]


def capped(tool, cap_mb, argv):
    env = dict(os.environ, FERRY_TEST_RSS_CAP_MB=str(cap_mb))
    return subprocess.run([sys.executable, tool] + argv, env=env, capture_output=True, text=True)


def main():
    tool = sys.argv[1]
    problems = []
    one = capped(tool, 100, holder(200))
    if one.returncode != 1 or "over the per-test cap of 100 MiB" not in one.stderr:
        problems.append(f"a 200 MiB test under a 100 MiB cap: exit {one.returncode}, {one.stderr[-300:]!r}")
    # two processes of 70 MiB each: neither passes 100 MiB, their sum does
    pair = holder(70, "import subprocess; subprocess.run([sys.executable, '-c', "
                      "\"b = bytearray(70 << 20); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(1.5)\"])")
    two = capped(tool, 100, pair)
    if two.returncode != 1:
        problems.append(f"two 70 MiB processes under a 100 MiB cap: exit {two.returncode}, {two.stderr[-300:]!r}")
    small = capped(tool, 400, holder(20, "sys.exit(3)"))
    if small.returncode != 3 or "ferry-peak-rss:" not in small.stderr:
        problems.append(f"a 20 MiB test exiting 3 under a 400 MiB cap: exit {small.returncode}, {small.stderr[-300:]!r}")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as log:
        for name, start, peak in [("a", 0.0, 3000), ("b", 1.0, 3000), ("c", 1.5, 3000), ("d", 10.0, 4000)]:
            log.write(json.dumps({"name": name, "result": "OK", "starttime": start, "duration": 2.0,
                                  "stderr": f"x\nferry-peak-rss: {peak} MiB (cap 4096 MiB)\n"}) + "\n")
    over = subprocess.run([sys.executable, tool, "--report", "--cap-mb", "8192", log.name],
                          capture_output=True, text=True)
    under = subprocess.run([sys.executable, tool, "--report", "--cap-mb", "9000", log.name],
                           capture_output=True, text=True)
    os.unlink(log.name)
    if over.returncode != 1 or "9000 MiB" not in over.stdout or under.returncode != 0:
        problems.append(f"report: a, b and c at once make 9000 MiB: {over.stdout!r} / {under.stdout!r}")
    for p in problems:
        print("FAILED: " + p)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
