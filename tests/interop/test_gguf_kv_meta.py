"""GGUF key/values through the CLI, checked with the reference tools:

- `tensorsafe meta FILE.gguf --set/--del` rewrites files that gguf-py's
  GGUFReader reads back with the values and GGUF types set, tensors intact;
- `convert --gguf-kv` adds typed key/values;
- safetensors -> GGUF -> safetensors gives the original bytes for files the
  `safetensors` package wrote, with and without metadata;
- `info` summarises a 50,000-token vocabulary (sizes printed);
- transformers' GGUF loader on a converted file: what it does, and the
  warning `convert` prints instead.
"""
import warnings

import gguf
import numpy as np
import pytest
from gguf import GGUFValueType as VT

import tensorsafe


def field(reader, key):
    f = reader.fields[key]
    if f.types[0] == VT.ARRAY:
        vals = [f.parts[i] for i in f.data]
        if f.types[-1] == VT.STRING:
            return f.types, [bytes(v).decode() for v in vals]
        return f.types, [v.tolist()[0] for v in vals]
    v = f.parts[f.data[0]]
    return f.types, bytes(v).decode() if f.types[0] == VT.STRING else v.tolist()[0]


def write_model(path, rng, vocab=20):
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny")
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_token_scores([float(i) for i in range(vocab)])
    w.add_tensor("blk.0.w", rng.integers(0, 256, size=(2, 144), dtype=np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.add_tensor("norm", rng.standard_normal(8).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tensors_of(path):
    return [(t.name, int(t.tensor_type), np.asarray(t.data).tobytes()) for t in gguf.GGUFReader(path).tensors]


def test_meta_edits_read_back_by_gguf_py(rng, ts, tmp_path):
    path = tmp_path / "m.gguf"
    write_model(path, rng)
    before = tensors_of(path)
    out = ts("meta", path)
    assert "llama.block_count" in out and "uint32" in out
    ts("meta", path, "--set", "general.name=str:renamed", "--set", "llama.block_count=u64:7",
       "--set", "new.flag=bool:true", "--set", "new.floats=f32[]:[0.5,-1.25]", "--set", "new.int=i8:-5",
       "--del", "llama.context_length")
    r = gguf.GGUFReader(path)
    assert field(r, "general.name") == ([VT.STRING], "renamed")
    assert field(r, "llama.block_count") == ([VT.UINT64], 7)
    assert field(r, "new.flag") == ([VT.BOOL], True)
    assert field(r, "new.floats") == ([VT.ARRAY, VT.FLOAT32], [0.5, -1.25])
    assert field(r, "new.int") == ([VT.INT8], -5)
    assert "llama.context_length" not in r.fields
    assert field(r, "tokenizer.ggml.tokens")[1][:2] == ["tok0", "tok1"]
    assert list(r.fields)[:3] == ["GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"]
    assert [k for k in r.fields if not k.startswith("GGUF.")][:2] == ["general.architecture", "general.name"]
    assert tensors_of(path) == before
    # A refused edit leaves the file as it was.
    data = path.read_bytes()
    p = ts("meta", path, "--set", "general.alignment=u32:48", check=False)
    assert p.returncode == 7 and "not a power of two" in p.stderr
    assert path.read_bytes() == data


def test_convert_gguf_kv_read_by_gguf_py(rng, ts, tmp_path):
    from safetensors.numpy import save_file
    save_file({"w": rng.standard_normal((2, 3)).astype(np.float32)}, tmp_path / "in.safetensors")
    ts("convert", "-q", "--gguf-kv", "general.architecture=str:llama", "--gguf-kv", "llama.block_count=u32:1",
       tmp_path / "in.safetensors", tmp_path / "out.gguf")
    r = gguf.GGUFReader(tmp_path / "out.gguf")
    assert field(r, "general.architecture") == ([VT.STRING], "llama")
    assert field(r, "llama.block_count") == ([VT.UINT32], 1)


@pytest.mark.parametrize("metadata", [None, {"format": "pt", "note": "x"}])
def test_safetensors_through_gguf_is_byte_exact(rng, ts, tmp_path, metadata):
    from safetensors.numpy import save_file
    arrays = {"a.weight": rng.standard_normal((3, 4)).astype(np.float32),
              "b": rng.standard_normal(5).astype(np.float16),
              "c": rng.integers(-9, 9, size=(2, 2)).astype(np.int64),
              "d": rng.standard_normal((1, 2, 3)).astype(np.float64),
              "e": np.array(3, dtype=np.int32)}
    save_file(arrays, tmp_path / "in.safetensors", metadata=metadata)
    ts("convert", "-q", tmp_path / "in.safetensors", tmp_path / "mid.gguf")
    ts("convert", "-q", tmp_path / "mid.gguf", tmp_path / "back.safetensors")
    assert (tmp_path / "back.safetensors").read_bytes() == (tmp_path / "in.safetensors").read_bytes()
    # The GGUF file itself has no key of ours.
    assert not any(k.startswith("tensorsafe") for k in gguf.GGUFReader(tmp_path / "mid.gguf").fields)


def test_info_summarises_a_large_vocabulary(ts, tmp_path):
    path = tmp_path / "vocab.gguf"
    n = 50000
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_token_list([f"token_{i:05d}" for i in range(n)])
    w.add_token_scores([float(-i) for i in range(n)])
    w.add_token_types([1] * n)
    w.add_token_merges([f"t{i} m{i}" for i in range(n)])
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    short, full = ts("info", path), ts("info", "--full", path)
    short_json, full_json = ts("info", "--json", path), ts("info", "--json", "--full", path)
    print(f"info: {len(short)} bytes ({len(full)} with --full); info --json: {len(short_json)} bytes "
          f"({len(full_json)} with --full)")
    assert len(short) < 4000 and len(short_json) < 8000
    assert len(full) > 1_000_000 and "token_49999" in full and "token_49999" not in short
    assert "[50000 items]" in short


def test_transformers_on_a_converted_file(rng, ts, tmp_path):
    """transformers 4.57.6 (requirements-streaming.txt) on GGUF written by
    `convert` from safetensors: without general.architecture it stops with
    an IndexError, which `convert` announces as a warning."""
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import save_file
    save_file({"model.embed_tokens.weight": rng.standard_normal((8, 4)).astype(np.float32)},
              tmp_path / "in.safetensors", metadata={"format": "pt"})
    p = ts("convert", tmp_path / "in.safetensors", tmp_path / "m.gguf", check=False)
    assert p.returncode == 0
    assert "warning: " in p.stderr and "no general.architecture key" in p.stderr and "IndexError" in p.stderr
    with pytest.warns(UserWarning, match="no general.architecture key"):
        tensorsafe.convert(tmp_path / "in.safetensors", tmp_path / "py.gguf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(IndexError):
            transformers.AutoConfig.from_pretrained(tmp_path, gguf_file="m.gguf")
    # With an architecture (and nothing else), it builds a default config.
    ts("convert", "-q", "--gguf-kv", "general.architecture=str:llama", tmp_path / "in.safetensors",
       tmp_path / "arch.gguf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.from_pretrained(tmp_path, gguf_file="arch.gguf")
    assert cfg.model_type == "llama"
    assert cfg.num_hidden_layers == transformers.LlamaConfig().num_hidden_layers  # a default, not ours
