#!/usr/bin/env python3
"""The example programs' command line (docs/examples/example_args.c), run as a user would.

    check_example_args.py SYNTH_COCO DEMO TRAIN_LOOP

For demo and train_loop alike:
  - --help exits 0 and prints every flag with its default on stdout;
  - a bad number (--batch -1, abc, 0, 99999999999999999999; --workers x; --resolution 1)
    exits 2 with a message naming the flag and the value, before any work;
  - --on-error skip on a set with one half-truncated JPEG finishes and reports
    "1 samples skipped (--on-error skip)"; --on-error fail (the default) exits 1 with a
    message naming the sample's dataset index and file and the skip policy;
  - --decode gpu on the host device fails at open, saying that it needs a CUDA device
    and nvJPEG; --decode with another word than cpu, gpu, auto exits 2;
  - a missing images folder fails at open, naming it;
  - --device cuda on a machine without a GPU says that --device host runs on the CPU.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checklist import check, summary  # noqa: E402  (the lines every script test prints)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def has_gpu():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    except OSError:
        return False
    return any(line.startswith("GPU") for line in out.splitlines())


def make_sets(synth, tmp):
    """A good set, and a copy of it whose first image is cut in half."""
    good = os.path.join(tmp, "good")
    subprocess.run([synth, "--out", good, "--images", "12", "--seed", "4", "--threads", "1"],
                   check=True, stdout=subprocess.DEVNULL, timeout=300)
    ann = os.path.join(good, "annotations", "instances_val2017.json")
    broken = os.path.join(tmp, "broken")
    shutil.copytree(os.path.join(good, "val2017"), broken)
    with open(ann) as f:
        first = json.load(f)["images"][0]["file_name"]
    victim = os.path.join(broken, first)
    with open(victim, "rb") as f:
        data = f.read()
    with open(victim, "wb") as f:
        f.write(data[: len(data) // 2])
    return ann, os.path.join(good, "val2017"), broken, first


def check_program(name, exe, ann, good, broken, victim):
    base = [exe, "--annotations", ann, "--images", good, "--resolution", "32", "--epochs", "1",
            "--workers", "2"]
    rc, out, err = run([exe, "--help"])
    check(rc == 0 and out.startswith(f"usage: {name}") and "--on-error" in out and "(default " in out,
          f"{name} --help: exit 0, the usage and the defaults on stdout (rc {rc})")

    bad = [("--batch", "-1", "out of range"), ("--batch", "abc", "not a whole number"),
           ("--batch", "0", "out of range"), ("--batch", "99999999999999999999", "out of range"),
           ("--workers", "x", "not a whole number"), ("--resolution", "1", "out of range"),
           ("--on-error", "sometimes", "neither skip nor fail"),
           ("--decode", "fast", "none of cpu, gpu, auto"),
           ("--augment", "flip", "none of none, val-square, val, rfdetr-square, rfdetr"),
           ("--multi-scale", "often", "none of off, per-sample, per-batch")]
    for flag, value, why in bad:
        rc, out, err = run(base + [flag, value])
        check(rc == 2 and f"{name}: {flag}: " in err and value in err and why in err
              and "out of memory" not in err,
              f"{name} {flag} {value}: exit 2 naming the flag ({rc}: {err.splitlines()[:1]})")
    rc, out, err = run([exe, "--images", good])
    check(rc == 2 and "--annotations is required" in err, f"{name} without --annotations: exit 2 ({rc})")

    rc, out, err = run(base[:4] + [broken] + base[5:] + ["--batch", "4", "--on-error", "skip"])
    # One epoch: the sample is skipped once in it. The loader begins the next epoch as
    # soon as one ends (ferry_loader_stats.samples_skipped counts since open), so when
    # its prefetch reaches the broken file before the count is read, it says 2.
    skipped = re.search(r"(\d+) samples skipped \(--on-error skip\)", out)
    check(rc == 0 and skipped is not None and int(skipped.group(1)) in (1, 2),
          f"{name} --on-error skip: finishes and counts the skipped sample "
          f"(rc {rc}: {skipped.group(0) if skipped else 'no count'}; {err.strip()[-200:]})")
    rc, out, err = run(base[:4] + [broken] + base[5:] + ["--batch", "4"])
    check(rc == 1 and "dataset index " in err and f"file {victim})" in err
          and "FERRY_ON_ERROR_SKIP" in err,
          f"{name} (--on-error fail): exit 1 naming the dataset index, file and the skip policy "
          f"(rc {rc}: {err.strip()[-300:]})")

    rc, out, err = run(base + ["--decode", "gpu"])
    check(rc == 1 and "needs a CUDA device and nvJPEG" in err,
          f"{name} --decode gpu on the host: fails at open saying what it needs (rc {rc}: {err.strip()})")

    rc, out, err = run(base[:4] + [good + "-missing"] + base[5:])
    check(rc == 1 and f"images folder {good}-missing" in err,
          f"{name} with a missing images folder: fails at open naming it (rc {rc}: {err.strip()})")

    if not has_gpu():
        rc, out, err = run(base + ["--device", "cuda"])
        why = "no usable NVIDIA GPU" in err or "built without the CUDA toolkit" in err
        check(rc == 1 and "--device host" in err and why,
              f"{name} --device cuda without a GPU: points to --device host (rc {rc}: {err.strip()})")


def main():
    synth, demo, train_loop = sys.argv[1:4]
    with tempfile.TemporaryDirectory(prefix="ferry-example-args-") as tmp:
        ann, good, broken, victim = make_sets(synth, tmp)
        check_program("demo", demo, ann, good, broken, victim)
        check_program("train_loop", train_loop, ann, good, broken, victim)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
