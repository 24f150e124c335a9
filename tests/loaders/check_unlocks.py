#!/usr/bin/env python3
"""Every release of the loader's lock goes through ferry__loader_unlock or
ferry__loader_wait (loaders/handoff.c), which send the wake-ups owed and run the
invariant checker first: no file of loaders/ unlocks it otherwise.

    check_unlocks.py SOURCE_ROOT
"""
import pathlib
import re
import sys

UNLOCK = re.compile(r"pthread_mutex_unlock\s*\(\s*&\s*\w+->lock\s*\)")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def main():
    root = pathlib.Path(sys.argv[1])
    bad = []
    for path in sorted((root / "loaders").glob("*.c")):
        text = COMMENT.sub("", path.read_text())
        for m in UNLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            inside = text.rfind("void ferry__loader_unlock(", 0, m.start())
            next_fn = text.find("\n}\n", inside)
            if path.name == "handoff.c" and inside >= 0 and m.start() < next_fn:
                continue
            bad.append(f"{path.relative_to(root)}:{line}: a plain unlock of the loader's lock")
    for b in bad:
        print(b)
    if bad:
        print("use ferry__loader_unlock: it sends the wake-ups owed and checks the invariants")
        return 1
    print("every release of the loader's lock goes through ferry__loader_unlock or ferry__loader_wait")
    return 0


if __name__ == "__main__":
    sys.exit(main())
