#!/usr/bin/env python3
"""Hold the C lines changed since a recorded base commit to .clang-format.

    check_format.py [SOURCE_ROOT] [--base REV] [--fix]

The tree was written before it had a .clang-format, and reformatting all of it at once
would bury every line's history under one commit; so only what changes is held to the
style. The lines checked are those that differ between the base (the commit named in
tests/lint/format-base, or --base) and the working tree, in .c, .h and .cu files: `git
diff -M -U0` gives their ranges (a moved file counts only the lines its move changed),
and `clang-format --lines` formats those ranges alone (clang-format may widen a range
to the whole statement it cuts through). Prints the diff that would make them right and
exits 1, or exits 0 when there is none. --fix applies it to the files instead.

Exits 77 (meson's "skipped") when clang-format is not installed, SOURCE_ROOT is not a
git checkout, or the base commit is not in its history (a shallow clone, a tarball),
unless FERRY_REQUIRE_FORMAT=1 (./run sets it under CI), which makes those failures.
"""
import difflib
import os
import re
import shutil
import subprocess
import sys

EXTENSIONS = (".c", ".h", ".cu")
HUNK = re.compile(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", re.M)
SKIP = 77


def unavailable(why):
    if os.environ.get("FERRY_REQUIRE_FORMAT") == "1":
        print(f"format check cannot run: {why} (FERRY_REQUIRE_FORMAT=1)")
        return 1
    print(f"format check skipped: {why}")
    return SKIP


def git(root, *args):
    return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)


def changed_ranges(root, base):
    """{path relative to root: [(first, last), ...]} of the working tree's lines that
    differ from base, 1-based and inclusive. One patch over the whole tree, so that
    rename detection sees both names of a moved file; deleted files have no lines."""
    patch = git(root, "diff", "--no-ext-diff", "--no-color", "--no-prefix", "-M", "-U0", base, "--")
    ranges, path = {}, None
    for line in patch.stdout.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            path = name if name != "/dev/null" and name.endswith(EXTENSIONS) else None
            continue
        match = HUNK.match(line)
        if path and match:
            start, count = int(match.group(1)), 1 if match.group(2) is None else int(match.group(2))
            if count:  # a hunk that only deletes leaves no line to check
                ranges.setdefault(path, []).append((start, start + count - 1))
    return ranges


def main(argv):
    args = argv[1:]
    fix = "--fix" in args
    args = [a for a in args if a != "--fix"]
    base = None
    if "--base" in args:
        i = args.index("--base")
        base = args[i + 1]
        del args[i:i + 2]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))

    clang_format = shutil.which("clang-format")
    if not clang_format:
        return unavailable("clang-format is not installed (Debian: apt-get install clang-format)")
    if git(root, "rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        return unavailable(f"{root} is not a git checkout")
    if base is None:
        with open(os.path.join(root, "tests", "lint", "format-base")) as f:
            base = f.read().split()[0]
    if git(root, "cat-file", "-e", f"{base}^{{commit}}").returncode != 0:
        return unavailable(f"the base commit {base} is not in this checkout's history (a shallow clone?)")

    ranges = changed_ranges(root, base)
    wrong = []
    for path, spans in sorted(ranges.items()):
        full = os.path.join(root, path)
        with open(full) as f:
            before = f.read()
        cmd = [clang_format, f"--assume-filename={full}"] + [f"--lines={a}:{b}" for a, b in spans]
        done = subprocess.run(cmd, input=before, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{path}: clang-format failed: {done.stderr.strip()}")
            return 1
        after = done.stdout
        if after == before:
            continue
        wrong.append(path)
        if fix:
            with open(full, "w") as f:
                f.write(after)
        else:
            sys.stdout.writelines(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                                       f"a/{path}", f"b/{path}"))
    checked = sum(b - a + 1 for spans in ranges.values() for a, b in spans)
    if fix:
        print(f"formatted {len(wrong)} file(s)" + "".join(f"\n  {p}" for p in wrong))
        return 0
    if wrong:
        print(f"\n{len(wrong)} file(s) with lines changed since {base} that .clang-format would change "
              f"(tests/lint/check_format.py --fix applies the diff above)")
        return 1
    print(f"{checked} changed line(s) in {len(ranges)} C file(s) since {base}: formatted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
