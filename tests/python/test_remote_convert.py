"""Converting tensor files and checkpoints at URLs into local files
(docs/REMOTE.md), against moto_server: the bytes equal those of the same
conversion from the local copy, each object byte is fetched once, and the
fetched bytes wait in a scratch file beside the output, not in memory."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn
from tensorsafe import _native

pytest.importorskip("boto3")

from moto_s3 import MOTO, moto, s3, upload, upload_dir  # noqa: E402,F401

pytestmark = pytest.mark.skipif(MOTO is None, reason="moto_server (moto[server]) is not installed")


def tensors(n, rows):
    out = {}
    for i in range(n):
        a = np.full((rows, 1024), i, np.float32)
        a[i % rows, 3] = -i
        out[f"w{i}"] = a
    return out


@pytest.mark.parametrize("src,dst", [("safetensors", "tsafe"), ("tsafe", "safetensors"), ("gguf", "safetensors"),
                                     ("safetensors", "gguf")])
def test_a_file_at_a_url_converts_to_the_bytes_of_the_local_conversion(s3, tmp_path, src, dst):
    local = tmp_path / f"m.{src}"
    ts.write(str(local), tensors(3, 640), format=src)
    url = upload(s3, local, f"convert/{src}-{dst}/m.{src}")
    out = tmp_path / "out"
    out.mkdir()
    before = _native.remote_bytes()
    ts.convert(url, out / f"from-url.{dst}")
    fetched = _native.remote_bytes() - before
    ts.convert(str(local), out / f"from-file.{dst}")
    assert (out / f"from-url.{dst}").read_bytes() == (out / f"from-file.{dst}").read_bytes()
    # The data once, plus the header and the object's end (open and sniff).
    assert local.stat().st_size <= fetched <= local.stat().st_size + (3 << 20), fetched
    assert sorted(os.listdir(out)) == [f"from-file.{dst}", f"from-url.{dst}"]  # no scratch file left


def test_a_checkpoint_at_a_url_converts_into_one_file(s3, tmp_path):
    want = tensors(6, 1280)
    tsn.save_sharded(want, str(tmp_path / "ck"), max_shard_size=11_000_000)
    url = upload_dir(s3, tmp_path / "ck", "convert/ck") + "/"
    ts.convert(url, tmp_path / "from-url.tsafe")
    ts.convert(str(tmp_path / "ck"), tmp_path / "from-dir.tsafe")
    assert (tmp_path / "from-url.tsafe").read_bytes() == (tmp_path / "from-dir.tsafe").read_bytes()
    assert sorted(p for p in os.listdir(tmp_path) if not p.startswith("from-")) == ["ck"]


def test_converting_a_url_does_not_hold_the_data_in_memory(s3, tmp_path):
    """A 192 MiB file converts in a process allowed 96 MiB more private
    memory (RLIMIT_DATA) than it had before: the fetched bytes sit in a
    file mapping, which that limit does not count. Fetched into fresh
    memory, as before, the conversion fails for want of memory."""
    local = tmp_path / "big.safetensors"
    tsn.save_file(tensors(48, 1024), str(local))  # 48 x 4 MiB
    url = upload(s3, local, "convert/big.safetensors")
    script = textwrap.dedent(f"""
        import resource, sys
        import tensorsafe as ts
        data = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmData:")) * 1024
        resource.setrlimit(resource.RLIMIT_DATA, (data + (96 << 20), resource.RLIM_INFINITY))
        ts.convert({url!r}, sys.argv[1])
    """)
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "big.tsafe")], capture_output=True, text=True,
                       timeout=300, env=os.environ.copy())
    assert r.returncode == 0, r.stderr[-3000:]
    got = tsn.load_file(str(tmp_path / "big.tsafe"))
    assert len(got) == 48 and all(np.array_equal(got[k], v) for k, v in tensors(48, 1024).items())


def test_no_room_for_the_scratch_file_is_named(s3, tmp_path):
    """The scratch file's space is reserved before anything is fetched: a
    file system without room is an error naming the directory and the size,
    and no output appears."""
    local = tmp_path / "m.safetensors"
    tsn.save_file(tensors(4, 1024), str(local))  # 16 MiB
    url = upload(s3, local, "convert/noroom/m.safetensors")
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here: " + mounted.stderr.decode()[-200:])
    try:
        with pytest.raises(ts.IOError, match=r"cannot reserve \d+ bytes of scratch space") as e:
            ts.convert(url, small / "m.tsafe")
        assert str(small) in str(e.value) and "convert/noroom/m.safetensors" in str(e.value)
        assert os.listdir(small) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)
