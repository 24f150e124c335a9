"""Shards read over HTTP and S3 (issue 26): real servers, started here, on 127.0.0.1.

A 24-image synth_coco set is packed by `ferry-coco pack` into five shards and served
  - over plain HTTP with Range (remote_servers.range_server), and
  - from moto's standalone S3 server (moto[server] from PyPI), with authentication
    enforced (INITIAL_NO_AUTH_ACTION_COUNT: after the IAM user, its policy and its key
    are made, every request must be signed by that key and allowed by its policy);
and coco_parity (every delivered byte, packed and unpacked paths) must give the
folder's digest from the index URL, a pattern URL and s3://, with 1, 2 and 16 workers.
A fault-injecting proxy between the reader and each server resets connections mid-body,
answers 503, stalls mid-body and cuts bodies short: with retries enough the epoch's
digest is still the folder's (nothing delivered twice, nothing lost); without, the run
fails with an error naming the URL, the bytes, the member (where one is being read) and
the HTTP status or the transport error. A wrong secret is refused (403
SignatureDoesNotMatch), no credential is sent unsigned, the session token is sent in
x-amz-security-token and signed, and no secret or token appears in any output.
Without moto (not installed) the S3 tests are skipped, saying so (failed under CI:
FERRY_REQUIRE_TORCH, which ./run sets there).
"""
import importlib.util
import json
import os
import re
import resource
import signal
import subprocess
import tarfile

import pytest

import remote_servers
from conftest import make_synth, skip_or_fail

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.path.dirname(os.environ.get("FERRY_SYNTH_COCO", os.path.join(ROOT, "build", "synth",
                                                                                         "synth_coco"))))
COCO_PARITY = os.path.join(BUILD, "repro", "coco_parity")
FERRY_COCO = os.path.join(BUILD, "tools", "ferry-coco")
HAVE_MOTO = importlib.util.find_spec("moto") is not None and importlib.util.find_spec("boto3") is not None
SECRET = "SeCrEt-never-shown-0123456789"
ALLOW_ALL = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
FAULTS = ("reset", "503", "stall", "cut")
# Short waits so that faults cost little: a stall is given up after 1 s without a byte.
FAST = {"FERRY_REMOTE_BACKOFF_MS": "10", "FERRY_REMOTE_STALL_S": "1", "FERRY_REMOTE_CONNECT_TIMEOUT_MS": "2000"}


