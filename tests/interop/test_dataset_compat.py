"""MDS and WebDataset shards written by the real packages (mosaicml-streaming,
webdataset), read by tensorsafe (compat_dump, tests/dataset/compat_dump.cc)
and compared sample for sample with what the packages' own readers return.

Data is random per run (the session seed, printed by conftest.py)."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT

TS_DTYPE = {"uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "int8": "i8", "int16": "i16",
            "int32": "i32", "int64": "i64", "float16": "f16", "float32": "f32", "float64": "f64", "bool": "bool"}


@pytest.fixture(scope="session")
def compat_dump():
    path = Path(os.environ.get("TENSORSAFE_COMPAT_DUMP", ROOT / "build" / "bin" / "compat_dump"))
    if not path.exists():
        message = f"{path} is not built (make build, or set TENSORSAFE_COMPAT_DUMP)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def dump(exe, *args):
    p = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    samples = [line for line in lines if "schema" not in line]
    for s in samples:
        assert "error" not in s, s
    return [s["fields"] for s in samples]


def tensor(a):
    a = np.asarray(a)
    return {"kind": "tensor", "dtype": TS_DTYPE[a.dtype.name], "shape": list(a.shape), "hex": a.tobytes().hex()}


def mds_value(encoding, v):
    if encoding in ("str", "str_int", "str_float", "str_decimal"):
        return {"kind": "str", "text": str(v)}
    if encoding == "int":
        return {"kind": "int", "value": int(v)}
    if encoding == "json":
        return {"kind": "json", "text": v}  # compared after parsing
    if encoding == "bytes":
        return {"kind": "bytes", "hex": v.hex()}
    return tensor(v)


def parsed_json(fields):
    for f in fields.values():
        if f["kind"] == "json" and isinstance(f["text"], str):
            f["text"] = json.loads(f["text"])
    return fields


@pytest.mark.parametrize("compression", [None, "zstd:5"])
def test_mds_sample_for_sample(compat_dump, rng, tmp_path, compression):
    streaming = pytest.importorskip("streaming")
    columns = {"blob": "bytes", "text": "str", "n": "int", "f": "float32", "u": "uint64", "h": "float16",
               "img": "ndarray:uint8:4,5", "vec": "ndarray:int32", "any": "ndarray", "meta": "json",
               "si": "str_int"}
    out = tmp_path / "mds"
    written = []
    with streaming.MDSWriter(out=str(out), columns=columns, compression=compression,
                             hashes=["sha1", "xxh128", "xxh32", "xxh3_128", "xxh3_64", "xxh64"],
                             size_limit=4000) as w:
        for k in range(60):
            s = {"blob": rng.bytes(int(rng.integers(0, 40))), "text": f"t{k}-ü-{rng.integers(1e9)}",
                 "n": int(rng.integers(-2**63, 2**63 - 1)), "f": np.float32(rng.standard_normal()),
                 "u": np.uint64(rng.integers(0, 2**63)), "h": np.float16(rng.standard_normal()),
                 "img": rng.integers(0, 255, (4, 5), dtype=np.uint8),
                 "vec": rng.integers(-9, 9, int(rng.integers(1, 600)), dtype=np.int32),
                 "any": rng.standard_normal((int(rng.integers(1, 4)), 2, int(rng.integers(1, 3)))),
                 "meta": {"k": k, "v": [float(rng.standard_normal())]}, "si": int(rng.integers(1e6))}
            w.write(s)
            written.append(s)
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) >= 3
    if compression:
        assert not list(out.glob("*.mds")), "only compressed shards should be there"
    ds = streaming.StreamingDataset(remote=str(out), local=str(tmp_path / "local"), batch_size=1, shuffle=False)
    want = [parsed_json({c: mds_value(columns[c], ds[i][c]) for c in columns}) for i in range(len(ds))]
    got = [parsed_json(s) for s in dump(compat_dump, "mds", out, tmp_path / "cache")]
    assert len(got) == len(want) == 60
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"sample {i}"


def streaming_samples(streaming, out, local, columns):
    ds = streaming.StreamingDataset(remote=str(out), local=str(local), batch_size=1, shuffle=False)
    return [parsed_json({c: mds_value(columns[c], ds[i][c]) for c in columns}) for i in range(len(ds))]


def test_mds_ndarray_encodings_spelled_as_python_int_reads_them(compat_dump, rng, tmp_path):
    """MDSWriter takes "ndarray:" (no arguments) and shapes whose dims int() reads ("2, 3", "+2,03", "1_0")
    and writes them into index.json as given; StreamingDataset reads them."""
    streaming = pytest.importorskip("streaming")
    columns = {"a": "ndarray:", "b": "ndarray:float32:2, 3", "c": "ndarray:int16: +2,03 ", "d": "ndarray:uint8:1_0"}
    out = tmp_path / "mds"
    with streaming.MDSWriter(out=str(out), columns=columns) as w:
        for k in range(5):
            w.write({"a": rng.standard_normal((k + 1, 2)), "b": rng.standard_normal((2, 3)).astype(np.float32),
                     "c": rng.integers(-9, 9, (2, 3), dtype=np.int16), "d": rng.integers(0, 255, 10, dtype=np.uint8)})
    written = json.loads((out / "index.json").read_text())["shards"][0]["column_encodings"]
    assert written == [columns[c] for c in sorted(columns)]
    want = streaming_samples(streaming, out, tmp_path / "local", columns)
    got = [parsed_json(s) for s in dump(compat_dump, "mds", out, tmp_path / "cache")]
    assert len(got) == len(want) == 5
    assert got == want


def test_mds_zstd_shards_of_several_frames(compat_dump, rng, tmp_path):
    """python-zstd's decompress (what StreamingDataset calls) reads every frame of a file and skips skippable
    frames; MDSWriter writes one frame, other tools may write several."""
    streaming = pytest.importorskip("streaming")
    zstd = pytest.importorskip("zstd")
    xxhash = pytest.importorskip("xxhash")
    columns = {"x": "int", "v": "ndarray:float32"}
    out = tmp_path / "mds"
    with streaming.MDSWriter(out=str(out), columns=columns, compression="zstd", hashes=["xxh64"],
                             size_limit=3000) as w:
        for k in range(40):
            w.write({"x": k, "v": rng.standard_normal(int(rng.integers(1, 50))).astype(np.float32)})
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) >= 2
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    for shard in index["shards"]:
        path = out / shard["zip_data"]["basename"]
        raw = zstd.decompress(path.read_bytes())
        cut = len(raw) // 3
        data = skippable + zstd.compress(raw[:cut], 3) + zstd.compress(raw[cut:], 3)
        path.write_bytes(data)
        shard["zip_data"].update(bytes=len(data), hashes={"xxh64": xxhash.xxh64(data).hexdigest()})
    (out / "index.json").write_text(json.dumps(index))
    got = [parsed_json(s) for s in dump(compat_dump, "mds", out, tmp_path / "cache")]
    want = streaming_samples(streaming, out, tmp_path / "local", columns)
    assert len(got) == len(want) == 40
    assert got == want


def write_small_mds(streaming, out, rng, compression, hashes=("xxh64",), n=30, size_limit=3000):
    """A few shards of samples both compressible (repeats, zeros) and not (random bytes)."""
    columns = {"x": "int", "b": "bytes", "v": "ndarray:float32", "t": "str"}
    with streaming.MDSWriter(out=str(out), columns=columns, compression=compression, hashes=list(hashes),
                             size_limit=size_limit) as w:
        for k in range(n):
            w.write({"x": k, "b": rng.bytes(int(rng.integers(0, 30))) * int(rng.integers(1, 4)),
                     "v": rng.standard_normal(int(rng.integers(1, 40))).astype(np.float32),
                     "t": "zz" * int(rng.integers(0, 50)) + f"-{k}"})
    return columns


def test_mds_every_compression_spelling(compat_dump, rng, tmp_path):
    """Every algorithm of compression.py's get_compressions() (br, br:0..11, bz2, bz2:1..9, gz, gz:0..9,
    snappy, zstd, zstd:1..22), written by MDSWriter and read by StreamingDataset and by us alike."""
    streaming = pytest.importorskip("streaming")
    from streaming.base.compression import get_compression_extension, get_compressions
    algos = sorted(get_compressions())
    assert len(algos) == 58
    for algo in algos:
        out = tmp_path / algo.replace(":", "-")
        columns = write_small_mds(streaming, out, rng, algo, hashes=() if algo.endswith("1") else ("xxh64",))
        index = json.loads((out / "index.json").read_text())
        assert len(index["shards"]) >= 2, algo
        ext = get_compression_extension(algo)
        assert all(s["compression"] == algo and s["zip_data"]["basename"].endswith("." + ext) for s in index["shards"])
        assert not list(out.glob("*.mds")), "only compressed shards should be there"
        want = streaming_samples(streaming, out, tmp_path / "local" / out.name, columns)
        got = [parsed_json(s) for s in dump(compat_dump, "mds", out, tmp_path / "cache")]
        assert len(got) == len(want) == 30, algo
        assert got == want, algo


def gzip_member(data, level, flags=0, rng=None):
    """A gzip member as RFC 1952 lays it out, with optional FEXTRA/FNAME/FCOMMENT/FHCRC fields (the header
    CRC deliberately wrong: gzip.decompress skips it) and reserved flag bits."""
    import zlib
    head = bytes([0x1F, 0x8B, 8, flags]) + (1234).to_bytes(4, "little") + bytes([0, 255])
    if flags & 4:
        head += (3).to_bytes(2, "little") + b"abc"
    if flags & 8:
        head += b"shard.mds\0"
    if flags & 16:
        head += b"comment\0"
    if flags & 2:
        head += b"\xde\xad"
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    return head + body + zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(4, "little")


def pieces(raw, rng, k):
    cuts = sorted(int(c) for c in rng.integers(0, len(raw) + 1, k - 1))
    return [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]


def variants(codec, raw, zip_bytes, rng):
    """(name, compressed bytes) built around a shard's raw bytes: what each codec's Python reader does with
    several members or streams, padding, bytes after the end, cuts and damage."""
    import bz2
    import gzip
    cut = int(rng.integers(1, len(zip_bytes)))
    yield "whole", zip_bytes
    yield "truncated", zip_bytes[:cut]
    yield "trailing junk", zip_bytes + b"junk"
    yield "trailing NUL", zip_bytes + b"\0"
    yield "twice", zip_bytes + zip_bytes
    damaged = bytearray(zip_bytes)
    damaged[cut] ^= 0x40
    yield "damaged", bytes(damaged)
    if codec == "gz":
        parts = pieces(raw, rng, 4)
        yield "members", b"".join(gzip.compress(p, int(rng.integers(0, 10))) for p in parts)
        yield "members and NULs", b"".join(gzip.compress(p) + b"\0" * int(rng.integers(0, 5)) for p in parts)
        yield "header fields", b"".join(gzip_member(p, 6, flags) for p, flags in zip(parts, (2 | 4 | 8 | 16, 8, 0xE0, 0)))
        yield "leading NUL", b"\0" + zip_bytes
        yield "NULs then junk", zip_bytes + b"\0\0x"
        yield "empty member", zip_bytes + gzip.compress(b"")
        yield "cut header", zip_bytes + b"\x1f\x8b\x08\x00"
    if codec == "bz2":
        parts = pieces(raw, rng, 3)
        yield "streams", b"".join(bz2.compress(p, int(rng.integers(1, 10))) for p in parts)
        bad = bytearray(bz2.compress(raw[: len(raw) // 2]))
        bad[10] ^= 1  # block CRC
        yield "damaged trailing stream", zip_bytes + bytes(bad)
        yield "stream then half a damaged one", bz2.compress(raw[: len(raw) // 2]) + bytes(bad)
        yield "cut trailing stream", zip_bytes + b"BZh9"
        yield "trailing BZh0", zip_bytes + b"BZh0"
        yield "empty trailing stream", zip_bytes + bz2.compress(b"")
    if codec == "snappy":
        import snappy
        yield "framed", snappy.StreamCompressor().add_chunk(raw)


@pytest.mark.parametrize("codec", ["gz", "bz2", "br", "snappy"])
def test_mds_compressed_files_read_as_python_reads_them(compat_dump, rng, tmp_path, codec):
    """Compressed shards rewritten around their raw bytes (members, streams, padding, trailing bytes, cuts,
    damage): we read exactly those that streaming's decompress() turns into the raw shard, with the same
    samples as StreamingDataset, and refuse (kCorruption) those it raises on."""
    streaming = pytest.importorskip("streaming")
    xxhash = pytest.importorskip("xxhash")
    from streaming.base.compression import decompress
    out = tmp_path / "mds"
    columns = write_small_mds(streaming, out, rng, codec, n=12, size_limit=100_000)
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) == 1
    shard = index["shards"][0]
    path = out / shard["zip_data"]["basename"]
    original = path.read_bytes()
    raw = decompress(codec, original)
    want = streaming_samples(streaming, out, tmp_path / "local", columns)
    seen = {True: 0, False: 0}
    for n, (name, data) in enumerate(variants(codec, raw, original, rng)):
        try:
            python_reads = decompress(codec, data) == raw
        except Exception:
            python_reads = False
        path.write_bytes(data)
        shard["zip_data"].update(bytes=len(data), hashes={"xxh64": xxhash.xxh64(data).hexdigest()})
        (out / "index.json").write_text(json.dumps(index))
        p = subprocess.run([str(compat_dump), "mds", str(out), str(tmp_path / f"cache{n}")], capture_output=True,
                           text=True)
        if python_reads:
            assert p.returncode == 0, f"{name}: Python reads it, we refuse: {p.stderr}"
            got = [parsed_json(json.loads(line)["fields"]) for line in p.stdout.splitlines() if "fields" in line]
            assert got == want, name
        else:
            assert p.returncode == 1 and "compat_dump: corruption: " in p.stderr, f"{name}: Python refuses it, we: {p.stderr or 'read it'}"
            assert not any((tmp_path / f"cache{n}").glob("*")), f"{name}: left files in the cache"
        seen[python_reads] += 1
    assert seen[True] >= 1 and seen[False] >= 3, seen


def test_wds_sample_for_sample(compat_dump, rng, tmp_path):
    wds = pytest.importorskip("webdataset")
    pattern = str(tmp_path / "ds-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=7, verbose=0) as w:
        for k in range(25):
            n = int(rng.integers(1, 5))
            w.write({"__key__": f"s{k:05d}",
                     "x.ten": rng.standard_normal((n, 3)).astype(np.float32),
                     "pair.ten": [rng.integers(0, 9, (n,), dtype=np.int64), np.float64(k) * np.ones((2, n))],
                     "y.npy": rng.integers(-5, 5, (2, n), dtype=np.int16),
                     "meta.json": {"k": k, "r": float(rng.standard_normal())},
                     "cls": int(rng.integers(0, 1000)),
                     "bin": rng.bytes(int(rng.integers(0, 50)))})
    urls = sorted(str(p) for p in tmp_path.glob("ds-*.tar"))
    assert len(urls) == 4
    want = []
    for s in wds.WebDataset(urls, shardshuffle=False).decode():
        f = {"__key__": {"kind": "str", "text": s["__key__"]}, "cls": {"kind": "int", "value": s["cls"]},
             "meta.json": {"kind": "json", "text": s["meta.json"]}, "bin": {"kind": "bytes", "hex": s["bin"].hex()},
             "x.ten": tensor(s["x.ten"][0]), "y.npy": tensor(s["y.npy"])}
        f.update({f"pair.ten[{j}]": tensor(a) for j, a in enumerate(s["pair.ten"])})
        want.append(f)
    got = [parsed_json(s) for s in dump(compat_dump, "wds", str(tmp_path / "ds-{000000..000003}.tar"))]
    assert len(got) == len(want) == 25
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"sample {i}"
