"""PyTorch checkpoints through tensorsafe's Python API, against torch 2.13.0.

Files are written at test time by torch.save (the zip archive and the legacy
stream, pickle protocols 2 to 5) and read by tensorsafe.read, safe_open and
tensorsafe.torch.load_file; every tensor and every other value must equal
what torch.load(weights_only=True) returns, flattened as
docs/formats/pytorch.md says (tests/interop/pytorch_reference.py is the
oracle). Malicious pickles are refused and never run: each test first shows
that Python's own pickle would have run it (the side effect happens), then
that tensorsafe refuses it and the side effect did not happen.
"""
import os
import pickle
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorsafe as ts  # noqa: E402
import tensorsafe.torch as tst  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))
import pytorch_reference as ref  # noqa: E402

from conftest import SEED  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
          torch.uint64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
          torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.float4_e2m1fn_x2]
V3 = set(torch.storage._new_dtypes())  # saved through UntypedStorage


def random_tensor(gen, dtype, shape):
    itemsize = torch.empty(0, dtype=dtype).element_size()
    n = int(np.prod(shape)) if shape else 1
    raw = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def state(gen):
    """Every dtype, views of shared storages, nested containers, values."""
    sd = OrderedDict()
    for d in DTYPES:
        sd[f"dtype.{str(d)[6:]}"] = random_tensor(gen, d, (3, 4))
    base = torch.randn(5, 6, generator=gen)
    sd.update(base=base, row=base[2], col=base[:, 1], t=base.t(), step=base[1::2, ::3], scalar=base[4, 5],
              empty=base[:0], again=base, expand=torch.arange(4.0).expand(3, 4),
              param=torch.nn.Parameter(torch.randn(2, 2, generator=gen)))
    sd["nested"] = {"a": {"b": torch.ones(2, dtype=torch.int64)}, "list": [torch.zeros(1), 3, "s"], "n": None,
                    "t": (1.5, -2, True)}
    return sd


def adam_state(gen):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for _ in range(2):
        model(torch.randn(8, 4, generator=gen)).sum().backward()
        opt.step()
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    sched.step()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 4, generator=gen)).sum().backward()
    sgd.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "sgd": sgd.state_dict(), "step": 2,
            "scheduler": sched.state_dict(), "rng": torch.get_rng_state()}


def check_against_torch(path, obj):
    """tensorsafe.read and the torch-facing loaders against `obj` (what
    torch.load returned, or what was saved)."""
    want_tensors, want_meta = ref.flatten(obj, Path(path).stem)
    # packed: f4 (float4_e2m1fn_x2) comes as its raw bytes; NumPy has no f4.
    arrays, meta = ts.read(path, packed=True)
    assert list(arrays) == list(want_tensors)
    assert meta == want_meta
    for name, t in want_tensors.items():
        a = arrays[name]
        if t.dtype != torch.float4_e2m1fn_x2:
            assert list(a.shape) == ref.ts_shape(t), name
        assert a.tobytes() == ref.tensor_bytes(t), name
    loaded = tst.load_file(path)
    assert list(loaded) == list(want_tensors) or sorted(loaded) == sorted(want_tensors)
    for name, t in want_tensors.items():
        assert loaded[name].dtype == t.dtype, name
        assert loaded[name].shape == t.shape, name
        assert ref.tensor_bytes(loaded[name]) == ref.tensor_bytes(t), name


@pytest.mark.parametrize("legacy", [False, True])
def test_state_dict_equals_torch_load(tmp_path, legacy):
    gen = torch.Generator().manual_seed(SEED)
    sd = state(gen)
    if legacy:  # torch.load cannot read v3 dtypes back from the legacy stream
        sd = OrderedDict((k, v) for k, v in sd.items() if not (isinstance(v, torch.Tensor) and v.dtype in V3))
    path = tmp_path / "model.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)
    check_against_torch(path, torch.load(path, weights_only=True))


def test_legacy_v3_dtypes_that_torch_cannot_load(tmp_path):
    gen = torch.Generator().manual_seed(SEED)
    sd = OrderedDict((str(d), random_tensor(gen, d, (2, 5))) for d in DTYPES if d in V3)
    path = tmp_path / "v3.pt"
    torch.save(sd, path, _use_new_zipfile_serialization=False)
    with pytest.raises(AttributeError):
        torch.load(path, weights_only=True)  # torch 2.13's _legacy_load asks UntypedStorage for a dtype
    check_against_torch(path, sd)


