#!/usr/bin/env python3
"""Total every test suite that `./run test` ran, for the closing line CI reads.

Each meson test is a Criterion binary (many tests), a script (one test), or a
program under the TSan harness. Criterion's synthesis line gives its counts and
its [SKIP] lines the skipped tests; anything else counts as one test by its
meson result. Prints each failure's name, then `N passed, N failed[, N skipped]`.
"""
import json
import re
import sys

SYNTHESIS = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)")


def count(entry):
    """(passed, failed, skipped) for one meson test entry."""
    text = (entry.get("stdout") or "") + (entry.get("stderr") or "")
    skipped = len(re.findall(r"^\[SKIP\]", text, re.M))
    match = SYNTHESIS.search(text)
    result = entry["result"]
    if match:
        tested, passing, failing, crashing = map(int, match.groups())
        failed = failing + crashing
        # A binary that died after its synthesis (a sanitizer report at exit) failed.
        if result not in ("OK", "SKIP") and failed == 0:
            failed = 1
        return passing, failed, skipped
    if result == "SKIP":
        return 0, 0, 1
    if result in ("OK", "EXPECTEDFAIL"):
        return 1, 0, 0
    return 0, 1, 0


def main(logs):
    passed = failed = skipped = 0
    for label_log in logs:
        label, _, path = label_log.partition("=")
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except OSError as err:
            print(f"{label}: no test log ({err})")
            failed += 1
            continue
        for line in lines:
            entry = json.loads(line)
            p, f, s = count(entry)
            passed, failed, skipped = passed + p, failed + f, skipped + s
            if f:
                print(f"FAILED [{label}] {entry['name']} ({entry['result']})")
    tail = f", {skipped} skipped" if skipped else ""
    print(f"{passed} passed, {failed} failed{tail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
