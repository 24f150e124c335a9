#!/usr/bin/env python3
"""Shards over loopback HTTP and S3 against local shards: the loader's rate, one paired run.

usage: remote_shards_bench.py BUILD SHARDS_DIR [ROUNDS] [--server python|nginx] [--pin] [--count-gets]
                              [-- THROUGHPUT FLAGS...]

SHARDS_DIR holds val-index.json and its shards (`ferry-coco pack ... --split val`).
--server python (the default): serves them over plain HTTP (python/tests/remote_servers.py's
Range server) and from moto's S3 server (moto[server], as the tests use it; requests signed
with a dummy key, which moto does not check here), on 127.0.0.1, and runs the local index,
the HTTP URL and the s3:// URL, in that order. --server nginx: serves them with nginx
(`nginx` on the PATH, Debian's nginx-light will do; one worker process, a temporary
config and prefix in a temp folder, on a free loopback port, in the foreground until the
bench ends) and runs the local index, the HTTP URL and the same shards as s3://bench/val/
with nginx as the endpoint (AWS_ENDPOINT_URL; the requests signed with SigV4 as for S3,
the path-style /bench/val/KEY served from SHARDS_DIR, the signature not checked: ferry's
S3 client at a server whose cost is nginx's, not moto's Python), in turn. Each run is
BUILD/repro/throughput --only loader in its own process under /usr/bin/time, ROUNDS times
(1 by default); flags after `--` go to throughput (`--order dataset`, say). Prints one
line per run: images/s, the open's seconds (the walk) and peak RSS.

--pin: the loader's runs on CPU 0 only (taskset), the servers (this process and its
threads, moto, nginx) on CPU 1 only, as when the server is another machine: the ratio
is then what the network path costs the loader, without the server's CPU taken from it
(on a 2-core machine the local runs then have one core too).

With the Python servers each s3 line also gives moto's CPU seconds during the run
(server_cpu_s, from /proc/PID/stat: what the server took from the loader's cores).
--count-gets (Python servers only): the HTTP and S3 runs go through python/tests/remote_servers.py's
counting proxy, and their lines give the ranged GETs of shards the epoch made (gets:
blocks, runs or images; the open's 8 MiB chunks apart, open_chunks) and the bytes
those asked for (get_bytes); the proxy's own Python on the path slows them, so take the
rates from runs without it.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
import remote_servers  # noqa: E402


PIN = {"loader": None}  # the loader's CPUs under --pin


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shard_gets(proxy):
    """The counting proxy's ranged GETs of shards: {gets, get_bytes, open_chunks}."""
    epoch = proxy.shard_gets(chunks=False)
    return {"gets": len(epoch), "get_bytes": sum(last - first + 1 for _, first, last in epoch),
            "open_chunks": len(proxy.shard_gets(chunks=True))}


def run(build, spec, images, env, extra=()):
    pin = ["taskset", "-c", ",".join(map(str, sorted(PIN["loader"])))] if PIN["loader"] is not None else []
    cmd = [*pin, "/usr/bin/time", "-f", "%M KB", os.path.join(build, "repro", "throughput"), "--annotations", spec,
           "--images", images, "--workers", "2", "--only", "loader", "--processes", "1", "--json", *extra]
    start = time.time()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    rss = int(out.stderr.strip().splitlines()[-1].split()[0])
    return json.loads(out.stdout.strip().splitlines()[-1]), rss, wall


NGINX_CONF = """daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    root {root};
  }}
}}
"""


