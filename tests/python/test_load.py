"""tensorsafe.load (docs/LOAD.md): equal to a mapped read with and without
verification, a flipped byte named, O_DIRECT refused on tmpfs, a 3-shard
checkpoint, into= a module's state_dict, names, slices, pinned memory, the
fixed backend="pread" path."""

import os

import numpy as np
import pytest
import torch

import tensorsafe
from tensorsafe import CorruptionError, InvalidArgumentError, NotFoundError, UnsupportedError
from tensorsafe._load_into import _copy_chunks
from tensorsafe.torch import load_file, save_file

RNG = np.random.default_rng(27)


def _tensors(n=12):
    out = {"empty": torch.zeros(0, 3), "one": torch.tensor([7], dtype=torch.uint8)}
    for i in range(n):
        shape = (int(RNG.integers(1, 70)), int(RNG.integers(1, 300)))
        dtype = [torch.float32, torch.bfloat16, torch.int64, torch.float16][i % 4]
        out[f"t{i}"] = torch.from_numpy(RNG.standard_normal(shape).astype(np.float32)).to(dtype)
    return out


def _same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k].reshape(-1).view(torch.uint8), b[k].reshape(-1).view(torch.uint8)), k


@pytest.mark.parametrize("ext", ["tsafe", "safetensors"])
@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("cached", [True, False])
def test_equals_mapped_read(tmp_path, ext, verify, cached):
    path = str(tmp_path / f"m.{ext}")
    t = _tensors()
    save_file(t, path)
    # The file was just written: in the page cache, so cached=True copies
    # from there, and cached=False reads it with O_DIRECT.
    got, rep = tensorsafe.load(path, verify=verify, cached_buffered=cached, return_report=True)
    assert rep["direct"] == [not cached]
    _same(got, load_file(path))
    assert list(got) == list(load_file(path))  # file order
    assert rep["tensors"] == len(t)
    if not verify:
        assert rep["verification"] == "not verified (verify=false)"
    elif ext == "tsafe":
        assert rep["verified"] == len(t)
    else:
        assert rep["verification"] == "nothing to verify: safetensors stores no checksums"
    thp = "[never]" not in open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    # auto: 2 MiB pages unless they fault slowly (then "2 MiB, then 4 KiB from byte N (...)")
    assert rep["pages"].startswith("2 MiB" if thp else "4 KiB"), rep["pages"]
    for huge, pages in ((False, "4 KiB"), (True, "2 MiB" if thp else "4 KiB")):
        again, rep = tensorsafe.load(path, verify=verify, cached_buffered=cached, huge_pages=huge, return_report=True)
        assert rep["pages"] == pages
        _same(again, got)
    # Tensors own their memory: writable, and alive after everything else is gone.
    x = got["t0"]
    del got
    x += 1
    n = tensorsafe.load(path, framework="np", verify=verify)
    for k, v in load_file(path).items():
        assert np.array_equal(n[k].reshape(-1).view(np.uint8), v.reshape(-1).view(torch.uint8).numpy()), k


