"""The shard order (issue 26, "Order"): shards are the unit of shuffling and of sharding.

A split of 53 samples in 8 shards of uneven sizes (5, 9, 3, 12, 7, 1, 10, 6), written
here with Python's tarfile as a brace pattern, read through ferry.Loader. Each test
checks the law docs/shards.md states, from the delivered image ids alone:

  - shuffle off: rank r's samples are positions r*m .. r*m+m-1 of the shards in index
    order (m samples per rank), wrapping around to pad;
  - shuffle on: the shards are permuted from (seed, epoch), every rank cutting the same
    sequence into contiguous runs (so a rank sees whole shards but at its run's ends);
    with shuffle_buffer=1 a rank's samples are its run as is, and with a buffer of B no
    sample is more than B - 1 positions from its place in the run;
  - 4 ranks: the same count each, the union covers the epoch once plus the padding
    (or less the cut tail with drop_last);
  - batches are the same for 1, 2 and 16 workers, and a mid-epoch resume
    (state_dict / load_state_dict) continues the uninterrupted epoch exactly;
  - the same split at a URL (served here over HTTP) is read in blocks, a GET per block
    rather than per image, and gives the local shards' bytes, batch for batch.
"""
import hashlib
import io
import json
import os
import tarfile

import pytest

import ferry
import remote_servers
from conftest import make_synth
from ferry._capi import FerryError

