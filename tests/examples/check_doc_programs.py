#!/usr/bin/env python3
"""Compile and run the C programs shown in the documentation against an installed ferry.

    check_doc_programs.py BUILD_ROOT SYNTH_COCO DOC.md...

Installs the build into a temporary DESTDIR (as `meson install` would), then, for every
```c block of each document that defines main(), compiles it with nothing but
`pkg-config --cflags --libs ferry` (as the documents tell a user to) and runs it on a
small synthetic COCO set (synth_coco --images 16 --seed 5) with the arguments
ANNOTATIONS IMAGES_DIR. Each program must exit 0 and print something. A document with
no such program fails the check (the check would otherwise pass on nothing).
"""
import os
import re
import subprocess
import sys
import tempfile

BLOCK = re.compile(r"^```c\n(.*?)^```", re.S | re.M)


def pkg_config(env, *args):
    return subprocess.run(["pkg-config", *args, "ferry"], env=env, check=True, capture_output=True,
                          text=True).stdout.split()


def main():
    build_root, synth, docs = sys.argv[1], sys.argv[2], sys.argv[3:]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="ferry-doc-programs-") as tmp:
        dest = os.path.join(tmp, "dest")
        subprocess.run(["meson", "install", "-C", build_root, "--destdir", dest, "--no-rebuild",
                        "--quiet"], check=True, stdout=subprocess.DEVNULL)
        pcs = [os.path.join(d, "ferry.pc") for d, _, files in os.walk(dest) if "ferry.pc" in files]
        if not pcs:
            print("FAIL: ferry.pc was not installed")
            return 1
        prefix = next(l.split("=", 1)[1].strip() for l in open(pcs[0]) if l.startswith("prefix="))
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]))
        define = f"--define-variable=prefix={dest}{prefix}"
        flags = pkg_config(env, define, "--cflags", "--libs")
        libdir = pkg_config(env, define, "--variable=libdir")[0]
        data = os.path.join(tmp, "data")
        subprocess.run([synth, "--out", data, "--images", "16", "--seed", "5"], check=True,
                       stdout=subprocess.DEVNULL)
        args = [os.path.join(data, "annotations", "instances_val2017.json"), os.path.join(data, "val2017")]
        for doc in docs:
            programs = [b for b in BLOCK.findall(open(doc, encoding="utf-8").read()) if "int main(" in b]
            if not programs:
                print(f"FAIL: {doc}: no C program found")
                failures += 1
            for k, source in enumerate(programs):
                name = f"{os.path.basename(doc)} program {k + 1}"
                src = os.path.join(tmp, f"prog{k}.c")
                exe = os.path.join(tmp, f"prog{k}")
                with open(src, "w") as f:
                    f.write(source)
                cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", src, "-o", exe, *flags],
                                    capture_output=True, text=True)
                if cc.returncode != 0:
                    print(f"FAIL: {name} does not compile:\n{cc.stderr}")
                    failures += 1
                    continue
                run = subprocess.run([exe, *args], capture_output=True, text=True, timeout=300,
                                     env=dict(os.environ, LD_LIBRARY_PATH=libdir))
                ok = run.returncode == 0 and run.stdout.strip()
                print(f"{'ok:  ' if ok else 'FAIL:'} {name}: exit {run.returncode}: {run.stdout.strip()}")
                if run.stderr.strip():
                    print(run.stderr.strip())
                failures += 0 if ok else 1
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
