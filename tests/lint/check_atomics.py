#!/usr/bin/env python3
"""check_atomics.py SOURCE_ROOT

One way to write atomics in ferry: C11's <stdatomic.h> (atomic_int, atomic_load,
atomic_fetch_add_explicit, ...), which the library, the programs and the tests use.
The compiler's __atomic_* and __sync_* builtins are not C, and work on plain types,
so a variable shared between threads would not say so in its type and a plain read of
it would compile silently. Prints every use of a builtin in a .c, .h or .cu file as
FILE:LINE and exits 1 if there is one outside KNOWN; exits 1 too when a file in
KNOWN no longer has any (so the list shrinks as they are converted).
"""
import os
import pathlib
import re
import sys

BUILTIN = re.compile(r"\b__(atomic|sync)_\w+")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# Files whose conversion waits for their owners (issue 37: being edited in parallel).
KNOWN = set()
SKIP_DIRS = {".git", ".venv", "data", "subprojects"}


def sources(root):
    """The tree's .c, .h and .cu files, build folders (build*/ at the top) left out."""
    for top, dirs, files in os.walk(root):
        if top == str(root):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        for name in files:
            if name.endswith((".c", ".h", ".cu")):
                yield pathlib.Path(top, name)


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    found, known_seen = [], set()
    for path in sorted(sources(root)):
        rel = path.relative_to(root).as_posix()
        text = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), path.read_text(errors="replace"))
        for n, line in enumerate(text.splitlines(), 1):
            if BUILTIN.search(line):
                if rel in KNOWN:
                    known_seen.add(rel)
                else:
                    found.append(f"{rel}:{n}: {line.strip()}")
    for line in found:
        print(line)
    stale = sorted(KNOWN - known_seen)
    for rel in stale:
        print(f"{rel}: no compiler atomics left; remove it from KNOWN in {pathlib.Path(__file__).name}")
    if found:
        print(f"{len(found)} use(s) of __atomic/__sync builtins: use <stdatomic.h> (docs/architecture.md)")
    return 1 if found or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
