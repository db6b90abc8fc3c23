"""Replays the atheris target's corpus and regressions (fuzz/python/) through
its check(), plus seeded truncations and bit flips of each corpus file, so the
Python layer's contract (load, or raise tensorsafe.Error / KeyError) is held
by `make test` without atheris."""

import importlib.util
import pathlib
import random

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FUZZ = ROOT / "fuzz" / "python"


def _load_target():
    spec = importlib.util.spec_from_file_location("python_fuzz", FUZZ / "python_fuzz.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


target = _load_target()
CORPUS = sorted((FUZZ / "corpus").iterdir())
REGRESSIONS = sorted(p for p in (FUZZ / "regressions").iterdir() if p.name != ".gitkeep")


def test_corpus_is_seeded():
    # A corpus that silently lost its files would make the replay vacuous.
    assert len(CORPUS) >= 50
    suffixes = {target.SUFFIXES[p.read_bytes()[0] % len(target.SUFFIXES)] for p in CORPUS}
    assert {".tsafe", ".safetensors", ".npy", ".npz", ".gguf", ".ten", ".btf"} <= suffixes


@pytest.mark.parametrize("path", CORPUS + REGRESSIONS, ids=lambda p: p.name)
def test_replay(path):
    target.check(path.read_bytes())


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_mutations(path):
    data = path.read_bytes()
    rng = random.Random(path.name)  # deterministic per file
    print("seed:", path.name)
    for _ in range(4):
        target.check(data[: rng.randrange(1, len(data))])
    for _ in range(4):
        b = bytearray(data)
        i = rng.randrange(1, len(b))
        b[i] ^= 1 << rng.randrange(8)
        target.check(bytes(b))


def test_contract_breach_is_reported(monkeypatch):
    # The replay can fail: an exception outside the contract escapes check().
    def boom(_):
        raise TypeError("not a tensorsafe error")

    monkeypatch.setattr(target.tsnp, "load", boom)
    with pytest.raises(TypeError):
        target.check(bytes([0]) + b"x")


def test_message_with_invalid_utf8_is_an_error_not_a_decode_failure():
    # Found by the atheris target: a descr byte 0xbc reached the message raw,
    # and decoding the message raised UnicodeDecodeError instead.
    data = (FUZZ / "regressions" / "npy_descr_invalid_utf8.npy").read_bytes()[1:]
    path = pathlib.Path(target._TMP) / "bad.npy"
    path.write_bytes(data)
    with pytest.raises(target.tensorsafe.CorruptionError, match=r'descr "\\xbcf4" is not a type string'):
        target.tensorsafe.read_npy(path)
