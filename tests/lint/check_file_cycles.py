#!/usr/bin/env python3
"""check_file_cycles.py SOURCE_ROOT

No circle of calls between the .c files of one folder: if a.c calls a function that
b.c defines, b.c must not (directly or through other files of the folder) call back
into a.c. A folder then reads bottom-up, each file needing only those below it
(coco/store.c at the bottom of coco/, loaders/handoff.c of loaders/). Across folders
the layers are kept by meson (each layer is a library linked only against those
below). Exits 1 naming each circle and the functions that close it.
"""
import pathlib
import re
import sys

# A "folder/**" entry is the folder with its subfolders, as one: image/gpu may call
# image/ (the resize's filter tables), never the other way round.
FOLDERS = ["lib", "lib/transfer", "source", "coco", "image", "image/gpu", "image/**", "loaders"]
DEFINITION = re.compile(r"^[A-Za-z][^;{()]*?\b(ferry_\w+)\s*\([^;]*?\)\s*\{", re.M | re.S)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def calls_between(files):
    """{file: {other file: [functions of other that file uses]}}"""
    text = {f: COMMENT.sub("", f.read_text()) for f in files}
    defined = {name: f for f in files for name in DEFINITION.findall(text[f])}
    uses = {f: {} for f in files}
    for f in files:
        for name, owner in defined.items():
            if owner != f and re.search(r"\b%s\b" % re.escape(name), text[f]):
                uses[f].setdefault(owner, []).append(name)
    return uses


def circles(uses):
    found, state = [], {}

    def visit(f, path):
        state[f] = "open"
        path.append(f)
        for g in sorted(uses[f]):
            if state.get(g) == "open":
                found.append(path[path.index(g):] + [g])
            elif g not in state:
                visit(g, path)
        path.pop()
        state[f] = "done"

    for f in sorted(uses):
        if f not in state:
            visit(f, [])
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    failures = 0
    for folder in FOLDERS:
        pattern = "**/*.c" if folder.endswith("/**") else "*.c"
        files = sorted((root / folder.removesuffix("/**")).glob(pattern))
        if not files:
            sys.exit(f"no .c files in {root / folder}: wrong source root?")
        uses = calls_between(files)
        for circle in circles(uses):
            failures += 1
            name = lambda f: str(f.relative_to(root))  # noqa: E731
            steps = [f"{name(a)} uses {', '.join(uses[a][b])} of {name(b)}" for a, b in zip(circle, circle[1:])]
            print(f"{folder}: circle {' -> '.join(name(f) for f in circle)}: " + "; ".join(steps))
    if failures:
        return 1
    print(f"no call circles between the files of {', '.join(FOLDERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
