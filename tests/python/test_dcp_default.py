"""Checkpoints of DCP's own back-end (FileSystemWriter: pickled `.metadata`,
`.distcp` files) through `tensorsafe dcp info|ls|verify|consolidate`, read
without pickle (docs/DCP.md, "DCP's own checkpoints")."""

import os
import pickle
import re
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is unavailable", allow_module_level=True)

import tensorsafe  # noqa: E402
from tensorsafe.dcp import _default, _tool  # noqa: E402
from test_dcp import dcp_jobs, job  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader  # noqa: E402


def tool(*args):
    return subprocess.run([sys.executable, "-m", "tensorsafe.dcp", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The save job's state (DTensors sharded over 2 ranks, replicated and
    plain values) written by DCP's own FileSystemWriter."""
    path = tmp_path_factory.mktemp("dcpdefault") / "ckpt"
    job("savedcp", 2, path)
    return path


def copy_of(saved, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(saved, dst)
    return dst


def reference_metadata(path):
    # The test's reference only: torch's own reader, which unpickles.
    return FileSystemReader(str(path)).read_metadata()


def test_metadata_equals_torchs_own_reading(saved):
    assert sorted(n for n in os.listdir(saved) if n.endswith(".distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    got = _default.to_metadata(_default.read_document(str(saved)))
    want = reference_metadata(saved)
    assert got.state_dict_metadata == want.state_dict_metadata
    assert got.storage_data == want.storage_data
    # MetadataIndex compares without its index hint: compare it too.
    assert [k.index for k in got.storage_data] == [k.index for k in want.storage_data]
    assert got.planner_data == want.planner_data
    assert got.version == want.version == "1.0.0"
    # The path as text (the pickle holds a PosixPath); load_id is what
    # FileSystemReader sets on reading.
    g, w = got.storage_meta, want.storage_meta
    assert (g.checkpoint_id, g.save_id, g.modules) == (str(w.checkpoint_id), w.save_id, w.modules)


def test_ls_info_verify(saved):
    r = tool("ls", saved)
    assert r.returncode == 0, r.stderr
    assert "big  float32  [301, 64]  2 chunks" in r.stdout and "dt1  bfloat16  [6, 10]  2 chunks" in r.stdout
    assert "values.step  bytes" in r.stdout and "scalar  float64  []  1 chunk" in r.stdout
    r = tool("info", saved)
    assert r.returncode == 0 and "DCP's own format" in r.stdout and "files: 2" in r.stdout, r.stdout + r.stderr
    r = tool("verify", saved)
    n = len(reference_metadata(saved).state_dict_metadata)
    assert r.returncode == 0 and f"{n} of {n} items verified" in r.stdout, r.stdout + r.stderr


def test_a_reader_that_leaves_gets_no_traceback(saved):
    # `true` exits before the tool (which imports torch) writes a line.
    r = subprocess.run(f"{sys.executable} -m tensorsafe.dcp ls {saved} | true", shell=True, capture_output=True,
                       text=True)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_consolidate_equals_the_saved_state_and_torchs_converter(saved, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    r = tool("consolidate", saved, tmp_path / "full.safetensors")
    assert r.returncode == 0, r.stderr
    got = st.load_file(str(tmp_path / "full.safetensors"))
    want = dcp_jobs.expected()
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
    dcp_to_torch_save(str(saved), str(tmp_path / "torch.pt"))  # DCP's own converter, as a second reference
    ref = torch.load(tmp_path / "torch.pt", weights_only=False)
    assert all(torch.equal(got[k], ref[k]) for k in want)
    r = tool("consolidate", saved, tmp_path / "full.tsafe")
    assert r.returncode == 0, r.stderr
    with tensorsafe.open(tmp_path / "full.tsafe") as f:
        assert all(torch.equal(f.get(k, "pt"), v) for k, v in want.items())


def test_no_pickle_runs(saved, tmp_path, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("pickle ran")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert _tool.main(["verify", str(saved)]) == 0
    assert _tool.main(["consolidate", str(saved), str(tmp_path / "out.tsafe")]) == 0
    assert _tool.main(["ls", str(saved)]) == 0


class Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_metadata_that_would_run_code_is_refused(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    marker = tmp_path / "ran"
    md = reference_metadata(saved)
    md.planner_data = {"x": Exploit(marker)}
    (path / ".metadata").write_bytes(pickle.dumps(md))
    for cmd in ("ls", "verify", "info"):
        r = tool(cmd, path)
        assert r.returncode == 3, r.stdout + r.stderr
        assert "global posix.system is not allowed" in r.stderr and ".metadata" in r.stderr, r.stderr
    assert not marker.exists()


def test_a_checkpoint_pickle_still_refuses_dcp_classes(tmp_path):
    md = reference_metadata_cls = __import__("torch.distributed.checkpoint.metadata", fromlist=["x"])
    torch.save({"m": md.BytesStorageMetadata(), "t": torch.ones(2)}, tmp_path / "x.pt")
    with pytest.raises(tensorsafe.UnsupportedError, match="BytesStorageMetadata is not allowed"):
        tensorsafe.read(tmp_path / "x.pt")
    del reference_metadata_cls


def rewrite(saved, tmp_path, change):
    path = copy_of(saved, tmp_path)
    md = reference_metadata(saved)
    change(md)
    (path / ".metadata").write_bytes(pickle.dumps(md))
    return path


@pytest.mark.parametrize("case, message", [
    ("truncated", "FRAME (0x95): a frame of "),
    ("escape", "relative_path \"../__0_0.distcp\" is not a path inside the checkpoint"),
    ("chunk", "of size 301 passes the tensor's 301 along dimension 0"),
    ("field", "a TensorStorageMetadata has no field chunks"),
])
def test_damaged_metadata_is_named(saved, tmp_path, case, message):
    if case == "truncated":
        path = copy_of(saved, tmp_path)
        data = (path / ".metadata").read_bytes()
        (path / ".metadata").write_bytes(data[:len(data) // 2])
    elif case == "escape":
        def change(md):
            k = next(iter(md.storage_data))
            md.storage_data[k].relative_path = "../" + md.storage_data[k].relative_path
        path = rewrite(saved, tmp_path, change)
    elif case == "chunk":
        def change(md):
            c = md.state_dict_metadata["big"].chunks[1]
            c.offsets = torch.Size([1, 0]) if c.offsets[0] == 0 else torch.Size([c.offsets[0] + 1, 0])
            c.sizes = torch.Size([301, 64])
        path = rewrite(saved, tmp_path, change)
    else:
        path = rewrite(saved, tmp_path, lambda md: delattr(md.state_dict_metadata["big"], "chunks"))
    with pytest.raises(tensorsafe.CorruptionError, match=re.escape(message)):
        _default.read_document(str(path))
    r = tool("ls", path)
    assert r.returncode == 3 and message in r.stderr and ".metadata" in r.stderr, r.stderr


def big_chunk(path):
    doc = _default.read_document(str(path))
    return next(s for s in doc["storage"] if s["fqn"] == "big")


def test_a_flipped_byte_in_a_distcp_file_is_caught(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    s = big_chunk(path)
    f = path / s["relative_path"]
    data = bytearray(f.read_bytes())
    data[s["file_offset"] + s["length"] // 2] ^= 0x40  # inside the tensor's data member
    f.write_bytes(bytes(data))
    r = tool("verify", path)
    where = f"{s['relative_path']}: item \"big\" at bytes [{s['file_offset']}, {s['file_offset'] + s['length']})"
    assert r.returncode == 1 and "BAD" in r.stdout and where in r.stdout and "CRC-32 mismatch" in r.stdout, r.stdout
    r = tool("consolidate", path, tmp_path / "out.safetensors")
    assert r.returncode == 1 and "CRC-32" in r.stderr, r.stderr
    assert not (tmp_path / "out.safetensors").exists()
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_a_missing_or_short_distcp_file_is_named(saved, tmp_path):
    path = copy_of(saved, tmp_path)
    s = big_chunk(path)
    f = path / s["relative_path"]
    f.write_bytes(f.read_bytes()[:s["file_offset"] + 10])
    r = tool("verify", path)
    assert r.returncode == 1 and f"item \"big\" at bytes [{s['file_offset']}," in r.stdout, r.stdout
    assert "the file has " in r.stdout
    os.remove(f)
    r = tool("verify", path)
    assert r.returncode == 1 and s["relative_path"] in r.stdout, r.stdout


def test_transforms_are_refused_by_name(saved, tmp_path):
    def change(md):
        for info in md.storage_data.values():
            info.transform_descriptors = ["zstd"]
    path = rewrite(saved, tmp_path, change)
    r = tool("consolidate", path, tmp_path / "out.tsafe")
    assert r.returncode == 1 and "transforms ['zstd']" in r.stderr, r.stderr
