"""tensorsafe.torch: save/load, and shared tensors as safetensors handles them."""

import pytest

torch = pytest.importorskip("torch")
import tensorsafe as ts  # noqa: E402
import tensorsafe.torch as tst  # noqa: E402


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.norm = torch.nn.LayerNorm(4)


@pytest.mark.parametrize("ext", ["safetensors", "tsafe"])
def test_save_model_load_model(tmp_path, ext):
    torch.manual_seed(0)
    m = Tied()
    p = tmp_path / f"m.{ext}"
    tst.save_model(m, p)
    with ts.safe_open(p, "pt") as f:
        assert sorted(f.keys()) == ["embed.weight", "norm.bias", "norm.weight"]
        assert f.metadata() == {"head.weight": "embed.weight"}
    m2 = Tied()
    missing, unexpected = tst.load_model(m2, p)
    assert missing == [] and unexpected == []
    assert torch.equal(m2.head.weight, m.embed.weight)
    assert m2.head.weight.data_ptr() == m2.embed.weight.data_ptr()  # still tied


def test_save_file_refuses_shared(tmp_path):
    m = Tied()
    with pytest.raises(RuntimeError, match="share memory"):
        tst.save_file(m.state_dict(), tmp_path / "x.safetensors")
    # Two non-overlapping halves of one storage are not shared.
    base = torch.arange(10.0)
    tst.save_file({"lo": base[:5], "hi": base[5:]}, tmp_path / "halves.safetensors")
    assert tst.load_file(tmp_path / "halves.safetensors")["hi"].tolist() == [5, 6, 7, 8, 9]
    # A partial overlap (different starts) is shared too, and nothing is written.
    with pytest.raises(RuntimeError, match=r"share memory.*\['a', 'b'\]"):
        tst.save_file({"a": base[:6], "b": base[4:], "c": torch.ones(2)}, tmp_path / "partial.tsafe")
    assert not (tmp_path / "partial.tsafe").exists()


def test_overlap_check_is_on_the_entries_addresses(tmp_path):
    """write_file's on_overlap runs when dense entries' bytes overlap, and
    only then (spans that touch are apart); the file is not written when it
    raises."""
    from tensorsafe import _arrays, _native

    base = torch.arange(12, dtype=torch.float32)
    calls = []

    def write(d, name):
        entries, all_cpu = _arrays.torch_entries(d)
        assert all_cpu
        _native.write_file(str(tmp_path / name), "tsafe", entries, "", False, False, 64, lambda: calls.append(name))

    write({"x": base[:4], "y": base[4:8], "e": base[8:8]}, "touch.tsafe")
    write({"x": base[:5], "y": base[4:8]}, "overlap.tsafe")
    write({"x": base[2:3], "y": base}, "inside.tsafe")
    assert calls == ["overlap.tsafe", "inside.tsafe"]

    def refuse():
        raise RuntimeError("refused")

    entries, _ = _arrays.torch_entries({"x": base[:5], "y": base[4:8]})
    with pytest.raises(RuntimeError, match="refused"):
        _native.write_file(str(tmp_path / "no.tsafe"), "tsafe", entries, "", False, False, 64, refuse)
    assert not (tmp_path / "no.tsafe").exists()


def test_save_file_refuses_non_contiguous_and_sparse(tmp_path):
    with pytest.raises(ValueError, match="contiguous"):
        tst.save_file({"t": torch.zeros(3, 4).T}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="sparse"):
        tst.save_file({"s": torch.zeros(3, 3).to_sparse()}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError):
        tst.save_file([torch.zeros(1)], tmp_path / "x.safetensors")


def test_load_model_strict(tmp_path):
    m = torch.nn.Linear(3, 2)
    p = tmp_path / "m.safetensors"
    tst.save_file({"weight": torch.zeros(2, 3), "extra": torch.zeros(1)}, p)
    with pytest.raises(RuntimeError, match='Missing key.*"bias"'):
        tst.load_model(m, p)
    missing, unexpected = tst.load_model(m, p, strict=False)
    assert missing == ["bias"] and unexpected == ["extra"]
    assert torch.equal(m.weight, torch.zeros(2, 3))


