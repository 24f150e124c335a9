#!/usr/bin/env python3
"""Total every test suite that `./run test` ran, for the closing line CI reads.

Each meson test is a Criterion binary (many tests), a script (one test), or a
program under the TSan harness. Criterion's synthesis line gives its counts and
its [SKIP] lines the skipped tests; anything else counts as one test by its
meson result. A log ending in .xml is a pytest JUnit report (python/tests/): each
test case counts by its outcome. Prints each failure's name, then
`N passed, N failed[, N skipped]`.
"""
import json
import re
import sys
import xml.etree.ElementTree as ElementTree

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


def junit_results(path):
    """(name, passed, failed, skipped, why) for each test case of a JUnit XML report."""
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            why = "error" if "error" in outcome else "FAIL"
            yield name, 0, 1, 0, why
        elif "skipped" in outcome:
            yield name, 0, 0, 1, None
        else:
            yield name, 1, 0, 0, None


def meson_results(path):
    """(name, passed, failed, skipped, why) for each entry of a meson testlog.json."""
    for line in open(path, encoding="utf-8").read().splitlines():
        entry = json.loads(line)
        p, f, s = count(entry)
        why = "sanitizer report" if SANITIZER.search(output_of(entry)) else entry["result"]
        yield entry["name"], p, f, s, why


def main(logs):
    passed = failed = skipped = 0
    for label_log in logs:
        label, _, path = label_log.partition("=")
        reader = junit_results if path.endswith(".xml") else meson_results
        try:
            results = list(reader(path))
        except (OSError, ElementTree.ParseError) as err:
            print(f"{label}: no test log ({err})")
            failed += 1
            continue
        for name, p, f, s, why in results:
            passed, failed, skipped = passed + p, failed + f, skipped + s
            if f:
                print(f"FAILED [{label}] {name} ({why})")
    tail = f", {skipped} skipped" if skipped else ""
    print(f"{passed} passed, {failed} failed{tail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
