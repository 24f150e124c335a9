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

# Criterion reports a test that leaked or tripped a sanitizer after its assertions
# passed as passing, so the sanitizers' own reports are read here too.
SANITIZER = re.compile(r"ERROR: (Leak|Address)Sanitizer|WARNING: ThreadSanitizer|runtime error:")
SYNTHESIS = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)")


def output_of(entry):
    return (entry.get("stdout") or "") + (entry.get("stderr") or "")


def count(entry):
    """(passed, failed, skipped) for one meson test entry."""
    text = output_of(entry)
    skipped = len(re.findall(r"^\[SKIP\]", text, re.M))
    clean = entry["result"] in ("OK", "EXPECTEDFAIL", "SKIP") and not SANITIZER.search(text)
    match = SYNTHESIS.search(text)
    if match:
        _, passing, failing, crashing = map(int, match.groups())
        failed = failing + crashing
        if not clean and failed == 0:
            # Died after its synthesis or left a sanitizer report: one test failed.
            return passing - 1, 1, skipped
        return passing, failed, skipped
    if entry["result"] == "SKIP":
        return 0, 0, 1
    return (1, 0, 0) if clean else (0, 1, 0)


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
                why = "sanitizer report" if SANITIZER.search(output_of(entry)) else entry["result"]
                print(f"FAILED [{label}] {entry['name']} ({why})")
    tail = f", {skipped} skipped" if skipped else ""
    print(f"{passed} passed, {failed} failed{tail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