@pytest.mark.parametrize("legacy", [False, True])
def test_optimizer_states(tmp_path, legacy):
    gen = torch.Generator().manual_seed(SEED)
    path = tmp_path / "ckpt.pth"
    torch.save(adam_state(gen), path, _use_new_zipfile_serialization=not legacy)
    obj = torch.load(path, weights_only=True)
    check_against_torch(path, obj)
    _, meta = ts.read(path)
    assert meta["optimizer.param_groups"][0]["initial_lr"] == 3e-4
    assert meta["optimizer.param_groups"][0]["params"] == [0, 1, 2, 3]
    assert meta["scheduler"]["base_lrs"] == [3e-4] and meta["scheduler"]["T_max"] == 10


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocols(tmp_path, protocol):
    gen = torch.Generator().manual_seed(SEED)
    sd = state(gen)
    path = tmp_path / f"p{protocol}.pt"
    torch.save(sd, path, pickle_protocol=protocol)
    # torch.load(weights_only=True) refuses protocols 4 and 5; the file is ours.
    check_against_torch(path, torch.load(path, weights_only=protocol <= 3))


def test_top_level_tensor_list_and_storage(tmp_path):
    t = torch.arange(6, dtype=torch.int32)
    torch.save(t, tmp_path / "bare.pt")
    arrays, meta = ts.read(tmp_path / "bare.pt")
    assert list(arrays) == ["bare"] and meta == {}
    np.testing.assert_array_equal(arrays["bare"], t.numpy())
    torch.save([t, t[1:], {"x": 1}], tmp_path / "list.pt")
    arrays, meta = ts.read(tmp_path / "list.pt")
    assert list(arrays) == ["0", "1"] and meta == {"2": {"x": 1}}
    u = torch.arange(3, dtype=torch.float64)
    # u.storage() would emit torch's once-per-process TypedStorage warning,
    # which test_torch_api.py expects to see: build the same object quietly.
    typed = torch.storage.TypedStorage(wrap_storage=u.untyped_storage(), dtype=torch.float64, _internal=True)
    torch.save({"s": t.untyped_storage(), "typed": typed}, tmp_path / "storage.pt")
    arrays, _ = ts.read(tmp_path / "storage.pt")
    assert arrays["s"].dtype == np.uint8 and arrays["s"].tobytes() == t.numpy().tobytes()
    # A TypedStorage is pickled as torch.DoubleStorage: a 1-D tensor of its type.
    np.testing.assert_array_equal(arrays["typed"], u.numpy())


def test_detect_and_zero_copy(tmp_path):
    sd = {"w": torch.randn(64, 64)}
    for name in ("pytorch_model.bin", "x.pt", "x.pth", "x.ckpt", "noext"):
        torch.save(sd, tmp_path / name)
        assert ts.detect_format(tmp_path / name) == "pytorch"
    arrays, _ = ts.read(tmp_path / "x.pt")
    assert not arrays["w"].flags.writeable  # a view of the read-only mapping
    assert arrays["w"].base is not None
    with ts.safe_open(tmp_path / "x.pt", framework="pt") as f:
        assert f.keys() == ["w"]
        assert torch.equal(f.get_tensor("w"), sd["w"])
    # torch tensors view a copy-on-write mapping of the whole file (as for
    # safetensors): no copy, and writes never reach the file.
    sd2 = {"w": torch.randn(64, 64), "t": torch.randn(8, 4).t()}
    torch.save(sd2, tmp_path / "y.pt")
    before = (tmp_path / "y.pt").read_bytes()
    loaded = tst.load_file(tmp_path / "y.pt")
    assert loaded["w"].untyped_storage().nbytes() == len(before)  # the mapping
    assert loaded["t"].untyped_storage().nbytes() == 8 * 4 * 4    # a copy (transposed)
    loaded["w"].add_(1)
    assert (tmp_path / "y.pt").read_bytes() == before
    assert torch.equal(loaded["t"], sd2["t"])


