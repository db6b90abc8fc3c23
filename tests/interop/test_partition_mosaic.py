"""tensorsafe's elastic partition against MosaicML streaming (docs/PARTITION.md).

* ``orig`` and ``relaxed``: tensorsafe's 5-D arrays equal
  ``streaming.base.partition.get_partitions(...)`` element for element over
  many (samples, canonical nodes, nodes, ranks, workers, batch, drop_first)
  combinations, and both refuse the same inputs.
* With shuffling on, each uses its own permutation, so the per-epoch coverage
  is compared as a multiset shape: every sample covered, the same multiplicity
  histogram, the same number of samples per node, rank and worker.
* The block shuffle is reimplemented here in pure Python from PARTITION.md §4
  and must give the native permutations exactly (the spec is complete).

MosaicML's package ``__init__`` imports torch, torchvision and transformers;
only its numpy-only ``partition`` and ``shuffle`` subpackages are needed, so
they are loaded from the installed files under empty parent packages unless
``streaming`` is already imported. Skipped when mosaicml-streaming is not
installed.
"""
import importlib
import importlib.util
import logging
import sys
import types
import warnings
from collections import Counter

import numpy as np
import pytest

ts = pytest.importorskip("tensorsafe")
from tensorsafe import _native  # noqa: E402

SEED = 9176


def _mosaic():
    if "streaming" in sys.modules:  # already imported for real (e.g. by another interop test)
        partition = importlib.import_module("streaming.base.partition")
        shuffle = importlib.import_module("streaming.base.shuffle")
        return partition.get_partitions, shuffle.get_shuffle
    spec = importlib.util.find_spec("streaming")
    if spec is None:
        pytest.skip("mosaicml-streaming is not installed (pip install --no-deps mosaicml-streaming)")
    root = spec.submodule_search_locations[0]
    before = set(sys.modules)
    try:
        for name, path in (("streaming", root), ("streaming.base", root + "/base")):
            module = types.ModuleType(name)
            module.__path__ = [path]
            sys.modules[name] = module
        logging.getLogger("streaming").setLevel(logging.ERROR)
        partition = importlib.import_module("streaming.base.partition")
        shuffle = importlib.import_module("streaming.base.shuffle")
        return partition.get_partitions, shuffle.get_shuffle
    finally:
        # Drop the empty parents (and what was loaded under them) so a later
        # `import streaming` elsewhere in the session gets the real package.
        for name in set(sys.modules) - before:
            if name == "streaming" or name.startswith("streaming."):
                del sys.modules[name]


@pytest.fixture(scope="module")
def mosaic():
    return _mosaic()