def run_env(env=None):
    """This process's environment without its AWS, FERRY_REMOTE and proxy settings, and
    without the binary index, plus `env`: what a run over the servers sees."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AWS_", "FERRY_REMOTE_")) and not k.lower().endswith("_proxy")}
    return dict(clean, FERRY_COCO_INDEX="off", **(env or {}))


def parity(spec, workers=2, env=None, shuffle=False, order="auto", preexec=None):
    """coco_parity's run over `spec` with only the given AWS and FERRY_REMOTE settings
    (preexec: run in the child before it starts): (returncode, its JSON or None,
    stdout + stderr)."""
    cmd = [COCO_PARITY, "--annotations", spec, "--images", os.path.dirname(COCO_PARITY), "--workers", str(workers),
           "--batch", "4", "--resolution", "96", "--remap-categories", "0", "--shuffle", str(int(shuffle)),
           "--order", order, "--json"]
    out = subprocess.run(cmd, env=run_env(env), capture_output=True, text=True, timeout=120, preexec_fn=preexec)
    result = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    return out.returncode, result, out.stdout + out.stderr


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """(shards folder, shard names, the folder + JSON's digest)."""
    for tool in (COCO_PARITY, FERRY_COCO):
        if not os.access(tool, os.X_OK):
            pytest.fail(f"{tool} not found (build ferry, or set FERRY_SYNTH_COCO)")
    scratch = str(tmp_path_factory.mktemp("remote"))
    annotations, images = make_synth(os.path.join(scratch, "synth"), 24, 11)
    out = os.path.join(scratch, "shards")
    subprocess.run([FERRY_COCO, "pack", annotations, "--images", images, "--out", out, "--split", "val",
                    "--max-shard-bytes", "700000", "--category-ids", "raw"], check=True, capture_output=True)
    shards = json.load(open(os.path.join(out, "val-index.json")))["shards"]
    assert len(shards) >= 3, shards
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run([COCO_PARITY, "--annotations", annotations, "--images", images, "--workers", "2", "--batch",
                           "4", "--resolution", "96", "--remap-categories", "0", "--shuffle", "0", "--json"],
                          env=dict(clean, FERRY_COCO_INDEX="off"), capture_output=True, text=True, check=True)
    folder = json.loads(done.stdout.strip().splitlines()[-1])
    assert folder["images"] == 24 and folder["mismatches"] == 0
    return out, shards, folder["digest"]


@pytest.fixture(scope="module")
def http_base(packed):
    server, url = remote_servers.range_server(packed[0])
    yield url
    server.shutdown()


@pytest.fixture(scope="module")
def s3(packed):
    """(moto's URL, access key id, secret, a role's temporary credentials as STS gives
    them): the shards uploaded to s3://data/val/."""
    if not HAVE_MOTO:
        skip_or_fail("moto[server] is not installed", "FERRY_REQUIRE_TORCH")
    import boto3
    # Three requests go unauthenticated (the IAM user, its policy, its key); every one
    # after must be signed by a known key and allowed by its policy.
    proc, url = remote_servers.moto_server({"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
    try:
        iam = boto3.client("iam", endpoint_url=url, region_name="us-east-1", aws_access_key_id="setup",
                           aws_secret_access_key="setup")
        iam.create_user(UserName="ferry")
        iam.put_user_policy(UserName="ferry", PolicyName="all", PolicyDocument=ALLOW_ALL)
        key = iam.create_access_key(UserName="ferry")["AccessKey"]
        signed = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": key["AccessKeyId"],
                  "aws_secret_access_key": key["SecretAccessKey"]}
        bucket = boto3.client("s3", **signed)
        bucket.create_bucket(Bucket="data")
        for name in os.listdir(packed[0]):
            bucket.upload_file(os.path.join(packed[0], name), "data", "val/" + name)
        # Temporary credentials (a key, a secret and a session token) of a role that may read.
        iam_signed = boto3.client("iam", **signed)
        iam_signed.create_role(RoleName="reader", AssumeRolePolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                     "Action": "sts:AssumeRole"}]}))
        iam_signed.put_role_policy(RoleName="reader", PolicyName="all", PolicyDocument=ALLOW_ALL)
        temporary = boto3.client("sts", **signed).assume_role(RoleArn="arn:aws:iam::123456789012:role/reader",
                                                              RoleSessionName="ferry")["Credentials"]
        yield url, key["AccessKeyId"], key["SecretAccessKey"], temporary
    finally:
        proc.kill()
        proc.wait()


def s3_env(endpoint, key_id, secret, **extra):
    return dict(AWS_ENDPOINT_URL=endpoint, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID=key_id,
                AWS_SECRET_ACCESS_KEY=secret, **extra)


@pytest.fixture
def proxy_to(request):
    """FaultProxy factory; every proxy made stops with the test."""
    made = []

    def make(upstream):
        made.append(remote_servers.FaultProxy(upstream))
        return made[-1]

    yield make
    for p in made:
        p.close()


# ---- plain HTTP ---------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2, 16])
def test_http_index_gives_the_folders_digest(packed, http_base, workers):
    rc, got, log = parity(f"{http_base}/val-index.json", workers)
    assert rc == 0, log
    assert got["digest"] == packed[2] and got["images"] == 24 and got["mismatches"] == 0


def test_http_pattern_and_tar(packed, http_base):
    last = len(packed[1]) - 1
    rc, got, log = parity(f"{http_base}/val-{{000000..{last:06d}}}.tar")
    assert rc == 0, log
    assert got["digest"] == packed[2]
    rc, got, log = parity(f"{http_base}/{packed[1][0]}")  # one shard: its own samples only
    assert rc == 0, log
    assert 0 < got["images"] < 24


def test_http_missing_shard_is_named(packed, http_base):
    """A pattern past the last shard: a 404 for it, named, the open failing."""
    rc, _, log = parity(f"{http_base}/val-{{000000..{len(packed[1]):06d}}}.tar")
    assert rc != 0
    missing = f"{http_base}/val-{len(packed[1]):06d}.tar"
    assert missing in log and "HTTP 404" in log, log


