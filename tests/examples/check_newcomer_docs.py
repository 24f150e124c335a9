#!/usr/bin/env python3
"""What a newcomer reads first matches what exists.

    check_newcomer_docs.py SOURCE_ROOT FERRY_COCO

  - every command `ferry-coco --help` lists is documented in docs/api.md
    ("`ferry-coco CMD"), and README.md mentions ferry-coco;
  - the comment at the top of ./run, its usage message and its case arms list the same
    commands;
  - docs/pytorch.md says how to get PyTorch (a pip and an apt command for torch).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checklist import check, summary  # noqa: E402  (the lines every script test prints)


def read(root, rel):
    with open(f"{root}/{rel}") as f:
        return f.read()


def check_ferry_coco(root, tool):
    out = subprocess.run([tool, "--help"], capture_output=True, text=True, check=True).stdout
    commands = re.findall(r"^  ferry-coco (\w+)", out, re.M)
    check(len(commands) >= 4, f"ferry-coco --help lists its commands: {commands}")
    api = read(root, "docs/api.md")
    for c in commands:
        check(f"`ferry-coco {c}" in api, f"docs/api.md documents `ferry-coco {c}`")
    check("ferry-coco" in read(root, "README.md"), "README.md mentions ferry-coco")


def check_run(root):
    run = read(root, "run")
    header = re.search(r"^# \./run (.+)$", run, re.M)
    usage = re.search(r'echo "usage: \./run ([^"]+)"', run)
    arms = re.findall(r"^  (\w+)\) cmd_\w+ ;;", run, re.M)
    listed = sorted(w.strip() for w in header[1].split("|")) if header else []
    said = sorted(w.strip() for w in usage[1].split("|")) if usage else []
    check(bool(arms) and listed == sorted(arms), f"./run's top comment lists its commands: {listed} vs {sorted(arms)}")
    check(said == sorted(arms), f"./run's usage lists its commands: {said} vs {sorted(arms)}")


def check_pytorch(root):
    doc = read(root, "docs/pytorch.md")
    check(re.search(r"pip install torch\b", doc) is not None, "docs/pytorch.md gives a pip command for torch")
    check("apt-get install python3-torch" in doc, "docs/pytorch.md gives Debian's package for torch")


def main():
    root, tool = sys.argv[1:3]
    check_ferry_coco(root, tool)
    check_run(root)
    check_pytorch(root)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