def test_convert_matches_safetensors_convert_py(tmp_path):
    gen = torch.Generator().manual_seed(SEED)
    emb = torch.randn(7, 5, generator=gen)
    sd = OrderedDict([("decoder.embed_tokens.weight", emb), ("lm_head.weight", emb),
                      ("encoder.embed_tokens.weight", emb), ("norm.weight", torch.randn(5, generator=gen)),
                      ("proj", torch.randn(5, 3, generator=gen).t()), ("half", torch.randn(4, generator=gen).half()),
                      ("format", emb[1:])])
    for name, obj in [("tied.bin", sd), ("wrapped.ckpt", {"state_dict": sd, "epoch": 4}),
                      ("plain.bin", {"a": torch.ones(3), "b": torch.zeros(2, 2, dtype=torch.bfloat16)})]:
        src = tmp_path / name
        torch.save(obj, src)
        for discard in ([], ["decoder.embed_tokens.weight", "lm_head.weight"]):
            ref.convert_reference(str(src), str(tmp_path / "ref.safetensors"), discard_names=discard)
            info = ts.convert(src, tmp_path / "ours.safetensors", discard_names=discard)
            assert info["from"] == "pytorch"
            ours = (tmp_path / "ours.safetensors").read_bytes()
            theirs = (tmp_path / "ref.safetensors").read_bytes()
            h1, m1, order, d1, n1 = ref.safetensors_parts(ours)
            h2, m2, _, d2, n2 = ref.safetensors_parts(theirs)
            assert (h1, m1, d1, n1) == (h2, m2, d2, n2), (name, discard)
            # Our __metadata__ keeps convert.py's dict order (safetensors' own
            # is a HashMap's): "format" first. A tensor named "format" removed
            # as a duplicate keeps "format": "pt", as convert.py's `not in`
            # check does.
            assert order[0] == "format" and m1["format"] == "pt"
            if len(order) <= 1:
                assert ours == theirs, name
            if name == "tied.bin":
                kept = "encoder.embed_tokens.weight" if discard else "decoder.embed_tokens.weight"
                assert m1["lm_head.weight"] == kept


def test_convert_to_other_formats_and_refuse_writing_pickles(tmp_path):
    sd = {"a": torch.arange(4.0), "b": {"c": torch.ones(2, dtype=torch.int8)}, "lr": 0.5}
    torch.save(sd, tmp_path / "m.pt")
    ts.convert(tmp_path / "m.pt", tmp_path / "m.tsafe")
    with ts.open(tmp_path / "m.tsafe") as r:
        assert sorted(r.keys()) == ["a", "b.c"]
    assert ts.read(tmp_path / "m.tsafe")[1] == {"lr": 0.5}
    with pytest.raises(ts.UnsupportedError, match="metadata"):
        ts.convert(tmp_path / "m.pt", tmp_path / "m.npz")
    ts.convert(tmp_path / "m.pt", tmp_path / "m.npz", drop_metadata=True)
    with pytest.raises(ts.InvalidArgumentError, match="the extension names pytorch, which tensorsafe reads but does not write"):
        ts.convert(tmp_path / "m.tsafe", tmp_path / "back.pt")
    with pytest.raises(ts.UnsupportedError, match="does not write PyTorch checkpoints"):
        ts.convert(tmp_path / "m.tsafe", tmp_path / "back.pt", dst_format="pytorch")
    assert not (tmp_path / "back.pt").exists()
    with pytest.raises(ts.UnsupportedError, match="does not write PyTorch checkpoints"):
        ts.write(tmp_path / "w.pt", {"a": np.zeros(2)}, format="pytorch")


# --- malicious pickles --------------------------------------------------------

class Shell:
    """A __reduce__ to os.system, as a malicious checkpoint carries."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class Eval:
    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        import builtins
        return (builtins.eval, (self.code,))


def getattr_chain(command):
    """getattr(__import__("os"), "system")(command), as protocol-0 opcodes
    (no __reduce__ can pickle a module)."""
    return (b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR(V"
            + command.encode() + b"\ntR.")


def archive(path, pkl):
    """A torch.save-shaped zip around a hand-made data.pkl."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/version", "3\n")


def _pickle_runs_it(payload_bytes, marker):
    """Python's pickle, in a child process, creates `marker`: the payload is
    live (so the refusal below is a real test)."""
    code = "import pickle,sys; pickle.loads(sys.stdin.buffer.read())"
    subprocess.run([sys.executable, "-c", code], input=payload_bytes, check=False, capture_output=True)
    return marker.exists()