def _both(get_partitions, algo, n, ncn, nodes, ranks, workers, bs, drop, initial=None):
    """(mosaic array or exception, tensorsafe array or exception)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = get_partitions(algo, n, ncn, nodes, ranks, workers, bs, drop, initial)
    except (ValueError, ZeroDivisionError) as e:
        ref = e
    try:
        ours = _native.partition_elastic(algo, n, ncn, nodes, ranks, workers, bs, drop, initial)
    except ts.InvalidArgumentError as e:
        ours = e
    return ref, ours


def _check(ref, ours, case):
    if isinstance(ref, Exception):
        assert isinstance(ours, Exception), f"{case}: MosaicML raised {ref!r}, tensorsafe returned {ours.shape}"
        return 0
    assert not isinstance(ours, Exception), f"{case}: tensorsafe raised {ours!r}, MosaicML returned {ref.shape}"
    assert ours.dtype == np.int64 and ours.shape == ref.shape, f"{case}: {ours.shape} != {ref.shape}"
    np.testing.assert_array_equal(ours, ref, err_msg=str(case))
    return 1


def test_documented_examples(mosaic):
    get_partitions, _ = mosaic
    ours = _native.partition_elastic("orig", 10, 2, 1, 2, 2, 2)
    assert ours.tolist() == [[[[[0, 1], [4, -1]], [[2, 3], [-1, -1]]], [[[5, 6], [9, -1]], [[7, 8], [-1, -1]]]]]
    np.testing.assert_array_equal(ours, get_partitions("orig", 10, 2, 1, 2, 2, 2, 0, None))
    resumed = _native.partition_elastic("orig", 10, 2, 1, 1, 1, 4, 4)
    assert resumed.reshape(-1, 4).tolist() == [[2, 7, 3, 8], [4, 9, -1, -1]]


def test_orig_grid_equals_mosaic(mosaic):
    get_partitions, _ = mosaic
    equal = 0
    for n in (1, 2, 3, 7, 10, 16, 33, 100, 257):
        for ncn in (1, 2, 3, 4, 8):
            for nodes in (1, 2, 4, 8):
                for ranks in (1, 2, 3):
                    for workers in (1, 3):
                        for bs in (1, 4):
                            for drop in sorted({0, nodes * ranks * bs, n // 2, n}):
                                case = ("orig", n, ncn, nodes, ranks, workers, bs, drop)
                                equal += _check(*_both(get_partitions, *case), case)
    assert equal > 2000


def test_random_orig_and_relaxed_equal_mosaic(mosaic, rng):
    get_partitions, _ = mosaic
    equal = 0
    for _ in range(2500):
        algo = str(rng.choice(["orig", "relaxed"]))
        n = int(rng.choice([1, 5, 64, 100, 999, 4096, 10007]))
        ncn = int(rng.choice([1, 2, 4, 6, 8, 16, 64]))
        nodes = int(rng.choice([1, 2, 3, 4, 8, 16]))
        ranks = int(rng.choice([1, 2, 4, 8]))
        workers = int(rng.choice([1, 2, 4, 8]))
        bs = int(rng.choice([1, 2, 5, 8, 32]))
        drop = int(rng.integers(0, n + 1)) if rng.random() < 0.5 else 0
        initial = int(rng.choice([1, 2, 4, 8])) if algo == "relaxed" and rng.random() < 0.7 else None
        case = (algo, n, ncn, nodes, ranks, workers, bs, drop, initial)
        equal += _check(*_both(get_partitions, *case), case)
    assert equal > 1000


def _state(ncn, global_bs, shuffle, epoch=0, block=64):
    return (
        f'{{"version":1,"mode":"elastic","partition":"orig","epoch":{epoch},"sample_in_epoch":0,"seed":{SEED},'
        f'"num_canonical_nodes":{ncn},"global_batch_size":{global_bs},"shuffle":{str(shuffle).lower()},'
        f'"shuffle_block_size":{block},"initial_nodes":null}}'
    )


@pytest.mark.parametrize("algo", ["py1s", "py1e"])
def test_shuffled_coverage_matches_mosaic(mosaic, algo):
    get_partitions, get_shuffle = mosaic
    shards = [37, 50, 0, 50, 41, 50, 50, 13, 50, 50, 29]
    n = sum(shards)
    for ncn, nodes, ranks, workers, bs in [(2, 1, 2, 2, 4), (4, 2, 2, 3, 2), (8, 4, 1, 2, 5), (2, 4, 2, 1, 3)]:
        for epoch in (0, 3):
            ids = get_partitions("orig", n, ncn, nodes, ranks, workers, bs, 0, None)
            perm = get_shuffle(algo, np.array(shards, np.int64), ncn, SEED, epoch, 64)
            ref = np.where(ids != -1, perm[ids], -1)
            state = _native.SamplerState.from_json(_state(ncn, nodes * ranks * bs, True, epoch))
            ours = {}
            for node in range(nodes):
                for rank in range(ranks):
                    for worker in range(workers):
                        ours[node, rank, worker] = _native.epoch_worker_ids(
                            shards, state, nodes, ranks, workers, node, rank, worker)
            mine = np.concatenate(list(ours.values()))
            theirs = ref[ref != -1]
            case = (algo, ncn, nodes, ranks, workers, bs, epoch)
            assert set(mine.tolist()) == set(range(n)) == set(theirs.tolist()), case
            assert sorted(Counter(mine.tolist()).values()) == sorted(Counter(theirs.tolist()).values()), case
            for (node, rank, worker), got in ours.items():
                assert len(got) == int((ref[node, rank, worker] != -1).sum()), case
            # Unshuffled, the multisets are equal worker by worker.
            plain = _native.SamplerState.from_json(_state(ncn, nodes * ranks * bs, False))
            for (node, rank, worker) in ours:
                got = _native.epoch_worker_ids(shards, plain, nodes, ranks, workers, node, rank, worker)
                want = ids[node, rank, worker]
                np.testing.assert_array_equal(got, want[want != -1])


# ---------------------------------------------------------------- PARTITION.md §4 in pure Python

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    z = (z + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class Rng:
    def __init__(self, tag, *args):
        h = tag
        for a in args:
            h = mix64(h ^ a)
        self.state = h

    def next(self):
        out = mix64(self.state)
        self.state = (self.state + GOLDEN) & MASK
        return out

    def bounded(self, bound):
        m = self.next() * bound
        if (m & MASK) < bound:
            threshold = ((1 << 64) - bound) % bound
            while (m & MASK) < threshold:
                m = self.next() * bound
        return m >> 64


def fisher_yates(a, rng):
    for i in range(len(a) - 1, 0, -1):
        j = rng.bounded(i + 1)
        a[i], a[j] = a[j], a[i]


def spec_shuffle(shards, ncn, seed, epoch, block):
    n = sum(shards)
    first = np.concatenate([[0], np.cumsum(shards)[:-1]]).tolist() if shards else []
    order = list(range(len(shards)))
    fisher_yates(order, Rng(1, seed))
    out = []
    at_shard, offset = 0, 0
    for c in range(ncn):
        remaining = (c + 1) * n // ncn - c * n // ncn
        spans = []
        while remaining > 0:
            s = order[at_shard]
            take = min(shards[s] - offset, remaining)
            if take > 0:
                spans.append((first[s] + offset, take))
            remaining -= take
            offset += take
            if offset == shards[s]:
                at_shard, offset = at_shard + 1, 0
        fisher_yates(spans, Rng(2, seed, epoch, c))
        first_block = 1 + Rng(3, seed, epoch, c).bounded(block)
        seq = [begin + i for begin, length in spans for i in range(length)]
        k, lo = 0, 0
        while lo < len(seq):
            hi = min(len(seq), first_block if k == 0 else lo + block)
            part = seq[lo:hi]
            fisher_yates(part, Rng(4, seed, epoch, c, k))
            out.extend(part)
            k, lo = k + 1, hi
    return out


def test_block_shuffle_spec_reimplementation(rng):
    for _ in range(40):
        shards = [int(x) for x in rng.integers(0, 30, size=int(rng.integers(1, 12)))]
        if sum(shards) == 0:
            shards.append(3)
        ncn = int(rng.integers(1, 6))
        block = int(rng.integers(1, 40))
        seed = int(rng.integers(0, 2**63))
        epoch = int(rng.integers(0, 5))
        native = _native.epoch_shuffle(shards, ncn, seed, epoch, block)
        assert native.tolist() == spec_shuffle(shards, ncn, seed, epoch, block), (shards, ncn, seed, epoch, block)
    # The golden permutation printed in PARTITION.md §4.4.
    assert spec_shuffle([4, 3, 0, 5], 2, 9176, 0, 4) == [4, 2, 1, 0, 6, 5, 3, 7, 8, 11, 9, 10]


def test_errors_are_tensorsafe_exceptions():
    with pytest.raises(ts.InvalidArgumentError, match="neither divides the other"):
        _native.partition_elastic("orig", 10, 3, 2, 1, 1, 1)
    with pytest.raises(ts.InvalidArgumentError, match="unknown partition algorithm"):
        _native.partition_elastic("py1e", 10, 1, 1, 1, 1, 1)
    with pytest.raises(ts.InvalidArgumentError, match='key "mode": is missing'):
        _native.SamplerState.from_json('{"version":1}')
    with pytest.raises(ts.InvalidArgumentError, match="empty range"):
        _native.partition_seed([3], 1, 1, 4, 0, 0, 3)
    assert _native.partition_seed([8], 1, 1, 3, 0, 0, 0, 2)["max_id"] == 3


def test_python_front_module():
    from tensorsafe import partition

    assert partition.elastic("orig", 10, 2, 1, 1, 1, 4).reshape(-1, 4).tolist() == [
        [0, 5, 1, 6], [2, 7, 3, 8], [4, 9, -1, -1]]
    assert partition.seed([8], 1, 1, 3, 0, 0, 0, batch_size=2)["max_id"] == 3
    assert partition.epoch_shuffle([4, 3, 0, 5], 2, 9176, 0, 4).tolist() == [4, 2, 1, 0, 6, 5, 3, 7, 8, 11, 9, 10]
    state = partition.normalize_state(_state(2, 4, False))
    assert partition.worker_ids([5, 5], state, 1, 2, 2, 0, 1, 1).tolist() == [7, 8]
