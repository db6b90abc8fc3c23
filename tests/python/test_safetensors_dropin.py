"""tensorsafe.safetensors, the drop-in for the safetensors package: the alias
that makes `import safetensors` resolve to it (in subprocesses), and its
results, exceptions and messages side by side with safetensors 0.8.0. Every
deliberate difference listed in docs/python.md is pinned here
(test_difference_*)."""

import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorsafe
import tensorsafe.safetensors as ours
import tensorsafe.torch  # noqa: F401
import tensorsafe.safetensors.numpy as ours_np
from helpers import random_array

real = pytest.importorskip("safetensors")
real_np = pytest.importorskip("safetensors.numpy")
torch = pytest.importorskip("torch")
import safetensors.torch as real_pt  # noqa: E402
import tensorsafe.safetensors.torch as ours_pt  # noqa: E402


def run_python(code, env_alias=True, extra_env=None):
    env = dict(os.environ)
    env.pop("TENSORSAFE_AS_SAFETENSORS", None)
    if env_alias:
        env["TENSORSAFE_AS_SAFETENSORS"] = "1"
    env.update(extra_env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)


# -- the alias -------------------------------------------------------------------

def test_alias_by_environment_variable():
    r = run_python("""
        import importlib.metadata, safetensors, safetensors.torch, safetensors.numpy
        from safetensors import safe_open, SafetensorError, TensorSpec, _safe_open_handle
        from safetensors.torch import _getdtype, storage_ptr
        import tensorsafe.safetensors
        assert safetensors is tensorsafe.safetensors, safetensors
        assert safetensors.torch is tensorsafe.safetensors.torch
        assert safe_open is tensorsafe.safetensors.safe_open
        assert issubclass(tensorsafe.NotFoundError, SafetensorError)
        import safetensors._safetensors_rust as r
        assert r.serialize is tensorsafe.safetensors.serialize
        print(safetensors.__version__, importlib.metadata.version("safetensors"), safetensors.__spec__.name)
    """)
    assert r.returncode == 0, r.stderr
    # The real distribution answers importlib.metadata (it is installed here).
    assert r.stdout.split() == ["0.8.0", real.__version__, "tensorsafe.safetensors"]


def test_alias_off_by_default_and_with_zero():
    for extra in ({}, {"TENSORSAFE_AS_SAFETENSORS": "0"}):
        r = run_python("import safetensors; print(safetensors.__name__, safetensors.safe_open.__module__)",
                       env_alias=False, extra_env=extra)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["safetensors", "builtins"]


