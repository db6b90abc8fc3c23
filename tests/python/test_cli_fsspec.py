"""The tensorsafe console script on URLs that only fsspec serves: it runs
the CLI in its own Python process, where the fsspec handler is registered.
fsspec's local:// filesystem stands in for gs:// or hf:// (no network here):
the bytes go through fsspec's calls, as they would for those."""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tensorsafe.numpy as tsn
from tensorsafe._cli import _needs_fsspec

pytest.importorskip("fsspec")
EXE = shutil.which("tensorsafe", path=os.path.dirname(sys.executable))


def cli(*args):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_which_arguments_go_through_fsspec():
    assert _needs_fsspec(["ls", "hf://org/model/model.safetensors"])
    assert _needs_fsspec(["convert", "x.safetensors", "--dtype=bf16", "gs://b/x.tsafe"])
    assert _needs_fsspec(["dataset", "ls", "--url=az://c/ds/"])
    assert not _needs_fsspec(["ls", "s3://b/x.tsafe", "https://h/x.safetensors", "file:///x.tsafe", "x.tsafe"])
    assert not _needs_fsspec(["cat", "x.tsafe", "not-a-url:"])


def test_ls_cat_verify_convert_at_an_fsspec_url(tmp_path):
    rng = np.random.default_rng(7)
    d = {"emb": rng.standard_normal((8, 4)).astype(np.float32), "ids": np.arange(5, dtype=np.int64)}
    local = tmp_path / "m.safetensors"
    tsn.save_file(d, local)
    url = f"local://{local}"
    ls = cli("ls", url)
    assert ls.returncode == 0 and "emb" in ls.stdout and "[8, 4]" in ls.stdout, ls.stderr
    cat = cli("cat", url, "ids")
    assert cat.returncode == 0 and "[0, 1, 2, 3, 4]" in cat.stdout, cat.stdout + cat.stderr
    conv = cli("convert", url, f"local://{tmp_path / 'm.tsafe'}")
    assert conv.returncode == 0 and f"converted {url} (safetensors) to local://" in conv.stdout, conv.stderr
    assert cli("verify", f"local://{tmp_path / 'm.tsafe'}").returncode == 0
    # The same bytes as the binary's conversion of the local file.
    ref = subprocess.run([EXE, "convert", local, tmp_path / "ref.tsafe"], capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    assert (tmp_path / "m.tsafe").read_bytes() == (tmp_path / "ref.tsafe").read_bytes()
    # Errors name the URL, with the binary's exit codes (3: not found, 1: corruption).
    missing = cli("ls", f"local://{tmp_path / 'none.safetensors'}")
    assert missing.returncode == 3 and "none.safetensors" in missing.stderr, missing.stderr
    bad = tmp_path / "bad.tsafe"
    raw = bytearray((tmp_path / "m.tsafe").read_bytes())
    raw[200] ^= 1  # in the data
    bad.write_bytes(bytes(raw))
    v = cli("verify", f"local://{bad}")
    assert v.returncode == 1 and f"local://{bad}" in v.stdout + v.stderr, v.stdout + v.stderr


def test_a_sharded_checkpoint_by_its_folder_url(tmp_path):
    d = {f"layer.{i}.w": np.full((100,), i, np.float32) for i in range(6)}
    tsn.save_sharded(d, tmp_path / "ck", max_shard_size=1000)
    assert len(list((tmp_path / "ck").glob("*.safetensors"))) > 1
    r = cli("info", f"local://{tmp_path / 'ck'}/")
    assert r.returncode == 0 and "sharded (3 shards)" in r.stdout, r.stdout + r.stderr
    assert re.search(r"^tensors:\s+6$", r.stdout, re.M), r.stdout
    out = tmp_path / "one.tsafe"
    assert cli("convert", f"local://{tmp_path / 'ck'}/", out).returncode == 0
    got = tsn.load_file(out)
    assert sorted(got) == sorted(d) and all(np.array_equal(got[k], v) for k, v in d.items())
