"""Zero-copy views: read-only, alive after the reader, buffer protocol and DLPack."""

import gc

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        w.add("a", np.arange(1000, dtype=np.float32))
        w.add("e", np.zeros((0, 3), np.int16))
    return p


def test_views_are_views_of_the_mapping(path):
    r = ts.open(path)
    a, b = r["a"], r["a"]
    assert not a.flags.writeable and not a.flags.owndata
    assert isinstance(a.base, ts.TensorBuffer)
    # Both views point at the same mapped bytes: no copy was made.
    assert a.ctypes.data == b.ctypes.data == r.tensor("a").address
    assert a.ctypes.data % 64 == 0  # tensors are 64-byte aligned in the file
    with pytest.raises(ValueError):
        a[0] = 1


def test_array_outlives_reader(path):
    r = ts.open(path)
    a = r["a"]
    buf = r.tensor("a")
    del r
    gc.collect()
    assert a.sum() == sum(range(1000))
    assert bytes(memoryview(buf)[:8]) == np.arange(2, dtype=np.float32).tobytes()


def test_array_outlives_safe_open_and_load_file(tmp_path):
    p = tmp_path / "x.safetensors"
    tsn.save_file({"w": np.arange(10, dtype=np.int64)}, p)
    with ts.safe_open(p, "np") as f:
        w = f.get_tensor("w")
    loaded = tsn.load_file(p)["w"]
    gc.collect()
    assert w.sum() == 45 and loaded.sum() == 45
    assert not w.flags.writeable


def test_mapping_survives_file_removal(path):
    a = ts.open(path)["a"]
    path.unlink()
    gc.collect()
    assert a[999] == 999


def test_buffer_protocol(path):
    buf = ts.open(path).tensor("a")
    m = memoryview(buf)
    assert m.readonly and m.nbytes == 4000 and m.format == "B"
    assert np.frombuffer(buf, dtype=np.float32)[7] == 7
    assert memoryview(ts.open(path).tensor("e")).nbytes == 0


def test_dlpack_torch(path):
    torch = pytest.importorskip("torch")
    r = ts.open(path)
    t = torch.from_dlpack(r.tensor("a"))
    assert t.dtype == torch.float32 and t.shape == (1000,)
    assert t.data_ptr() == r.tensor("a").address  # zero-copy
    del r
    gc.collect()
    assert float(t[999]) == 999.0
    assert torch.from_dlpack(ts.open(path).tensor("e")).shape == (0, 3)


def test_dlpack_numpy(path):
    buf = ts.open(path).tensor("a")
    arr = np.from_dlpack(buf)
    assert arr.ctypes.data == buf.address and arr[3] == 3
    assert buf.__dlpack_device__() == (1, 0)
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)


def test_dlpack_dtypes(tmp_path):
    torch = pytest.importorskip("torch")
    from helpers import NUMPY_DTYPES, random_array
    rng = np.random.default_rng(0)
    p = tmp_path / "d.tsafe"
    arrays = {k: random_array(rng, v, (3, 2)) for k, v in NUMPY_DTYPES.items()}
    with ts.Writer(p) as w:
        for k, v in arrays.items():
            w.add(k, v)
    r = ts.open(p)
    for k, v in arrays.items():
        t = torch.from_dlpack(r.tensor(k))
        assert t.shape == (3, 2), k
        assert t.view(torch.uint8).numpy().tobytes() == v.tobytes(), k


def test_torch_tensors_are_copy_on_write(tmp_path):
    torch = pytest.importorskip("torch")
    import tensorsafe.torch as tst
    for name in ("x.safetensors", "x.tsafe"):
        p = tmp_path / name
        tst.save_file({"w": torch.arange(6, dtype=torch.float32)}, p)
        before = p.read_bytes()
        t = tst.load_file(p)["w"]
        t.add_(100)  # must neither crash nor reach the file
        assert float(t[5]) == 105.0
        assert p.read_bytes() == before
        assert float(tst.load_file(p)["w"][5]) == 5.0
