"""Every dtype: NumPy and torch round trips, the tables, packed dtypes."""

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn
from helpers import NUMPY_DTYPES, random_array, same_bits
from tensorsafe import _dtypes


@pytest.mark.parametrize("fmt", ["tsafe", "safetensors"])
@pytest.mark.parametrize("name", sorted(NUMPY_DTYPES))
def test_numpy_round_trip(tmp_path, rng, name, fmt):
    if fmt == "safetensors" and name == "c128":
        pytest.skip("safetensors has no complex128")
    arrays = {f"{name}_{i}": random_array(rng, NUMPY_DTYPES[name], shape)
              for i, shape in enumerate([(), (0,), (7,), (3, 5), (2, 1, 4)])}
    p = tmp_path / f"x.{fmt}"
    tsn.save_file(arrays, p)
    loaded = tsn.load_file(p)
    assert list(loaded) == list(arrays) or sorted(loaded) == sorted(arrays)
    for k, v in arrays.items():
        assert same_bits(loaded[k], v), k
        assert ts.read(p)[0][k].dtype == np.dtype(NUMPY_DTYPES[name])


def test_numpy_c128_to_safetensors_is_unsupported(tmp_path):
    with pytest.raises(ts.UnsupportedError):
        tsn.save_file({"c": np.zeros(2, np.complex128)}, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def torch_dtypes():
    torch = pytest.importorskip("torch")
    return torch, _dtypes.torch_tables()[0]


@pytest.mark.parametrize("fmt", ["tsafe", "safetensors"])
def test_torch_round_trip_every_dtype(tmp_path, rng, fmt):
    torch, table = torch_dtypes()
    import tensorsafe.torch as tst
    tensors = {}
    for name, tdtype in table.items():
        if fmt == "safetensors" and name == "c128":
            continue
        raw = torch.from_numpy(rng.integers(0, 256, size=(4, 6 * tdtype.itemsize), dtype=np.uint8))
        if tdtype == torch.bool:
            raw = raw & 1
        tensors[name] = raw.view(tdtype)
    p = tmp_path / f"x.{fmt}"
    tst.save_file(tensors, p)
    loaded = tst.load_file(p)
    assert sorted(loaded) == sorted(tensors)
    for k, v in tensors.items():
        got = loaded[k]
        assert got.dtype == v.dtype and got.shape == v.shape, k
        assert torch.equal(got.view(torch.uint8), v.view(torch.uint8)), k
    # The torch bytes API too.
    if fmt == "safetensors":
        again = tst.load(tst.save(tensors))
        for k, v in tensors.items():
            assert torch.equal(again[k].view(torch.uint8), v.view(torch.uint8)), k


def test_tables_cover_every_dtype():
    torch, table = torch_dtypes()
    assert set(_dtypes.CODES) == set(_dtypes.NUMPY) == set(NUMPY_DTYPES) | _dtypes.PACKED
    # torch 2.13 has every dtype but f6, i4 and u4 (not stored packed in torch).
    assert set(_dtypes.CODES) - set(table) == {"f6_e2m3", "f6_e3m2", "i4", "u4"}
    assert table["f8_e8m0"] == torch.float8_e8m0fnu and table["f4_e2m1"] == torch.float4_e2m1fn_x2
    assert table["u16"] == torch.uint16 and table["u64"] == torch.uint64


def write_packed(tmp_path):
    """A .tsafe with packed tensors, written through the native entry API."""
    from tensorsafe import _native
    p = tmp_path / "packed.tsafe"
    w = _native.Writer.create(str(p), 64, False)
    w.add(("f4", "f4_e2m1", (2, 4), np.arange(4, dtype=np.uint8), ""))
    w.add(("i4", "i4", (6,), np.array([0x21, 0x43, 0x65], np.uint8), ""))
    w.add(("f6", "f6_e2m3", (4,), np.array([1, 2, 3], np.uint8), ""))
    w.finish()
    return p


def test_packed_dtypes_numpy(tmp_path):
    r = ts.open(write_packed(tmp_path))
    for name in ("f4", "i4", "f6"):
        with pytest.raises(ts.UnsupportedError, match="packed"):
            r[name]
    assert list(r.get("i4", packed=True)) == [0x21, 0x43, 0x65]
    assert r.get("f4", packed=True).dtype == np.uint8
    with pytest.raises(ts.UnsupportedError):
        r.read_slice("i4", np.s_[:2])
    with pytest.raises(ts.UnsupportedError):
        np.from_dlpack(r.tensor("i4"))


def test_packed_dtypes_torch(tmp_path):
    torch, _ = torch_dtypes()
    p = write_packed(tmp_path)
    with ts.safe_open(p, "pt") as f:
        t = f.get_tensor("f4")
        assert t.dtype == torch.float4_e2m1fn_x2 and t.shape == (2, 2)
        assert t.view(torch.uint8).flatten().tolist() == [0, 1, 2, 3]
        with pytest.raises(ts.UnsupportedError):
            f.get_tensor("i4")
        with pytest.raises(ts.UnsupportedError):
            f.get_tensor("f6")


def test_unpacked_ml_dtypes_are_refused(tmp_path):
    import ml_dtypes
    with pytest.raises(ts.UnsupportedError, match="pack"):
        tsn.save_file({"x": np.zeros(4, ml_dtypes.int4)}, tmp_path / "x.tsafe")