def test_flipped_byte_is_named(tmp_path):
    path = str(tmp_path / "f.tsafe")
    save_file(_tensors(), path)
    with tensorsafe.open(path) as r:
        e = r.info("t3")
    off, nbytes = e["offset"], e["nbytes"]
    with open(path, "r+b") as f:
        f.seek(off + nbytes // 2)
        b = f.read(1)
        f.seek(off + nbytes // 2)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(CorruptionError, match=rf"f\.tsafe: tensor \"t3\" \(offset {off}, {nbytes} bytes\): data checksum"):
        tensorsafe.load(path)
    sd = {k: v.clone() for k, v in load_file(path).items()}
    with pytest.raises(CorruptionError, match='tensor "t3"'):
        tensorsafe.load(path, into=sd)
    tensorsafe.load(path, verify=False)  # the caller's choice



def test_an_error_while_the_tensors_are_made_stops_the_reads(tmp_path, monkeypatch):
    """load() makes its tensors while the last bytes arrive: an error there
    (a KeyboardInterrupt, say) stops the reads and joins the loader's
    threads before it propagates, though the traceback keeps the load's
    handle alive; the next load runs as usual."""
    import tensorsafe._load as loader

    path = str(tmp_path / "slow.tsafe")
    t = {f"w{i}": torch.full((1 << 20,), i, dtype=torch.int32) for i in range(8)}
    save_file(t, path)

    def threads():
        return len(os.listdir("/proc/self/task"))

    def interrupted(*args):
        raise KeyboardInterrupt

    before = threads()
    monkeypatch.setattr(loader, "_arena_tensors", interrupted)
    # 32 MiB in 4 KiB O_DIRECT requests on one thread: seconds of reads left
    with pytest.raises(KeyboardInterrupt) as caught:
        tensorsafe.load(path, cached_buffered=False, request_bytes=4096, io_threads=1)
    assert threads() == before, caught.traceback  # the handle is alive in the traceback, its threads gone
    monkeypatch.undo()
    _same(tensorsafe.load(path, cached_buffered=False), t)

def test_tmpfs_refuses_direct(tmp_path):
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    path = f"/dev/shm/tensorsafe_test_load_{os.getpid()}.tsafe"
    try:
        save_file(_tensors(), path)
        got, rep = tensorsafe.load(path, cached_buffered=False, return_report=True)
        _same(got, load_file(path))
        # tmpfs refuses O_DIRECT before Linux 6.6 and takes it since (the
        # refusal itself is simulated in tests/load/loader_test.cc).
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
            direct = True
        except OSError:
            direct = False
        assert rep["direct"] == [direct]
        assert rep["buffered_reason"] == ["" if direct else "O_DIRECT refused by the file system (Invalid argument)"]
    finally:
        os.remove(path)


def test_three_shard_checkpoint(tmp_path):
    from tensorsafe.torch import save_sharded  # the hub's layout

    t = _tensors(9)
    save_sharded(t, str(tmp_path), max_shard_size=20000)
    shards = sorted(p for p in os.listdir(tmp_path) if p.endswith(".safetensors"))
    assert len(shards) >= 3
    got, rep = tensorsafe.load(str(tmp_path), return_report=True)
    _same(got, t)
    assert len(rep["direct"]) == len(shards)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 32)
        self.b = torch.nn.Linear(32, 8, dtype=torch.bfloat16)
        self.register_buffer("steps", torch.tensor(3))


def test_into_state_dict_in_place(tmp_path):
    src, dst = Net(), Net()
    path = str(tmp_path / "net.tsafe")
    save_file(src.state_dict(), path)
    sd = dst.state_dict()
    ptrs = {k: v.data_ptr() for k, v in sd.items()}
    out = tensorsafe.load(path, into=sd)
    assert {k: v.data_ptr() for k, v in out.items()} == ptrs
    _same(dst.state_dict(), src.state_dict())
    # A mismatch names file, tensor and numbers.
    bad = {"a.weight": torch.zeros(32, 65)}
    with pytest.raises(InvalidArgumentError, match=r"net\.tsafe: tensor 'a\.weight' is f32 \[32, 64\].*\[32, 65\]"):
        tensorsafe.load(path, into=bad)
    with pytest.raises(InvalidArgumentError, match="is f32"):
        tensorsafe.load(path, into={"a.weight": torch.zeros(32, 64, dtype=torch.float16)})
    # A tensor not contiguous (as one on a GPU) is filled by a copy.
    transposed = torch.zeros(64, 32).t()
    _, rep = tensorsafe.load(path, into={"a.weight": transposed}, return_report=True)
    assert torch.equal(transposed, src.a.weight.detach()) and rep["copied"] == {"a.weight": "not contiguous"}
    with pytest.raises(InvalidArgumentError, match=r"tensor 'a\.weight' is f32 \[32, 64\], but .* \[16, 64\]"):
        tensorsafe.load(path, into={"a.weight": torch.zeros(64, 16).t()})
    with pytest.raises(InvalidArgumentError, match="into= fills its tensors where they are"):
        tensorsafe.load(path, into={"a.weight": transposed}, device="cuda")
    with pytest.raises(UnsupportedError, match="is on meta, which holds no memory to fill"):
        tensorsafe.load(path, into={"a.weight": torch.zeros(32, 64, device="meta")})
    # Parameters themselves (keep_vars=True), and NumPy arrays, are filled too.
    params = Net()
    tensorsafe.load(path, into=params.state_dict(keep_vars=True))
    _same(params.state_dict(), src.state_dict())
    arrays = {"a.weight": np.zeros((32, 64), np.float32), "a.bias": np.zeros(32, np.float32)}
    tensorsafe.load(path, into=arrays, framework="np")
    assert np.array_equal(arrays["a.weight"], src.a.weight.detach().numpy())
    with pytest.raises(InvalidArgumentError, match="writable"):
        ro = np.zeros(32, np.float32)
        ro.flags.writeable = False
        tensorsafe.load(path, into={"a.bias": ro}, framework="np")


def test_match_into_reads_only_plain_matching_tensors_in_place(tmp_path):
    """The native first pass of load(into=): a contiguous CPU tensor of the
    file's dtype and shape gets its address; everything else is left to the
    Python checks (copies, errors), in item order."""
    from tensorsafe import _dtypes, _native

    path = str(tmp_path / "m.tsafe")
    names = ["plain", "param", "missing", "array", "dtype", "shape", "strided", "empty", "meta", "odd", "sub"]
    save_file({n: torch.zeros(0 if n == "empty" else 4, 6) for n in names}, path)
    plan = _native.plan_load([path], None, None)
    order = [name for name, *_ in plan.items()]

    class Odd(torch.Tensor):  # its dtype raises: Python's checks see it again
        @property
        def dtype(self):
            raise RuntimeError("no dtype")

    class Sub(torch.Tensor):
        pass

    into = {"plain": torch.ones(4, 6), "param": torch.nn.Parameter(torch.ones(4, 6)), "array": np.ones((4, 6), "f4"),
            "dtype": torch.ones(4, 6, dtype=torch.float64), "shape": torch.ones(6, 4),
            "strided": torch.ones(6, 4).t(), "empty": torch.ones(0, 6), "meta": torch.ones(4, 6, device="meta"),
            "odd": torch.ones(4, 6).as_subclass(Odd), "sub": torch.ones(4, 6).as_subclass(Sub)}
    out, outs, slow = plan.match_into(into, _dtypes.torch_tables()[0], torch.Tensor)
    assert list(out) == [n for n in order if n != "missing"]
    assert all(out[n] is into[n] for n in out)
    fast = {"plain", "param", "sub"}
    assert [order[i] for i in slow] == [n for n in order if n not in fast]
    for i, name in enumerate(order):
        assert outs[i] == (into[name].data_ptr() if name in fast else None)
    # No torch tensor type (torch not imported by the caller): all to Python.
    assert plan.match_into(into, {}, None)[2] == list(range(len(order)))


def test_into_a_tied_transformers_model(tmp_path):
    # GPT-2 ties lm_head.weight to transformer.wte.weight: its state_dict has
    # both, its checkpoint (save_pretrained, sharded) only the second.
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=500, n_positions=64)
    torch.manual_seed(0)
    src = transformers.GPT2LMHeadModel(cfg).eval()
    src.save_pretrained(str(tmp_path), max_shard_size="100KB")
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]) > 3
    torch.manual_seed(1)
    dst = transformers.GPT2LMHeadModel(cfg).eval()
    sd = dst.state_dict()
    before = {k: v.data_ptr() for k, v in sd.items()}
    out, rep = tensorsafe.load(str(tmp_path), into=sd, return_report=True)
    assert rep["tied"] == {"lm_head.weight": "transformer.wte.weight"} and rep["missing"] == []
    assert {k: v.data_ptr() for k, v in out.items()} == before  # every entry, filled in place
    ids = torch.randint(0, 500, (2, 12))
    with torch.no_grad():
        assert torch.equal(src(ids).logits, dst(ids).logits)


