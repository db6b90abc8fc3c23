"""Native sparse COO tensors (format 1.1) in Python: torch.sparse_coo_tensor
and tensorsafe.SparseCoo round trips, the golden file, and damaged indices
(which the reader defers to verify(), so the bindings check them before
torch, which does not bound-check, sees them)."""
import os
import shutil
import struct

import numpy as np
import pytest
import torch

import tensorsafe
import tensorsafe.torch as tst
from tensorsafe import SparseCoo

# The library passes check_invariants=False only after its own index check,
# so torch's "checks are implicitly disabled" warning is an error here.
pytestmark = pytest.mark.filterwarnings("error:Sparse invariant checks are implicitly disabled")

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "golden", "tsafe", "coo.tsafe")

# torch dtypes whose sparse tensors torch can build and densify.
TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
                torch.int64, torch.uint8, torch.bool, torch.complex64]


def random_sparse(rng, dtype, shape, nnz, coalesce):
    idx = np.stack([rng.integers(0, d, nnz) for d in shape]) if shape else np.zeros((0, nnz), np.int64)
    vals = torch.from_numpy(rng.standard_normal(nnz) * 10).to(dtype) if dtype != torch.bool else \
        torch.from_numpy(rng.integers(0, 2, nnz).astype(bool))
    t = torch.sparse_coo_tensor(torch.from_numpy(idx).long(), vals, shape, check_invariants=True)
    return t.coalesce() if coalesce else t


def assert_same_sparse(a, b):
    assert b.layout == torch.sparse_coo
    assert b.shape == a.shape and b.dtype == a.dtype
    assert b.is_coalesced() == a.is_coalesced()
    assert torch.equal(b._indices(), a._indices())
    assert torch.equal(b._values(), a._values())
    assert torch.equal(b.to_dense(), a.to_dense())


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_round_trip_every_dtype(tmp_path, rng, dtype):
    tensors = {
        "r2": random_sparse(rng, dtype, (5, 7), 9, coalesce=True),
        "r3_uncoalesced": random_sparse(rng, dtype, (3, 4, 2), 12, coalesce=False),
        "r1": random_sparse(rng, dtype, (11,), 4, coalesce=False),
        "empty": random_sparse(rng, dtype, (6, 6), 0, coalesce=False),
        "empty_coalesced": random_sparse(rng, dtype, (2, 3, 4), 0, coalesce=True),
        "dense": torch.arange(6).to(dtype).reshape(2, 3),
    }
    path = tmp_path / "s.tsafe"
    tst.save_file(tensors, path, metadata={"k": "v"})
    for backend in ("mmap", "pread"):
        loaded = tst.load_file(path, backend=backend)
        assert set(loaded) == set(tensors)
        for name, t in tensors.items():
            if t.layout == torch.sparse_coo:
                assert_same_sparse(t, loaded[name])
            else:
                assert torch.equal(loaded[name], t)
    with tensorsafe.safe_open(path, "pt") as f:
        assert_same_sparse(tensors["r2"], f.get_tensor("r2"))
    r = tensorsafe.open(path)
    assert_same_sparse(tensors["r3_uncoalesced"], r.get("r3_uncoalesced", "pt"))
    info = r.info("r3_uncoalesced")
    assert (info["layout"], info["nnz"], info["coalesced"]) == ("coo", 12, False)
    assert r.info("r2")["coalesced"] is True
    assert "layout" not in r.info("dense")
    tensorsafe.verify(path)


def test_rank_zero_sparse(tmp_path):
    one = torch.sparse_coo_tensor(torch.zeros((0, 1), dtype=torch.long), torch.tensor([2.5]), (), check_invariants=True)
    none = torch.sparse_coo_tensor(torch.zeros((0, 0), dtype=torch.long), torch.zeros(0), (), check_invariants=True)
    tst.save_file({"one": one, "none": none}, tmp_path / "z.tsafe")
    got = tst.load_file(tmp_path / "z.tsafe")
    assert got["one"].to_dense().item() == 2.5 and got["one"].shape == ()
    assert got["none"]._nnz() == 0 and got["none"].shape == ()


