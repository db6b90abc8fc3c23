"""safe_open on .safetensors and .tsafe files alike."""

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn

FMTS = ["safetensors", "tsafe"]


@pytest.fixture(params=FMTS)
def sample(request, tmp_path):
    p = tmp_path / f"x.{request.param}"
    arrays = {"zeta": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
              "alpha": np.arange(5, dtype=np.int64), "mid": np.ones((2, 2), np.float16)}
    tsn.save_file(arrays, p, metadata={"format": "np", "k": "v"})
    return p, arrays


def test_surface(sample):
    p, arrays = sample
    with ts.safe_open(p, framework="numpy") as f:
        assert f.keys() == ["alpha", "mid", "zeta"]
        assert sorted(f.offset_keys()) == f.keys() and len(f.offset_keys()) == 3
        assert f.metadata() == {"format": "np", "k": "v"}
        for k, v in arrays.items():
            np.testing.assert_array_equal(f.get_tensor(k), v)
        assert list(f.get_tensors()) == f.offset_keys()
        s = f.get_slice("zeta")
        assert s.get_shape() == [2, 3, 4] and s.get_dtype() == "F32"
        np.testing.assert_array_equal(s[1, ::2, -1], arrays["zeta"][1, ::2, -1])
        np.testing.assert_array_equal(s[...], arrays["zeta"])
        with pytest.raises(KeyError):
            f.get_tensor("nope")
        with pytest.raises(ts.NotFoundError):
            f.get_slice("nope")


def test_offset_keys_follow_data(tmp_path):
    p = tmp_path / "x.tsafe"
    with ts.Writer(p) as w:
        for n in ["c", "a", "b"]:
            w.add(n, np.zeros(3))
    with ts.safe_open(p, "np") as f:
        assert f.offset_keys() == ["c", "a", "b"] and f.keys() == ["a", "b", "c"]
        assert f.metadata() is None


@pytest.mark.parametrize("fw", ["pt", "torch", "pytorch"])
def test_torch_framework(sample, fw):
    torch = pytest.importorskip("torch")
    p, arrays = sample
    with ts.safe_open(p, framework=fw, device="cpu") as f:
        t = f.get_tensor("zeta")
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
        assert torch.equal(t, torch.from_numpy(arrays["zeta"]))
        part = f.get_slice("zeta")[:, 1:, ::3]
        assert torch.equal(part, torch.from_numpy(np.ascontiguousarray(arrays["zeta"][:, 1:, ::3])))
        assert f.get_tensor("mid").dtype == torch.float16


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_backends(sample, backend):
    p, arrays = sample
    with ts.safe_open(p, "np", backend=backend) as f:
        np.testing.assert_array_equal(f.get_tensor("alpha"), arrays["alpha"])
        np.testing.assert_array_equal(f.get_slice("alpha")[-3:], arrays["alpha"][-3:])


def test_bad_arguments(sample):
    p, _ = sample
    with pytest.raises(ts.InvalidArgumentError):
        ts.safe_open(p, framework="nope")
    with pytest.raises(ts.UnsupportedError):
        ts.safe_open(p, framework="tf")
    with pytest.raises(ts.InvalidArgumentError):
        ts.safe_open(p, framework="np", device="cuda")
    with pytest.raises(ts.InvalidArgumentError):
        ts.safe_open(p, framework="np", backend="odirect")


def test_closed(sample):
    p, _ = sample
    with ts.safe_open(p, "np") as f:
        pass
    with pytest.raises(ts.FailedPreconditionError):
        f.keys()


def test_slice_errors(sample):
    p, _ = sample
    with ts.safe_open(p, "np") as f:
        s = f.get_slice("zeta")
        with pytest.raises(IndexError):
            s[2]
        with pytest.raises(ts.OutOfRangeError):
            s[0, -4]
        with pytest.raises(ts.OutOfRangeError):
            s[0, 0, 0, 0]
        with pytest.raises(ts.UnsupportedError):
            s[[0, 1]]
        with pytest.raises(ts.InvalidArgumentError):
            s[None]
        with pytest.raises(ts.InvalidArgumentError):
            s[..., ...]
        with pytest.raises(ts.InvalidArgumentError):
            s[::0]
        with pytest.raises(ts.InvalidArgumentError):
            s[1.5]
        assert s[[]].shape == (0, 3, 4)
        assert s[()].shape == (2, 3, 4)
        assert s[np.int64(1)].shape == (3, 4)


def test_other_formats_open_too(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ts.write_npz(tmp_path / "x.npz", {"a": a})
    with ts.safe_open(tmp_path / "x.npz", "np") as f:
        assert f.keys() == ["a"]
        np.testing.assert_array_equal(f.get_slice("a")[:, -1], a[:, -1])