def test_into_ties_missing_and_overlaps(tmp_path):
    path = str(tmp_path / "t.safetensors")
    w = torch.arange(12.0).reshape(3, 4)
    save_file({"a": w, "b": w + 100, "c": torch.ones(5)}, path)
    # Tied entries the file holds both of are read once, from the first in file order.
    shared = torch.zeros(3, 4)
    out, rep = tensorsafe.load(path, into={"b": shared, "a": shared}, return_report=True)
    assert rep["tied"] == {"b": "a"} and rep["bytes"] == w.nbytes and torch.equal(shared, w)
    assert set(out) == {"a", "b"} and out["b"] is shared
    half = torch.zeros(3, 4, dtype=torch.float16)  # and cast once
    out, rep = tensorsafe.load(path, into={"b": half, "a": half}, cast=True, return_report=True)
    assert rep["tied"] == {"b": "a"} and rep["copied"] == {"a": "f32 -> f16"} and torch.equal(half, w.half())
    # An entry no file holds, and tied to none, is named; strict=False leaves it and lists it.
    extra, c = torch.full((2,), -1.0), torch.zeros(5)
    many = {f"m{i}": torch.zeros(1) for i in range(7)}
    with pytest.raises(NotFoundError, match=r'no tensor "m0", "m1", "m2", "m3", "m4" and 2 more in .*, which into='):
        tensorsafe.load(path, into=many)
    with pytest.raises(NotFoundError, match=r"no tensor \"x\", \"y\" in .*t\.safetensors, which into= has entries for "
                                            r"\(strict=False leaves such entries as they are\)"):
        tensorsafe.load(path, into={"c": c, "x": extra, "y": torch.zeros(1)})
    out, rep = tensorsafe.load(path, into={"c": c, "x": extra}, strict=False, return_report=True)
    assert rep["missing"] == ["x"] and rep["tied"] == {} and list(out) == ["c"]
    assert torch.equal(c, torch.ones(5)) and torch.equal(extra, torch.full((2,), -1.0))
    # A tie satisfied by an entry the file holds; names= still means exactly those names.
    e = torch.zeros(5)
    assert tensorsafe.load(path, into={"c": e, "c_alias": e}, return_report=True)[1]["tied"] == {"c_alias": "c"}
    with pytest.raises(NotFoundError, match='no tensor "c_alias"'):
        tensorsafe.load(path, names=["c", "c_alias"], into={"c": e, "c_alias": e})
    # Entries that share some bytes but are not one tensor would be written twice at once.
    buf = torch.zeros(20)
    with pytest.raises(InvalidArgumentError, match=r"the buffers of tensors \"c\" and \"b\" overlap"):
        tensorsafe.load(path, into={"c": buf[0:5], "b": buf[3:15].view(3, 4)})


