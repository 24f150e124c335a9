#!/usr/bin/env python3
"""check_file_cycles.py SOURCE_ROOT

No circle anywhere between the source files, by three rules, over every folder that
holds C or CUDA sources (found, not listed: lib, lib/transfer, coco, image, image/gpu,
loaders, tools, repro, docs/examples, python/tests, each folder of tests/, and any
folder added later):
  - calls: no two .c files of one folder call each other in a circle: if a.c calls a
    function that b.c defines, b.c must not (directly or through other files of the
    folder) call back into a.c. A folder with subfolders is also checked as one with
    them (image/gpu may call image/, never the other way round). A folder then reads
    bottom-up, each file needing only those below it (coco/store.c at the bottom of
    coco/, loaders/handoff.c of loaders/). Across folders the layers are kept by meson
    (each layer is a library linked only against those below).
  - includes: no #include chain comes back to where it started (a.h includes b.h
    includes a.h), within a folder or across folders;
  - files: a file uses the file whose header it includes (the .c that defines what the
    header declares, or the .c of the same name beside it), directly or through the
    headers that header includes; no circle of such uses, in any folder or across
    folders. A header declaring the functions of several files joins them, and is what
    made coco.c <-> parse.c a circle before coco/store.h.
Exits 1 naming each circle and what closes it.
"""
import pathlib
import re
import sys

SUFFIXES = {".c", ".h", ".cu", ".cuh"}
SKIP_TOP = {"subprojects"}  # besides hidden folders and build folders
# Headers that declare the functions of several files: for the file rule, each joins the
# files it serves into one, so that only circles through the rest are found. The list is
# for headers that are one interface by design (say why beside each); a header that
# merely has not been split yet is marked so, and comes off when it is (issue 37 split
# coco/, image/image_internal.h, loaders/loader_internal.h, loaders/fill.h and
# lib/transfer's transfer_internal.h and producer.h).
JOINED = {
    # One interface by design: a host half and a CUDA half of one formula's kernels;
    # normalize.c dispatches to normalize_cuda.cu's launch, which only the .cu defines.
    "lib/transfer/normalize.h",       # normalize.c and its kernels, normalize_cuda.cu
    # One interface by design: the kernel-set table resize.c picks one of at run time,
    # each set (resize_avx2.c, _avx512.c, _vbmi.c, normalize_table.c's portable
    # normalisation) filling the same entries; one header keeps the sets in step.
    "image/resize_kernels.h",         # resize.c, the kernel sets, normalize_table.c
}
DEFINITION = re.compile(r"^[A-Za-z][^;{()]*?\b(ferry_\w+)\s*\([^;]*?\)\s*\{", re.M | re.S)
DECLARATION = re.compile(r"\b(ferry_\w+)\s*\(")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(ferry/[^>]+)>)', re.M)


def source_files(root):
    files = []
    for path in sorted(root.rglob("*")):
        top = path.relative_to(root).parts[0]
        if path.suffix in SUFFIXES and path.is_file() and top not in SKIP_TOP and not top.startswith((".", "build")):
            files.append(path)
    return files


