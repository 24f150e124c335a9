#!/usr/bin/env python3
"""check_internal_names.py SOURCE_ROOT

The names of the library's types say who may use them (docs/architecture.md, "Names"):
  - public types, declared in include/ferry/, are ferry_...;
  - a type that an internal header declares (a .h anywhere else in the library) is
    shared between files, and is ferry__... (or the body of a public opaque type, such
    as struct ferry_coco in coco/store.h);
  - a type private to one .c file may stay bare (SQLite's style), but is never ferry_...
    unless public: that prefix promises the API.
The library is every source folder but include/ and the programs' folders (tests/,
repro/, synth/, tools/, docs/, python/), so a new folder is checked without being listed.
Types are struct, union and enum tags (defined or declared) and typedef names; enum
constants and macros are not checked. Exits 1 naming each type that breaks the rule.
"""
import pathlib
import re
import sys

PUBLIC = "include/ferry"
NOT_LIBRARY = {"include", "tests", "repro", "synth", "tools", "docs", "python", "subprojects"}
SUFFIXES = {".c", ".h", ".cu", ".cuh"}

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"", re.S)
TAG = re.compile(r"\b(?:struct|union|enum)\s+(\w+)\s*[{;]")
TYPEDEF = re.compile(r"\btypedef\b")
FUNCTION_POINTER = re.compile(r"\(\s*\*\s*(\w+)\s*\)\s*\(")
LAST_NAME = re.compile(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$")


def typedef_names(text):
    """The name each typedef declares (the last one of a list is enough here)."""
    names = []
    for m in TYPEDEF.finditer(text):
        depth, i = 0, m.end()
        while i < len(text) and not (text[i] == ";" and depth == 0):
            depth += text[i] in "{(" and 1 or text[i] in "})" and -1 or 0
            i += 1
        body = text[m.end():i]
        if "}" in body:
            body = body[body.rindex("}") + 1:]
        pointer = FUNCTION_POINTER.search(body)
        last = pointer or LAST_NAME.search(body.strip())
        if last:
            names.append(last.group(1))
    return names


def types_of(path):
    text = COMMENT.sub("", path.read_text(errors="replace"))
    return sorted(set(TAG.findall(text)) | set(typedef_names(text)))


def library_files(root):
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        top = rel.parts[0]
        if path.suffix in SUFFIXES and top not in NOT_LIBRARY and not top.startswith((".", "build")):
            yield rel


def offence(rel, name, public):
    """Why this name breaks the rule in this file, or None."""
    if name.startswith("ferry__") or name in public:
        return None
    if rel.suffix in (".h", ".cuh"):
        return "an internal header's type is named ferry__"
    if name.startswith("ferry_"):
        return "ferry_ is for public types: a .c file's own type is bare or ferry__"
    return None


def main():
    root = pathlib.Path(sys.argv[1])
    public = {name for h in (root / PUBLIC).glob("*.h") for name in types_of(h)}
    if not public:
        sys.exit(f"no types in {root / PUBLIC}: wrong source root?")
    bad, checked = [], 0
    for rel in library_files(root):
        for name in types_of(root / rel):
            checked += 1
            why = offence(rel, name, public)
            if why:
                bad.append(f"{rel}: {name}: {why}")
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} internal type(s) not named by the rule (docs/architecture.md, Names)")
        return 1
    print(f"{checked} types of the library named by the rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
