"""transformers through tensorsafe (docs/TRANSFORMERS.md), with real models
built from configs (no downloads): GPT-2 (tied embeddings) and a Llama-style
model. save_pretrained(max_shard_size="200KB") and from_pretrained run on
tensorsafe through the safetensors alias, in a subprocess, and write the
same files as with safetensors itself; .tsafe checkpoints load through
tensorsafe.transformers; every path gives the original model's logits."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = r"""
import json, os, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, AutoModelForCausalLM
import safetensors

out_dir, mode = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
models = {
    "gpt2": GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=64)),
    "llama": LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                                          max_position_embeddings=64, tie_word_embeddings=False)),
}
ids = torch.randint(0, 1000, (2, 16))
report = {"safetensors": safetensors.__name__}
for name, model in models.items():
    model.eval()
    with torch.no_grad():
        want = model(ids).logits
    d = os.path.join(out_dir, name)
    if mode in ("alias", "real"):
        model.save_pretrained(d, max_shard_size="200KB")
        loaded = AutoModelForCausalLM.from_pretrained(d)
    else:  # .tsafe through tensorsafe.transformers
        import tensorsafe.transformers as tt
        tt.save_pretrained(model, d, max_shard_size="200KB")
        loaded = tt.from_pretrained(AutoModelForCausalLM, d)
    loaded.eval()
    with torch.no_grad():
        got = loaded(ids).logits
    emb = loaded.get_input_embeddings().weight
    head = loaded.get_output_embeddings().weight
    report[name] = {"files": sorted(os.listdir(d)), "equal": bool(torch.equal(want, got)),
                    "tied": emb.data_ptr() == head.data_ptr()}
print(json.dumps(report))
"""


def run(tmp_path, mode):
    env = {k: v for k, v in os.environ.items() if k != "TENSORSAFE_AS_SAFETENSORS"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if mode in ("alias", "tsafe"):
        env["TENSORSAFE_AS_SAFETENSORS"] = "1"
    out = tmp_path / mode
    out.mkdir()
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(out), mode], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    return out, json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("transformers")
    return {mode: run(tmp, mode) for mode in ("alias", "real", "tsafe")}


def test_save_and_load_through_the_alias(saves):
    out, report = saves["alias"]
    assert report["safetensors"] == "tensorsafe.safetensors"
    for name in ("gpt2", "llama"):
        r = report[name]
        assert r["equal"], name  # identical logits
        assert "model.safetensors.index.json" in r["files"], r["files"]
        assert len([f for f in r["files"] if f.startswith("model-")]) >= 2, r["files"]  # 200KB shards
    assert report["gpt2"]["tied"] and not report["llama"]["tied"]


def test_the_alias_writes_what_safetensors_writes(saves):
    ours, report = saves["alias"]
    theirs, real_report = saves["real"]
    assert real_report["safetensors"] == "safetensors"
    for name in ("gpt2", "llama"):
        assert report[name]["files"] == real_report[name]["files"]
        for f in report[name]["files"]:
            if f.endswith(".safetensors") or f.endswith(".index.json"):
                assert (ours / name / f).read_bytes() == (theirs / name / f).read_bytes(), (name, f)


def test_tsafe_checkpoints(saves):
    out, report = saves["tsafe"]
    for name in ("gpt2", "llama"):
        r = report[name]
        assert r["equal"], name
        assert "model.tsafe.index.json" in r["files"] and "config.json" in r["files"]
        assert not any(f.endswith(".safetensors") for f in r["files"]), r["files"]
    assert report["gpt2"]["tied"]
    # The index keeps transformers' metadata; the CLI reads the checkpoint.
    index = json.loads((out / "gpt2" / "model.tsafe.index.json").read_text())
    assert set(index["metadata"]) == {"total_parameters", "total_size"}
    assert "lm_head.weight" not in index["weight_map"]  # tied: saved once


def test_convert_a_transformers_checkpoint(saves, tmp_path):
    import tensorsafe as ts
    import torch
    src, _ = saves["real"]
    st = ts.convert(src / "llama", tmp_path / "llama.tsafe")
    assert st["from"] == "safetensors" and st["to"] == "tsafe"
    import tensorsafe.torch as tst
    single = tst.load_file(tmp_path / "llama.tsafe")
    sharded = tst.load_file(src / "llama")
    assert single.keys() == sharded.keys() and all(torch.equal(single[k], sharded[k]) for k in single)
