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
import subprocess
import tarfile

import pytest

import remote_servers
from conftest import make_synth, skip_or_fail

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.path.dirname(os.environ.get("FERRY_SYNTH_COCO", os.path.join(ROOT, "build", "repro",
                                                                                         "synth_coco"))))
COCO_PARITY = os.path.join(BUILD, "repro", "coco_parity")
FERRY_COCO = os.path.join(BUILD, "tools", "ferry-coco")
HAVE_MOTO = importlib.util.find_spec("moto") is not None and importlib.util.find_spec("boto3") is not None
SECRET = "SeCrEt-never-shown-0123456789"
ALLOW_ALL = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
FAULTS = ("reset", "503", "stall", "cut")
# Short waits so that faults cost little: a stall is given up after 1 s without a byte.
FAST = {"FERRY_REMOTE_BACKOFF_MS": "10", "FERRY_REMOTE_STALL_S": "1", "FERRY_REMOTE_CONNECT_TIMEOUT_MS": "2000"}


def parity(spec, workers=2, env=None):
    """coco_parity's run over `spec` with only the given AWS and FERRY_REMOTE settings:
    (returncode, its JSON or None, stdout + stderr)."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AWS_", "FERRY_REMOTE_")) and not k.lower().endswith("_proxy")}
    cmd = [COCO_PARITY, "--annotations", spec, "--images", os.path.dirname(COCO_PARITY), "--workers", str(workers),
           "--batch", "4", "--resolution", "96", "--remap-categories", "0", "--shuffle", "0", "--json"]
    out = subprocess.run(cmd, env=dict(clean, FERRY_COCO_INDEX="off", **(env or {})), capture_output=True, text=True,
                         timeout=120)
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
    assert rc != 0 and "val-index.json: bytes 0-1048575: HTTP 206 for other bytes (from 1)" in log, log
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


def last_image(packed):
    """(URL path of the last shard, its last image member's first and last byte, the
    member's name): a range the open never asks for (it reads 1 MiB chunks and 64 KiB
    image heads)."""
    folder, shards, _ = packed
    with tarfile.open(os.path.join(folder, shards[-1])) as tar:
        image = [m for m in tar.getmembers() if not m.name.endswith(".json")][-1]
    assert image.size > 65536
    return "/" + shards[-1], image.offset_data, image.offset_data + image.size - 1, image.name


@pytest.mark.parametrize("fault", FAULTS)
def test_faults_past_the_retries_fail_named(packed, upstream, proxy_to, fault):
    """Every GET of the index, or every GET of one image member, faulted: the run fails in
    the open or in the epoch, naming the URL, the bytes, what went wrong, and in the epoch
    the member."""
    spec, base, env_for = upstream
    proxy = proxy_to(base)
    env = dict(env_for(proxy.url), FERRY_REMOTE_RETRIES="1", **FAST)
    what = {"503": "HTTP 503", "reset": "Failure when receiving data from the peer",
            "stall": "stalled, no byte for 1 s", "cut": "Transferred a partial file"}[fault]
    proxy.every(1, fault)
    rc, _, log = parity(spec_through(spec, proxy), 2, env)
    assert rc != 0 and what in log and "after 1 retry" in log, log
    assert re.search(r"val-index\.json: bytes \d+-1048575: ", log), log  # from where the body stopped
    shard, first, last, member = last_image(packed)
    path = shard if not spec.startswith("s3://") else "/data/val" + shard
    proxy.within(path, first, last, fault)
    before = dict(proxy.faults)
    rc, _, log = parity(spec_through(spec, proxy), 2, env)
    assert rc != 0, log
    assert proxy.faults[fault] >= before[fault] + 2  # a read and its one retry (each loader coco_parity runs reads)
    assert f"member '{member}' of " in log, log
    assert re.search(re.escape(shard[1:]) + r": bytes (\d+)-" + str(last) + ": ", log), log
    assert int(re.search(r": bytes (\d+)-" + str(last), log).group(1)) >= first
    assert what in log and "after 1 retry" in log, log
    if spec.startswith("s3://"):
        assert env["AWS_SECRET_ACCESS_KEY"] not in log
