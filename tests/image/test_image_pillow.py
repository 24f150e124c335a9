#!/usr/bin/env python3
"""Compare ferry's image decoding and resize with Pillow, the reference pipelines' decoder.

Usage: test_image_pillow.py TEST_IMAGE_TOOL   (FERRY_SHARED must point at ../shared)

Checks, each against Pillow computing the same thing independently:
  - every JPEG/PNG under realdata/ decodes to Pillow's convert("RGB"); truncated.jpg fails;
  - resize to R x R (up and down) equals Image.resize((R, R), BILINEAR) within 1 on u8;
  - the f32 CHW layout equals torchvision's to_tensor + normalize computed in float32;
  - PNG kinds Pillow cannot always write (2/4-bit gray, 16-bit, gray+alpha, interlaced),
    written here by a minimal encoder, decode as Pillow decodes them;
  - CMYK JPEG, and EXIF orientations 1..8 (JPEG and PNG) against ImageOps.exif_transpose;
  - a JPEG libjpeg only warns about decodes, a cut one fails, in both.
Without Pillow/numpy, or without ../shared: skip (exit 77), or fail when CI is set.
"""
import glob
import os
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import numpy as np
    from PIL import Image, ImageOps
except ImportError as e:  # pragma: no cover - depends on the machine
    if os.environ.get("CI"):
        print(f"FAIL: CI is set but Pillow/numpy is missing: {e}")
        sys.exit(1)
    print(f"skipped: Pillow/numpy not installed ({e})")
    sys.exit(77)

TOOL = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from realdata import realdata  # noqa: E402  (the skip rule shared by the tests)

REAL = realdata()
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run_tool(*args):
    return subprocess.run([TOOL, *args], capture_output=True, text=True)


def ferry_decode(path, *flags):
    with tempfile.NamedTemporaryFile() as out:
        r = run_tool(*flags, "decode", path, out.name)
        if r.returncode:
            return None, r.stderr
        w, h = map(int, r.stdout.split())
        return np.fromfile(out.name, np.uint8).reshape(h, w, 3), ""


def ferry_resize(path, size, layout="u8", *flags):
    with tempfile.NamedTemporaryFile() as out:
        r = run_tool(*flags, layout, path, str(size), out.name)
        if r.returncode:
            return None, r.stderr
        if layout == "u8":
            return np.fromfile(out.name, np.uint8).reshape(size, size, 3), ""
        return np.fromfile(out.name, np.float32).reshape(3, size, size), ""


