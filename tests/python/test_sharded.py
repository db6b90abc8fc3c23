"""Sharded checkpoints (docs/SHARDED.md) from Python: save_sharded writes the
bytes huggingface_hub's save_torch_state_dict writes (same names, shards and
index) for random state dicts with tied and shared tensors; safe_open /
load_file read an index or its directory lazily; convert goes both ways."""

import json
import os

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn

torch = pytest.importorskip("torch")
hub = pytest.importorskip("huggingface_hub")
import tensorsafe.torch as tst  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int8, torch.uint8, torch.bool,
          torch.float64]


def random_state_dict(rng, n):
    sd = {}
    for i in range(n):
        dtype = DTYPES[int(rng.integers(len(DTYPES)))]
        shape = tuple(int(d) for d in rng.integers(0, 40, size=int(rng.integers(0, 3))))
        nbytes = torch.empty(shape, dtype=dtype).nbytes
        if nbytes:  # random bits of the dtype
            raw = rng.integers(0, 256, size=nbytes, dtype=np.uint8).tobytes()
            t = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).clone()
        else:
            t = torch.empty(shape, dtype=dtype)
        sd[f"layers.{i}.w\u00e9ight" if i % 7 == 3 else f"layers.{i}.weight"] = t
    names = list(sd)
    if names and rng.integers(2):  # tied: one tensor under two names
        sd["lm_head.weight"] = sd[names[0]]
    if rng.integers(4) == 0:  # views that do not cover their storage: refused by both
        base = torch.arange(64, dtype=torch.float32)
        sd["split.a"], sd["split.b"] = base[:32], base[32:]
    return sd


def outcome(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared
        return (type(e).__name__, str(e))


def same_file(a: bytes, b: bytes) -> bool:
    """Identical bytes; or, when the header's metadata has several keys
    (which safetensors writes in hash-map order), equal headers as JSON and
    identical data."""
    if a == b:
        return True
    na, nb = int.from_bytes(a[:8], "little"), int.from_bytes(b[:8], "little")
    ha, hb = json.loads(a[8:8 + na]), json.loads(b[8:8 + nb])
    return na == nb and ha == hb and a[8 + na:] == b[8 + nb:] and len(ha.get("__metadata__", {})) > 1


def compare_dirs(ours_dir, hub_dir):
    names = sorted(os.listdir(ours_dir))
    assert names == sorted(os.listdir(hub_dir))
    for n in names:
        a, b = (ours_dir / n).read_bytes(), (hub_dir / n).read_bytes()
        if n.endswith(".json"):
            assert a == b, n
        else:
            assert same_file(a, b), n
    return names


@pytest.mark.parametrize("trial", range(12))
def test_save_sharded_is_byte_identical_to_the_hub(tmp_path, rng, trial):
    sd = random_state_dict(rng, int(rng.integers(0, 30)))
    size = ["200KB", "2KB", "1KB", 3000, "1MB", 0, "5GB"][trial % 7]
    meta = {"note": "x", "k": "\u00e9"} if trial % 3 == 0 else None
    discard = ["lm_head.weight"] if trial % 4 == 1 else None
    ours_dir, hub_dir = tmp_path / "ours", tmp_path / "hub"
    ours_dir.mkdir(), hub_dir.mkdir()
    for d in (ours_dir, hub_dir):  # an earlier save's files, which both remove
        (d / "model-00001-of-00009.safetensors").write_bytes(b"old")
        (d / "model.safetensors.index.json").write_bytes(b"old")
        (d / "unrelated.txt").write_bytes(b"kept")
    theirs = outcome(lambda: hub.save_torch_state_dict(dict(sd), hub_dir, max_shard_size=size,
                                                       metadata=dict(meta) if meta else None,
                                                       shared_tensors_to_discard=discard))
    ours = outcome(lambda: tst.save_sharded(dict(sd), ours_dir, max_shard_size=size, metadata=meta,
                                            shared_tensors_to_discard=discard))
    if theirs[0] != "ok":
        assert ours == theirs
        return
    stats = ours[1]
    names = compare_dirs(ours_dir, hub_dir)
    assert stats["files"] == [n for n in names if n.endswith(".safetensors")]
    # The hub's loader reads what we wrote, and we read it back exactly.
    if sd:
        loaded = tst.load_file(ours_dir)
        for k, v in loaded.items():
            assert v.dtype == sd[k].dtype and v.shape == sd[k].shape
            assert v.reshape(-1).view(torch.uint8).equal(sd[k].contiguous().reshape(-1).view(torch.uint8)), k


def test_views_not_covering_their_storage_are_refused_as_the_hub_does(tmp_path):
    base = torch.arange(64, dtype=torch.float32)
    sd = {"a": base[:32], "b": base[32:], "c": torch.ones(3)}
    (tmp_path / "hub").mkdir()
    theirs = outcome(lambda: hub.save_torch_state_dict(dict(sd), tmp_path / "hub"))
    assert theirs[0] == "RuntimeError" and "None is covering the entire storage" in theirs[1]
    assert outcome(lambda: tst.save_sharded(dict(sd), tmp_path / "ours")) == theirs
    assert not (tmp_path / "ours").exists() or not os.listdir(tmp_path / "ours")


def test_custom_pattern_and_tsafe_shards(tmp_path, rng):
    sd = {f"w{i}": torch.full((100,), float(i)) for i in range(5)}
    (tmp_path / "hub").mkdir()  # the hub needs it to exist; save_sharded makes it
    hub.save_torch_state_dict(sd, tmp_path / "hub", max_shard_size=1000,
                              filename_pattern="adapter{suffix}.safetensors")
    tst.save_sharded(sd, tmp_path / "ours", max_shard_size=1000, filename_pattern="adapter{suffix}.safetensors")
    assert compare_dirs(tmp_path / "ours", tmp_path / "hub")[0] == "adapter-00001-of-00003.safetensors"
    stats = tst.save_sharded(sd, tmp_path / "ts", max_shard_size=1000, format="tsafe")
    assert stats["files"] == [f"model-0000{i}-of-00003.tsafe" for i in (1, 2, 3)]
    index = json.loads((tmp_path / "ts" / "model.tsafe.index.json").read_text())
    assert index["weight_map"]["w4"] == "model-00003-of-00003.tsafe" and index["metadata"] == {"total_size": 2000}
    loaded = tst.load_file(tmp_path / "ts" / "model.tsafe.index.json")
    assert all(loaded[k].equal(v) for k, v in sd.items())
    # tensorsafe.verify takes the checkpoint, and names the damaged shard and tensor.
    assert ts.verify(tmp_path / "ts") == {"tensors": 5, "data_bytes": 2000}
    shard = tmp_path / "ts" / "model-00003-of-00003.tsafe"
    offset = ts.open(str(shard)).info("w4")["offset"]
    data = bytearray(shard.read_bytes())
    data[offset + 17] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ts.CorruptionError, match=f'{shard}: tensor "w4": data checksum'):
        ts.verify(tmp_path / "ts" / "model.tsafe.index.json")


