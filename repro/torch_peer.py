#!/usr/bin/env python3
"""torch_peer: ferry's Python loader against a torch DataLoader running RF-DETR's recipe.

    repro/torch_peer.py --annotations FILE --images DIR [--build build] [--workers 2]
        [--batch 8] [--resolution 312] [--patch-size 12] [--num-windows 1]
        [--augment rfdetr-square] [--multi-scale per-sample] [--batches 40] [--rounds 3]
        [--peer restated|rfdetr] [--peer-python PYTHON] [--layout f32|u8]
        [--detection [--ferry-full-size]]

Two peers. `--peer rfdetr` is the code an RF-DETR 1.11 user trains with: its own
CocoDetection (ConvertCoco, pycocotools masks at full size), its
make_coco_transforms[_square_div_64]("train", ...) pipeline and its make_collate_fn, in a
torch DataLoader; it needs rfdetr 1.11 on torch >= 2, so --peer-python names that
interpreter (./run test makes build/rfdetr-venv). `--peer restated` (the default, any
torch) is the same recipe restated: a torch DataLoader (the same
workers, batch, shuffling) whose dataset opens each image with Pillow, makes its
target as ConvertCoco does (pycocotools masks at full size), and runs the training
recipe of coco.py's _build_train_resize_transforms with its classes' semantics
(tests/common/rfdetr_reference.py: RandomSelect, RandomChoice of Resize,
RandomResize, RandomSizedCrop, RandomHorizontalFlip, drawn from torch's generator in
their order; Pillow resizes, nearest masks), then ToDtype, Normalize and boxes to
normalised cxcywh; the collate pads the images to the batch's largest, as DETR's
nested tensors do. ferry's side is ferry.Loader with the same recipe, workers, batch
and resolution, images padded the same way (tensor_type torch). Each round runs both,
each in a fresh process, alternating which goes first; a round's ratio is ferry /
peer. Images/s over --batches batches after a warm-up of 3 (the peer's workers start
their processes in the first), and the CPU milliseconds each side spends per image (its
threads, and the peer's worker processes), which a busy machine changes less than
rates; ferry's is also split by thread (its workers, the transfer's stream, the Python
thread), which says where the Python side spends it. Needs torch, Pillow and pycocotools (./run test puts them in
build/python-venv). The same libferry.so as throughput (BUILD/libferry.so through
$FERRY_LIB), the package from python/. --layout is ferry.Loader's (both give the peer's
normalised float32 images): f32 (the default) normalises in the workers, u8 in the
transfer, which on a GPU copies a quarter of the bytes and normalises on the device and
here, on the host backend, on the stream's thread.

--detection (with --peer rfdetr) is RF-DETR's detection training instead (issue 36): no
masks on either side, so RF-DETR's CocoDetection decodes each JPEG at the reduced scale
its draft_size_for_transforms gives (simplejpeg, which its `train` extra installs) and
ferry takes draft_size="rfdetr", the same rule; --ferry-full-size makes ferry decode at
full size instead, for the ratio the reduced decode buys on large photos.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
WARMUP = 3


def peer_loader(args):
    """RF-DETR's training pipeline, restated, in a torch DataLoader."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
    import torch
    from pycocotools.coco import COCO
    import rfdetr_reference as ref

    scales = ref.multi_scale_scales(args.resolution, False, args.patch_size, args.num_windows) \
        if args.multi_scale == "per-sample" else [args.resolution]
    square = args.augment == "rfdetr-square"

    class Dataset(torch.utils.data.Dataset):
        def __init__(self):
            import contextlib
            import io
            with contextlib.redirect_stdout(io.StringIO()):
                self.coco = COCO(args.annotations)
            self.ids = sorted(self.coco.imgs)

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            im = self.coco.imgs[self.ids[i]]
            anns = self.coco.imgToAnns.get(im["id"], [])
            s = ref.Sample(os.path.join(args.images, im["file_name"]), im, anns)
            s.replay(ref.draw(im["height"], im["width"], scales, square))
            h, w = s.size()
            b = s.boxes
            cxcywh = torch.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2,
                                  b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], -1)
            target = {"boxes": cxcywh / torch.tensor([w, h, w, h], dtype=torch.float32),
                      "labels": s.labels, "masks": s.masks, "area": s.area,
                      "image_id": torch.tensor([im["id"]]), "size": torch.tensor([h, w])}
            return s.normalised(), target

    def collate(batch):
        images = [b[0] for b in batch]
        hmax = max(x.shape[1] for x in images)
        wmax = max(x.shape[2] for x in images)
        out = torch.zeros(len(images), 3, hmax, wmax)
        for k, x in enumerate(images):
            out[k, :, :x.shape[1], :x.shape[2]].copy_(x)
        return out, [b[1] for b in batch]

    return torch.utils.data.DataLoader(Dataset(), batch_size=args.batch, shuffle=True,
                                       num_workers=args.workers, collate_fn=collate,
                                       persistent_workers=args.workers > 0)