@pytest.mark.parametrize("ext", ["tsafe", "safetensors"])
def test_into_with_cast(tmp_path, ext, monkeypatch):
    from tensorsafe import _load_into

    path = str(tmp_path / f"c.{ext}")
    src = {f"w{i}": torch.randn(64, 100, generator=torch.Generator().manual_seed(i)) for i in range(5)}
    src["ids"] = torch.arange(10)
    save_file(src, path)
    # Without cast= a dtype that differs is refused, with the hint.
    half = {k: torch.zeros(v.shape, dtype=torch.bfloat16) for k, v in src.items() if k != "ids"}
    with pytest.raises(InvalidArgumentError, match=r"'w0' is f32 \[64, 100\].*bfloat16 \[64, 100\] \(cast=True"):
        tensorsafe.load(path, into=half)
    # Read a chunk at a time (two tensors here), each checked as it is read.
    monkeypatch.setattr(_load_into, "_COPY_CHUNK", 2 * 64 * 100 * 4)
    chunks = []
    monkeypatch.setattr(_load_into, "_copy_chunks", lambda *a: chunks.append(_copy_chunks(*a)) or chunks[-1])
    ids = torch.zeros(10, dtype=torch.int64)  # the same dtype: read in place
    before = {k: v.data_ptr() for k, v in half.items()}
    out, rep = tensorsafe.load(path, into={**half, "ids": ids}, cast=True, return_report=True)
    assert {k: v.data_ptr() for k, v in half.items()} == before and torch.equal(ids, src["ids"])
    for k, v in half.items():
        assert torch.equal(v, src[k].to(torch.bfloat16)), k
    assert rep["copied"] == {f"w{i}": "f32 -> bf16" for i in range(5)} and rep["tensors"] == 6
    assert [len(c) for c in chunks[0]] == [2, 2, 1]
    assert rep["bytes"] == sum(v.nbytes for v in src.values())
    assert rep["verification"] == ("verified 6 of 6 tensors (XXH3-64)" if ext == "tsafe"
                                   else "nothing to verify: safetensors stores no checksums")
    # NumPy destinations, widened; a shape that differs is still refused.
    arrays = {"w1": np.zeros((64, 100), np.float64), "ids": np.zeros(10, np.int32)}
    tensorsafe.load(path, into=arrays, cast=True, framework="np")
    assert np.array_equal(arrays["w1"], src["w1"].double().numpy()) and arrays["ids"].tolist() == list(range(10))
    with pytest.raises(InvalidArgumentError, match="cast= changes dtypes, not shapes"):
        tensorsafe.load(path, into={"w0": torch.zeros(100, 64, dtype=torch.bfloat16)}, cast=True)