def test_lazy_safe_open_across_shards(tmp_path):
    sd = {f"layer.{i}": torch.arange(12, dtype=torch.float32).reshape(3, 4) + i for i in range(6)}
    hub.save_torch_state_dict(sd, tmp_path, max_shard_size=50)  # one 48-byte tensor a shard
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".safetensors")]) == 6
    for path in (tmp_path, tmp_path / "model.safetensors.index.json"):
        for backend in ("mmap", "pread"):
            with ts.safe_open(path, "pt", backend=backend) as f:
                assert f.keys() == sorted(sd)
                assert f.offset_keys() == [f"layer.{i}" for i in range(6)]
                assert f.metadata() == {"format": "pt"}
                assert f.get_tensor("layer.4").equal(sd["layer.4"])
                assert f.get_slice("layer.5")[1:, ::2].equal(sd["layer.5"][1:, ::2])
                got = f.get_tensors()
                assert list(got) == f.offset_keys() and all(got[k].equal(sd[k]) for k in sd)
            with ts.safe_open(path, "np", backend=backend) as f:
                np.testing.assert_array_equal(f.get_tensor("layer.2"), sd["layer.2"].numpy())
    assert tsn.load_file(tmp_path)["layer.3"].tolist() == sd["layer.3"].tolist()


def test_hub_loader_reads_our_checkpoints(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    tst.save_sharded(model.state_dict(), tmp_path, max_shard_size="10KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    other = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    # strict=False: the hub checks strictness per shard (0.36.2), which fails
    # for any sharded checkpoint.
    result = hub.load_torch_model(other, tmp_path, strict=False)
    assert not result.missing_keys and not result.unexpected_keys
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))