def test_values_are_zero_copy_and_writes_stay_private(tmp_path):
    t = torch.sparse_coo_tensor(torch.tensor([[0, 3], [1, 2]]), torch.tensor([1.0, 2.0]), (4, 4), check_invariants=True).coalesce()
    path = tmp_path / "s.tsafe"
    tst.save_file({"s": t}, path)
    before = path.read_bytes()
    with tensorsafe.safe_open(path, "pt") as f:
        s = f.get_tensor("s")
    buf = tensorsafe.open(path).tensor("s")
    _, _, values_offset = buf.coo()
    # The values view the file's copy-on-write mapping at their offset.
    vals = s._values()
    s2 = tensorsafe.open(path).get("s", "pt")
    assert vals.untyped_storage().nbytes() == path.stat().st_size
    assert vals.data_ptr() - vals.untyped_storage().data_ptr() == values_offset
    s2._values().mul_(10)  # private: neither the file nor the other tensor changes
    assert path.read_bytes() == before
    assert torch.equal(s.to_dense(), t.to_dense())


def test_numpy_sparse_coo_round_trip(tmp_path, rng):
    idx = np.array([[0, 2, 2], [1, 0, 3]])
    vals = np.array([1.5, -2.0, 4.0], np.float32)
    with tensorsafe.Writer(tmp_path / "n.tsafe") as w:
        w.add("s", SparseCoo(idx, vals, (3, 4), True), metadata={"kind": "sparse"})
        w.add("u", SparseCoo(np.array([[1, 1]]), np.array([3, 4], np.int16), (2,)))
    r = tensorsafe.open(tmp_path / "n.tsafe")
    s = r["s"]
    assert isinstance(s, SparseCoo)
    assert s.indices.shape == (2, 3) and s.indices.dtype == np.int64
    np.testing.assert_array_equal(s.indices, idx)
    np.testing.assert_array_equal(s.values, vals)
    assert s.shape == (3, 4) and s.coalesced and s.nnz == 3
    assert not s.values.flags.writeable and not s.indices.flags.writeable  # views of the mapping
    dense = np.zeros((3, 4), np.float32)
    dense[0, 1], dense[2, 0], dense[2, 3] = 1.5, -2.0, 4.0
    np.testing.assert_array_equal(s.to_dense(), dense)
    u = r["u"]
    assert not u.coalesced
    np.testing.assert_array_equal(u.to_dense(), np.array([0, 7], np.int16))  # repeats are summed
    c = r.get("s", copy=True)
    assert c.values.flags.writeable and c.values.base is None
    tensors, _ = tensorsafe.read(tmp_path / "n.tsafe")
    np.testing.assert_array_equal(tensors["s"].values, vals)
    with tensorsafe.safe_open(tmp_path / "n.tsafe", "np") as f:
        np.testing.assert_array_equal(f.get_tensor("u").indices, [[1, 1]])
        assert isinstance(f.get_tensors()["s"], SparseCoo)
        with pytest.raises(tensorsafe.UnsupportedError, match="'s' is sparse COO: get_slice reads dense tensors"):
            f.get_slice("s")


def test_golden_file(tmp_path):
    r = tensorsafe.open(GOLDEN)
    assert r.keys() == ["s", "d"]
    np.testing.assert_array_equal(r["d"], np.array([7, 8], dtype=np.int32))
    s = r["s"]
    np.testing.assert_array_equal(s.indices, [[0, 2, 2], [1, 0, 3]])
    np.testing.assert_array_equal(s.values, np.array([1.5, -2, 4], np.float32))
    assert s.shape == (3, 4) and s.coalesced
    t = r.get("s", "pt")
    assert t.is_coalesced()
    want = torch.zeros(3, 4)
    want[0, 1], want[2, 0], want[2, 3] = 1.5, -2, 4
    assert torch.equal(t.to_dense(), want)
    assert r.info("s")["metadata"] == {}
    # Written back through Python, the bytes are the golden file's.
    out = tmp_path / "again.tsafe"
    with tensorsafe.Writer(out) as w:
        w.add("s", t)
        w.add("d", np.array([7, 8], np.int32))
    assert out.read_bytes() == open(GOLDEN, "rb").read()
    # 48 bytes of indices padded to 64, then 3 f32 values; plus d's 8 bytes.
    assert tensorsafe.verify(GOLDEN) == {"tensors": 2, "data_bytes": 76 + 8}


