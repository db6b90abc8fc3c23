"""Differential tests against the real safetensors package: the same random
inputs must give equal results, equivalent exceptions and identical bytes."""

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn
from helpers import SAFETENSORS_NUMPY, random_array, same_bits

st = pytest.importorskip("safetensors")
stn = pytest.importorskip("safetensors.numpy")


# safetensors.numpy writes ml_dtypes arrays (bf16, float8) but cannot load
# them (KeyError / AttributeError in 0.8.0): loads compare the others.
NUMPY_LOADABLE = {k: v for k, v in SAFETENSORS_NUMPY.items() if k != "bf16" and not k.startswith("f8")}


def same_file(a: bytes, b: bytes) -> bool:
    """Byte-identical, except that safetensors writes __metadata__ keys in
    its hash map's order, which changes from process to process: with more
    than one key, the headers must be equal as JSON and the rest identical."""
    if a == b:
        return True
    import json
    na, nb = int.from_bytes(a[:8], "little"), int.from_bytes(b[:8], "little")
    ha, hb = json.loads(a[8:8 + na]), json.loads(b[8:8 + nb])
    return na == nb and ha == hb and list(ha) == list(hb) and a[8 + na:] == b[8 + nb:] \
        and len(ha.get("__metadata__", {})) > 1


def random_dict(rng, n, dtypes=SAFETENSORS_NUMPY):
    out = {}
    names = list(dtypes)
    for i in range(n):
        dname = names[int(rng.integers(len(names)))]
        rank = int(rng.integers(0, 4))
        shape = tuple(int(d) for d in rng.integers(0, 5, size=rank))
        out[f"t{i}.{dname}"] = random_array(rng, dtypes[dname], shape)
    return out


def random_metadata(rng):
    return None if rng.integers(2) else {f"k{i}": "v" * int(rng.integers(0, 9)) for i in range(3)}


@pytest.mark.parametrize("trial", range(20))
def test_save_is_byte_identical(tmp_path, rng, trial):
    d = random_dict(rng, int(rng.integers(0, 12)))
    meta = random_metadata(rng)
    assert same_file(tsn.save(d, metadata=meta), stn.save(d, metadata=meta))
    tsn.save_file(d, tmp_path / "ours.safetensors", metadata=meta)
    stn.save_file(d, tmp_path / "theirs.safetensors", metadata=meta)
    assert same_file((tmp_path / "ours.safetensors").read_bytes(), (tmp_path / "theirs.safetensors").read_bytes())


def test_name_order_is_the_crates_byte_order():
    """Names sharing 8-byte prefixes, shorter than 8 bytes, with a NUL, non-
    ASCII, across dtypes: the writer sorts on the first 8 bytes first."""
    names = ["layer.10.w", "layer.1.w", "layer.100", "é", "éa", "z", "a" * 20 + "b", "a" * 20 + "a", "a" * 8,
             "a" * 7, "a" * 9, "A", "\x7f", "\u00ff", "ab\x00", "ab", "model.layers.0.self_attn.q_proj.weight",
             "model.layers.0.self_attn.k_proj.weight"]
    kinds = [np.float32, np.float16, np.int64, np.uint8]
    d = {n: np.arange(i + 1, dtype=kinds[i % 4]) for i, n in enumerate(names)}
    assert same_file(tsn.save(d), stn.save(d))


def test_single_key_metadata_is_byte_identical():
    d = {"a": np.arange(3, dtype=np.float32)}
    assert tsn.save(d, {"format": "np"}) == stn.save(d, {"format": "np"})


def test_every_dtype_in_one_file(tmp_path, rng):
    d = {k: random_array(rng, v, (2, 3)) for k, v in SAFETENSORS_NUMPY.items()}
    assert tsn.save(d) == stn.save(d)


@pytest.mark.parametrize("trial", range(10))
def test_loads_agree(tmp_path, rng, trial):
    d = random_dict(rng, 8, NUMPY_LOADABLE)
    p = tmp_path / "x.safetensors"
    stn.save_file(d, p, metadata=random_metadata(rng))
    ours, theirs = tsn.load_file(p), stn.load_file(p)
    assert sorted(ours) == sorted(theirs)
    for k in theirs:
        assert same_bits(ours[k], theirs[k]), k
    for k, v in tsn.load(p.read_bytes()).items():
        assert same_bits(v, theirs[k])
    with ts.safe_open(p, "np") as a, st.safe_open(p, "np") as b:
        assert a.keys() == b.keys()
        # Tensors of zero bytes share an offset; safetensors orders such
        # ties differently in each process, so compare up to them.
        offsets = {k: a._buffer(k).offset for k in a.keys()}
        for keys in (a.offset_keys(), b.offset_keys()):
            assert sorted(keys) == a.keys()
            assert [offsets[k] for k in keys] == sorted(offsets.values())
        assert a.metadata() == b.metadata()
        for k in b.keys():
            assert a.get_slice(k).get_shape() == b.get_slice(k).get_shape()
            assert a.get_slice(k).get_dtype() == b.get_slice(k).get_dtype()


# Keys both accept (safetensors 0.8 takes no negative slice bounds and no
# negative steps; tensorsafe takes both, see test_safe_open).
KEYS = [0, -1, 1, np.s_[:], np.s_[1:], np.s_[::2], np.s_[1::3], np.s_[..., 0], np.s_[0, ...],
        np.s_[:, 1:3], np.s_[1, :, ::2], np.s_[..., 1:2], (), np.s_[0, 1], np.s_[:1, -1]]