def rfdetr_loader(args):
    """RF-DETR 1.11's own training pipeline: its CocoDetection, its transforms, its collate.

    What RFDETRDataModule.train_dataloader builds for a segmentation model trained on a
    COCO folder (build_coco with segmentation_head, so masks and no draft decode), with
    its default torchvision backend on the CPU; the DataLoader's sampler is plain
    shuffling (no grad-accumulation padding, which changes no sample's work).
    """
    import contextlib
    import io
    import logging
    import warnings

    import torch
    from rfdetr.datasets.coco import CocoDetection, make_coco_transforms, make_coco_transforms_square_div_64
    from rfdetr.utilities.tensors import make_collate_fn

    from rfdetr.datasets.coco import draft_size_for_transforms

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    build = make_coco_transforms_square_div_64 if args.augment == "rfdetr-square" else make_coco_transforms
    multi = args.multi_scale == "per-sample"
    transforms = build("train", args.resolution, multi_scale=multi,
                       expanded_scales=False, skip_random_resize=False, patch_size=args.patch_size,
                       num_windows=args.num_windows)
    # what build_coco passes: a draft size for a detection set, None with masks
    draft = draft_size_for_transforms("train", args.resolution, multi_scale=multi, expanded_scales=False,
                                      patch_size=args.patch_size, num_windows=args.num_windows,
                                      scale_jitter=True, include_masks=not args.detection)
    with contextlib.redirect_stdout(io.StringIO()):
        dataset = CocoDetection(args.images, args.annotations, transforms=transforms,
                                include_masks=not args.detection, draft_size=draft)
    return torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                       num_workers=args.workers,
                                       collate_fn=make_collate_fn(block_size=args.patch_size * args.num_windows),
                                       persistent_workers=args.workers > 0)


def ferry_loader(args):
    import ferry
    detection = {}
    if args.detection:  # RF-DETR's detection targets, and its reduced-size decode unless told otherwise
        detection = dict(fields=("boxes", "labels", "area", "iscrowd", "image_id", "orig_size", "size"),
                         draft_size=None if args.ferry_full_size else "rfdetr")
    return ferry.Loader(args.annotations, args.images, batch_size=args.batch, workers=args.workers,
                        resolution=args.resolution, augment=args.augment, multi_scale=args.multi_scale,
                        patch_size=args.patch_size, num_windows=args.num_windows, tensor_type="torch",
                        layout=args.layout, **detection)


