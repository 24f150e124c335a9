#!/usr/bin/env python3
"""Shards over loopback HTTP and S3 against local shards: the loader's rate, one paired run.

usage: remote_shards_bench.py BUILD SHARDS_DIR [ROUNDS]

SHARDS_DIR holds val-index.json and its shards (`ferry-coco pack ... --split val`). Serves
them over plain HTTP (python/tests/remote_servers.py's Range server) and from moto's S3
server (moto[server], as the tests use it; requests signed with a dummy key, which moto
does not check here), on 127.0.0.1, then runs BUILD/repro/throughput --only loader on
the local index, the HTTP URL and the s3:// URL, in that order, each in its own process
under /usr/bin/time, ROUNDS times (1 by default). Prints one line per run: images/s,
the open's seconds (the walk) and peak RSS.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import remote_servers  # noqa: E402


def run(build, spec, images, env):
    cmd = ["/usr/bin/time", "-f", "%M KB", os.path.join(build, "repro", "throughput"), "--annotations", spec,
           "--images", images, "--workers", "2", "--only", "loader", "--processes", "1", "--json"]
    start = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    rss = int(out.stderr.strip().splitlines()[-1].split()[0])
    return json.loads(out.stdout.strip().splitlines()[-1]), rss, wall


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    build, shards = sys.argv[1], os.path.abspath(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) == 4 else 1
    import boto3
    server, http_url = remote_servers.range_server(shards)
    proc, s3_url = remote_servers.moto_server()
    try:
        keys = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
        bucket = boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1", **keys)
        bucket.create_bucket(Bucket="bench")
        for name in os.listdir(shards):
            bucket.upload_file(os.path.join(shards, name), "bench", "val/" + name)
        env = dict(os.environ, AWS_ENDPOINT_URL=s3_url, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="bench",
                   AWS_SECRET_ACCESS_KEY="bench")
        specs = (("local", os.path.join(shards, "val-index.json")), ("http", http_url + "/val-index.json"),
                 ("s3", "s3://bench/val/val-index.json"))
        for r in range(rounds):
            for name, spec in specs:
                got, rss, wall = run(build, spec, shards, env)
                print(json.dumps({"round": r + 1, "source": name, "images_per_s": got["images_per_s_median"],
                                  "result": got, "peak_rss_kb": rss, "wall_s": round(wall, 2)}), flush=True)
    finally:
        proc.kill()
        server.shutdown()


if __name__ == "__main__":
    main()