def find_circles(graph):
    """Every circle a depth-first walk of {node: {successors}} closes, each once."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


# ---- calls between the .c files of a folder ---------------------------------------

def calls_between(files, text):
    """{file: {other file: [functions of other that file uses]}}"""
    defined = {name: f for f in files for name in DEFINITION.findall(text[f])}
    uses = {f: {} for f in files}
    for f in files:
        for name, owner in defined.items():
            if owner != f and re.search(r"\b%s\b" % re.escape(name), text[f]):
                uses[f].setdefault(owner, []).append(name)
    return uses


def call_groups(root, files):
    """(name, .c files) for each folder, and for each folder with its subfolders."""
    folders = sorted({f.parent for f in files if f.suffix in (".c", ".cu")})
    groups = []
    for folder in folders:
        groups.append((str(folder.relative_to(root)), [f for f in files if f.parent == folder and f.suffix == ".c"]))
        below = [f for f in files if f.suffix == ".c" and folder in f.parents]
        if any(f.parent != folder for f in below):
            groups.append((str(folder.relative_to(root)) + "/**", below))
    return groups


def call_circles(root, files, text, name):
    lines = []
    groups = call_groups(root, files)
    for group, members in groups:
        uses = calls_between(members, text)
        for circle in find_circles(uses):
            steps = [f"{name(a)} uses {', '.join(uses[a][b])} of {name(b)}" for a, b in zip(circle, circle[1:])]
            lines.append(f"{group}: call circle {' -> '.join(name(f) for f in circle)}: " + "; ".join(steps))
    return lines, len(groups)


# ---- includes ---------------------------------------------------------------------

def resolve(root, including, target):
    """The file an #include names, as the compiler finds it: beside the includer, then
    at the source root or include/ (meson's include directories); None if not ours."""
    for base in (including.parent, root, root / "include"):
        path = (base / target).resolve()
        if path.is_file() and root in path.parents:
            return path
    return None


def include_graph(root, files, raw):
    graph = {}
    for f in files:
        graph[f] = set()
        for quoted, angled in INCLUDE.findall(COMMENT.sub("", raw[f])):
            path = resolve(root, f, quoted or angled)
            if path:
                graph[f].add(path)
    return graph


def include_circles(graph, name):
    return [f"include circle {' -> '.join(name(f) for f in circle)}" for circle in find_circles(graph)]


def owners_of(files, text, root):
    """{header: the .c files it belongs to}: those defining what it declares, and the
    .c (or .cu) of the same name beside it. A .c file included as text is its own."""
    defined = {}
    for f in files:
        if f.suffix in (".c", ".cu"):
            for fn in DEFINITION.findall(text[f]):
                defined.setdefault(fn, set()).add(f)
    owners = {}
    for f in files:
        if root / "include" in f.parents:
            owners[f] = set()  # a layer's API: its users are kept by the layers' links
            continue
        if f.suffix in (".c", ".cu"):
            owners[f] = {f}
            continue
        mine = {c for fn in set(DECLARATION.findall(text[f])) for c in defined.get(fn, ())}
        mine |= {c for c in (f.with_suffix(".c"), f.with_suffix(".cu")) if c in text}
        owners[f] = mine
    return owners


def file_circles(root, files, text, graph, name):
    """Circles of 'a.c uses b.c because it includes b.c's header' (through headers)."""
    owners = owners_of(files, text, root)
    why = {}

    def reach(f):
        seen, todo = set(), list(graph[f])
        while todo:
            h = todo.pop()
            if h not in seen:
                seen.add(h)
                if h.suffix in (".h", ".cuh"):
                    todo.extend(graph[h])
        return seen

    parent = {f: f for f in files}

    def find(f):
        while parent[f] != f:
            f = parent[f]
        return f

    for h in files:
        if name(h) in JOINED:
            for a, b in zip(sorted(owners[h]), sorted(owners[h])[1:]):
                parent[max(find(a), find(b))] = min(find(a), find(b))
    unit = {f: find(f) for f in files}
    uses = {}
    for f in files:
        if f.suffix not in (".c", ".cu"):
            continue
        me = unit[f]
        uses.setdefault(me, set())
        for h in reach(f):
            for owner in {unit[o] for o in owners[h]} - {me}:
                uses[me].add(owner)
                why.setdefault((me, owner), f"{name(f)} includes {name(h)}")
    lines = []
    for circle in find_circles(uses):
        steps = [f"{why[(a, b)]} of {name(b)}" for a, b in zip(circle, circle[1:])]
        lines.append(f"file circle {' -> '.join(name(f) for f in circle)}: " + "; ".join(steps))
    return lines


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    files = source_files(root)
    if not any(f.suffix == ".c" for f in files):
        sys.exit(f"no .c files under {root}: wrong source root?")
    raw = {f: f.read_text(errors="replace") for f in files}
    text = {f: COMMENT.sub("", raw[f]) for f in files}
    name = lambda f: str(f.relative_to(root))  # noqa: E731
    calls, groups = call_circles(root, files, text, name)
    graph = include_graph(root, files, raw)
    failures = calls + include_circles(graph, name) + file_circles(root, files, text, graph, name)
    for line in failures:
        print(line)
    if failures:
        return 1
    folders = len({f.parent for f in files})
    print(f"no call circles in {groups} folder groups, no include or file circles across the "
          f"{len(files)} files of {folders} folders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
