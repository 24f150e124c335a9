#!/usr/bin/env python3
"""python_throughput: ferry.Loader's images/s against the C loader's, same data, same run.

    repro/python_throughput.py [--build build] [--annotations FILE --images DIR]
        [--workers 2] [--batch 8] [--resolution 312] [--warmup 20] [--batches 200]
        [--rounds 6] [--tensor-type torch|numpy] [--json]
        [--augment RECIPE --multi-scale MODE --patch-size N --num-windows N]

Each round runs, each in a fresh process and back to back: repro/throughput
--processes 1 --only direct (the C loop this package wraps: ferry_loader_next,
ferry_transfer to the host device, wait, free) and the Python loop over ferry.Loader
(the same, plus taking every tensor out and handing it to torch or numpy through
DLPack, and building the DETR targets); which one goes first alternates. Each reports images/s and the CPU
time of all its threads per image over the timed batches; on a machine whose other
load comes and goes, the CPU ratio (C direct's CPU per image over Python's) is the
steadier measure of what the Python layer adds. Same loader options as throughput's (all fields, xyxy boxes, f32
CHW images, shuffled, seed 0, default prefetch), same libferry.so (BUILD/libferry.so,
through $FERRY_LIB), the package from the source tree (python/). The ratio is the
median over rounds of python / direct of the same round; the machine drifts between
rounds more than within one. Without --annotations, throughput's own data set
(build-bench-data/, 1,000 synth_coco images) is used. --augment and its options
(issue 24) go to both sides: the C loop then gets each sample's image as its own
tensor, the Python loop one padded batch tensor (the transfer's pad_multiple).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def python_rate(args):
    """The child: images/s of the Python loop, after the warm-up batches."""
    import ferry
    loader = ferry.Loader(args.annotations, args.images, batch_size=args.batch,
                          workers=args.workers, resolution=args.resolution, box_format="xyxy",
                          tensor_type=args.tensor_type, augment=args.augment,
                          multi_scale=args.multi_scale, patch_size=args.patch_size,
                          num_windows=args.num_windows)

    def batches():
        while True:  # epochs follow one another, as throughput's next_batch does
            yield from loader

    stream = batches()
    for _ in range(args.warmup):
        next(stream)
    images = 0
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.batches):
        batch, targets = next(stream)
        images += batch.shape[0]
        del batch, targets
    rate = images / (time.perf_counter() - start)
    cpu_us = (time.process_time() - cpu) * 1e6 / images
    loader.close()
    return rate, cpu_us


def c_rate(args, throughput):
    out = subprocess.run([throughput, "--processes", "1", "--only", "direct", "--json",
                          "--workers", str(args.workers),
                          "--batch", str(args.batch), "--resolution", str(args.resolution),
                          "--warmup", str(args.warmup), "--batches", str(args.batches),
                          "--augment", args.augment, "--multi-scale", args.multi_scale,
                          "--patch-size", str(args.patch_size), "--num-windows", str(args.num_windows)]
                         + (["--annotations", args.annotations, "--images", args.images]
                            if args.annotations else []),
                         check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return rows[0]["images_per_s_median"], rows[0]["cpu_us_per_image"]


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--annotations")
    p.add_argument("--images")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--resolution", type=int, default=312)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--tensor-type", default=None, choices=["torch", "numpy"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--augment", default="none")
    p.add_argument("--multi-scale", default="off")
    p.add_argument("--patch-size", type=int, default=16)
    p.add_argument("--num-windows", type=int, default=4)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(*python_rate(args))
        return 0
    build = os.path.abspath(args.build)
    throughput = os.path.join(build, "repro", "throughput")
    env = dict(os.environ, FERRY_LIB=os.path.join(build, "libferry.so"),
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not args.annotations:  # throughput's own data set, which it makes on first use
        c_rate(argparse.Namespace(**{**vars(args), "warmup": 0, "batches": 1}), throughput)
        args.annotations = os.path.join("build-bench-data", "annotations", "instances_val2017.json")
        args.images = os.path.join("build-bench-data", "val2017")
    child = [sys.executable, os.path.abspath(__file__), "--child"] + [
        a for a in sys.argv[1:] if a != "--json"]
    if "--annotations" not in child:
        child += ["--annotations", args.annotations, "--images", args.images]

    def python_run():
        out = subprocess.run(child, env=env, check=True, capture_output=True, text=True).stdout
        return tuple(float(v) for v in out.split()[-2:])

    rounds = []
    for r in range(args.rounds):
        # alternate which goes first, so a drift within a round favours neither
        if r % 2 == 0:
            c, py = c_rate(args, throughput), python_run()
        else:
            py, c = python_run(), c_rate(args, throughput)
        rounds.append({"c_direct": c[0], "python": py[0], "ratio": py[0] / c[0],
                       "c_cpu_us_per_image": c[1], "python_cpu_us_per_image": py[1],
                       "cpu_ratio": c[1] / py[1]})
        if not args.json:
            print(f"round {r + 1}: C direct {c[0]:.1f} images/s, Python {py[0]:.1f}: ratio "
                  f"{py[0] / c[0]:.3f}; CPU per image {c[1]:.0f} us and {py[1]:.0f} us: ratio "
                  f"{c[1] / py[1]:.3f}", flush=True)
    result = {key: summary([r[key] for r in rounds]) for key in rounds[0]}
    result.update(workers=args.workers, batch=args.batch, resolution=args.resolution,
                  rounds=args.rounds, tensor_type=args.tensor_type or "auto",
                  augment=args.augment, multi_scale=args.multi_scale)
    if args.json:
        print(json.dumps(result))
    else:
        for key, what in (("ratio", "images/s, Python / C direct"),
                          ("cpu_ratio", "CPU per image, C direct / Python")):
            v = result[key]
            print(f"{what}: {v['median']:.3f} median [{v['min']:.3f}, {v['max']:.3f}] over "
                  f"{args.rounds} rounds; {args.workers} workers, batch {args.batch}, "
                  f"resolution {args.resolution}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
