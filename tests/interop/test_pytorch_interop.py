"""PyTorch checkpoints through the `tensorsafe` CLI, as users meet them:
transformers' pytorch_model.bin from real models built from configs (GPT-2,
with tied embeddings, and a Llama-style model), converted to safetensors
with the bytes safetensors' convert.py writes and loaded back by
`from_pretrained` with identical logits; and info, ls, verify and cat on
checkpoints torch.save wrote, damaged ones and malicious ones.
"""
import json
import os
import pickle
import struct
import zipfile

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import pytorch_reference as ref  # noqa: E402  (tests/interop is on sys.path via rootdir conftest)

EXIT_CORRUPTION, EXIT_UNSUPPORTED, EXIT_INVALID_ARGUMENT = 1, 5, 7


def tiny_models():
    gpt2 = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=64)
    llama = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                     hidden_size=32, intermediate_size=64, vocab_size=101,
                                     max_position_embeddings=64)
    return [("gpt2", transformers.GPT2LMHeadModel, gpt2), ("llama", transformers.LlamaForCausalLM, llama)]


@pytest.mark.parametrize("kind,cls,config", tiny_models(), ids=lambda x: x if isinstance(x, str) else "")
def test_transformers_bin_to_safetensors(tmp_path, ts, kind, cls, config, rng):
    torch.manual_seed(int(rng.integers(2**31)))
    model = cls(config).eval()
    src = tmp_path / "pt"
    model.save_pretrained(src, safe_serialization=False)
    bin_path = src / "pytorch_model.bin"
    assert bin_path.exists()

    out = ts("info", bin_path, "--json")
    info = json.loads(out)
    assert info["format"] == "pytorch"
    listing = ts("ls", bin_path)
    state = torch.load(bin_path, weights_only=True)
    for name in state:
        assert name in listing
    assert ts("verify", bin_path).startswith(f"ok: {len(state)} tensors")

    # Without discard names, as convert_file(..., discard_names=[]); with the
    # model class's _tied_weights_keys, as Hugging Face's conversion passes
    # them (get_discard_names), which keeps the input embedding.
    dst = tmp_path / "st"
    dst.mkdir()
    discard = list(getattr(cls, "_tied_weights_keys", None) or [])
    for extra in ([], discard):
        args = [a for n in extra for a in ("--discard-name", n)]
        ts("convert", bin_path, dst / "model.safetensors", "--quiet", *args)
        ref.convert_reference(str(bin_path), str(tmp_path / "ref.safetensors"), discard_names=extra)
        ours = (dst / "model.safetensors").read_bytes()
        theirs = (tmp_path / "ref.safetensors").read_bytes()
        h1, m1, order, d1, n1 = ref.safetensors_parts(ours)
        h2, m2, _, d2, n2 = ref.safetensors_parts(theirs)
        assert (h1, m1, d1, n1) == (h2, m2, d2, n2)
        if kind == "gpt2":  # tied: one storage, two names
            kept = "transformer.wte.weight" if extra else "lm_head.weight"
            dropped = "lm_head.weight" if extra else "transformer.wte.weight"
            assert m1 == {"format": "pt", dropped: kept}
        else:
            assert ours == theirs  # one metadata key: byte for byte

    (dst / "config.json").write_text((src / "config.json").read_text())
    back = cls.from_pretrained(dst).eval()
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with torch.no_grad():
        assert torch.equal(back(ids).logits, model(ids).logits)


def test_cli_on_a_checkpoint(tmp_path, ts):
    sd = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "opt": {"lr": 0.1, "m": [torch.ones(2)]}}
    path = tmp_path / "ckpt.pth"
    torch.save(sd, path)
    info = ts("info", path)
    assert "format:       pytorch" in info
    assert '"opt.lr":0.1' in info
    assert "opt.m.0" in ts("ls", path)
    out = ts("cat", path, "w")
    assert "dtype: f32" in out and "[2, 3]" in out
    ts("cat", path, "opt.m.0", "--out", tmp_path / "m.npy")
    assert (tmp_path / "m.npy").exists()
    # Legacy stream, under a name that says nothing.
    torch.save(sd, tmp_path / "legacy", _use_new_zipfile_serialization=False)
    assert "format:       pytorch" in ts("info", tmp_path / "legacy")
    ts("convert", tmp_path / "legacy", tmp_path / "x.tsafe", "--quiet")
    assert "opt.m.0" in ts("ls", tmp_path / "x.tsafe")
    # Never written.
    p = ts("convert", tmp_path / "x.tsafe", tmp_path / "back.pt", check=False)
    assert p.returncode == EXIT_INVALID_ARGUMENT and "which tensorsafe reads but does not write" in p.stderr
    p = ts("convert", tmp_path / "x.tsafe", tmp_path / "back.pt", "--to", "pytorch", check=False)
    assert p.returncode == EXIT_UNSUPPORTED and "does not write PyTorch checkpoints" in p.stderr
    assert not (tmp_path / "back.pt").exists()


def test_verify_finds_damaged_storage(tmp_path, ts):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(256)}, path)
    data = bytearray(path.read_bytes())
    member = next(i for i in zipfile.ZipFile(path).infolist() if i.filename.endswith("/data/0"))
    # The local header's name and extra lengths give the data's offset.
    nlen, xlen = struct.unpack("<HH", data[member.header_offset + 26:member.header_offset + 30])
    start = member.header_offset + 30 + nlen + xlen
    data[start] ^= 0xFF
    path.write_bytes(bytes(data))
    assert "w" in ts("ls", path)  # torch.load never checks CRCs either
    p = ts("verify", path, check=False)
    assert p.returncode == EXIT_CORRUPTION and "CRC-32 mismatch" in p.stderr


def test_malicious_checkpoint_exit_code(tmp_path, ts):
    marker = tmp_path / "pwned"

    class Shell:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "evil.bin"
    torch.save({"w": torch.ones(1), "x": Shell()}, path)
    for cmd in (["info"], ["ls"], ["verify"], ["convert", "--quiet"]):
        args = [*cmd, path] + ([tmp_path / "out.safetensors"] if cmd[0] == "convert" else [])
        p = ts(*args, check=False)
        assert p.returncode == EXIT_UNSUPPORTED, p.stderr
        assert "global posix.system is not allowed" in p.stderr
    assert not marker.exists()
    assert not (tmp_path / "out.safetensors").exists()
    # The payload is live: Python's pickle runs it.
    pickle.loads(pickle.dumps(Shell()))
    assert marker.exists()