def test_sparse_is_refused_where_it_cannot_go(tmp_path):
    t = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (2,), check_invariants=True)
    with pytest.raises(tensorsafe.UnsupportedError,
                       match='"s": a sparse COO tensor cannot be stored in safetensors \\(convert it to tsafe or btf'):
        tst.save_file({"s": t}, tmp_path / "s.safetensors")
    assert not (tmp_path / "s.safetensors").exists()
    with pytest.raises(tensorsafe.UnsupportedError, match="cannot be stored in safetensors"):
        tst.save({"s": t})
    with pytest.raises(tensorsafe.UnsupportedError, match="cannot be stored in npz"):
        tensorsafe.write(tmp_path / "s.npz", {"s": SparseCoo(np.array([[0]]), np.array([1.0]), (2,))})
    hybrid = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.ones(1, 3), (2, 3), check_invariants=True)
    with pytest.raises(tensorsafe.UnsupportedError, match="hybrid sparse tensor"):
        tst.save_file({"h": hybrid}, tmp_path / "h.tsafe")
    with pytest.raises(tensorsafe.InvalidArgumentError, match="SparseCoo needs indices"):
        tensorsafe.write(tmp_path / "b.tsafe", {"b": SparseCoo(np.array([[0, 1]]), np.array([1.0]), (2,))})
    with pytest.raises(tensorsafe.InvalidArgumentError, match='"o": COO index of element 0 in dimension 0 is 5'):
        tensorsafe.write(tmp_path / "o.tsafe", {"o": SparseCoo(np.array([[5]]), np.array([1.0]), (2,))})
    with pytest.raises(tensorsafe.InvalidArgumentError, match='"c": marked coalesced, but element 1'):
        tensorsafe.write(tmp_path / "c.tsafe", {"c": SparseCoo(np.array([[1, 0]]), np.ones(2), (2,), True)})
    with pytest.raises(tensorsafe.UnsupportedError, match="sparse COO, which DLPack cannot describe"):
        torch.from_dlpack(tensorsafe.open(GOLDEN).tensor("s"))
    shutil.copy(GOLDEN, tmp_path / "u.tsafe")
    with pytest.raises(tensorsafe.UnsupportedError, match="the updater cannot add sparse COO tensors"):
        with tensorsafe.Updater(tmp_path / "u.tsafe") as u:
            u.add("t", t)


def _damaged_golden(tmp_path, index_values):
    """The golden file with the indices of "s" replaced (the data checksum is
    left stale: readers check it only in verify())."""
    data = bytearray(open(GOLDEN, "rb").read())
    off = tensorsafe.open(GOLDEN).tensor("s").offset
    data[off:off + 48] = struct.pack("<6q", *index_values)
    path = tmp_path / "bad.tsafe"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("framework", ["np", "pt"])
def test_damaged_indices_raise_corruption(tmp_path, framework):
    path = _damaged_golden(tmp_path, [0, 4, 2, 0, 2, 3])
    with pytest.raises(tensorsafe.CorruptionError,
                       match=r'tensor "s": COO index of element 0 in dimension 1 is 4, outside \[0, 4\)'):
        tensorsafe.open(path).get("s", framework)
    path = _damaged_golden(tmp_path, [0, 1, -1, 0, 2, 3])
    with pytest.raises(tensorsafe.CorruptionError, match=r"element 1 in dimension 0 is -1, outside \[0, 3\)"):
        with tensorsafe.safe_open(path, framework) as f:
            f.get_tensor("s")
    path = _damaged_golden(tmp_path, [0, 1, 2, 0, 2, 0])
    with pytest.raises(tensorsafe.CorruptionError,
                       match='"s": marked coalesced, but COO element 2 does not follow element 1 in order'):
        tensorsafe.open(path).get("s", framework)
    # The dense neighbour is still served; verify() names the damage.
    np.testing.assert_array_equal(tensorsafe.open(path)["d"], [7, 8])
    with pytest.raises(tensorsafe.CorruptionError, match='damaged tensors: "s"'):
        tensorsafe.verify(path)


def test_unaligned_regions_are_read_correctly(tmp_path):
    # alignment=1: indices and values at odd offsets (numpy views them
    # unaligned, torch gets copies).
    path = tmp_path / "a1.tsafe"
    with tensorsafe.Writer(path, alignment=1) as w:
        w.add("pad", np.ones(3, np.uint8))
        w.add("s", SparseCoo(np.array([[0, 2], [1, 1]]), np.array([1.5, 2.5]), (3, 4), True))
    r = tensorsafe.open(path)
    assert r.info("s")["offset"] % 8 != 0
    s = r["s"]
    assert not s.indices.flags.aligned
    np.testing.assert_array_equal(s.indices, [[0, 2], [1, 1]])
    want = torch.zeros(3, 4, dtype=torch.float64)
    want[0, 1], want[2, 1] = 1.5, 2.5
    assert torch.equal(r.get("s", "pt").to_dense(), want)
    assert torch.equal(tst.load_file(path)["s"].to_dense(), want)
