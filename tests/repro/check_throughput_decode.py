"""repro/throughput --decode on the host device (issue 15): gpu stops before measuring,
with a message that says a CUDA device and nvJPEG are needed; auto runs, and the
loader it measured decoded on the CPU; --json reports pinned and device bytes per batch.

usage: check_throughput_decode.py THROUGHPUT LOADER_DATA_DIR
"""
import json
import subprocess
import sys

exe, data = sys.argv[1], sys.argv[2]
common = ["--annotations", f"{data}/annotations/instances_val2017.json", "--images", f"{data}/val2017",
          "--workers", "2", "--batch", "4", "--warmup", "0", "--batches", "3", "--processes", "1",
          "--json"]


def run(decode):
    return subprocess.run([exe, *common, "--decode", decode], capture_output=True, text=True, timeout=300)


gpu = run("gpu")
assert gpu.returncode != 0, f"--decode gpu on the host exited 0:\n{gpu.stdout}"
assert gpu.stdout == "", f"--decode gpu measured something:\n{gpu.stdout}"
for needed in ("CUDA device", "nvJPEG", "host"):
    assert needed in gpu.stderr, f"--decode gpu: the message does not say '{needed}': {gpu.stderr!r}"

bad = run("fast")
assert bad.returncode == 2 and "cpu, gpu or auto" in bad.stderr, bad.stderr

auto = run("auto")
assert auto.returncode == 0, auto.stderr
rows = [json.loads(line) for line in auto.stdout.splitlines()]
assert [r["path"] for r in rows] == ["loader", "previous", "direct", "unpacked"], rows
for r in rows:
    assert r["decode"] == "auto" and r["decoder"] == "cpu", r
    # f32 [3,R,R] images alone are 4 * 3 * 312 * 312 bytes a sample
    images = 4 * 4 * 3 * 312 * 312
    if r["path"] != "unpacked":
        assert r["pinned_bytes_per_batch"] >= images, r
    else:
        assert r["pinned_bytes_per_batch"] == 0, r
    if r["path"] == "loader":
        assert r["device_bytes_per_batch"] == 0, r
    else:
        assert r["device_bytes_per_batch"] >= images, r
print("ok: gpu refused on the host, auto ran the CPU decoder, bytes per batch reported")
