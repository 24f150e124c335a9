#!/usr/bin/env python3
"""Check that every relative link in README.md and docs/*.md points at a file or folder
that exists.

    check_doc_links.py SOURCE_ROOT

Links are Markdown's [text](target); web links (scheme://, mailto:) and pure anchors
are not checked, and an anchor after a path (#section) is ignored. Prints each broken
link as FILE:LINE: TARGET; exits 1 if there is any, or if no link was found at all.
"""
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def documents(root):
    yield os.path.join(root, "README.md")
    docs = os.path.join(root, "docs")
    for name in sorted(os.listdir(docs)):
        if name.endswith(".md"):
            yield os.path.join(docs, name)


def main():
    root = sys.argv[1]
    checked = broken = 0
    for doc in documents(root):
        if not os.path.exists(doc):
            print(f"{doc}: missing")
            broken += 1
            continue
        in_code = False
        for number, line in enumerate(open(doc, encoding="utf-8"), 1):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                path = os.path.normpath(os.path.join(os.path.dirname(doc), target.split("#")[0]))
                checked += 1
                if not os.path.exists(path):
                    print(f"{os.path.relpath(doc, root)}:{number}: {target} does not exist")
                    broken += 1
    print(f"{checked} links checked, {broken} broken")
    return 1 if broken or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
