#!/usr/bin/env python3
"""check_layer_includes.py SOURCE_ROOT

Each layer includes only its own floor and below (issue 37, docs/architecture.md,
"Layers"). Every #include "..." of a .c, .h, .cu or .cuh file in a layer's folder
(lib/, coco/, image/, source/, loaders/) and of a public header (include/ferry/, each
the layer's whose API it is) must name a header of the same layer or of one it
stands on; and a layer above lib/ may include of lib/'s own headers only the floor
ones (FLOOR), which lib/ offers every layer. Headers of no layer (ferry_config.h, the
build's) pass; <...> includes are the system's and are not looked at.

Prints FILE:LINE: what is wrong, for every such include, and exits 1 if there is one;
also exits 1 when a floor header no longer exists or docs/architecture.md does not
name it (the list and the document stay one list). A layer folder that does not exist
(source/, before it is made) is simply empty.
"""
import pathlib
import re
import sys

# What each layer stands on (itself included). coco/, image/ and source/ are side by
# side over lib/ and do not see each other; loaders/ sees them all.
BELOW = {
    "lib": {"lib"},
    "coco": {"coco", "lib"},
    "image": {"image", "lib"},
    "source": {"source", "lib"},
    "loaders": {"loaders", "source", "coco", "image", "lib"},
}
# The public headers' layers: ferry/X.h is X's when X is a layer (ferry/source.h, say).
PUBLIC = {
    "error.h": "lib", "export.h": "lib", "tensor.h": "lib", "device.h": "lib", "pool.h": "lib",
    "batch.h": "lib", "advanced.h": "lib", "transfer.h": "lib", "dlpack.h": "lib",
    "coco.h": "coco", "mask.h": "coco",
    "image.h": "image",
    "loader.h": "loaders", "ferry.h": "loaders",  # ferry.h includes every layer's API
}
# lib/'s floor: the internal headers meant for every layer above it. Everything else of
# lib/ (device_internal.h, batch_internal.h, transfer/transfer_internal.h, transfer/device_batch_internal.h, ...) is
# lib/'s own.
FLOOR = {
    "lib/alloc.h", "lib/status.h", "lib/thread.h", "lib/cond.h", "lib/rng.h", "lib/nearest.h",
    "lib/struct_size.h", "lib/batch_fields.h", "lib/device_native.h",
    "lib/transfer/producer.h", "lib/transfer/device_batch.h", "lib/transfer/sample_name.h",
    "lib/transfer/normalize.h",
}
SOURCES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def layer_of(rel):
    """The layer a path (relative to the root, posix) belongs to, or None."""
    parts = rel.split("/")
    if parts[0] in BELOW:
        return parts[0]
    if parts[:2] == ["include", "ferry"] and len(parts) == 3:
        name = parts[2]
        return PUBLIC.get(name, name[:-2] if name[:-2] in BELOW else None)
    return None


def resolve(root, including, name):
    """The root-relative path an include names: next to the including file when it is
    there (C's own rule for "..."), else from the include directories (root, include/)."""
    for base in (including.parent, root, root / "include"):
        if (base / name).is_file():
            return (base / name).resolve().relative_to(root.resolve()).as_posix()
    return name if "/" in name else None


def problem(rel, target):
    """What is wrong with file `rel` including `target` (both root-relative), or None."""
    mine, theirs = layer_of(rel), layer_of(target)
    if not mine or not theirs:
        return None
    if theirs not in BELOW[mine]:
        return f'{mine}/ may not include "{target}" ({theirs}/ is not below it: {", ".join(sorted(BELOW[mine]))})'
    if mine != "lib" and theirs == "lib" and not target.startswith("include/") and target not in FLOOR:
        return f'"{target}" is lib/\'s own; a layer above includes only lib/\'s floor headers (docs/architecture.md)'
    return None


def files(root):
    for top in list(BELOW) + ["include/ferry"]:
        folder = root / top
        if folder.is_dir():
            yield from sorted(p for p in folder.rglob("*") if p.suffix in SOURCES and p.is_file())


def check_floor(root):
    doc = (root / "docs" / "architecture.md").read_text(errors="replace")
    out = []
    for header in sorted(FLOOR):
        if not (root / header).is_file():
            out.append(f"{header}: listed as a floor header but missing")
        elif f"`{header}`" not in doc:
            out.append(f"docs/architecture.md: does not name the floor header `{header}`")
    return out


def main(argv):
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    found = check_floor(root)
    checked = 0
    for path in files(root):
        rel = path.relative_to(root).as_posix()
        # Comments blanked, lines kept: an include named in a comment is no include.
        text = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), path.read_text(errors="replace"))
        for n, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            checked += 1
            target = resolve(root, path, m.group(1))
            why = problem(rel, target) if target else None
            if why:
                found.append(f'{rel}:{n}: #include "{m.group(1)}": {why}')
    for line in found:
        print(line)
    if found:
        print(f"check_layer_includes: {len(found)} problem(s) in {checked} includes", file=sys.stderr)
        return 1
    print(f"check_layer_includes: {checked} includes, each of its own layer or below")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
