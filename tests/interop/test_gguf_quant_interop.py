"""Block-quantized GGUF tensors through the native format, checked with gguf-py.

GGUF -> tsafe -> GGUF must give back the same file byte for byte, and
gguf-py's GGUFReader must see the same type codes, shapes and block bytes in
the result. The inputs are tests/golden/gguf/quant.gguf (one tensor of every
block type, see make_golden.py) and a bigger file gguf-py's own GGUFWriter
writes here from raw block bytes of every quantized type it knows.
"""
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "gguf"
PLAIN = {QT.F32, QT.F16, QT.BF16, QT.F64, QT.I8, QT.I16, QT.I32, QT.I64}


def tensors_of(path):
    r = gguf.GGUFReader(path)
    return [(t.name, int(t.tensor_type), [int(d) for d in t.shape], bytes(np.asarray(t.data).tobytes()))
            for t in r.tensors]


def round_trip(ts, src, tmp_path):
    ts("convert", "-q", src, tmp_path / "mid.tsafe")
    ts("convert", "-q", tmp_path / "mid.tsafe", tmp_path / "back.gguf")
    return tmp_path / "back.gguf"


def test_golden_quant_file_survives_the_native_format(ts, tmp_path):
    # gguf-py cannot read this file (it lacks Q2_0, make_golden.py), so the
    # check is the bytes; the package's reader checks the file below.
    src = GOLDEN / "quant.gguf"
    back = round_trip(ts, src, tmp_path)
    assert back.read_bytes() == src.read_bytes()


def quantized_types():
    """Every block type gguf-py can write, with its geometry from the package
    (Q8_1 excluded: the package's 40-byte block disagrees with ggml's 36)."""
    out = []
    for qt, (be, bb) in gguf.GGML_QUANT_SIZES.items():
        if qt in PLAIN or qt == QT.Q8_1 or be == 1:
            continue
        out.append((qt, be, bb))
    return out


def test_gguf_py_multi_type_file_survives_and_reads_back(rng, ts, tmp_path):
    src = tmp_path / "multi.gguf"
    w = gguf.GGUFWriter(src, "llama")
    w.add_uint32("general.quantization_version", 2)
    w.add_string("general.name", "quant round trip")
    expected = []
    for i, (qt, be, bb) in enumerate(quantized_types()):
        rows = int(rng.integers(1, 4))
        blocks = int(rng.integers(1, 4))
        raw = rng.integers(0, 256, size=(rows, blocks * bb), dtype=np.uint8)
        name = f"blk.{i}.{qt.name.lower()}"
        w.add_tensor(name, raw, raw_dtype=qt)
        expected.append((name, int(qt), [blocks * be, rows], raw.tobytes()))
        if i % 5 == 0:  # plain tensors between the quantized ones
            f = rng.standard_normal((2, 3)).astype(np.float32)
            w.add_tensor(f"plain.{i}", f)
            expected.append((f"plain.{i}", int(QT.F32), [3, 2], f.tobytes()))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert len(expected) > 20
    assert tensors_of(src) == expected  # what the writer made

    back = round_trip(ts, src, tmp_path)
    assert back.read_bytes() == src.read_bytes()
    assert tensors_of(back) == expected



def test_quantized_tensors_are_refused_where_they_cannot_live(ts, tmp_path):
    ts("convert", "-q", GOLDEN / "quant.gguf", tmp_path / "q.tsafe")
    for ext in ("safetensors", "npz", "ten", "btf"):
        p = ts("convert", "-q", "--drop-tensor-metadata", "--drop-metadata", "--drop-names",
               tmp_path / "q.tsafe", tmp_path / f"x.{ext}", check=False)
        assert p.returncode != 0, ext
        assert "a GGUF block-quantized Q4_0 tensor cannot be stored in" in p.stderr, p.stderr
        assert not (tmp_path / f"x.{ext}").exists()