def test_copy_chunks():
    assert _copy_chunks([], 10) == []
    assert _copy_chunks([(0, 4), (1, 6), (2, 1), (3, 30), (4, 0)], 10) == [[0, 1], [2], [3], [4]]


def test_cast_reads_a_damaged_tensor_as_damaged(tmp_path):
    path = str(tmp_path / "d.tsafe")
    save_file({"a": torch.ones(1000), "b": torch.ones(1000)}, path)
    with tensorsafe.open(path) as r:
        off = r.info("b")["offset"]
    with open(path, "r+b") as f:
        f.seek(off + 10)
        f.write(b"\x55")
    dest = {"a": torch.zeros(1000, dtype=torch.float16), "b": torch.zeros(1000, dtype=torch.float16)}
    with pytest.raises(CorruptionError, match='tensor "b"'):
        tensorsafe.load(path, into=dest, cast=True)


def test_names_and_slices(tmp_path):
    path = str(tmp_path / "n.safetensors")
    t = {"w": torch.arange(64 * 48, dtype=torch.float32).reshape(64, 48), "b": torch.arange(48.0)}
    save_file(t, path)
    got = tensorsafe.load(path, names=["b"])
    assert list(got) == ["b"] and torch.equal(got["b"], t["b"])
    with pytest.raises(NotFoundError):
        tensorsafe.load(path, names=["nope"])
    with pytest.raises(KeyError):
        tensorsafe.load(path, names=["nope"])
    # A predicate picks by name, over every shard of a checkpoint too, in file order.
    got, rep = tensorsafe.load(path, names=lambda n: n.startswith("w"), return_report=True)
    assert list(got) == ["w"] and torch.equal(got["w"], t["w"]) and rep["bytes"] == t["w"].nbytes
    assert tensorsafe.load(path, names=lambda n: False) == {}
    assert tensorsafe.load(path, names=[]) == {} and tensorsafe.load(path, into={}) == {}  # none, not all
    with pytest.raises(InvalidArgumentError, match="names= picks tensor 'w', which into= has no entry for"):
        tensorsafe.load(path, names=lambda n: True, into={"b": torch.zeros(48)})
    ck = {f"layer.{i}.{k}": torch.full((100,), float(i)) for i in range(6) for k in ("w", "b")}
    from tensorsafe.torch import save_sharded

    save_sharded(ck, str(tmp_path / "ck"), max_shard_size=1000)
    got = tensorsafe.load(str(tmp_path / "ck"), names=lambda n: n.endswith(".b"))
    assert sorted(got) == sorted(k for k in ck if k.endswith(".b"))
    assert all(torch.equal(v, ck[k]) for k, v in got.items())
    rows = tensorsafe.load(path, slice=(0, 1, 4))
    assert torch.equal(rows["w"], t["w"][16:32]) and torch.equal(rows["b"], t["b"])
    cols = tensorsafe.load(path, slice=(1, 2, 3))
    assert torch.equal(cols["w"], t["w"][:, 32:48])