def nginx_server(root, probe):
    """nginx in the foreground serving `root` on a free loopback port, once it serves the
    path `probe`: (process, URL, temp folder)."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    tmp = tempfile.mkdtemp(prefix="ferry-nginx-")
    os.chmod(tmp, 0o755)  # the worker process (user nobody) writes nothing here, but reads root
    port = remote_servers.free_port()
    with open(os.path.join(tmp, "nginx.conf"), "w") as f:
        f.write(NGINX_CONF.format(tmp=tmp, port=port, root=root))
    proc = subprocess.Popen([nginx, "-p", tmp, "-c", os.path.join(tmp, "nginx.conf"),
                             "-e", os.path.join(tmp, "error.log")])
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + probe, timeout=1).read()
            return proc, url, tmp
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"nginx did not answer on {url}: {open(os.path.join(tmp, 'error.log')).read()[-2000:]}")


def bench_nginx(build, shards, rounds, extra):
    root = tempfile.mkdtemp(prefix="ferry-bucket-")  # /bench/val -> shards: the path-style S3 layout
    os.chmod(root, 0o755)
    os.mkdir(os.path.join(root, "bench"))
    os.chmod(os.path.join(root, "bench"), 0o755)
    os.symlink(shards, os.path.join(root, "bench", "val"))
    proc, url, tmp = nginx_server(root, "/bench/val/val-index.json")
    env = dict(os.environ, AWS_ENDPOINT_URL=url, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="bench",
               AWS_SECRET_ACCESS_KEY="bench")
    try:
        specs = (("local", os.path.join(shards, "val-index.json")), ("nginx", url + "/bench/val/val-index.json"),
                 ("s3-nginx", "s3://bench/val/val-index.json"))
        for r in range(rounds):
            for name, spec in specs:
                got, rss, wall = run(build, spec, shards, env, extra)
                print(json.dumps({"round": r + 1, "source": name, "images_per_s": got["images_per_s_median"],
                                  "result": got, "peak_rss_kb": rss, "wall_s": round(wall, 2)}), flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def main():
    args, extra = sys.argv[1:], []
    if "--" in args:
        args, extra = args[:args.index("--")], args[args.index("--") + 1:]
    server = "python"
    if "--server" in args:
        at = args.index("--server")
        server = args[at + 1] if at + 1 < len(args) else ""
        del args[at:at + 2]
    count = "--count-gets" in args
    if count:
        args.remove("--count-gets")
    if "--pin" in args:
        args.remove("--pin")
        PIN["loader"] = {0}
        os.sched_setaffinity(0, {1})  # inherited by the servers: this process's threads, moto's and nginx's processes
    if len(args) not in (2, 3) or server not in ("python", "nginx"):
        sys.exit(__doc__)
    build, shards = args[0], os.path.abspath(args[1])
    rounds = int(args[2]) if len(args) == 3 else 1
    if server == "nginx":
        return bench_nginx(build, shards, rounds, extra)
    import boto3
    server, http_url = remote_servers.range_server(shards)
    proc, s3_url = remote_servers.moto_server()
    proxies = {}
    try:
        keys = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
        bucket = boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1", **keys)
        bucket.create_bucket(Bucket="bench")
        for name in os.listdir(shards):
            bucket.upload_file(os.path.join(shards, name), "bench", "val/" + name)
        if count:
            proxies = {"http": remote_servers.FaultProxy(http_url), "s3": remote_servers.FaultProxy(s3_url)}
        endpoint = proxies["s3"].url if count else s3_url
        env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="bench",
                   AWS_SECRET_ACCESS_KEY="bench")
        http_base = proxies["http"].url if count else http_url
        specs = (("local", os.path.join(shards, "val-index.json")), ("http", http_base + "/val-index.json"),
                 ("s3", "s3://bench/val/val-index.json"))
        for r in range(rounds):
            for name, spec in specs:
                if name in proxies:
                    proxies[name].gets.clear()
                moto_before = cpu_seconds(proc.pid)
                got, rss, wall = run(build, spec, shards, env, extra)
                line = {"round": r + 1, "source": name, "images_per_s": got["images_per_s_median"], "result": got,
                        "peak_rss_kb": rss, "wall_s": round(wall, 2)}
                if name == "s3":
                    line["server_cpu_s"] = round(cpu_seconds(proc.pid) - moto_before, 2)
                if name in proxies:
                    line.update(shard_gets(proxies[name]))
                print(json.dumps(line), flush=True)
    finally:
        for proxy in proxies.values():
            proxy.close()
        proc.kill()
        server.shutdown()


if __name__ == "__main__":
    main()
