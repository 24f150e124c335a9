#!/usr/bin/env python3
"""Run docs/examples/train_loop and check that it learns and resumes exactly.

    check_train_loop.py SYNTH_COCO TRAIN_LOOP

On a synthetic 48-image set (synth_coco --images 48 --seed 3):
  1. an uninterrupted run (2 workers) must lower the epoch mean loss: the last epoch's
     below 0.8 x the first's;
  2. a --resume-test run (1 worker) saves a checkpoint mid-epoch, resumes on a second
     loader, and must report the bit-for-bit verdict; independently of that verdict,
     every step loss it prints (C99 hex floats, so exact) must equal the uninterrupted
     run's for the same step, in both the first leg and the resumed leg, and the
     resumed leg's epoch summaries must equal the uninterrupted run's lines.
  3. with RF-DETR's training recipe (--augment rfdetr --multi-scale per-sample: flips,
     random crops, every sample its own size), the same resume check: a recipe's
     draws are keyed by (seed, epoch, sample), so the resumed leg replays them.
Then, when $FERRY_SHARED/realdata/dali_coco/coco exists (61 real photos), the same
resume check and a falling loss on it.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checklist import check, summary  # noqa: E402  (the lines every script test prints)

EPOCH = re.compile(r"^epoch (\d+): loss ([0-9.]+) .* over (\d+) steps$")
STEP = re.compile(r"^step (\d+): loss \S+ \((\S+)\)$")
CHECKPOINT = re.compile(r"^checkpoint after step (\d+):")


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    check(p.returncode == 0, f"exit status 0 (got {p.returncode})")
    return p.stdout.splitlines()


def epochs_of(lines):
    return [(int(m[1]), float(m[2]), int(m[3]), line) for line in lines if (m := EPOCH.match(line))]


def steps_of(lines):
    return [(int(m[1]), m[2]) for line in lines if (m := STEP.match(line))]


def check_dataset(train_loop, annotations, images, epochs, label, extra=(), learns=True):
    args = [train_loop, "--annotations", annotations, "--images", images,
            "--epochs", str(epochs), "--print-steps", *extra]
    plain = run(args + ["--workers", "2"])
    ep = epochs_of(plain)
    check([e[0] for e in ep] == list(range(epochs)), f"{label}: {epochs} epoch lines, in order")
    if len(ep) != epochs:
        return
    first, last = ep[0][1], ep[-1][1]
    if learns:  # random crops move the targets every epoch: no such promise under a recipe
        check(last < 0.8 * first, f"{label}: loss falls: last epoch {last} < 0.8 x first {first}")
    reference = dict(steps_of(plain))
    check(len(reference) == sum(e[2] for e in ep) > 0,
          f"{label}: one step line per step ({len(reference)})")

    resumed = run(args + ["--workers", "1", "--resume-test"])
    check(any("reproduce the uninterrupted run bit for bit" in l for l in resumed),
          f"{label}: train_loop reports an exact resume")
    marks = [i for i, l in enumerate(resumed) if l.startswith("resumed:")]
    ckpt = [int(m[1]) for l in resumed if (m := CHECKPOINT.match(l))]
    check(len(marks) == 1 and len(ckpt) == 1, f"{label}: one checkpoint and one resume")
    if len(marks) != 1 or len(ckpt) != 1:
        return
    before, after = resumed[:marks[0]], resumed[marks[0]:]
    leg1, leg2 = steps_of(before), steps_of(after)
    check(leg1 == sorted(reference.items()), f"{label}: first leg's {len(leg1)} step losses equal the plain run's")
    expect2 = [(s, h) for s, h in sorted(reference.items()) if s > ckpt[0]]
    check(len(expect2) > 0 and leg2 == expect2,
          f"{label}: the {len(leg2)} resumed step losses equal the plain run's, bit for bit")
    plain_lines = {e[0]: e[3] for e in ep}
    resumed_epochs = epochs_of(after)
    check(len(resumed_epochs) > 0 and all(plain_lines.get(e[0]) == e[3] for e in resumed_epochs),
          f"{label}: resumed epoch summaries equal the plain run's")


def main():
    synth, train_loop = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="ferry-train-loop-") as tmp:
        subprocess.run([synth, "--out", tmp, "--images", "48", "--seed", "3"], check=True,
                       stdout=subprocess.DEVNULL, timeout=600)
        check_dataset(train_loop, os.path.join(tmp, "annotations", "instances_val2017.json"),
                      os.path.join(tmp, "val2017"), 4, "synthetic")
        check_dataset(train_loop, os.path.join(tmp, "annotations", "instances_val2017.json"),
                      os.path.join(tmp, "val2017"), 2, "synthetic, rfdetr per-sample",
                      ("--augment", "rfdetr", "--multi-scale", "per-sample"), learns=False)
    real = os.path.join(os.environ.get("FERRY_SHARED", ""), "realdata", "dali_coco", "coco")
    if os.path.isfile(os.path.join(real, "instances.json")):
        check_dataset(train_loop, os.path.join(real, "instances.json"), os.path.join(real, "images"),
                      2, "dali_coco")
    else:
        print(f"note: {real} not found; the real-data part is skipped")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