@pytest.mark.parametrize("ext", ["tsafe", "safetensors"])
def test_pin_memory(tmp_path, monkeypatch, ext):
    """pin_memory=True: every tensor comes from the pinned allocator and is
    read into in place, verified. Without an accelerator the allocator is
    replaced by one that records what it made (the path is the same); with
    one, the tensors are pinned."""
    from tensorsafe import UnsupportedError
    from tensorsafe import _load

    t = _tensors()
    path = str(tmp_path / f"p.{ext}")
    save_file(t, path)
    if torch.cuda.is_available():
        got = tensorsafe.load(path, pin_memory=True)
        assert all(v.is_pinned() for v in got.values())
        _same(got, t)
        return
    with pytest.raises(UnsupportedError, match="pin_memory=True: torch cannot pin memory here"):
        tensorsafe.load(path, pin_memory=True)
    made = []

    def fake_pinned(shape, dtype):
        made.append(torch.empty(shape, dtype=dtype))
        return made[-1]

    monkeypatch.setattr(_load, "_pinned_empty", fake_pinned)
    got, rep = tensorsafe.load(path, pin_memory=True, return_report=True)
    _same(got, t)
    assert [v.data_ptr() for v in got.values()] == [m.data_ptr() for m in made] and len(made) == len(t)
    if ext == "tsafe":
        assert rep["verification"] == f"verified {len(t)} of {len(t)} tensors (XXH3-64)"
    kw = dict(names=lambda n: n.startswith("t1"), slice=(0, 1, 2))
    got = tensorsafe.load(path, pin_memory=True, **kw)
    assert set(got) == {"t1", "t10", "t11"}
    _same(got, tensorsafe.load(path, **kw))
    for bad in (dict(framework="np"), dict(into={}), dict(device="cuda")):
        with pytest.raises(InvalidArgumentError, match="pin_memory=True makes new torch tensors"):
            tensorsafe.load(path, pin_memory=True, **bad)


def test_pread_backend_reads_once_into_tensors(tmp_path):
    path = str(tmp_path / "p.tsafe")
    t = _tensors()
    save_file(t, path)
    got = load_file(path, backend="pread")
    _same(got, t)
    for v in got.values():
        v.add_(0) if v.is_floating_point() else None  # writable memory of its own


def test_loading_many_tensors_defers_collections_and_keeps_the_gc_state(tmp_path):
    """A load makes an item and a tensor per tensor with the cyclic GC
    paused (each 700 new containers would start a collection, one of them
    perhaps a full one owed since torch's import), then leaves the GC as it
    found it, disabled by the caller or not. What the pauses defer is one
    young collection after each (without them: 21 here); the bound leaves
    room for one or two started by another thread."""
    import gc

    path = str(tmp_path / "many.tsafe")
    t = {f"w{i}": torch.full((4,), i, dtype=torch.int32) for i in range(5000)}
    save_file(t, path)
    starts = []

    def count(phase, info):
        if phase == "start":
            starts.append(info["generation"])

    gc.callbacks.append(count)
    try:
        gc.collect()
        starts.clear()
        got = tensorsafe.load(path)
        assert len(starts) <= 4 and max(starts, default=0) < 2, starts
        assert gc.isenabled()
        _same(got, t)
        gc.disable()
        try:
            tensorsafe.load(path)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(count)


@pytest.mark.parametrize("ext", ["tsafe", "safetensors"])
def test_every_torch_dtype_in_a_storage_of_its_own(tmp_path, ext):
    """Each loaded tensor (made from the native DLPack export, or sliced from
    the arena for dtypes DLPack lacks) has the file's dtype, shape and bytes,
    is writable, outlives the dict, and is a storage of only its own bytes:
    torch.save of one tensor writes that tensor, not the whole arena."""
    import gc
    import io

    from tensorsafe import _dtypes

    table = _dtypes.torch_tables()[0]
    want = {}
    for name, tdtype in table.items():
        if ext == "safetensors" and name == "c128":
            continue
        raw = torch.from_numpy(RNG.integers(0, 256, size=(3, 4 * tdtype.itemsize), dtype=np.uint8))
        want[name] = (raw & 1 if tdtype == torch.bool else raw).view(tdtype)
    want["zero"] = torch.zeros(0, 5, dtype=torch.float32)
    want["big"] = torch.arange(1 << 20, dtype=torch.float32)
    path = str(tmp_path / f"d.{ext}")
    save_file(want, path)
    for got in (tensorsafe.load(path), load_file(path, backend="pread")):
        _same(got, want)
        for k, t in got.items():
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), k
        buf = io.BytesIO()
        torch.save(got["u8"], buf)
        assert len(buf.getvalue()) < 4096
        kept = got["big"]
        kept[0] = -1.0
        del got
        gc.collect()
        assert kept[0].item() == -1.0 and kept[-1].item() == float((1 << 20) - 1)