SHARD_SIZES = [5, 9, 3, 12, 7, 1, 10, 6]
N = sum(SHARD_SIZES)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """(pattern, images folder, image id of each dataset index)."""
    out = tmp_path_factory.mktemp("order")
    annotations, images = make_synth(str(out / "synth"), N, 7)
    with open(annotations) as f:
        doc = json.load(f)
    by_image = {}
    for a in doc["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    ids, at = [], 0
    for s, size in enumerate(SHARD_SIZES):
        with tarfile.open(out / f"part-{s:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for image in doc["images"][at:at + size]:
                sidecar = json.dumps({"image_id": image["id"], "file_name": image["file_name"],
                                      "annotations": by_image.get(image["id"], [])}).encode()
                tar.add(os.path.join(images, image["file_name"]), arcname=f"{len(ids):08d}.jpg")
                info = tarfile.TarInfo(f"{len(ids):08d}.json")
                info.size = len(sidecar)
                tar.addfile(info, io.BytesIO(sidecar))
                ids.append(image["id"])
        at += size
    pattern = str(out / f"part-{{000000..{len(SHARD_SIZES) - 1:06d}}}.tar")
    return pattern, images, {image_id: i for i, image_id in enumerate(ids)}


def epoch(split, batch_size=4, **options):
    """The dataset indices of one epoch, batch by batch."""
    pattern, images, index_of = split
    loader = ferry.Loader(pattern, images, batch_size=batch_size, resolution=16, load_images=False,
                          fields=["image_id"], tensor_type="numpy", **options)
    try:
        return [[index_of[int(t["image_id"][0])] for t in targets] for _, targets in loader]
    finally:
        loader.close()


def flat(batches):
    return [i for batch in batches for i in batch]


def shard_of(index):
    at = 0
    for s, size in enumerate(SHARD_SIZES):
        if index < at + size:
            return s
        at += size
    raise AssertionError(index)


FIRST = [sum(SHARD_SIZES[:s]) for s in range(len(SHARD_SIZES))]


def check_shard_sequence(sequence):
    """`sequence` (N samples) is whole shards, each in member order: the order the
    shards were permuted into."""
    shards, at = [], 0
    while at < len(sequence):
        s = shard_of(sequence[at])
        assert sequence[at:at + SHARD_SIZES[s]] == list(range(FIRST[s], FIRST[s] + SHARD_SIZES[s])), \
            f"shard {s} is not whole and in member order at position {at}: {sequence}"
        shards.append(s)
        at += SHARD_SIZES[s]
    assert sorted(shards) == list(range(len(SHARD_SIZES))), shards
    return shards


def assert_mostly_whole_shards(samples, who):
    """A run of the shard sequence: every shard it touches whole, but for its two ends."""
    touched = {}
    for i in samples:
        touched[shard_of(i)] = touched.get(shard_of(i), 0) + 1
    partial = [s for s, c in touched.items() if c < SHARD_SIZES[s]]
    assert len(partial) <= 2, f"{who} reads parts of shards {partial}: {samples}"


def rank_runs(split, world, **options):
    return [flat(epoch(split, batch_size=1, rank=r, world_size=world, **options)) for r in range(world)]


def test_shuffle_off_is_the_shards_in_order(split):
    """No shuffle: rank r takes positions r*m .. of the shards in index order, padded by
    wrapping to the start (m = ceil(53 / 4) = 14; the last rank's 3 padding samples
    are samples 0, 1, 2), not DistributedSampler's r, r + 4, ... of the folder order."""
    per_rank = -(-N // 4)
    got = rank_runs(split, 4, shuffle=False)
    for r in range(4):
        assert got[r] == [(r * per_rank + k) % N for k in range(per_rank)], f"rank {r}: {got[r]}"


def test_four_ranks_equal_counts_cover_the_epoch_once(split):
    """4 ranks over uneven shards: the same count on each (so no DDP rank waits on
    another), the union every sample once plus exactly the padding (4 * 14 - 53 = 3,
    the start of the epoch's shard sequence), and each rank's run is contiguous in that
    sequence; with drop_last, 13 each and no sample twice."""
    for seed in (0, 5):
        buffered = rank_runs(split, 4, seed=seed)
        for r in range(4):
            assert_mostly_whole_shards(buffered[r], f"rank {r}")
        unbuffered = rank_runs(split, 4, seed=seed, shuffle_buffer=1)
        assert [len(r) for r in unbuffered] == [14] * 4
        sequence = flat(unbuffered)
        check_shard_sequence(sequence[:N])
        assert sequence[N:] == sequence[:4 * 14 - N], "the padding wraps to the start of the sequence"
        assert [sorted(b) for b in buffered] == [sorted(u) for u in unbuffered], \
            "the buffer shuffles within a rank's run, never across ranks"
        counts = {}
        for i in flat(buffered):
            counts[i] = counts.get(i, 0) + 1
        assert sorted(counts) == list(range(N))
        assert sum(c - 1 for c in counts.values()) == 4 * 14 - N
    dropped = rank_runs(split, 4, drop_last=True, shuffle_buffer=1)
    assert [len(r) for r in dropped] == [N // 4] * 4
    assert len(set(flat(dropped))) == 4 * (N // 4), "drop_last: no sample twice"
    assert flat(dropped) == flat(rank_runs(split, 4, shuffle_buffer=1))[:4 * (N // 4)]


def test_default_order_reads_mostly_whole_shards(split):
    """The default order of a shard spec (no option given): each of 4 ranks' samples
    are whole shards but for at most two partial ones (its run's ends), where the
    folder's order scatters a rank over nearly every shard."""
    for r, samples in enumerate(rank_runs(split, 4, seed=3)):
        assert_mostly_whole_shards(samples, f"rank {r}")


@pytest.mark.parametrize("buffer", [2, 5, 20])
def test_the_buffer_moves_no_sample_past_its_bound(split, buffer):
    """A buffer of B: every sample is delivered within B - 1 positions of its place in
    its rank's run (the run being the shards' sequence, shuffle_buffer=1), the runs are
    shuffled (B > 1), and the shards' permutation changes with the epoch."""
    for r in range(2):
        run = flat(epoch(split, batch_size=1, rank=r, world_size=2, seed=9, shuffle_buffer=1))
        got = flat(epoch(split, batch_size=1, rank=r, world_size=2, seed=9, shuffle_buffer=buffer))
        assert sorted(got) == sorted(run) and got != run
        where = {}
        for k, i in enumerate(run):
            where.setdefault(i, []).append(k)
        for k, i in enumerate(got):
            here = where[i].pop(0)
            assert abs(k - here) <= buffer - 1, f"rank {r}: sample {i} from {here} to {k} with a buffer of {buffer}"
    pattern, images, index_of = split
    loader = ferry.Loader(pattern, images, batch_size=1, resolution=16, load_images=False, fields=["image_id"],
                          tensor_type="numpy", shuffle_buffer=1, seed=9)
    orders = []
    for _ in range(2):
        orders.append(check_shard_sequence([index_of[int(t["image_id"][0])] for _, ts in loader for t in ts]))
    loader.close()
    assert orders[0] != orders[1], "epoch 1 permutes the shards anew"


def digested(loader, index_of, batches=None):
    """(dataset indices, a digest of every image and target array) of each of the next
    `batches` batches (all of the epoch's by default)."""
    got, digests = [], []
    for k, (pixels, targets) in enumerate(loader):
        got.append([index_of[int(t["image_id"][0])] for t in targets])
        h = hashlib.sha256(pixels.tobytes())
        for t in targets:
            for key in sorted(t):
                h.update(key.encode() + t[key].tobytes())
        digests.append(h.hexdigest())
        if batches is not None and k + 1 == batches:
            break
    return got, digests


def test_batches_do_not_depend_on_the_worker_count(split):
    """Batch k is the same samples for 1, 2 and 16 workers, in the shard order, and the
    same bytes: a digest of every image and target array of each batch."""
    pattern, images, index_of = split
    got, digests = {}, {}
    for workers in (1, 2, 16):
        with ferry.Loader(pattern, images, batch_size=4, resolution=16, workers=workers, rank=1, world_size=2,
                          seed=4, tensor_type="numpy") as loader:
            got[workers], digests[workers] = digested(loader, index_of)
    assert got[1] == got[2] == got[16]
    assert digests[1] == digests[2] == digests[16]
    assert_mostly_whole_shards(flat(got[1]), "rank 1")


@pytest.mark.parametrize("block, most", [(512 << 10, 3 / 4), (4 << 20, 1 / 3)])
def test_url_shards_read_in_blocks_give_the_local_bytes(split, monkeypatch, block, most):
    """The split served over HTTP (with Range) and read in blocks: for 1, 2 and 16
    workers, two epochs, and a resume after 5 batches of epoch 1, batch k is the local
    shards' batch k byte for byte, while the GETs of the shards (the open's 8 MiB chunks
    aside) are at most 3/4 of the images read with 512 KiB blocks (which a quarter of
    the images cross), at most 1/3 with 4 MiB blocks (the default: a block holds a
    shard); with blocks off (FERRY_REMOTE_CACHE_BYTES=0) one per image. Not exact
    counts: where an epoch's last reads and the next's first overlap in time, a block
    may be freed and fetched again."""
    pattern, images, index_of = split
    server, base = remote_servers.range_server(os.path.dirname(pattern))
    proxy = remote_servers.FaultProxy(base)
    url = proxy.url + "/" + os.path.basename(pattern)
    options = dict(batch_size=4, resolution=16, rank=1, world_size=2, seed=4, tensor_type="numpy")
    monkeypatch.setenv("FERRY_REMOTE_BLOCK_BYTES", str(block))

    def reads():
        return len(proxy.shard_gets(chunks=False))

    try:
        with ferry.Loader(pattern, images, **options) as loader:
            local = [digested(loader, index_of) for _ in range(2)]
        images_read = 2 * len(flat(local[0][0]))
        for workers in (1, 2, 16):
            before = reads()
            with ferry.Loader(url, images, workers=workers, **options) as loader:
                assert [digested(loader, index_of) for _ in range(2)] == local, f"{workers} workers"
            assert reads() - before <= most * images_read, (reads() - before, images_read, workers)
        with ferry.Loader(url, images, workers=2, **options) as loader:
            head = digested(loader, index_of, 5)
            state = loader.state_dict()
        assert head == tuple(part[:5] for part in local[0])
        with ferry.Loader(url, images, workers=2, **options) as loader:
            loader.load_state_dict(state)
            assert digested(loader, index_of) == tuple(part[5:] for part in local[0])
        monkeypatch.setenv("FERRY_REMOTE_CACHE_BYTES", "0")
        before = reads()
        with ferry.Loader(url, images, workers=2, **options) as loader:
            assert digested(loader, index_of) == local[0]
        assert reads() - before >= images_read // 2  # and more: the prefetch reads into the next epoch
    finally:
        proxy.close()
        server.shutdown()


def test_a_mid_epoch_resume_continues_the_epoch_exactly(split):
    """state_dict after 5 batches of epoch 1, load_state_dict on a new loader: the rest
    of epoch 1, and epoch 2, are the uninterrupted run's, in the shard order."""
    pattern, images, index_of = split
    options = dict(batch_size=3, resolution=16, load_images=False, fields=["image_id"], tensor_type="numpy",
                   seed=2, rank=0, world_size=2)

    def batches(loader):
        return [[index_of[int(t["image_id"][0])] for t in ts] for _, ts in loader]

    with ferry.Loader(pattern, images, **options) as loader:
        full = [batches(loader) for _ in range(3)]
    with ferry.Loader(pattern, images, **options) as loader:
        batches(loader)
        it = iter(loader)
        head = [[index_of[int(t["image_id"][0])] for t in next(it)[1]] for _ in range(5)]
        state = loader.state_dict()
    assert head == full[1][:5]
    with ferry.Loader(pattern, images, **options) as loader:
        loader.load_state_dict(state)
        assert batches(loader) == full[1][5:]
        assert batches(loader) == full[2]
    for e in range(3):
        assert_mostly_whole_shards(flat(full[e]), f"epoch {e}")


def test_dataset_order_stays_available_and_shards_order_needs_shards(split):
    """order="dataset" gives a shard spec the folder's order; order="shards" on a JSON
    and its folder is refused, naming it."""
    pattern, images, index_of = split
    annotations = os.path.join(os.path.dirname(images), "annotations", "instances_val2017.json")
    folder = flat(epoch((annotations, images, index_of), rank=1, world_size=4, seed=6))
    assert flat(epoch(split, rank=1, world_size=4, seed=6, order="dataset")) == folder
    with pytest.raises(FerryError, match="config.order SHARDS needs a split packed as shards"):
        ferry.Loader(annotations, images, order="shards")