def pillow_rgb(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def max_diff(a, b):
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


def compare_decode(path, tolerance):
    got, err = ferry_decode(path)
    if got is None:
        check(False, f"{path}: ferry failed: {err.strip()}")
        return
    want = pillow_rgb(path)
    check(got.shape == want.shape, f"{path}: shape {got.shape} != Pillow {want.shape}")
    if got.shape == want.shape:
        d = max_diff(got, want)
        check(d <= tolerance, f"{path}: decode differs from Pillow by {d}")


def real_images():
    found = []
    for ext in ("jpg", "jpeg", "png", "JPG", "PNG"):
        found += glob.glob(os.path.join(REAL, "**", "*." + ext), recursive=True)
    return sorted(set(found))


def test_real_decodes():
    images = real_images()
    check(len(images) > 100, f"expected the realdata images, found {len(images)}")
    for path in images:
        if path.endswith("truncated.jpg"):
            got, err = ferry_decode(path)
            check(got is None and path in err, f"{path}: must fail naming the file, got {err!r}")
            continue
        # libjpeg's accurate IDCT is exact across versions; allow 1 should Pillow bundle another
        compare_decode(path, 0 if path.lower().endswith(".png") else 1)
    print(f"decoded {len(images)} real images")


RESIZE_PHOTOS = [
    "photos/skimage/chelsea.png", "photos/skimage/coffee.png", "photos/skimage/astronaut.png",
    "photos/skimage/rocket.jpg", "photos/skimage/camera.png", "photos/mmcv/color.jpg",
    "photos/mmcv/grayscale.jpg", "photos/dali_jpeg_subsampling/420-odd-both.jpg",
    "photos/dali_jpeg_subsampling/411-non-multiple-4-width.jpg",
    "mmpose_coco/000000000785.jpg", "panopticapi_sample/000000142238.jpg",
    "dali_coco/coco/images/car-1300629_1280.png",
    # portrait: Pillow 13 runs the vertical pass first when the height shrinks much more
    "photos/dali_jpeg_subsampling/dog-3277414_640.jpg", "dali_coco/coco/images/wine-5884_1280.jpg",
    "dali_coco/coco/images/kite-1344067_1280.png",
]
RESIZE_SIZES = [1, 37, 224, 384, 560, 640, 800, 1333]


def find_real(rel):
    direct = os.path.join(REAL, rel)
    if os.path.exists(direct):
        return direct
    hits = glob.glob(os.path.join(REAL, "**", os.path.basename(rel)), recursive=True)
    return hits[0] if hits else None


def test_resize_matches_pillow():
    worst = 0
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
    for rel in RESIZE_PHOTOS:
        path = find_real(rel)
        check(path is not None, f"{rel}: missing from realdata")
        if path is None:
            continue
        with Image.open(path) as im:
            src = im.convert("RGB")
        for size in RESIZE_SIZES:
            want = np.asarray(src.resize((size, size), Image.BILINEAR))
            got, err = ferry_resize(path, size)
            check(got is not None, f"{path} @{size}: {err.strip()}")
            if got is None:
                continue
            d = max_diff(got, want)
            worst = max(worst, d)
            check(d <= 1, f"{path} @{size}: resize differs from Pillow by {d}")
        size = 224
        want = np.asarray(src.resize((size, size), Image.BILINEAR)).transpose(2, 0, 1)
        ref = (want.astype(np.float32) / np.float32(255) - mean) / std
        got, err = ferry_resize(path, size, "f32")
        check(got is not None and np.allclose(got, ref, rtol=0, atol=1e-6),
              f"{path}: f32 CHW differs from to_tensor+normalize {err}")
    print(f"resize: worst |ferry - Pillow| = {worst} over {len(RESIZE_PHOTOS)} photos x {RESIZE_SIZES}")


def test_resize_noise_matches_pillow(tmp):
    """Noise makes rounding ties common, so any difference in the filter taps, the
    rounding or the order of the passes shows up; shapes cover up/down and tall/wide."""
    rng = np.random.default_rng(9)
    path = os.path.join(tmp, "noise.png")
    cases, worst = 0, 0
    for w, h in [(20, 37), (63, 200), (65, 64), (100, 427), (130, 90), (300, 1000), (427, 640),
                 (480, 640), (640, 427), (640, 480), (1000, 129)]:
        Image.fromarray(rng.integers(0, 256, (h, w, 3)).astype(np.uint8)).save(path)
        with Image.open(path) as im:
            src = im.convert("RGB")
        for size in (37, 64, 384, 640):
            want = np.asarray(src.resize((size, size), Image.BILINEAR))
            got, err = ferry_resize(path, size)
            check(got is not None, f"noise {w}x{h} @{size}: {err}")
            if got is None:
                continue
            d = max_diff(got, want)
            worst = max(worst, d)
            check(d <= 1, f"noise {w}x{h} @{size}: differs from Pillow by {d}")
            cases += 1
    print(f"resize of noise: worst |ferry - Pillow| = {worst} over {cases} cases")


def write_png(path, w, h, depth, color, rows, interlace=False, extra=b""):
    """A minimal PNG writer: rows are lists of samples (unpacked), packed here."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]

    def pack(samples):
        if depth == 16:
            return struct.pack(">%dH" % len(samples), *samples)
        if depth == 8:
            return bytes(samples)
        out, acc, nbits = bytearray(), 0, 0
        for s in samples:
            acc, nbits = (acc << depth) | s, nbits + depth
            if nbits == 8:
                out.append(acc)
                acc, nbits = 0, 0
        if nbits:
            out.append(acc << (8 - nbits))
        return bytes(out)

    def pixel(x, y):
        return rows[y][x * channels:(x + 1) * channels]

    raw = bytearray()
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2)] if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        for y in range(y0, h, dy):
            xs = range(x0, w, dx)
            if len(xs) == 0:
                continue
            raw += b"\0" + pack([s for x in xs for s in pixel(x, y)])

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)

    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 1 if interlace else 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra +
                chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))


def test_png_kinds(tmp):
    rng = np.random.default_rng(4)
    w, h = 13, 11
    kinds = [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (4, 8), (4, 16), (6, 8),
             (6, 16), (3, 1), (3, 2), (3, 4), (3, 8)]
    for color, depth in kinds:
        channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
        top = (1 << depth) - 1
        if color == 0 and depth == 16:
            # cover 16-bit gray values below and above 255 (Pillow clips those)
            samples = rng.choice([0, 7, 200, 255, 256, 4000, 65535], size=(h, w * channels))
        else:
            samples = rng.integers(0, top + 1, size=(h, w * channels))
        extra = b""
        if color == 3:
            palette = rng.integers(0, 256, size=(1 << depth) * 3).astype(np.uint8).tobytes()
            trns = bytes(rng.integers(0, 256, size=min(4, 1 << depth)).astype(np.uint8))
            extra = (struct.pack(">I", len(palette)) + b"PLTE" + palette +
                     struct.pack(">I", zlib.crc32(b"PLTE" + palette) & 0xffffffff) +
                     struct.pack(">I", len(trns)) + b"tRNS" + trns +
                     struct.pack(">I", zlib.crc32(b"tRNS" + trns) & 0xffffffff))
        for interlace in (False, True):
            path = os.path.join(tmp, f"kind_c{color}_d{depth}_i{int(interlace)}.png")
            write_png(path, w, h, depth, color, samples.tolist(), interlace, extra)
            compare_decode(path, 0)
    print(f"PNG kinds: {len(kinds)} colour type/depth pairs, plain and interlaced")


def test_cmyk_jpeg(tmp):
    path = os.path.join(tmp, "cmyk.jpg")
    with Image.open(find_real("photos/skimage/chelsea.png")) as im:
        im.convert("RGB").convert("CMYK").save(path, quality=90)
    with Image.open(path) as im:
        check(im.mode == "CMYK", f"Pillow wrote a {im.mode} JPEG, expected CMYK")
    compare_decode(path, 0)


def test_jpeg_warnings_like_pillow(tmp):
    """Data libjpeg only warns about decodes (as in Pillow); a cut file fails (as in Pillow)."""
    with open(find_real("photos/mmcv/color.jpg"), "rb") as f:
        data = f.read()
    noisy = os.path.join(tmp, "extraneous.jpg")
    with open(noisy, "wb") as f:
        f.write(data[:-2] + b"\x01\x02\x03\xff\xd9")
    compare_decode(noisy, 0)
    cut = os.path.join(tmp, "cut.jpg")
    with open(cut, "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    try:
        with Image.open(cut) as im:
            im.load()
        pillow_fails = False
    except OSError:
        pillow_fails = True
    got, err = ferry_decode(cut)
    check(pillow_fails and got is None and cut in err,
          f"{cut}: Pillow fails={pillow_fails}, ferry must fail naming the file: {err!r}")


def test_exif_orientation(tmp):
    with Image.open(find_real("photos/skimage/chelsea.png")) as im:
        src = im.convert("RGB").crop((0, 0, 61, 40))
    for fmt in ("jpg", "png"):
        for o in range(1, 9):
            exif = Image.Exif()
            exif[0x0112] = o
            path = os.path.join(tmp, f"orient{o}.{fmt}")
            src.save(path, exif=exif.tobytes())
            with Image.open(path) as im:
                want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
                plain = np.asarray(im.convert("RGB"))
            got, err = ferry_decode(path, "--exif")
            check(got is not None and got.shape == want.shape and max_diff(got, want) == 0,
                  f"{path}: EXIF orientation {o} differs from exif_transpose {err}")
            got, err = ferry_decode(path)
            check(got is not None and got.shape == plain.shape and max_diff(got, plain) == 0,
                  f"{path}: without the option the orientation must be ignored {err}")
    real = find_real("photos/mmcv/color_exif.jpg")
    with Image.open(real) as im:
        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    got, err = ferry_decode(real, "--exif")
    check(got is not None and got.shape == want.shape and max_diff(got, want) <= 1,
          f"{real}: EXIF transpose differs from Pillow {err}")


def main():
    test_real_decodes()
    test_resize_matches_pillow()
    with tempfile.TemporaryDirectory() as tmp:
        test_resize_noise_matches_pillow(tmp)
        test_png_kinds(tmp)
        test_cmyk_jpeg(tmp)
        test_jpeg_warnings_like_pillow(tmp)
        test_exif_orientation(tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all image checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