def tbits(t):
    """The bytes of a tensor (torch.equal says NaN != NaN)."""
    torch = __import__("torch")
    fresh = torch.empty(t.shape, dtype=t.dtype).copy_(t)  # plain strides, even for size-1 dims
    return fresh.reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("fw", ["np", "pt"])
def test_slices_agree(tmp_path, rng, fw):
    if fw == "pt":
        torch = pytest.importorskip("torch")
    d = {"a": random_array(rng, np.float32, (4, 5, 6)), "b": random_array(rng, np.int16, (3, 7)),
         "c": random_array(rng, np.uint8, (5, 4)), "s": random_array(rng, np.float64, ())}
    p = tmp_path / "x.safetensors"
    stn.save_file(d, p)
    with ts.safe_open(p, fw) as a, st.safe_open(p, fw) as b:
        for name in d:
            for key in KEYS:
                try:
                    want = b.get_slice(name)[key]
                except Exception as e:  # noqa: BLE001 - compared below
                    with pytest.raises(ts.Error):
                        a.get_slice(name)[key]
                    continue
                got = a.get_slice(name)[key]
                if fw == "np":
                    assert same_bits(got, want), (name, key)
                else:
                    assert got.dtype == want.dtype and got.shape == want.shape, (name, key)
                    assert tbits(got) == tbits(want), (name, key)


@pytest.mark.parametrize("key", [5, -6, (0, 0, 0), [0, 1], (Ellipsis, Ellipsis), "x", 1.5, None])
def test_bad_slices_both_refuse(tmp_path, key):
    p = tmp_path / "x.safetensors"
    stn.save_file({"a": np.zeros((5, 4), np.float32)}, p)
    with st.safe_open(p, "np") as b:
        with pytest.raises(Exception):
            b.get_slice("a")[key]
    with ts.safe_open(p, "np") as a:
        with pytest.raises(ts.Error):
            a.get_slice("a")[key]


def test_errors_are_equivalent(tmp_path):
    p = tmp_path / "x.safetensors"
    stn.save_file({"a": np.zeros(3, np.float32)}, p)
    # Missing tensor: both refuse; ours is also a KeyError.
    with st.safe_open(p, "np") as b, ts.safe_open(p, "np") as a:
        with pytest.raises(st.SafetensorError):
            b.get_tensor("zz")
        with pytest.raises(KeyError):
            a.get_tensor("zz")
    # Missing file: FileNotFoundError from both.
    for mod in (st, ts):
        with pytest.raises(FileNotFoundError):
            mod.safe_open(tmp_path / "none.safetensors", "np")
    # Unknown framework.
    with pytest.raises(st.SafetensorError):
        st.safe_open(p, "xx")
    with pytest.raises(ts.InvalidArgumentError):
        ts.safe_open(p, "xx")


def corruptions(good: bytes):
    yield "truncated", good[:-1]
    yield "trailing", good + b"\0"
    yield "short", good[:5]
    yield "huge header", (10 ** 9).to_bytes(8, "little") + good[8:]
    yield "bad json", good[:8] + b"[" + good[9:]
    yield "header past end", (len(good)).to_bytes(8, "little") + good[8:]
    yield "bad dtype", good.replace(b'"F32"', b'"X32"')
    yield "bad offsets", good.replace(b"[0,12]", b"[0,16]")


@pytest.mark.parametrize("case", [c for c, _ in corruptions(b"")] or ["none"])
def test_corrupt_files_both_refuse(tmp_path, case):
    good = stn.save({"a": np.arange(3, dtype=np.float32)})
    data = dict(corruptions(good))[case]
    p = tmp_path / "bad.safetensors"
    p.write_bytes(data)
    with pytest.raises(Exception):
        stn.load_file(p)
    with pytest.raises(ValueError) as exc:  # CorruptionError / LimitExceeded / Unsupported
        tsn.load_file(p)
    assert isinstance(exc.value, ts.Error)
    with pytest.raises(Exception):
        stn.load(data)
    with pytest.raises(ts.Error):
        tsn.load(data)


def test_metadata_must_be_strings(tmp_path):
    with pytest.raises(Exception):
        stn.save({"a": np.zeros(1)}, metadata={"k": 1})
    with pytest.raises(ValueError):
        tsn.save({"a": np.zeros(1)}, metadata={"k": 1})


def test_torch_save_is_byte_identical(tmp_path, rng):
    torch = pytest.importorskip("torch")
    import safetensors.torch as stt
    import tensorsafe.torch as tst
    from tensorsafe import _dtypes
    tensors = {}
    for name, tdtype in _dtypes.torch_tables()[0].items():
        if name == "c128":
            continue
        raw = torch.from_numpy(rng.integers(0, 256, size=(3, 4 * tdtype.itemsize), dtype=np.uint8))
        tensors[name] = (raw & 1 if tdtype == torch.bool else raw).view(tdtype)
    meta = {"format": "pt"}
    assert tst.save(tensors, meta) == stt.save(tensors, meta)
    tst.save_file(tensors, tmp_path / "a.safetensors", meta)
    stt.save_file(tensors, tmp_path / "b.safetensors", meta)
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    theirs = stt.load_file(tmp_path / "a.safetensors")
    ours = tst.load_file(tmp_path / "b.safetensors")
    for k in theirs:
        assert ours[k].dtype == theirs[k].dtype and ours[k].shape == theirs[k].shape, k
        assert tbits(ours[k]) == tbits(theirs[k]), k