def test_convert_between_sharded_and_single(tmp_path):
    arrays = {f"t{i}": np.full((50,), i, np.float32) for i in range(8)}
    tsn.save_file(arrays, tmp_path / "one.safetensors", metadata={"format": "np"})
    st = ts.convert(tmp_path / "one.safetensors", tmp_path / "sh" / "model.safetensors.index.json",
                    max_shard_size="400")  # two 200-byte tensors a shard
    assert st["to"] == "safetensors" and st["tensor_count"] == 8
    with ts.safe_open(tmp_path / "sh", "np") as f:
        assert f.metadata() == {"format": "np"}
        assert len({f._view.shard_of(k) for k in f.keys()}) == 4
    ts.convert(tmp_path / "sh", tmp_path / "ts" / "model.tsafe.index.json")  # keeps the shards
    assert sorted(os.listdir(tmp_path / "ts"))[:2] == ["model-00001-of-00004.tsafe", "model-00002-of-00004.tsafe"]
    ts.convert(tmp_path / "ts", tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == (tmp_path / "one.safetensors").read_bytes()
    tsn_stats = tsn.save_sharded(arrays, tmp_path / "np", max_shard_size=400, metadata={"format": "np"})
    assert len(tsn_stats["files"]) == 4 and tsn_stats["total_size"] == 1600
    # A shard size makes a name without extension a directory, and refuses a single file's name.
    ts.convert(tmp_path / "one.safetensors", tmp_path / "split", max_shard_size=400)
    assert sorted(os.listdir(tmp_path / "split")) == sorted(os.listdir(tmp_path / "np"))
    with pytest.raises(ts.InvalidArgumentError, match=r"x\.tsafe: a shard size .* names one file"):
        ts.convert(tmp_path / "one.safetensors", tmp_path / "x.tsafe", max_shard_size=400)
    assert not (tmp_path / "x.tsafe").exists()


def test_broken_checkpoints_raise_named_errors(tmp_path):
    sd = {"a": torch.ones(100), "b": torch.zeros(100)}
    tst.save_sharded(sd, tmp_path, max_shard_size=400)
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(ts.NotFoundError, match='shard "model-00002-of-00002.safetensors" \\(1 tensor mapped to it\\) '
                                               'does not exist'):
        ts.safe_open(tmp_path, "pt")
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"a": "/etc/x.safetensors"}}')
    with pytest.raises(ts.CorruptionError, match="is an absolute path"):
        tst.load_file(tmp_path)
    with pytest.raises(ts.UnsupportedError, match="PyTorch pickle"):
        (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"a": "pytorch_model.bin"}}')
        tst.load_file(tmp_path / "model.safetensors.index.json")


def test_save_file_writes_the_format_its_name_asks_for(tmp_path):
    t = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    for name, fmt in (("x.gguf", "gguf"), ("x.npz", "npz"), ("x.tsafe", "tsafe"), ("x.safetensors", "safetensors"),
                      ("x.weights", "safetensors"), ("noext", "safetensors")):
        tst.save_file(t, tmp_path / name)
        assert ts.detect_format(tmp_path / name) == fmt, name
        tsn.save_file({"w": t["w"].numpy()}, tmp_path / ("np-" + name))
        assert ts.detect_format(tmp_path / ("np-" + name)) == fmt, name
    for name in ("x.pt", "x.bin", "x.pth", "x.ckpt"):
        with pytest.raises(ts.UnsupportedError, match="PyTorch pickle checkpoint"):
            tst.save_file(t, tmp_path / name)
        assert not (tmp_path / name).exists()
    with pytest.raises(ts.InvalidArgumentError, match="holds exactly one tensor"):
        tsn.save_file({"a": np.zeros(1), "b": np.zeros(1)}, tmp_path / "two.npy")


@pytest.mark.parametrize("shards,order", [(1, "sorted"), (7, "shuffled"), (7, "reversed"), (300, "shuffled"),
                                          (7, "shuffled, index sorted")])
def test_keys_sorted_whatever_the_shards_order(tmp_path, rng, shards, order):
    """keys() over a sharded checkpoint merges the shards' sorted runs (a
    few runs), or sorts outright (more than 256), or takes the weight map's
    order when it is sorted (as transformers writes it): each way it equals
    Python's sorted() of the names, with long shared prefixes."""
    names = [f"model.layers.{i // 10}.block.{i % 10}.weight" for i in range(600)]
    if order.startswith("shuffled"):
        names = [names[i] for i in rng.permutation(len(names))]
    elif order == "reversed":
        names = names[::-1]
    arrays = {n: np.full(4, i, np.float32) for i, n in enumerate(names)}
    per = -(-len(names) // shards)
    d = tmp_path / "ck"
    stats = tsn.save_sharded(arrays, d, max_shard_size=per * 16)
    assert len(stats["files"]) == shards
    index = d / "model.safetensors.index.json"
    if order.endswith("index sorted"):
        index.write_text(json.dumps(json.loads(index.read_text()), indent=2, sort_keys=True) + "\n")
    if shards > 1:
        assert (list(json.loads(index.read_text())["weight_map"]) == sorted(names)) == order.endswith("index sorted")
    with ts.safe_open(d, "np") as f:
        assert f.keys() == sorted(names)
        assert all(int(f.get_tensor(n)[0]) == i for i, n in enumerate(names))