class Normed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.bn = torch.nn.BatchNorm1d(4)  # its own _load_from_state_dict


@pytest.mark.parametrize("ext", ["safetensors", "tsafe"])
def test_load_model_reads_into_the_model_or_leaves_it_to_load_state_dict(tmp_path, ext, monkeypatch):
    """load_model reads the file straight into the model's tensors
    (load(into=)), planning the file once and taking the model's state dict
    once; where load_state_dict would do more than copy, it is
    load_state_dict's, and the results are the same either way."""
    from tensorsafe import _load_into, _native

    calls, plans = [], []
    real_fill, real_plan = _load_into.fill_into, _native.plan_load
    monkeypatch.setattr(_load_into, "fill_into", lambda *a, **k: calls.append(a[0].files[0][0]) or real_fill(*a, **k))
    monkeypatch.setattr(_native, "plan_load", lambda *a, **k: plans.append(a[0]) or real_plan(*a, **k))
    torch.manual_seed(1)
    m = Tied()
    p = tmp_path / f"m.{ext}"
    tst.save_model(m, p)

    def refuse(*a, **k):
        raise AssertionError("load_state_dict was called")

    m2 = Tied()
    m2.load_state_dict = refuse
    states = []
    real_state = m2.state_dict
    m2.state_dict = lambda *a, **k: states.append(1) or real_state(*a, **k)
    assert tst.load_model(m2, p) == ([], [])
    assert calls == [str(p)] and plans == [[str(p)]] and len(states) == 1
    assert torch.equal(m2.embed.weight, m.embed.weight) and torch.equal(m2.norm.bias, m.norm.bias)
    assert m2.head.weight.data_ptr() == m2.embed.weight.data_ptr()
    # Another dtype is cast, as load_state_dict's copy_ casts.
    half = Tied().to(torch.bfloat16)
    half.load_state_dict = refuse
    tst.load_model(half, p)
    assert torch.equal(half.embed.weight, m.embed.weight.to(torch.bfloat16))
    # Missing and unexpected names as load_state_dict gives them (backend="pread" takes its path).
    tst.save_file({"weight": torch.ones(2, 3), "extra": torch.zeros(1)}, tmp_path / "lin.safetensors")
    got = [tst.load_model(torch.nn.Linear(3, 2), tmp_path / "lin.safetensors", strict=False, backend=b)
           for b in ("mmap", "pread")]
    assert got[0] == got[1] == (["bias"], ["extra"])
    # BatchNorm's own _load_from_state_dict, a hook, a shape that differs, a meta model: load_state_dict's.
    n = Normed()
    with torch.no_grad():
        n.bn.running_mean += 3
    tst.save_model(n, tmp_path / "n.safetensors")
    calls.clear()
    n2 = Normed()
    tst.load_model(n2, tmp_path / "n.safetensors")
    assert calls == [] and torch.equal(n2.bn.running_mean, n.bn.running_mean)
    hooked = Tied()
    seen = []
    hooked.norm.register_load_state_dict_post_hook(lambda mod, keys: seen.append(mod))
    tst.load_model(hooked, p)
    assert calls == [] and seen == [hooked.norm] and torch.equal(hooked.embed.weight, m.embed.weight)
    wide = torch.nn.Linear(3, 3)
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        tst.load_model(wide, tmp_path / "lin.safetensors", strict=False)
    assert calls == []


def test_save_model_force_contiguous(tmp_path):
    m = torch.nn.Linear(3, 2)
    with torch.no_grad():
        m.weight = torch.nn.Parameter(torch.randn(3, 2).T)
    with pytest.raises(ValueError, match="force_contiguous"):
        tst.save_model(m, tmp_path / "m.safetensors", force_contiguous=False)
    tst.save_model(m, tmp_path / "m.safetensors")
    m2 = torch.nn.Linear(3, 2)
    tst.load_model(m2, tmp_path / "m.safetensors")
    assert torch.equal(m2.weight, m.weight)


def test_requires_grad_and_bytes(tmp_path):
    w = torch.randn(4, 4, requires_grad=True)
    data = tst.save({"w": w})
    back = tst.load(data)["w"]
    assert torch.equal(back, w.detach())
    back.mul_(2)  # loaded tensors are writable