def test_http_206_for_other_bytes_refused(http_base, proxy_to):
    """A server that answers a range with other bytes (a 206 whose Content-Range starts
    elsewhere): refused, never taken for the bytes asked for, and not retried."""
    proxy = proxy_to(http_base)
    proxy.every(1, "wrong-range")
    rc, _, log = parity(f"{proxy.url}/val-index.json", 2, FAST)
    assert rc != 0 and "val-index.json: bytes 0-8388607: HTTP 206 for other bytes (from 1)" in log, log
    assert proxy.requests == 1


def test_url_with_password_or_query_refused(http_base):
    host = http_base.split("://")[1]
    rc, _, log = parity(f"http://user:{SECRET}@{host}/val-index.json")
    assert rc != 0 and "user name or password" in log and SECRET not in log, log
    rc, _, log = parity(f"{http_base}/val-index.json?X-Amz-Signature=abc")
    assert rc != 0 and "query" in log, log


def test_python_loader_reads_a_url(packed, http_base):
    """ferry.Loader takes the index URL as it takes the local index: the same batches,
    image bytes and targets alike."""
    import numpy as np
    import ferry

    def epoch(spec):
        loader = ferry.Loader(spec, packed[0], batch_size=4, workers=2, resolution=64, shuffle=False,
                              tensor_type="numpy")
        return [(images.copy(), [{k: np.array(v) for k, v in t.items()} for t in targets])
                for images, targets in loader]

    local, remote = epoch(os.path.join(packed[0], "val-index.json")), epoch(f"{http_base}/val-index.json")
    assert len(local) == len(remote) == 6
    for (li, lt), (ri, rt) in zip(local, remote):
        assert np.array_equal(li, ri)
        assert len(lt) == len(rt)
        for a, b in zip(lt, rt):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# ---- S3 (moto) ------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 16])
def test_s3_signed_gives_the_folders_digest(packed, s3, workers):
    endpoint, key_id, secret, _ = s3
    rc, got, log = parity("s3://data/val/val-index.json", workers, s3_env(endpoint, key_id, secret))
    assert rc == 0, log
    assert got["digest"] == packed[2] and got["images"] == 24


def test_s3_wrong_secret_and_unsigned_refused(s3):
    endpoint, key_id, _, _ = s3
    rc, _, log = parity("s3://data/val/val-index.json", 2, s3_env(endpoint, key_id, SECRET))
    assert rc != 0
    assert "s3://data/val/val-index.json" in log and "HTTP 403 (SignatureDoesNotMatch)" in log, log
    assert SECRET not in log
    rc, _, log = parity("s3://data/val/val-index.json", 2, {"AWS_ENDPOINT_URL": endpoint})
    assert rc != 0 and "HTTP 403" in log, log