@pytest.mark.parametrize("ext", ["tsafe", "safetensors"])
def test_pread_get_tensor_holds_one_copy(tmp_path, ext):
    """safe_open(backend="pread").get_tensor reads a tensor once, into the
    tensor: the process's peak memory grows by one tensor (64 MiB), not two
    (a reader's buffer, then a copy of it). Every dtype's bytes are checked
    by get_tensor in the same mode."""
    import subprocess
    import sys

    path = tmp_path / f"w.{ext}"
    save_file({"w": torch.arange(16 << 20, dtype=torch.float32)}, str(path))
    # VmHWM, the peak of this process image (ru_maxrss keeps the forking parent's).
    code = (
        "import sys, torch, tensorsafe as ts\n"
        "def hwm():\n"
        "    return int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) * 1024\n"
        "with ts.safe_open(sys.argv[1], 'pt', backend='pread') as f:\n"
        "    before = hwm()\n"
        "    t = f.get_tensor('w')\n"
        "    grew = (hwm() - before) / t.nbytes\n"
        "assert torch.equal(t, torch.arange(16 << 20, dtype=torch.float32))\n"
        "print(grew)\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    grew = float(out.stdout.strip())
    assert 0.9 < grew < 1.3, f"peak memory grew by {grew:.2f} tensors"
    small = _tensors()
    save_file(small, str(tmp_path / f"s.{ext}"))
    with tensorsafe.safe_open(str(tmp_path / f"s.{ext}"), "pt", backend="pread") as f:
        _same({k: f.get_tensor(k) for k in f.keys()}, small)
        with pytest.raises(NotFoundError, match="nope"):
            f.get_tensor("nope")


def test_other_formats_are_refused_naming_what_reads_them(tmp_path):
    """A format whose tensors are not stored as they load is refused, and
    both readers the message names read it (the message once named
    tensorsafe.open, which opens .tsafe files only)."""
    path = str(tmp_path / "x.npz")
    np.savez(path, a=np.arange(3))
    with pytest.raises(UnsupportedError, match=r"not npz; tensorsafe.safe_open or tensorsafe.read reads it"):
        tensorsafe.load(path)
    with tensorsafe.safe_open(path, "np") as f:
        assert np.array_equal(f.get_tensor("a"), np.arange(3))
    assert np.array_equal(tensorsafe.read(path)[0]["a"], np.arange(3))


def test_gguf_quantized_tensors_load_as_their_blocks(tmp_path):
    """docs/LOAD.md: a block-quantized GGUF tensor loads as the flat u8 of
    its blocks, which tensorsafe.gguf.dequantize turns into gguf-py's
    values."""
    gguf = pytest.importorskip("gguf")
    from gguf.quants import dequantize

    golden = os.path.join(os.path.dirname(__file__), "..", "golden", "gguf", "quant.gguf")
    out = tensorsafe.load(golden, framework="np")
    for name, kind, shape in (("q.q4_0", "Q4_0", (2, 64)), ("q.q4_k", "Q4_K", (1, 256))):
        blocks = out[name]
        assert blocks.dtype == np.uint8 and blocks.ndim == 1
        values = tensorsafe.gguf.dequantize(blocks, kind, shape)
        assert values.shape == shape
        assert np.array_equal(values, dequantize(blocks.reshape(shape[0], -1), gguf.GGMLQuantizationType[kind]))
    assert out["t.f32"].dtype == np.float32