@pytest.mark.parametrize("legacy", [False, True])
def test_reduce_to_os_system_is_never_run(tmp_path, legacy):
    marker = tmp_path / "pwned"
    evil = {"w": torch.ones(2), "x": Shell(f"touch {marker}")}
    path = tmp_path / "evil.pt"
    torch.save(evil, path, _use_new_zipfile_serialization=not legacy)  # pickles Shell through os.system
    assert not marker.exists()
    assert _pickle_runs_it(pickle.dumps(Shell(f"touch {marker}"), protocol=2), marker)
    marker.unlink()
    with pytest.raises(ts.UnsupportedError, match=r"global posix\.system is not allowed") as e:
        ts.read(path)
    assert str(path) in str(e.value)
    with pytest.raises(ts.UnsupportedError):
        tst.load_file(path)
    with pytest.raises(ts.UnsupportedError):
        ts.convert(path, tmp_path / "out.safetensors")
    assert not marker.exists()
    assert not (tmp_path / "out.safetensors").exists()


@pytest.mark.parametrize("make,message", [
    (lambda m: pickle.dumps(Eval(f"open({str(m)!r}, 'w')"), protocol=2), r"global builtins\.eval is not allowed"),
    (lambda m: getattr_chain(f"touch {m}"), r"global builtins\.getattr is not allowed"),
])
def test_eval_and_getattr_are_never_run(tmp_path, make, message):
    marker = tmp_path / "pwned"
    assert _pickle_runs_it(make(marker), marker)
    marker.unlink()
    path = tmp_path / "evil.pt"
    archive(path, make(marker))
    with pytest.raises(ts.UnsupportedError, match=message):
        ts.read(path)
    assert not marker.exists()


def test_torchscript_archive_is_refused(tmp_path):
    # CVE-2025-32434: torch < 2.6 ran a TorchScript archive's code from
    # torch.load(weights_only=True).
    class M(torch.nn.Module):
        def forward(self, x):
            return x + 1

    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(M()), path)
    assert ts.detect_format(path) == "pytorch"
    with pytest.raises(ts.UnsupportedError, match="TorchScript archive"):
        ts.read(path)
    with pytest.raises(RuntimeError, match="TorchScript"):
        torch.load(path, weights_only=True)  # torch >= 2.6 refuses it too


def test_setitems_on_a_list_is_refused(tmp_path):
    # CVE-2026-24747: SETITEMS applied to a non-dict.
    path = tmp_path / "cve.pt"
    archive(path, b"\x80\x02](K\x00X\x01\x00\x00\x00xu.")
    with pytest.raises(ts.UnsupportedError, match="SETITEMS applies to dicts, and the target is a list"):
        ts.read(path)


def test_every_prefix_is_an_error(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"a": torch.arange(3.0), "b": [1, {"c": torch.ones(2, 2)}]}, path)
    data = path.read_bytes()
    cut = tmp_path / "cut.pt"
    for n in range(0, len(data), 7):
        cut.write_bytes(data[:n])
        with pytest.raises((ts.CorruptionError, ts.UnsupportedError)):
            ts.read(cut, format="pytorch")


def test_reader_keeps_the_mapping_alive(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.arange(1000.0)}, path)
    arrays, _ = ts.read(path)
    w = arrays["w"]
    del arrays
    os.unlink(path)
    assert float(w[999]) == 999.0


def test_big_endian_archive(tmp_path):
    """A torch.save archive rewritten as a big-endian host writes it."""
    src = tmp_path / "le.pt"
    sd = OrderedDict(f=torch.randn(5), c=torch.randn(3, dtype=torch.complex128), u=torch.arange(1, 5, dtype=torch.int32).to(torch.uint16))
    torch.save(sd, src)
    be = tmp_path / "be.pt"
    zin = zipfile.ZipFile(src)
    prefix = zin.namelist()[0].split("/")[0] + "/"
    widths = [v.element_size() // (2 if v.is_complex() else 1) for v in sd.values()]
    with zipfile.ZipFile(be, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename == prefix + "byteorder":
                data = b"big"
            elif info.filename.startswith(prefix + "data/"):
                w = widths[int(info.filename.rsplit("/", 1)[1])]
                data = b"".join(data[i:i + w][::-1] for i in range(0, len(data), w))
            zout.writestr(info.filename, data)
    arrays, _ = ts.read(be)
    for k, v in sd.items():
        assert arrays[k].tobytes() == ref.tensor_bytes(v), k
    # torch agrees for the typed storages; for uint16 (an UntypedStorage) it
    # swaps nothing and returns other numbers (docs/formats/pytorch.md).
    back = torch.load(be, weights_only=True)
    assert torch.equal(back["f"], sd["f"]) and torch.equal(back["c"], sd["c"])
    assert not torch.equal(back["u"], sd["u"])