def test_s3_session_token_sent_signed_never_shown(packed, s3, proxy_to):
    """A role's temporary credentials, through a recording proxy: every GET carries the
    token in x-amz-security-token, signed, and the epoch gives the folder's digest; a
    wrong token is refused (moto checks it); no run shows the secret or the token."""
    endpoint, _, _, temporary = s3
    proxy = proxy_to(endpoint)
    token = temporary["SessionToken"]
    env = s3_env(proxy.url, temporary["AccessKeyId"], temporary["SecretAccessKey"], AWS_SESSION_TOKEN=token)
    rc, got, log = parity("s3://data/val/val-index.json", 2, env)
    assert rc == 0, log
    assert got["digest"] == packed[2]
    assert proxy.headers
    for h in proxy.headers:
        h = {k.lower(): v for k, v in h.items()}
        assert h["x-amz-security-token"] == token
        signed = h["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
        assert "x-amz-security-token" in signed and "host" in signed
    rc, _, log = parity("s3://data/val/val-index.json", 2, dict(env, AWS_SESSION_TOKEN=SECRET))
    assert rc != 0 and "HTTP 4" in log, log
    assert SECRET not in log
    proxy.every(1, "503")
    rc, _, log = parity("s3://data/val/val-index.json", 2, dict(env, FERRY_REMOTE_RETRIES="1", **FAST))
    assert rc != 0 and "HTTP 503" in log, log
    assert temporary["SecretAccessKey"] not in log and token not in log


# ---- faults ----------------------------------------------------------------------------


def upstream_of(kind, http_base, s3):
    """(spec, upstream URL, the environment given the proxy's URL)."""
    if kind == "http":
        return "val-index.json", http_base, lambda proxy: {}
    endpoint, key_id, secret, _ = s3
    return "s3://data/val/val-index.json", endpoint, lambda proxy: s3_env(proxy, key_id, secret)


@pytest.fixture(params=["http", "s3"])
def upstream(request, http_base):
    s3 = request.getfixturevalue("s3") if request.param == "s3" else None
    return upstream_of(request.param, http_base, s3)


def spec_through(spec, proxy):
    return spec if spec.startswith("s3://") else f"{proxy.url}/{spec}"


@pytest.mark.parametrize("fault", FAULTS)
def test_faults_retried_give_the_folders_digest(packed, upstream, proxy_to, fault):
    """Every third GET (at most four) faulted: retried from where it stopped, the epoch
    delivers exactly the folder's bytes."""
    spec, base, env_for = upstream
    proxy = proxy_to(base)
    proxy.every(3, fault, first=1, limit=4)
    env = dict(env_for(proxy.url), FERRY_REMOTE_RETRIES="3", **FAST)
    rc, got, log = parity(spec_through(spec, proxy), 4, env)
    assert rc == 0, log
    assert proxy.faults.get(fault) == 4, proxy.faults
    assert got["digest"] == packed[2] and got["images"] == 24 and got["mismatches"] == 0


def test_remote_options_reach_the_client_and_the_environment_wins(http_base, proxy_to, monkeypatch):
    """ferry.Loader's remote_retries is the client's (include/ferry/source.h): every GET
    answered 503, the index is asked for 1 + retries times and the message says how many
    retries; 0 is none; FERRY_REMOTE_RETRIES, when set, wins over the keyword; a keyword
    out of its range is refused before anything is read."""
    import ferry
    for name in [k for k in os.environ if k.startswith("FERRY_REMOTE_")]:
        monkeypatch.delenv(name)
    proxy = proxy_to(http_base)
    proxy.every(1, "503")
    spec = f"{proxy.url}/val-index.json"

    def refused(**keywords):
        before = proxy.faults.get("503", 0)
        with pytest.raises(ferry.FerryError) as failure:
            ferry.Loader(spec, None, batch_size=4, workers=1, resolution=64, remote_backoff_ms=0, **keywords)
        return str(failure.value), proxy.faults.get("503", 0) - before

    message, gets = refused(remote_retries=2)
    assert "HTTP 503" in message and "after 2 retries" in message and gets == 3, (message, gets)
    message, gets = refused(remote_retries=0)
    assert "HTTP 503" in message and "retr" not in message and gets == 1, (message, gets)
    monkeypatch.setenv("FERRY_REMOTE_RETRIES", "1")
    message, gets = refused(remote_retries=3)
    assert "after 1 retry" in message and gets == 2, (message, gets)
    before = proxy.faults.get("503", 0)
    for bad in (dict(remote_stall_s=0), dict(remote_retries=-1), dict(remote_block_bytes=1024)):
        with pytest.raises((ValueError, ferry.FerryError)):
            ferry.Loader(spec, None, **bad)
    assert proxy.faults.get("503", 0) == before  # refused at the config: no GET made


def last_image(packed):
    """(URL path of the last shard, its last image member's first and last byte, the
    member's name): a range the open never asks for (it reads 8 MiB chunks and 64 KiB
    image heads)."""
    folder, shards, _ = packed
    with tarfile.open(os.path.join(folder, shards[-1])) as tar:
        image = [m for m in tar.getmembers() if not m.name.endswith(".json")][-1]
    assert image.size > 65536
    return "/" + shards[-1], image.offset_data, image.offset_data + image.size - 1, image.name


@pytest.mark.parametrize("fault", FAULTS)
def test_faults_past_the_retries_fail_named(packed, upstream, proxy_to, fault):
    """Every GET of the index, of one image member (blocks off: a GET per image), or of
    the block holding the last shard (blocks on, the default) faulted: the run fails in
    the open or in the epoch, naming the URL, the bytes, what went wrong, and in the epoch
    the member being read."""
    spec, base, env_for = upstream
    proxy = proxy_to(base)
    env = dict(env_for(proxy.url), FERRY_REMOTE_RETRIES="1", **FAST)
    what = {"503": "HTTP 503", "reset": "Failure when receiving data from the peer",
            "stall": "stalled, no byte for 1 s", "cut": "Transferred a partial file"}[fault]
    proxy.every(1, fault)
    rc, _, log = parity(spec_through(spec, proxy), 2, env)
    assert rc != 0 and what in log and "after 1 retry" in log, log
    assert re.search(r"val-index\.json: bytes \d+-8388607: ", log), log  # from where the body stopped
    shard, first, last, member = last_image(packed)
    path = shard if not spec.startswith("s3://") else "/data/val" + shard
    proxy.within(path, first, last, fault)
    before = dict(proxy.faults)
    rc, _, log = parity(spec_through(spec, proxy), 2, dict(env, FERRY_REMOTE_CACHE_BYTES="0"))
    assert rc != 0, log
    assert proxy.faults[fault] >= before[fault] + 2  # a read and its one retry (each loader coco_parity runs reads)
    assert f"member '{member}' of " in log, log
    assert re.search(re.escape(shard[1:]) + r": bytes (\d+)-" + str(last) + ": ", log), log
    assert int(re.search(r": bytes (\d+)-" + str(last), log).group(1)) >= first
    assert what in log and "after 1 retry" in log, log
    # The last shard's one block (4 MiB > the shard): its image members' bytes, from 0.
    proxy.within(path, 0, last, fault)
    before = dict(proxy.faults)
    rc, _, log = parity(spec_through(spec, proxy), 2, env)
    assert rc != 0, log
    assert proxy.faults[fault] >= before[fault] + 2
    named = re.search(r"member '([^']+)' of \S*" + re.escape(shard[1:]) + r": bytes (\d+)-" + str(last) + ": ", log)
    with tarfile.open(os.path.join(packed[0], shard[1:])) as tar:
        assert named and named.group(1) in tar.getnames(), log  # the member being read: one of the shard's
    assert what in log and "after 1 retry" in log, log
    if spec.startswith("s3://"):
        assert env["AWS_SECRET_ACCESS_KEY"] not in log


# ---- blocks (issue 26's remote speed) -------------------------------------------------
# In the shard order (coco_parity's default for shards) a shard at a URL is read in
# blocks shared by the workers: one GET per block, not per image. The open's own reads
# (the index and each shard's headers, through source/remote.c's stream) are 8 MiB chunks;
# every other GET of a shard is the epoch's: an image, or a block.

BLOCK = 4 << 20  # FERRY_REMOTE_BLOCK_BYTES's default
SMALL_BLOCK = 256 << 10
# The passes over a shard in one coco_parity run, at most: its two loaders (packed and
# unpacked) each read the epoch, and begin the next one before they are closed (as many
# images of it as the workers reached: timing, so the GETs of two runs differ), and a
# block read by both epochs at once may be read through by the first and fetched again.
PASSES_AT_MOST = 2 * 3


def image_reads(proxy):
    """(shard name, first byte, last byte) of each GET of a shard that is not the
    open's 8 MiB chunk."""
    return proxy.shard_gets(chunks=False)


def image_spans(packed):
    """{shard name: [(first byte, last byte) of each image member]}."""
    folder, shards, _ = packed
    out = {}
    for name in shards:
        with tarfile.open(os.path.join(folder, name)) as tar:
            out[name] = [(m.offset_data, m.offset_data + m.size - 1) for m in tar.getmembers()
                         if not m.name.endswith(".json")]
    return out


def is_block_read(spans, shard, first, last, block):
    """Whether a GET of [first, last] of `shard` is a read of blocks: a block (a worker's
    own read) or a run of them (the read-ahead's), aligned at a multiple of the block and
    ending at one, or at the end of the shard's last image."""
    end = max(last for _, last in spans[shard])
    return first % block == 0 and last <= end and (last == end or (last + 1) % block == 0) and last > first


def counted_parity(base, proxy_to, workers, env, **order):
    """coco_parity through a counting proxy: (the run's JSON, its image_reads)."""
    proxy = proxy_to(base)
    rc, got, log = parity(f"{proxy.url}/val-index.json", workers, env, **order)
    assert rc == 0, log
    return got, image_reads(proxy)


@pytest.mark.parametrize("workers", [1, 2, 16])
def test_blocks_one_get_per_block_same_digest(packed, http_base, proxy_to, workers):
    """With blocks off (FERRY_REMOTE_CACHE_BYTES=0) each image read is a GET of its
    bytes; with them (the default), every read is of whole blocks (aligned, cut at the
    shard's last image): one, or with 256 KiB blocks a run of them read ahead in one GET
    (one worker: the reader is slower than loopback, so the run is ahead of it); with
    4 MiB blocks (a block holds a whole 700 KB shard here) one GET per shard and pass
    (PASSES_AT_MOST), fewer than one per image; fewer than one per image with 256 KiB
    blocks (over which many images cross into the next); and the same bytes: the
    folder's digest."""
    spans = image_spans(packed)
    off, per_image = counted_parity(http_base, proxy_to, workers, {"FERRY_REMOTE_CACHE_BYTES": "0"})
    assert sorted(set((first, last) for _, first, last in per_image)) == \
        sorted(span for images in spans.values() for span in images)
    for block in (BLOCK, SMALL_BLOCK):
        env = {"FERRY_REMOTE_BLOCK_BYTES": str(block)} if block != BLOCK else {}
        got, reads = counted_parity(http_base, proxy_to, workers, env)
        assert got["digest"] == off["digest"] == packed[2] and got["images"] == 24
        for shard, first, last in reads:
            assert is_block_read(spans, shard, first, last, block), (shard, first, last)
        if block == SMALL_BLOCK and workers == 1:
            assert any(last - first + 1 > block for _, first, last in reads), reads
        if block == BLOCK:  # a shard is one block: one GET per shard and pass
            assert len(reads) <= PASSES_AT_MOST * len(spans) < len(per_image), (len(reads), len(spans), len(per_image))
        else:
            assert len(reads) < len(per_image), (len(reads), len(per_image))
    crossing = sum(first // SMALL_BLOCK != last // SMALL_BLOCK for images in spans.values() for first, last in images)
    assert crossing >= 3, "no image crosses a block boundary: the test would not test that"


def test_read_ahead_goes_on_into_the_next_shard(packed, http_base, proxy_to):
    """The loader tells the shards' cache each epoch's order, and the read-ahead goes
    on from a shard's end into the next shard read: with 256 KiB blocks (three to a
    shard here) and one worker, slower than loopback, the shards after the first are
    read ahead whole, one GET from byte 0 to the end of the last image each. Without
    that, a shard's first block was always its first reader's own GET of one block, and
    the rest a run from the second block. The same digest."""
    spans = image_spans(packed)
    ends = {shard: max(last for _, last in images) for shard, images in spans.items()}
    got, reads = counted_parity(http_base, proxy_to, 1, {"FERRY_REMOTE_BLOCK_BYTES": str(SMALL_BLOCK)})
    assert got["digest"] == packed[2]
    assert all(end >= SMALL_BLOCK for end in ends.values()), "a shard of one block: the test would not test that"
    whole = {shard for shard, first, last in reads if first == 0 and last == ends[shard]}
    assert len(whole) >= max(1, (len(spans) - 1) // 2), (sorted(whole), reads)


THROUGHPUT = os.path.join(BUILD, "repro", "throughput")


def epochs_through(proxy, batches, env):
    """repro/throughput's loader over the proxy's index for `batches` batches of 8 (with
    its 5 of warm-up), epoch after epoch of the 24 images, shuffled: the shards' image
    reads."""
    cmd = [THROUGHPUT, "--annotations", f"{proxy.url}/val-index.json", "--images", os.path.dirname(THROUGHPUT),
           "--workers", "2", "--only", "loader", "--processes", "1", "--warmup", "5", "--batches", str(batches),
           "--resolution", "64", "--json"]
    out = subprocess.run(cmd, env=run_env(env), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return image_reads(proxy)


def test_a_split_that_fits_the_cache_is_fetched_once(packed, http_base, proxy_to):
    """When the split's blocks all fit in the read-ahead's part of the cache (the
    default cap here: 24 images), a block read through is kept, so twelve epochs fetch
    each block once: with 256 KiB blocks, no more GETs than the split has blocks (each
    GET fills one block or more; a run's request may ask past what it fills, so the
    ranges asked overlap). With a cap the split does not fit in (1 MiB: the
    read-ahead's half is smaller than the 2 MB split), the blocks are freed when read
    through and fetched again in each epoch: a GET per shard and epoch at least."""
    small = {"FERRY_REMOTE_BLOCK_BYTES": str(SMALL_BLOCK)}
    ends = [max(last for _, last in images) for images in image_spans(packed).values()]
    blocks = sum(end // SMALL_BLOCK + 1 for end in ends)
    assert 1 << 20 < sum(ends), "the split fits in 1 MiB: the test would not test that"
    reads = epochs_through(proxy_to(http_base), 31, small)  # (5 + 31) x 8 = 12 epochs
    assert len(packed[1]) <= len(reads) <= blocks, (len(reads), blocks)
    again = epochs_through(proxy_to(http_base), 31, dict(small, FERRY_REMOTE_CACHE_BYTES=str(1 << 20)))
    assert len(again) >= 12 * len(packed[1]) > blocks, (len(again), len(packed[1]), blocks)


def test_the_open_fetches_each_shard_once(packed, http_base, proxy_to, tmp_path):
    """Over a network the open walks each shard once: the sidecars it reads are copied
    to an unnamed file in $TMPDIR, which the second pass (the annotations) reads rather
    than fetching the shards again. Each 700 KB shard is then one 8 MiB chunk GET at the
    open (coco_parity opens the split more than once: each open fetches the index once);
    with TMPDIR naming no folder there is no copy, each shard is fetched twice per open,
    and the digest is the same; when writing the copy fails after the first two sidecars
    (a file size limit, as a full disk), those two are read from it and the rest fetched
    again: the same digest. Nothing is left in TMPDIR."""
    folder, shards, _ = packed
    with tarfile.open(os.path.join(folder, shards[0])) as tar:
        sidecars = [m.size for m in tar.getmembers() if m.name.endswith(".json")]

    def two_sidecars_fit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (sidecars[0] + sidecars[1], resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), nothing more

    for tmpdir, per_open, preexec in ((tmp_path, 1, None), (tmp_path / "absent", 2, None),
                                      (tmp_path, 2, two_sidecars_fit)):
        proxy = proxy_to(http_base)
        rc, got, log = parity(f"{proxy.url}/val-index.json", 2, {"TMPDIR": str(tmpdir)}, preexec=preexec)
        assert rc == 0, log
        assert got["digest"] == packed[2]
        chunks = {}
        for name, _, _ in proxy.shard_gets(chunks=True):
            chunks[name] = chunks.get(name, 0) + 1
        opens = sum(1 for path, _ in proxy.gets if path.endswith("/val-index.json"))
        assert opens >= 1 and chunks == {name: per_open * opens for name in packed[1]}, (str(tmpdir), opens, chunks)
    assert os.listdir(tmp_path) == []


def test_dataset_order_shuffled_keeps_a_get_per_image(packed, http_base, proxy_to):
    """The dataset order with shuffle reads a shard's images far apart in time: blocks
    would fetch each several times over, so it keeps one GET per image, the same GETs as
    with blocks turned off."""
    order = dict(shuffle=True, order="dataset")
    images = set((shard, first, last) for shard, spans in image_spans(packed).items() for first, last in spans)
    _, default = counted_parity(http_base, proxy_to, 2, {}, **order)
    _, off = counted_parity(http_base, proxy_to, 2, {"FERRY_REMOTE_CACHE_BYTES": "0"}, **order)
    assert set(default) == set(off) == images


def test_cache_cap_honoured(packed, http_base, proxy_to):
    """A cap of two 256 KiB blocks: blocks are evicted and fetched again, yet fewer GETs
    than one per image, and the same digest; a cap smaller than a block: every image
    read directly (the GETs of blocks off), the same digest."""
    small = {"FERRY_REMOTE_BLOCK_BYTES": str(SMALL_BLOCK)}
    _, per_image = counted_parity(http_base, proxy_to, 4, {"FERRY_REMOTE_CACHE_BYTES": "0"})
    got, reads = counted_parity(http_base, proxy_to, 4, dict(small, FERRY_REMOTE_CACHE_BYTES=str(2 * SMALL_BLOCK)))
    assert got["digest"] == packed[2]
    assert len(reads) < len(per_image)
    got, reads = counted_parity(http_base, proxy_to, 4, dict(small, FERRY_REMOTE_CACHE_BYTES=str(100 << 10)))
    assert got["digest"] == packed[2] and set(reads) == set(per_image)