def test_load_file_device_and_backend(tmp_path):
    p = tmp_path / "x.tsafe"
    tst.save_file({"a": torch.arange(5)}, p)
    for backend in ("mmap", "pread"):
        t = tst.load_file(p, device="cpu", backend=backend)["a"]
        assert t.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ts.NotFoundError):
        with ts.safe_open(p, "pt") as f:
            f.get_tensor("b")


def test_misaligned_safetensors_offsets(tmp_path):
    """safetensors packs tensors without alignment: a u8 tensor of odd size
    leaves the next tensor misaligned; it is copied, not viewed."""
    p = tmp_path / "x.safetensors"
    tst.save_file({"a": torch.ones(3, dtype=torch.uint8), "b": torch.arange(4, dtype=torch.float32)}, p)
    with ts.safe_open(p, "pt") as f:
        assert f.get_tensor("b").tolist() == [0, 1, 2, 3]
        assert f.get_tensor("a").tolist() == [1, 1, 1]


def test_load_file_tensors_are_private_copy_on_write(tmp_path):
    """load_file's tensors view a private mapping of the file (NumPy views
    made natively, then torch.from_numpy; ml_dtypes' bf16 through an int
    view): writable, and writes never reach the file."""
    p = tmp_path / "x.tsafe"
    tst.save_file({"f": torch.arange(6.0), "b": torch.arange(4.0).to(torch.bfloat16),
                   "e": torch.zeros(0, 3)}, p)
    d = tst.load_file(p)
    assert d["b"].dtype == torch.bfloat16 and d["e"].shape == (0, 3)
    with ts.open(p) as r:
        # Zero-copy: the tensor's data sits at its file offset in one mapping.
        assert d["b"].data_ptr() - d["f"].data_ptr() == r.tensor("b").offset - r.tensor("f").offset
    d["f"][0] = 100
    d["b"][1] = 7
    again = tst.load_file(p)
    assert again["f"].tolist() == [0, 1, 2, 3, 4, 5] and again["b"].tolist() == [0, 1, 2, 3]
    ts.verify(p)  # raises CorruptionError if a write had reached the file


def test_storage_ptr_and_size():
    """safetensors.torch's public storage helpers, which transformers'
    pytorch_utils imports: the start and byte size of the whole storage, the
    same for every view of it."""
    from tensorsafe.torch import storage_ptr, storage_size

    base = torch.arange(10, dtype=torch.float32)
    view = base[3:7]
    assert storage_ptr(view) == storage_ptr(base) == base.data_ptr() != view.data_ptr()
    assert storage_size(view) == storage_size(base) == 40
    # A tensor set on the first 16 bytes of the storage: same start, less size.
    head = torch.empty(0, dtype=torch.float32).set_(base.untyped_storage()[:16])
    assert storage_ptr(head) == storage_ptr(base) and storage_size(head) == 16
    meta = torch.zeros((2, 3), device="meta")
    assert storage_ptr(meta) == 0 and storage_size(meta) == 24
    assert storage_ptr(torch.empty(0)) == 0 and storage_size(torch.empty(0)) == 0
    sparse = torch.zeros(2, 2).to_sparse()
    assert storage_ptr(sparse) == 0  # no storage: 0, as safetensors.torch gives
    with pytest.raises(NotImplementedError):
        storage_size(sparse)


def test_storage_helpers_match_safetensors():
    st_torch = pytest.importorskip("safetensors.torch")
    base = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    for t in (base, base[1:], base.T, base[:, 1], torch.zeros(5, device="meta"), torch.empty(0, dtype=torch.int8)):
        assert tst.storage_ptr(t) == st_torch.storage_ptr(t)
        assert tst.storage_size(t) == st_torch.storage_size(t)
    sparse = base.float().to_sparse()
    with pytest.warns(UserWarning):  # the peer's fallback goes through TypedStorage
        assert tst.storage_ptr(sparse) == st_torch.storage_ptr(sparse) == 0


