"""tensorsafe.convert (Python) is the C++ Convert() that `tensorsafe convert`
runs: for several format pairs and options, its output bytes equal the
CLI's, and it refuses what the CLI refuses with the same message."""
import re

import ml_dtypes
import numpy as np
import pytest

import tensorsafe


def _inputs(tmp_path, rng):
    arrays = {f"t{i}.{np.dtype(d).name}": rng.integers(0, 100, size=(3, i + 1)).astype(d)
              for i, d in enumerate([np.float32, np.int64, np.float16, np.uint8])}
    tensorsafe.write(tmp_path / "in.tsafe", arrays, {"source": "test", "n": 4})
    tensorsafe.write(tmp_path / "in.safetensors", arrays, {"source": "test"})
    tensorsafe.write(tmp_path / "in.npz", arrays)
    return arrays


# (input, output, python kwargs, CLI flags)
PAIRS = [
    ("in.safetensors", "out.tsafe", {}, []),
    ("in.tsafe", "out.safetensors", {"stringify_metadata": True}, ["--stringify-metadata"]),
    ("in.tsafe", "out.npz", {"drop_metadata": True, "compress": True}, ["--drop-metadata", "--compress"]),
    ("in.npz", "out.ten", {"drop_names": True}, ["--drop-names"]),
    ("in.tsafe", "out.gguf", {"alignment": 64, "tensors": ["t1.int64", "t0.float32"]},
     ["--alignment", "64", "--tensor", "t1.int64", "--tensor", "t0.float32"]),
    ("in.safetensors", "out.zio", {}, []),
    ("in.tsafe", "out.bin", {"dst_format": "tsafe", "alignment": 4096}, ["--to", "tsafe", "--alignment", "4096"]),
]


@pytest.mark.parametrize("src,dst,kwargs,flags", PAIRS, ids=[f"{p[0]}->{p[1]}" for p in PAIRS])
def test_same_bytes_as_the_cli(tmp_path, rng, ts, src, dst, kwargs, flags):
    _inputs(tmp_path, rng)
    py_out, cli_out = tmp_path / ("py-" + dst), tmp_path / ("cli-" + dst)
    calls = []
    stats = tensorsafe.convert(tmp_path / src, py_out, progress=calls.append, **kwargs)
    ts("convert", "-q", tmp_path / src, cli_out, *flags)
    assert py_out.read_bytes() == cli_out.read_bytes()
    assert stats["file_size"] == py_out.stat().st_size
    assert calls and calls[-1]["done"] is True


def test_same_refusals_as_the_cli(tmp_path, rng, ts):
    tensorsafe.write(tmp_path / "h.safetensors", {"h": np.zeros(2, ml_dtypes.bfloat16)})
    with pytest.raises(tensorsafe.UnsupportedError) as e:
        tensorsafe.convert(tmp_path / "h.safetensors", tmp_path / "h.ten")
    p = ts("convert", "-q", tmp_path / "h.safetensors", tmp_path / "h.ten", check=False)
    assert p.returncode != 0
    assert str(e.value) in p.stderr
    assert not (tmp_path / "h.ten").exists()
    _inputs(tmp_path, rng)
    with pytest.raises(tensorsafe.NotFoundError, match=re.escape('"nope"')):
        tensorsafe.convert(tmp_path / "in.tsafe", tmp_path / "x.tsafe", tensors=["nope"])
    with pytest.raises(tensorsafe.InvalidArgumentError, match="destination format \"xyz\" is not one of"):
        tensorsafe.convert(tmp_path / "in.tsafe", tmp_path / "x.tsafe", dst_format="xyz")


def test_progress_errors_are_raised(tmp_path, rng):
    _inputs(tmp_path, rng)

    def boom(p):
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt, match="stop"):
        tensorsafe.convert(tmp_path / "in.tsafe", tmp_path / "x.tsafe", progress=boom)