def cpu_seconds(loader):
    """CPU time (user + system) of this process and of the DataLoader's worker processes
    (read from /proc: they run until we exit, so RUSAGE_CHILDREN never sees them)."""
    import resource
    use = resource.getrusage(resource.RUSAGE_SELF)
    total = use.ru_utime + use.ru_stime
    for worker in getattr(getattr(loader, "_iterator", None), "_workers", None) or []:
        with open(f"/proc/{worker.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def thread_seconds():
    """CPU seconds (user + system) of this process's threads so far, summed by name with
    any trailing -N cut (ferry-worker-0 and -1 are "ferry-worker"; the main thread is
    named after the interpreter). Threads that ended are not counted, so read it while
    the loader runs."""
    tick, by_name = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue  # it ended between the listing and the read
        name = re.sub(r"-[0-9]+$", "", stat[stat.index("(") + 1:stat.rindex(")")])
        fields = stat.rsplit(")", 1)[1].split()
        by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return by_name


def child_rate(args):
    """The child: images/s of one side after the warm-up batches, its CPU milliseconds
    per image (all its threads and processes), and, for ferry, those milliseconds by
    thread (workers, the transfer's stream, the Python thread)."""
    if args.side == "ferry":
        loader = ferry_loader(args)
    else:
        loader = rfdetr_loader(args) if args.peer == "rfdetr" else peer_loader(args)

    def batches():
        while True:
            yield from loader

    stream = batches()
    for _ in range(WARMUP):
        next(stream)
    images = 0
    start, cpu, threads = time.perf_counter(), cpu_seconds(loader), thread_seconds()
    for _ in range(args.batches):
        batch = next(stream)[0]
        images += getattr(batch, "tensors", batch).shape[0]  # RF-DETR's collate: a NestedTensor
    rate = images / (time.perf_counter() - start)
    by_thread = {name: round(1000 * (t - threads.get(name, 0.0)) / images, 4)
                 for name, t in thread_seconds().items()} if args.side == "ferry" else {}
    print(f"{rate:.3f} {1000 * (cpu_seconds(loader) - cpu) / images:.4f} {json.dumps(by_thread, separators=(',', ':'))}")
    os._exit(0)  # the peer's worker processes and ferry's threads end with us


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--annotations", required=True)
    p.add_argument("--images", required=True)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--resolution", type=int, default=312)
    p.add_argument("--patch-size", type=int, default=12)
    p.add_argument("--num-windows", type=int, default=1)
    p.add_argument("--augment", default="rfdetr-square", choices=["rfdetr-square", "rfdetr"])
    p.add_argument("--multi-scale", default="per-sample", choices=["off", "per-sample"])
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--peer", default="restated", choices=["restated", "rfdetr"],
                   help="restated: tests/common/rfdetr_reference.py in a DataLoader; rfdetr: RF-DETR's own "
                        "CocoDetection, transforms and collate (needs rfdetr 1.11 and torch >= 2)")
    p.add_argument("--peer-python", default=sys.executable,
                   help="the interpreter for the peer's side (e.g. a venv with torch 2 and rfdetr)")
    p.add_argument("--layout", default="f32", choices=["f32", "u8"],
                   help="ferry.Loader's layout: f32 normalised by the workers, u8 by the transfer")
    p.add_argument("--detection", action="store_true",
                   help="no masks, and RF-DETR's reduced-size decode on both sides (--peer rfdetr)")
    p.add_argument("--ferry-full-size", action="store_true", help="with --detection: ferry decodes at full size")
    p.add_argument("--json", action="store_true")
    p.add_argument("--side", choices=["peer", "ferry"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.detection and args.peer != "rfdetr":
        p.error("--detection compares against RF-DETR's own loader: add --peer rfdetr")
    if args.ferry_full_size and not args.detection:
        p.error("--ferry-full-size goes with --detection")
    if args.side:
        return child_rate(args)
    env = dict(os.environ, FERRY_LIB=os.path.join(os.path.abspath(args.build), "libferry.so"),
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rest = [os.path.abspath(__file__)] + [a for a in sys.argv[1:] if a != "--json"]

    def run(side):
        python = args.peer_python if side == "peer" else sys.executable
        out = subprocess.run([python] + rest + ["--side", side], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"torch_peer: the {side} side failed ({python}):\n{out.stderr[-2000:]}")
        rate, cpu_ms, by_thread = out.stdout.split()[-3:]
        return float(rate), float(cpu_ms), json.loads(by_thread)

    rounds, threads = [], []
    for r in range(args.rounds):
        first, second = ("ferry", "peer") if r % 2 == 0 else ("peer", "ferry")
        got = {first: run(first), second: run(second)}
        (ferry_rate, ferry_cpu, by_thread), (peer_rate, peer_cpu, _) = got["ferry"], got["peer"]
        rounds.append({"ferry": ferry_rate, "peer": peer_rate, "ratio": ferry_rate / peer_rate,
                       "ferry_cpu_ms": ferry_cpu, "peer_cpu_ms": peer_cpu, "cpu_ratio": peer_cpu / ferry_cpu})
        threads.append(by_thread)
        if not args.json:
            print(f"round {r + 1}: ferry {ferry_rate:.1f} images/s ({ferry_cpu:.2f} CPU ms each), peer "
                  f"{peer_rate:.1f} ({peer_cpu:.2f}): ratio {ferry_rate / peer_rate:.2f}, "
                  f"CPU per image {peer_cpu / ferry_cpu:.2f}", flush=True)
            print("  ferry's CPU ms per image by thread: " +
                  ", ".join(f"{name} {ms:.3f}" for name, ms in sorted(by_thread.items(), key=lambda kv: -kv[1])))
    summary = {k: {"median": statistics.median(v[k] for v in rounds), "min": min(v[k] for v in rounds),
                   "max": max(v[k] for v in rounds)} for k in rounds[0]}
    names = sorted({name for t in threads for name in t})
    summary["ferry_cpu_ms_by_thread"] = {name: statistics.median(t.get(name, 0.0) for t in threads) for name in names}
    summary.update(peer=args.peer, workers=args.workers, batch=args.batch, resolution=args.resolution,
                   augment=args.augment, multi_scale=args.multi_scale, rounds=args.rounds, layout=args.layout,
                   detection=args.detection, ferry_full_size=args.ferry_full_size)
    if args.json:
        print(json.dumps(summary))
    else:
        for key, what in (("ratio", "images/s, ferry / peer"), ("cpu_ratio", "CPU per image, peer / ferry")):
            v = summary[key]
            print(f"{what}: {v['median']:.2f} median [{v['min']:.2f}, {v['max']:.2f}] over {args.rounds} "
                  f"rounds against the {args.peer} peer; {args.workers} workers, batch {args.batch}, "
                  f"{args.augment}, multi-scale {args.multi_scale}, resolution {args.resolution}, "
                  f"layout {args.layout}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