def _shared_cases():
    """(state dict, comment) pairs: views of one storage in every relation."""
    a = torch.arange(16, dtype=torch.float32)
    m = torch.zeros((3, 4), dtype=torch.float16)
    meta = torch.zeros((2, 2), device="meta")
    return [
        ({"a": a, "head": a[:4]}, "a view inside a complete tensor"),
        ({"lo": a[:8], "hi": a[8:]}, "two halves: one storage, no overlap"),
        ({"lo": a[:9], "hi": a[8:]}, "two halves overlapping by one element"),
        ({"x": a[:8], "y": a[8:], "z": a[:2]}, "overlap in one half only"),
        ({"t": a, "tied": a, "other": torch.ones(3)}, "the same tensor twice"),
        ({"m": m, "col": m[:, 1], "row": m[2]}, "2-D views, strided"),
        ({"meta": meta, "meta_view": meta[:1], "e": torch.empty(0)}, "no memory: left out"),
        ({"b": torch.zeros(2, dtype=torch.bool), "c": torch.zeros(3, dtype=torch.complex64)}, "separate"),
    ]


@pytest.mark.parametrize("case", range(len(_shared_cases())))
def test_private_sharing_helpers_match_safetensors(case):
    """safetensors.torch's private helpers, which conversion scripts import by
    name, give the peer's results on views of one storage."""
    st_torch = pytest.importorskip("safetensors.torch")
    sd, comment = _shared_cases()[case]
    assert tst._find_shared_tensors(sd) == st_torch._find_shared_tensors(sd), comment
    for name, t in sd.items():
        assert tst._is_complete(t) == st_torch._is_complete(t), (comment, name)
        if t.dim() <= 1 and t.device.type != "meta":
            assert tst._end_ptr(t) == st_torch._end_ptr(t), (comment, name)
    for kwargs in ({}, {"preferred_names": ["tied"]}, {"discard_names": ["t", "a"]}):
        try:
            theirs = st_torch._remove_duplicate_names(sd, **kwargs)
        except RuntimeError:
            with pytest.raises(RuntimeError, match="none of them covers the whole storage"):
                tst._remove_duplicate_names(sd, **kwargs)
            continue
        assert tst._remove_duplicate_names(sd, **kwargs) == theirs, (comment, kwargs)


def test_private_sharing_helpers_values():
    """The same helpers against fixed answers, where safetensors has none
    (2-D strided end pointers) or differs (a tensor overlapping an earlier
    one but not its neighbour stays in the group)."""
    a = torch.arange(100, dtype=torch.float32)
    groups = tst._find_shared_tensors({"all": a, "b": a[10:20], "c": a[30:40], "other": torch.ones(2)})
    assert groups == [{"all", "b", "c"}, {"other"}]
    assert tst._remove_duplicate_names({"all": a, "b": a[10:20], "c": a[30:40]}) == {"all": ["b", "c"]}
    m = torch.zeros((3, 4), dtype=torch.float64)
    col = m[:, 1]  # elements at 1, 5, 9
    assert tst._end_ptr(col) - m.data_ptr() == 10 * 8
    assert tst._end_ptr(m.T) - m.data_ptr() == 12 * 8
    assert tst._end_ptr(m[:0]) == m[:0].data_ptr()  # torch gives 0 for an empty view
    assert tst._is_complete(m) and not tst._is_complete(m[1:]) and not tst._is_complete(m[::2])
    assert tst._is_complete(m.T)  # a permutation covers its storage
    # A lone view that does not cover its storage has no name to keep.
    with pytest.raises(RuntimeError, match=r"\['half'\] share memory"):
        tst._remove_duplicate_names({"half": a[:50]})
    keep = tst._remove_duplicate_names({"w": a, "tied": a, "v": a[:3]}, preferred_names=["tied"], discard_names=["w"])
    assert keep == {"tied": ["v", "w"]}


def test_save_model_refuses_shared_views_without_a_complete_one(tmp_path):
    """save_model keeps one name per shared group; when no tensor of the
    group covers its storage there is none to keep: refused, nothing written."""
    m = torch.nn.Module()
    base = torch.zeros(10)
    m.a = torch.nn.Parameter(base[:6])
    m.b = torch.nn.Parameter(base[4:])
    with pytest.raises(RuntimeError, match=r"tensors \['a', 'b'\] share memory .* no name to keep"):
        tst.save_model(m, tmp_path / "m.safetensors")
    assert list(tmp_path.iterdir()) == []