def test_alias_unknown_submodule_is_not_found():
    r = run_python("""
        try:
            import safetensors.nothing_here
        except ModuleNotFoundError as e:
            print("missing", e.name)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["missing", "safetensors.nothing_here"]


def test_install_alias_in_code_and_too_late():
    r = run_python("""
        import tensorsafe.safetensors
        tensorsafe.safetensors.install_alias()
        import safetensors
        assert safetensors is tensorsafe.safetensors
        print("ok")
    """, env_alias=False)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    r = run_python("""
        import safetensors, tensorsafe.safetensors
        try:
            tensorsafe.safetensors.install_alias()
        except RuntimeError as e:
            print(e)
    """, env_alias=False)
    assert r.returncode == 0, r.stderr
    assert "the real safetensors was imported before the alias was installed" in r.stdout


def test_alias_without_the_real_package(tmp_path):
    """A venv without safetensors: site-packages as links, minus safetensors;
    the alias then also answers importlib.metadata, so transformers sees
    safetensors available and loads a model through tensorsafe."""
    import sysconfig
    fake = tmp_path / "site"
    fake.mkdir()
    sp = sysconfig.get_paths()["purelib"]  # this venv's site-packages, with the alias's .pth
    for name in os.listdir(sp):
        if name == "safetensors" or name.startswith("safetensors-"):
            continue
        os.symlink(os.path.join(sp, name), fake / name)
    r = subprocess.run(
        [sys.executable, "-S", "-c", textwrap.dedent(f"""
            import site, sys
            site.addsitedir({str(fake)!r})   # runs the .pth files, ours included
            import importlib.metadata, importlib.util
            import safetensors
            print(safetensors.__name__, importlib.metadata.version("safetensors"))
            from transformers.utils import is_safetensors_available
            print(is_safetensors_available())
        """)],
        env={**os.environ, "TENSORSAFE_AS_SAFETENSORS": "1", "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tensorsafe.safetensors", "0.8.0", "True"]


# -- side by side with safetensors 0.8.0 ---------------------------------------------

def write_both(tmp_path, tensors, metadata=None):
    p = tmp_path / "x.safetensors"
    real_np.save_file(tensors, p, metadata=metadata)
    return p


def outcome(fn):
    """A comparable outcome: ("ok", value) or (exception class name, message)."""
    try:
        v = fn()
    except Exception as e:  # noqa: BLE001 - compared, not swallowed
        return (type(e).__name__, str(e))
    return ("ok", v)


def test_messages_callers_test(tmp_path):
    p = write_both(tmp_path, {"a": np.arange(50, dtype=np.float32).reshape(10, 5)}, {"k": "v"})
    for mod in (real, ours):
        with pytest.raises(FileNotFoundError) as e:
            mod.safe_open("notafile", framework="pt")
        assert str(e.value) == "No such file or directory: notafile"
        with pytest.raises(mod.SafetensorError) as e:
            mod.safe_open(p, framework="bogus")
        assert str(e.value) == "framework bogus is invalid"
        with pytest.raises(mod.SafetensorError) as e:
            mod.safe_open(p, framework="np", device="cuda")
        assert str(e.value) == "Device cuda:0 is not supported for framework numpy"
        for dev, msg in (("bogus", "device bogus is invalid"),
                         ("mps:1", "device mps:1 is invalid: only mps or mps:0 is supported")):
            with pytest.raises(mod.SafetensorError) as e:
                mod.safe_open(p, framework="pt", device=dev)
            assert str(e.value) == msg
        with pytest.raises(mod.SafetensorError) as e:
            mod.safe_open(p, framework="np", backend="x")
        assert str(e.value) == 'backend "x" is invalid (expected one of: "mmap", "pread")'
        with mod.safe_open(p, framework="np") as f:
            with pytest.raises(mod.SafetensorError) as e:
                f.get_tensor("zz")
            assert str(e.value) == "File does not contain tensor zz"
        with pytest.raises(mod.SafetensorError) as e:
            f.keys()
        assert str(e.value) == "File is closed"
        with pytest.raises(mod.SafetensorError) as e:
            mod.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0)
        assert str(e.value).startswith('Unknown dtype "nonsense". Supported dtypes: bool, int8')
        with pytest.raises(TypeError):
            mod.serialize({"t": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}})
        with pytest.raises(TypeError):
            mod.TensorSpec("float32", [1], 0, 0)
    bad = tmp_path / "bad.safetensors"
    for content in (b"\x10\0\0", b"\x10\0\0\0\0\0\0\0{\"a\":1}        ", b"\xff" * 16):
        bad.write_bytes(content)
        for mod in (real, ours):
            with pytest.raises(mod.SafetensorError) as e:
                mod.safe_open(bad, framework="np")
            assert str(e.value).startswith("Error while deserializing header: ")
        with pytest.raises(ours.SafetensorError) as e:
            ours.deserialize(content)
        assert str(e.value).startswith("Error while deserializing: ")


def test_framework_and_device_parsing(tmp_path):
    p = write_both(tmp_path, {"a": np.ones(2, np.float32)})
    for fw in ("pt", "torch", "pytorch", "np", "numpy", "tf", "tensorflow", "jax", "flax", "mlx"):
        for mod in (real, ours):
            mod.safe_open(p, framework=fw).__exit__(None, None, None)  # opens without the framework
    for dev in ("cpu", "cuda", "cuda:1", "xpu:0", "npu", 0, 3, "mps", "mps:0", None):
        assert outcome(lambda: real.safe_open(p, "pt", device=dev) and None) == \
            outcome(lambda: ours.safe_open(p, "pt", device=dev) and None), dev


def test_tensor_spec_and_serialize(rng):
    a = np.arange(6, dtype=np.float32)
    for mod in (real, ours):
        s = mod.TensorSpec(dtype="float4_e2m1fn_x2", shape=(2, 3), data_ptr=0, data_len=6)
        assert (s.dtype, s.shape, s.data_len) == ("F4", [2, 6], 6)
    s_real = real.TensorSpec(dtype="float32", shape=[6], data_ptr=a.ctypes.data, data_len=24)
    s_ours = ours.TensorSpec(dtype="float32", shape=[6], data_ptr=a.ctypes.data, data_len=24)
    assert repr(s_real) == repr(s_ours)
    names = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
             "float32", "float64", "bfloat16", "complex64"]
    for trial in range(20):
        keep = []
        specs = {}, {}
        for i in range(int(rng.integers(0, 6))):
            name = names[int(rng.integers(len(names)))]
            arr = random_array(rng, np.uint8, (int(rng.integers(0, 5)) * np.dtype(
                "float16" if name == "bfloat16" else name).itemsize,))
            keep.append(arr)
            n = arr.nbytes // (2 if name == "bfloat16" else np.dtype(name).itemsize)
            for d, mod in zip(specs, (real, ours)):
                d[f"t{i}"] = mod.TensorSpec(dtype=name, shape=[n], data_ptr=arr.ctypes.data, data_len=arr.nbytes)
        meta = None if trial % 2 else {"format": "x"}
        assert real.serialize(specs[0], metadata=meta) == ours.serialize(specs[1], metadata=meta)
        data = ours.serialize(specs[1], metadata=meta)
        got = ours.deserialize(data)
        want = real.deserialize(data)
        assert sorted(got, key=lambda x: x[0]) == sorted(want, key=lambda x: x[0])
    with pytest.raises(ours.SafetensorError, match="Error while serializing: invalid shape, data type, or offset"):
        ours.serialize({"a": ours.TensorSpec(dtype="float32", shape=[3], data_ptr=a.ctypes.data, data_len=8)})
    with pytest.raises(TypeError):
        ours.serialize({"a": s_ours}, metadata={"k": 1})


def test_serialize_file_releases_the_gil(tmp_path):
    # What safetensors' test_threadable checks, on a smaller array.
    import threading
    import time
    a = np.random.default_rng(0).standard_normal((1000, 4000)).astype(np.float32)
    spec = {"a": ours.TensorSpec(dtype="float32", shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)}
    windows = []

    def save(i):
        t0 = time.monotonic()
        ours.serialize_file(spec, tmp_path / f"{i}.safetensors")
        windows.append((t0, time.monotonic()))

    threads = [threading.Thread(target=save, args=(i,)) for i in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert max(w[0] for w in windows) < min(w[1] for w in windows)
    np.testing.assert_array_equal(ours_np.load_file(tmp_path / "0.safetensors")["a"], a)


SLICE_KEYS = [
    np.s_[:], np.s_[::2], np.s_[1:8:3], np.s_[10:20], np.s_[9:100], np.s_[:20], np.s_[:20:2], np.s_[2:, 20],
    np.s_[:, :20], np.s_[2:, -6], np.s_[12], np.s_[-11], np.s_[-1], np.s_[0:0], np.s_[10:], np.s_[10:10],
    np.s_[3:3], np.s_[::0], np.s_[[0]], np.s_[[]], np.s_[...], np.s_[..., 1], np.s_[..., ...], np.s_[0, 0, 0],
    np.s_[1.5], np.s_["a"], np.s_[:, [1]], np.s_[2**40], np.s_[(1,)], [slice(None), 1],
    np.s_[:3, ..., :2], np.s_[np.int64(2)], np.s_[True], np.s_[None], (), np.s_[:, ::-1],
]


@pytest.mark.parametrize("key", SLICE_KEYS, ids=repr)
def test_numpy_slicing_matches(tmp_path, key):
    a = np.arange(50, dtype=np.float32).reshape(10, 5)
    p = write_both(tmp_path, {"a": a, "s": np.array(3.0, np.float32)})
    with real.safe_open(p, "np") as f, ours.safe_open(p, "np") as g:
        want = outcome(lambda: f.get_slice("a")[key])
        got = outcome(lambda: g.get_slice("a")[key])
    if want[0] == "ok":
        assert got[0] == "ok", got
        assert got[1].shape == want[1].shape and got[1].tobytes() == want[1].tobytes()
        assert got[1].flags.writeable
    else:
        assert got[0] != "ok", (key, want)
        assert got[1] == want[1], (key, want, got)
        with ours.safe_open(p, "np") as g, pytest.raises(ours.SafetensorError):
            g.get_slice("a")[key]


@pytest.mark.parametrize("key", [np.s_[::2], np.s_[-3:], np.s_[10:20], np.s_[5:2], np.s_[..., 1], np.s_[[]],
                                 np.s_[2:, 1], np.s_[-1, :2], np.s_[[0, 2]]], ids=repr)
def test_torch_slicing_matches(tmp_path, key):
    # safetensors 0.8.0 indexes torch tensors with torch's own rules.
    a = torch.arange(50, dtype=torch.float32).reshape(10, 5)
    p = tmp_path / "x.safetensors"
    real_pt.save_file({"a": a}, p)
    with real.safe_open(p, "pt") as f, ours.safe_open(p, "pt") as g:
        want, got = f.get_slice("a")[key], g.get_slice("a")[key]
    assert torch.equal(want, got)


def test_torch_and_numpy_files_are_identical(tmp_path, rng):
    tensors = {"a": torch.randn(3, 4), "b": torch.zeros(2, dtype=torch.bfloat16), "c": torch.tensor(7),
               "d": torch.empty(0, 3, dtype=torch.float16), "e": torch.ones(3).to(torch.float8_e4m3fn)}
    real_pt.save_file(tensors, tmp_path / "r.safetensors", metadata={"format": "pt"})
    ours_pt.save_file(tensors, tmp_path / "o.safetensors", metadata={"format": "pt"})
    assert (tmp_path / "r.safetensors").read_bytes() == (tmp_path / "o.safetensors").read_bytes()
    assert real_pt.save(tensors) == ours_pt.save(tensors)
    loaded = ours_pt.load_file(tmp_path / "r.safetensors")
    assert list(loaded) == list(real_pt.load_file(tmp_path / "r.safetensors"))
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape
        assert loaded[k].reshape(-1).view(torch.uint8).tolist() == v.reshape(-1).view(torch.uint8).tolist()
    loaded["a"] += 1  # writable, never reaching the file
    assert ours_pt.load_file(tmp_path / "r.safetensors")["a"].equal(tensors["a"])
    arrays = {"x": random_array(rng, np.float64, (3, 2)), "y": np.zeros((2, 2), ">i4")}
    assert real_np.save(arrays) == ours_np.save(arrays)
    got = ours_np.load(real_np.save(arrays))
    assert got["x"].flags.writeable and got["y"].dtype == np.int32
    with ours.safe_open(tmp_path / "r.safetensors", "np") as f:
        x = f.get_tensor("a")
        x[0, 0] = 42  # writable, as safetensors' arrays are
        assert f.get_tensors()["a"].flags.writeable


def test_save_errors_match():
    A = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    cases = [
        {"test": torch.sparse_coo_tensor(size=(2, 3))},
        {"test": {"some": "thing"}},
        "notadict",
        {"A": A, "B": A[:1]},
        {"t": A[:, 1]},
        {"A": A, "B": A.t()},  # shared and non-contiguous: the shared check comes first
        {"z": torch.zeros((10, 10), device="meta")},
        {"A": A, "E": A[1:1]},  # a zero-size view inside A's storage counts as shared
        {"ok": A, "also": A[1:]},
    ]
    for case in cases:
        for fn in ("save", "save_file"):
            args = (case,) if fn == "save" else (case, "/tmp/tensorsafe-dropin-never-written.safetensors")
            want = outcome(lambda: getattr(real_pt, fn)(*args) and None)
            got = outcome(lambda: getattr(ours_pt, fn)(*args) and None)
            if want[0] == "NotImplementedError":  # torch's own, from the meta tensor
                assert got[0] == want[0] and "Cannot copy out of meta tensor" in got[1]
            else:
                assert got == want, (case, fn)
    if os.path.exists("/tmp/tensorsafe-dropin-never-written.safetensors"):
        os.remove("/tmp/tensorsafe-dropin-never-written.safetensors")


def test_private_helpers_match():
    A = torch.zeros((3, 3))
    B = torch.zeros((16,))
    m = torch.randn(10)
    n = torch.empty([], dtype=m.dtype)
    n.set_(source=m.untyped_storage()[:16])
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[1].weight = model[0].weight
    dicts = [{"A": A, "B": A[:1, :]}, {"A": A, "B": A[:1], "C": A}, {"B": A[:1]}, {"x": B[:2], "y": B[2:]},
             {"x": B[:2], "y": B[1:]}, {"B": B[:2], "C": B[2:], "D": B[:1]}, {"a": B[0:10], "b": B[1:3], "c": B[4:6]},
             {"m": m, "n": n}, dict(model.state_dict()), {"meta": torch.zeros(2, device="meta")},
             {"e": torch.empty(0)}]
    for d in dicts:
        assert outcome(lambda: ours_pt._find_shared_tensors(d)) == outcome(lambda: real_pt._find_shared_tensors(d))
        for kw in ({}, {"preferred_names": ["b"]}, {"discard_names": ["a"]}, {"discard_names": list(d)}):
            assert outcome(lambda: dict(ours_pt._remove_duplicate_names(d, **kw))) == \
                outcome(lambda: dict(real_pt._remove_duplicate_names(d, **kw))), (list(d), kw)
        for t in d.values():
            assert ours_pt._is_complete(t) == real_pt._is_complete(t)
            assert ours_pt.storage_ptr(t) == real_pt.storage_ptr(t)
            assert ours_pt.storage_size(t) == real_pt.storage_size(t)
            if t.device.type != "meta" and (t.is_contiguous() or t.dim() < 2):
                assert ours_pt._end_ptr(t) == real_pt._end_ptr(t)
    assert ours_pt._TYPES == real_pt._TYPES and ours_pt._SIZE == real_pt._SIZE
    for code in real_pt._TYPES:
        assert ours_pt._getdtype(code) is real_pt._getdtype(code)
    with pytest.raises(KeyError):
        ours_pt._getdtype("F8_E8M0")
    assert ours_np._TYPES == real_np._TYPES
    assert ours_pt._tobytes(A[:1], "a") == A[:1].numpy().tobytes()
    flat = ours_pt._flatten({"a": A})
    assert flat["a"]["dtype"] == "float32" and flat["a"]["data"] == A.numpy().tobytes()
    keep = []
    spec = ours_pt._flatten_as_ptr({"a": A}, keep)["a"]
    assert (spec.dtype, spec.shape, spec.data_len) == ("F32", [3, 3], 36)
    view = ours.deserialize(ours_pt.save({"a": A}))
    assert ours_pt._view2torch(view)["a"].equal(A)


def test_models_round_trip_like_safetensors(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = self.a

    m = Tied()
    ours_pt.save_model(m, tmp_path / "o.safetensors")
    real_pt.save_model(m, tmp_path / "r.safetensors")
    for p in ("o.safetensors", "r.safetensors"):
        with ours.safe_open(tmp_path / p, "pt") as f:
            assert f.metadata() == {"b.bias": "a.bias", "b.weight": "a.weight"}
        m2 = Tied()
        assert real_pt.load_model(m2, tmp_path / p) == ours_pt.load_model(m2, tmp_path / p)
        assert m2.a.weight.equal(m.a.weight)
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "b.bias", "b.weight"'):
        class Two(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        ours_pt.load_model(Two(), tmp_path / "o.safetensors")


def test_safe_open_handle(tmp_path):
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros((2, 3), np.uint8)}
    p = tmp_path / "h.safetensors"
    real_np.save_file(tensors, p, metadata={"m": "1"})
    # A local file, in text mode as safetensors' own test opens it: its
    # descriptor is used.
    with open(p, "r") as fh, ours._safe_open_handle(fh, framework="np") as g:
        assert g.keys() == ["a", "b"] and g.metadata() == {"m": "1"}
        np.testing.assert_array_equal(g.get_tensor("a"), tensors["a"])
    fsspec = pytest.importorskip("fsspec")
    with fsspec.filesystem("file").open(str(p), "rb") as fh, ours._safe_open_handle(fh, "pt") as g:
        assert g.get_tensor("a").equal(torch.from_numpy(tensors["a"]))


def test_difference_safe_open_handle_reads_any_file_object(tmp_path):
    """safetensors 0.8 needs a named local file (it reopens f.name); tensorsafe
    reads any binary object with read() and seek(): BytesIO, fsspec's memory
    and remote files, lazily (header first, then each tensor as asked)."""
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "z": np.zeros((0, 2), np.int64)}
    data = real_np.save(tensors, metadata={"m": "1"})
    with pytest.raises(AttributeError):
        real._safe_open_handle(io.BytesIO(data), framework="np")
    fsspec = pytest.importorskip("fsspec")
    mem = fsspec.filesystem("memory")
    with mem.open("/dropin/x.safetensors", "wb") as fh:
        fh.write(data)
    for make in (lambda: io.BytesIO(data), lambda: mem.open("/dropin/x.safetensors", "rb")):
        for fw in ("np", "pt"):
            with make() as fh, ours._safe_open_handle(fh, framework=fw) as g:
                assert g.keys() == ["a", "z"] and g.offset_keys() == ["z", "a"] and g.metadata() == {"m": "1"}
                a = g.get_tensor("a")
                assert list(a.shape) == [2, 3]
                np.testing.assert_array_equal(np.asarray(a), tensors["a"])
                assert list(g.get_slice("a")[1:, ::2].shape) == [1, 2]
                assert set(g.get_tensors()) == {"a", "z"}
                with pytest.raises(ours.SafetensorError, match="File does not contain tensor q"):
                    g.get_tensor("q")
    with pytest.raises(ours.SafetensorError, match="Error while deserializing header"):
        ours._safe_open_handle(io.BytesIO(data[:20]), framework="np")


def test_difference_more_slices_work(tmp_path):
    """Negative bounds count from the end (safetensors 0.8: OverflowError);
    start > stop is empty (SystemError); slices of a zero-size dimension are
    empty (an out-of-bounds error)."""
    a = np.arange(50, dtype=np.float32).reshape(10, 5)
    p = write_both(tmp_path, {"a": a, "z": np.zeros((0, 5), np.float32)})
    with ours.safe_open(p, "np") as g:
        np.testing.assert_array_equal(g.get_slice("a")[-3:], a[-3:])
        np.testing.assert_array_equal(g.get_slice("a")[:-1, -2:], a[:-1, -2:])
        assert g.get_slice("a")[5:2].shape == (0, 5)
        assert g.get_slice("z")[:].shape == (0, 5)
    with real.safe_open(p, "np") as f:
        with pytest.raises(OverflowError):
            f.get_slice("a")[-3:]
        with pytest.raises(SystemError):
            f.get_slice("a")[5:2]
        with pytest.raises(real.SafetensorError):
            f.get_slice("z")[:]


def test_difference_reads_tsafe_and_sharded_checkpoints(tmp_path):
    """safe_open and load_file also read .tsafe files, any other format
    tensorsafe reads, and sharded checkpoints (an index or its directory)."""
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tensorsafe.torch.save_file({"w": w}, tmp_path / "m.tsafe")
    assert ours_pt.load_file(tmp_path / "m.tsafe")["w"].equal(w)
    tensorsafe.torch.save_sharded({"w": w, "v": w + 1}, tmp_path / "ck", max_shard_size=48)
    with ours.safe_open(tmp_path / "ck", "pt") as f:
        assert f.keys() == ["v", "w"] and f.metadata() == {"format": "pt"}
        assert f.get_slice("v")[1:, 0].equal(w[1:, 0] + 1)


def test_difference_refusals_and_supersets(tmp_path):
    """"__metadata__" as a tensor name is refused (safetensors 0.8 writes a
    file it cannot read back); non-contiguous NumPy arrays are saved in
    their logical order (safetensors saves the bytes behind their first
    element); SafetensorError is tensorsafe.Error, so it also catches a
    missing file."""
    a = np.arange(4, dtype=np.float32)
    spec = ours.TensorSpec(dtype="float32", shape=[4], data_ptr=a.ctypes.data, data_len=16)
    with pytest.raises(ours.SafetensorError, match="__metadata__"):
        ours.serialize({"__metadata__": spec})
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    np.testing.assert_array_equal(ours_np.load(ours_np.save({"s": strided}))["s"], strided)
    assert not np.array_equal(real_np.load(real_np.save({"s": strided}))["s"], strided)
    assert ours.SafetensorError is tensorsafe.Error
    with pytest.raises(ours.SafetensorError):
        ours.safe_open(tmp_path / "missing.safetensors", "np")


def test_other_frameworks_convert_through_numpy(tmp_path):
    """tf/jax/mlx/paddle are not installed here: stub modules record what
    safe_open hands them, the conversion safetensors does."""
    p = write_both(tmp_path, {"a": np.arange(4, dtype=np.float32)})
    r = run_python(f"""
        import sys, types, numpy as np
        calls = []
        def module(name, **attrs):
            m = types.ModuleType(name); m.__dict__.update(attrs); sys.modules[name] = m; return m
        module("tensorflow", convert_to_tensor=lambda a: ("tf", a))
        jnp = module("jax.numpy", array=lambda a: ("jax", a))
        module("jax", numpy=jnp)
        core = module("mlx.core", array=lambda a: ("mlx", a))
        module("mlx", core=core)
        module("paddle", to_tensor=lambda a, place=None: ("paddle", a, place))
        from safetensors import safe_open
        for fw in ("tf", "flax", "mlx", "paddle"):
            with safe_open({str(p)!r}, framework=fw) as f:
                tag, arr, *rest = f.get_tensor("a")
                print(fw, tag, arr.tolist(), *rest)
        import safetensors.mlx
        print(sorted(safetensors.mlx.load_file({str(p)!r})))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["tf tf [0.0, 1.0, 2.0, 3.0]", "flax jax [0.0, 1.0, 2.0, 3.0]",
                                     "mlx mlx [0.0, 1.0, 2.0, 3.0]", "paddle paddle [0.0, 1.0, 2.0, 3.0] cpu",
                                     "['a']"]


def test_torch_distributed_checkpoint_through_the_alias(tmp_path):
    """torch's HuggingFaceStorageWriter / Reader (dcp.save / dcp.load) import
    safetensors.torch (save, _getdtype) and safe_open: through the alias they
    write files the real safetensors reads, and load them back."""
    r = run_python(f"""
        import os, torch, safetensors
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
        assert safetensors.__name__ == "tensorsafe.safetensors"
        sd = {{"a": torch.arange(12.).reshape(3, 4), "b": torch.ones(5, dtype=torch.bfloat16)}}
        dcp.save(sd, storage_writer=HuggingFaceStorageWriter({str(tmp_path)!r}, save_distributed=False))
        out = {{"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.bfloat16)}}
        dcp.load(out, storage_reader=HuggingFaceStorageReader({str(tmp_path)!r}))
        print(torch.equal(out["a"], sd["a"]), torch.equal(out["b"], sd["b"]))
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", "True"]
    shard = next(p for p in tmp_path.iterdir() if p.suffix == ".safetensors")
    got = real_pt.load_file(shard)
    assert got["a"].equal(torch.arange(12.).reshape(3, 4)) and got["b"].dtype == torch.bfloat16


def test_difference_torch_slices_follow_torch_with_either_backend(tmp_path):
    """safetensors 0.8 indexes torch tensors by torch's rules with the mmap
    backend but by its strict slicer with backend="pread"; tensorsafe uses
    torch's rules with both."""
    a = torch.arange(50.).reshape(10, 5)
    p = tmp_path / "x.safetensors"
    real_pt.save_file({"a": a}, p)
    with real.safe_open(p, "pt", backend="pread") as f:
        with pytest.raises(real.SafetensorError, match="index 10 out of bounds"):
            f.get_slice("a")[10:20]
        with pytest.raises(OverflowError):
            f.get_slice("a")[-3:]
    for backend in ("mmap", "pread"):
        with ours.safe_open(p, "pt", backend=backend) as g:
            assert g.get_slice("a")[10:20].shape == (0, 5)
            assert g.get_slice("a")[-3:].equal(a[-3:])


def test_difference_deserialize_order_and_input(tmp_path):
    """deserialize lists tensors in data order (safetensors 0.8: its hash
    map's order) and takes any bytes-like object (0.8: bytes only)."""
    data = real_np.save({"z": np.zeros(2, np.float64), "a": np.ones(3, np.int8), "m": np.ones(1, np.float32)})
    order = [name for name, _ in ours.deserialize(data)]
    assert order == ["z", "m", "a"]  # F64, F32, I8: the writer's order, which is the data's
    assert ours.deserialize(bytearray(data)) == ours.deserialize(memoryview(data)) == ours.deserialize(data)
    with pytest.raises(TypeError):
        real.deserialize(bytearray(data))
