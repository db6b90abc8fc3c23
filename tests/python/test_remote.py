"""Tensor files over S3 from Python and the CLI (docs/REMOTE.md), against a
real S3 server: moto_server from .venv on 127.0.0.1, started and stopped
here, fake credentials, requests counted in its log. Every API a user points
at a local file takes the s3:// URL of the same file and gives the same
tensors."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tensorsafe as ts
import tensorsafe.numpy as tsn
from tensorsafe import _native

torch = pytest.importorskip("torch")
boto3 = pytest.importorskip("boto3")
import tensorsafe.torch as tst  # noqa: E402

from moto_s3 import BUCKET, MOTO, check_two_ranks_two_workers, moto, s3, upload, upload_dir  # noqa: E402,F401

pytestmark = pytest.mark.skipif(MOTO is None, reason="moto_server (moto[server]) is not installed")


def sample(rng):
    return {
        "emb": rng.standard_normal((64, 48)).astype(np.float32),
        "ids": rng.integers(-1000, 1000, size=(37,), dtype=np.int64),
        "half": rng.standard_normal((5, 3, 2)).astype(np.float16),
        "empty": np.zeros((0, 4), np.float32),
    }


def write(fmt, path, tensors):
    if fmt == "tsafe":
        with ts.Writer(path) as w:
            for k, v in tensors.items():
                w.add(k, v)
    elif fmt == "safetensors":
        tsn.save_file(tensors, path)
    else:
        ts.write(path, tensors, format=fmt)


def assert_same(got, want):
    assert set(got) == set(want)
    for k, v in want.items():
        g = got[k].numpy() if isinstance(got[k], torch.Tensor) else np.asarray(got[k])
        assert g.dtype == v.dtype and g.shape == v.shape and np.array_equal(g, v), k


@pytest.mark.parametrize("fmt,ext", [("tsafe", "tsafe"), ("safetensors", "safetensors"), ("gguf", "gguf"),
                                     ("npz", "npz")])
def test_every_reader_takes_the_url(s3, tmp_path, rng, fmt, ext):
    want = sample(rng)
    if fmt == "gguf":
        want.pop("empty")  # GGUF has no empty tensors
    local = tmp_path / f"m.{ext}"
    write(fmt, str(local), want)
    url = upload(s3, local, f"every/{fmt}/m.{ext}")

    assert ts.detect_format(url) == fmt
    assert_same(ts.read(url)[0], want)
    with ts.safe_open(url, framework="np") as f:
        assert sorted(f.keys()) == sorted(want)
        assert_same({k: f.get_tensor(k) for k in f.keys()}, want)
        assert np.array_equal(f.get_slice("emb")[3:9, ::5], want["emb"][3:9, ::5])
    with ts.safe_open(url, framework="pt") as f:
        assert_same(f.get_tensors(), want)
    assert_same(tst.load_file(url), want)
    if fmt != "npz":
        assert_same(ts.load(url), want)
        assert_same(ts.load(url, framework="np"), want)
        assert_same(ts.load(url, names=["ids"]), {"ids": want["ids"]})
    if fmt == "tsafe":
        assert_same(ts.open(url).get_many(), want)
        ts.verify(url)


def write_tsafe(path, sd):
    with ts.Writer(str(path)) as w:
        for k, v in sd.items():
            w.add(k, v.numpy())
    return path


def test_load_into_a_module_from_s3(s3, tmp_path, monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    tst.save_file(model.state_dict(), str(tmp_path / "m.safetensors"))
    url = upload(s3, tmp_path / "m.safetensors", "into/m.safetensors")
    fresh = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    sd = fresh.state_dict()
    before = {k: v.data_ptr() for k, v in sd.items()}
    out, report = ts.load(url, into=sd, return_report=True)
    assert {k: v.data_ptr() for k, v in out.items()} == before  # filled in place
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    assert report["bytes_read"] == sum(v.numel() * v.element_size() for v in sd.values())
    assert report["direct"] == [False] and "URL" in report["buffered_reason"][0]
    assert report["verification"].startswith("nothing to verify"), report
    _, report = ts.load(upload(s3, write_tsafe(tmp_path / "m.tsafe", model.state_dict()), "into/m.tsafe"),
                        return_report=True)
    assert report["verification"] == "verified 4 of 4 tensors (XXH3-64)", report
    biases = ts.load(url, names=lambda n: n.endswith(".bias"))  # a predicate, as for local files
    assert list(biases) == ["0.bias", "2.bias"] and torch.equal(biases["2.bias"], model[2].bias.detach())
    assert ts.load(url, names=[]) == {}
    from tensorsafe import _load

    made = []  # pin_memory's allocator, replaced where nothing can pin (tests/python/test_load.py)
    monkeypatch.setattr(_load, "_pinned_empty", lambda shape, dtype: made.append(torch.empty(shape, dtype=dtype))
                        or made[-1])
    pinned = ts.load(url, pin_memory=True)
    assert [v.data_ptr() for v in pinned.values()] == [m.data_ptr() for m in made] and len(made) == 4
    assert all(torch.equal(pinned[k], v) for k, v in model.state_dict().items())


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.head = torch.nn.Linear(8, 50, bias=False)
        self.head.weight = self.emb.weight


def test_load_into_a_tied_module_from_s3(s3, tmp_path):
    # As for local files (tests/python/test_load.py): a tied entry the file
    # lacks is filled by its tie; one tied to nothing is named, or listed.
    src = Tied()
    tst.save_model(src, str(tmp_path / "tied.safetensors"))  # keeps one name of the tie
    url = upload(s3, tmp_path / "tied.safetensors", "into/tied.safetensors")
    dst = Tied()
    sd = dst.state_dict()
    out, report = ts.load(url, into=sd, return_report=True)
    assert len(report["tied"]) == 1 and report["missing"] == [] and set(out) == set(sd)
    assert torch.equal(dst.head.weight, src.emb.weight) and report["bytes_read"] == src.emb.weight.nbytes
    extra = torch.zeros(3)
    with pytest.raises(ts.NotFoundError, match=r'no tensor "extra" in s3://.*tied\.safetensors, which into='):
        ts.load(url, into={**dst.state_dict(), "extra": extra})
    _, report = ts.load(url, into={**dst.state_dict(), "extra": extra}, strict=False, return_report=True)
    assert report["missing"] == ["extra"] and torch.equal(extra, torch.zeros(3))
    half = Tied().to(torch.bfloat16)  # cast= as for local files: f32 read, cast into bf16 in place
    _, report = ts.load(url, into=half.state_dict(), cast=True, return_report=True)
    assert report["copied"] == {"emb.weight": "f32 -> bf16"} and len(report["tied"]) == 1
    assert torch.equal(half.head.weight, src.emb.weight.detach().to(torch.bfloat16))
    turl = upload(s3, write_tsafe(tmp_path / "tied.tsafe", {k: v.detach() for k, v in src.state_dict().items()}),
                  "into/tied.tsafe")  # both names of the tie, verified
    half = Tied().to(torch.bfloat16)
    _, report = ts.load(turl, into=half.state_dict(), cast=True, return_report=True)
    assert report["copied"] == {"emb.weight": "f32 -> bf16"} and report["tied"] == {"head.weight": "emb.weight"}
    assert report["verification"] == "verified 1 of 1 tensors (XXH3-64)", report
    assert torch.equal(half.head.weight, src.emb.weight.detach().to(torch.bfloat16))


def test_sharded_checkpoint_over_s3(s3, tmp_path, rng):
    sd = {f"layer.{i}.w": torch.from_numpy(rng.standard_normal((32, 8)).astype(np.float32)) for i in range(6)}
    tst.save_sharded(dict(sd), tmp_path / "ck", max_shard_size=2500)
    files = sorted(os.listdir(tmp_path / "ck"))
    assert len([f for f in files if f.endswith(".safetensors")]) > 1, files
    for f in files:
        upload(s3, tmp_path / "ck" / f, f"sharded/{f}")
    url = f"s3://{BUCKET}/sharded/model.safetensors.index.json"
    want = {k: v.numpy() for k, v in sd.items()}
    with ts.safe_open(url, framework="pt") as f:
        assert_same({k: f.get_tensor(k) for k in f.keys()}, want)
    assert_same(tst.load_file(url), want)
    assert_same(ts.load(url), want)
    # By its folder: the prefix is no object (HEAD 404), so the index under it.
    for folder in (f"s3://{BUCKET}/sharded", f"s3://{BUCKET}/sharded/"):
        with ts.safe_open(folder, framework="pt") as f:
            assert_same({k: f.get_tensor(k) for k in f.keys()}, want)
        assert_same(ts.load(folder), want)
        r = cli("info", folder)
        assert r.returncode == 0, r.stderr
        assert f"file:         s3://{BUCKET}/sharded/model.safetensors.index.json\n" in r.stdout, r.stdout
        assert "sharded (3 shards)" in r.stdout and re.search(r"^tensors: +6$", r.stdout, re.M), r.stdout
    r = cli("ls", f"s3://{BUCKET}/no-such-model")
    assert r.returncode != 0
    assert f"s3://{BUCKET}/no-such-model: no checkpoint at this URL" in r.stderr, r.stderr


def five_mib_checkpoint(s3, tmp_path, fmt, prefix):
    """6 tensors of 5 MiB in 3 shards of `fmt`, uploaded under `prefix`:
    (folder URL, local folder, the tensors)."""
    want = {}
    for i in range(6):
        a = np.full((1280, 1024), i, np.float32)
        a[i, 7] = -i
        want[f"w{i}"] = a
    tsn.save_sharded(want, str(tmp_path / prefix), max_shard_size=11_000_000, format=fmt)
    assert len(os.listdir(tmp_path / prefix)) == 4
    return upload_dir(s3, tmp_path / prefix, prefix) + "/", tmp_path / prefix, want


@pytest.mark.parametrize("fmt", ["safetensors", "tsafe"])
def test_checkpoint_at_a_url_is_opened_by_its_headers(s3, moto, tmp_path, fmt):
    """Listing a checkpoint at a URL reads each shard's header (or .tsafe
    index), not its data; a tensor costs its own bytes when it is read."""
    url, _, want = five_mib_checkpoint(s3, tmp_path, fmt, f"headers-{fmt}")
    total = 6 * (5 << 20)
    before = _native.remote_bytes()
    with ts.safe_open(url, framework="np") as f:
        assert f.keys() == sorted(want)
        assert f.get_slice("w4").get_shape() == [1280, 1024]
        opened = _native.remote_bytes() - before
        # Each shard's last MiB (every open of a URL fetches it) and first.
        assert opened <= 3 * (2 << 20) + (1 << 20), opened
        # A slice fetches the rows of dimension 0 it spans: 4.6 MiB here,
        # straight into the block (not the tensor's 5 MiB); 80 rows (320 KiB)
        # come in whole 1 MiB blocks.
        before = _native.remote_bytes()
        w4 = f.get_slice("w4")
        assert np.array_equal(w4[100:, 5:9], want["w4"][100:, 5:9])
        assert _native.remote_bytes() - before == (1280 - 100) * 4096
        before = _native.remote_bytes()
        for key in (np.s_[1279:1199:-3, 7], np.s_[1210], np.s_[1200:1200], np.s_[..., 3]):
            assert np.array_equal(w4[key], want["w4"][key]), key
        assert 0 < _native.remote_bytes() - before <= (2 << 20) + 5 * (1 << 20)
        before = _native.remote_bytes()
        assert np.array_equal(f.get_tensor("w1"), want["w1"])
        assert _native.remote_bytes() - before == 5 << 20
    with ts.safe_open(url, framework="pt") as f:
        before = _native.remote_bytes()
        assert torch.equal(f.get_tensor("w2"), torch.from_numpy(want["w2"]))
        assert _native.remote_bytes() - before == 5 << 20  # read once, into the tensor
        assert_same(f.get_tensors(), want)
    got, report = ts.load(url, return_report=True)
    assert_same(got, want)
    # .tsafe shards carry checksums, checked as the tensors arrive.
    assert (report["verified"], report["unverifiable"]) == ((6, 0) if fmt == "tsafe" else (0, 6)), report
    before = _native.remote_bytes()
    assert_same(ts.load(url, names=["w5"]), {"w5": want["w5"]})
    assert _native.remote_bytes() - before <= (5 << 20) + opened
    assert_same(ts.read(url)[0], want)

    # The CLI lists it for at most 2 requests a shard per open (info and ls
    # open it once each), where fetching each shard whole would take 3.
    mark = moto.requests(f"headers-{fmt}/model-")
    r = cli("info", url)
    assert r.returncode == 0 and "sharded (3 shards)" in r.stdout, r.stdout + r.stderr
    r = cli("ls", url)
    assert r.returncode == 0 and all(re.search(rf"^{k}\b", r.stdout, re.M) for k in want), r.stdout + r.stderr
    assert moto.requests(f"headers-{fmt}/model-") - mark <= 2 * 3 * 2
    r = cli("cat", url, "w3")
    assert r.returncode == 0 and "3" in r.stdout, r.stdout + r.stderr
    assert opened < total / 4
    # Converted shard by shard into a local sharded checkpoint.
    r = cli("convert", url, tmp_path / "local" / "model.tsafe.index.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(os.listdir(tmp_path / "local")) == [f"model-0000{i}-of-00003.tsafe" for i in (1, 2, 3)] + [
        "model.tsafe.index.json"]
    assert_same(ts.read(str(tmp_path / "local"))[0], want)


@pytest.mark.parametrize("fmt", ["safetensors", "gguf"])
def test_single_file_at_a_url_is_opened_by_its_header(s3, tmp_path, fmt):
    want = {f"w{i}": np.full((1280, 1024), i, np.float32) for i in range(3)}
    write(fmt, str(tmp_path / f"m.{fmt}"), want)
    url = upload(s3, tmp_path / f"m.{fmt}", f"single/m.{fmt}")
    before = _native.remote_bytes()
    with ts.safe_open(url, framework="np") as f:
        assert f.keys() == sorted(want)
        assert _native.remote_bytes() - before <= 4 << 20  # format sniff and open: last MiB and first, twice
        before = _native.remote_bytes()
        assert np.array_equal(f.get_tensor("w1"), want["w1"])
        assert _native.remote_bytes() - before == 5 << 20
    r = cli("ls", url)
    assert r.returncode == 0 and all(re.search(rf"^{k}\b", r.stdout, re.M) for k in want), r.stdout + r.stderr
    r = cli("cat", url, "w2")
    assert r.returncode == 0 and "2" in r.stdout, r.stdout + r.stderr


class _UrlTensors(torch.utils.data.Dataset):
    """Item i: tensor w{i} of a checkpoint opened once, at a URL, in the parent."""

    def __init__(self, f, n):
        self.f, self.n = f, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.f.get_tensor(f"w{i}")[i, 7]


def test_forked_dataloader_workers_read_a_checkpoint_opened_at_a_url(s3, tmp_path):
    """The handle is opened, and read, in the parent; forked workers fetch
    their tensors through it (each process its own connections)."""
    url, _, want = five_mib_checkpoint(s3, tmp_path, "safetensors", "forked")
    with ts.safe_open(url, framework="pt") as f:
        assert f.get_tensor("w0")[0, 7] == 0
        loader = torch.utils.data.DataLoader(_UrlTensors(f, len(want)), batch_size=2, num_workers=2,
                                             multiprocessing_context="fork")
        assert torch.cat(list(loader)).tolist() == [-i for i in range(len(want))]


def test_many_small_tensors_at_a_url_load_in_few_requests(s3, tmp_path):
    """2,048 tensors of 4 KiB: load reads them as one run of neighbours,
    not one cached block's lookup (and a request for each missing one) per
    tensor."""
    want = {f"t{i:04d}": np.full((32, 32), i, np.float32) for i in range(2048)}
    write("safetensors", str(tmp_path / "small.safetensors"), want)
    url = upload(s3, tmp_path / "small.safetensors", "small/small.safetensors")
    before = _native.remote_requests()
    assert_same(ts.load(url, framework="np"), want)
    # The format sniff and the open (the object's end, its first MiB), then
    # the 8 MiB of data as one ranged read.
    assert _native.remote_requests() - before <= 5


def test_damaged_shards_at_a_url_are_named(s3, tmp_path):
    url, local, _ = five_mib_checkpoint(s3, tmp_path, "tsafe", "damaged-tsafe")
    shard = "model-00002-of-00003.tsafe"
    offset = ts.open(str(local / shard)).info("w3")["offset"]
    data = bytearray((local / shard).read_bytes())
    data[offset + 12345] ^= 0x10
    (tmp_path / "flipped").write_bytes(bytes(data))
    shard_url = upload(s3, tmp_path / "flipped", f"damaged-tsafe/{shard}")
    with ts.safe_open(url, framework="np") as f:  # opening reads no data
        assert f.keys() == [f"w{i}" for i in range(6)]
    with pytest.raises(ts.CorruptionError, match=re.escape(f"{shard_url}: tensor \"w3\": data checksum")):
        ts.verify(url)
    r = cli("verify", url)
    assert r.returncode != 0 and shard_url in r.stderr and '"w3"' in r.stderr, r.stdout + r.stderr
    with pytest.raises(ts.CorruptionError, match=re.escape(f'{shard_url}: tensor "w3": data checksum')):
        ts.load(url, framework="np")
    assert ts.load(url, names=["w3"], verify=False)["w3"].shape == (1280, 1024)  # the caller's choice

    url, local, _ = five_mib_checkpoint(s3, tmp_path, "safetensors", "damaged-st")
    shard = "model-00003-of-00003.safetensors"
    (tmp_path / "cut").write_bytes((local / shard).read_bytes()[: 6 << 20])
    shard_url = upload(s3, tmp_path / "cut", f"damaged-st/{shard}")
    with pytest.raises(ts.CorruptionError, match=re.escape(shard_url + ": ")):
        ts.safe_open(url, framework="np")


def test_checkpoint_by_http_folder_url(nginx, rng):
    """An http server has no folders: one ending in "/" is searched for the
    checkpoint files; without the "/", nginx answers 301 (to the "/" form),
    which is not followed, and the error says so."""
    www, base = nginx
    want = {f"layer.{i}.w": rng.standard_normal((32, 8)).astype(np.float32) for i in range(6)}
    tsn.save_sharded(want, str(www / "ck"), max_shard_size=2500)
    tsn.save_file(want, str(www / "model.safetensors"))
    for folder in (base + "/ck/", base + "/"):
        with ts.safe_open(folder, framework="np") as f:
            assert_same({k: f.get_tensor(k) for k in f.keys()}, want)
        assert_same(ts.load(folder, framework="np"), want)
    r = cli("ls", base + "/ck/")
    assert r.returncode == 0, r.stderr
    assert all(re.search(rf"^{re.escape(k)}\b", r.stdout, re.M) for k in want), r.stdout
    redirect = re.escape(base + "/ck") + r" last \d+ bytes: HTTP 301 \(redirects are not followed\)"
    with pytest.raises(ts.IOError, match=redirect):
        ts.safe_open(base + "/ck", framework="np")
    with pytest.raises(ts.NotFoundError, match=re.escape(base + "/nothing/") + ": no checkpoint at this URL"):
        ts.safe_open(base + "/nothing/", framework="np")


def test_tsafe_of_100k_tensors_opens_in_few_requests(s3, moto, tmp_path):
    path = tmp_path / "many.tsafe"
    with ts.Writer(str(path)) as w:
        for i in range(100_000):
            w.add(f"t{i:06d}", np.full(4, i, np.int32))
    url = upload(s3, path, "many/many.tsafe")
    before = moto.requests("many/many.tsafe")
    r = ts.open(url)
    assert len(r) == 100_000
    opened = moto.requests("many/many.tsafe") - before
    assert opened <= 5, opened
    assert np.array_equal(r["t054321"], np.full(4, 54321, np.int32))
    # One tensor: the 1 MiB block of the index holding its entry, then its data.
    assert moto.requests("many/many.tsafe") - before <= opened + 2


def cli(*args):
    exe = shutil.which("tensorsafe", path=os.path.dirname(sys.executable))
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_cli_on_s3_urls(s3, tmp_path, rng):
    want = sample(rng)
    write("tsafe", str(tmp_path / "m.tsafe"), want)
    url = upload(s3, tmp_path / "m.tsafe", "cli/m.tsafe")
    size = (tmp_path / "m.tsafe").stat().st_size

    r = cli("info", url)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"file size:\s+{size} bytes", r.stdout), r.stdout
    assert re.search(r"tensors:\s+4\b", r.stdout), r.stdout
    r = cli("ls", url)
    assert r.returncode == 0 and all(k in r.stdout for k in want), r.stdout + r.stderr
    r = cli("cat", url, "ids")
    assert r.returncode == 0 and str(want["ids"][0]) in r.stdout, r.stdout + r.stderr
    r = cli("verify", url)
    assert r.returncode == 0 and "4 tensors" in r.stdout, r.stdout + r.stderr
    r = cli("convert", url, tmp_path / "out.safetensors")
    assert r.returncode == 0, r.stderr
    assert_same(tsn.load_file(str(tmp_path / "out.safetensors")), want)


def test_missing_object_and_bucket_name_the_url(s3, tmp_path):
    for url in (f"s3://{BUCKET}/no/such.tsafe", "s3://no-such-bucket-here/m.safetensors"):
        with pytest.raises(ts.NotFoundError, match=re.escape(url)):
            ts.open(url)
        with pytest.raises(ts.NotFoundError, match=re.escape(url)):
            ts.load(url)
        r = cli("info", url)
        assert r.returncode != 0 and url in r.stderr, r.stderr


def test_no_credentials_says_where_it_looked(s3, tmp_path, monkeypatch):
    write("tsafe", str(tmp_path / "m.tsafe"), {"a": np.ones(3, np.float32)})
    url = upload(s3, tmp_path / "m.tsafe", "creds/m.tsafe")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    r = cli("info", url)
    assert r.returncode != 0
    assert "AWS_ACCESS_KEY_ID" in r.stderr and str(tmp_path / "none") in r.stderr, r.stderr


def test_a_flipped_byte_in_the_object_is_caught_on_load(s3, tmp_path, rng):
    want = {"w": rng.standard_normal((256, 64)).astype(np.float32)}
    write("tsafe", str(tmp_path / "m.tsafe"), want)
    offset = ts.open(str(tmp_path / "m.tsafe")).info("w")["offset"]
    data = bytearray((tmp_path / "m.tsafe").read_bytes())
    data[offset + 1000] ^= 0x40
    (tmp_path / "bad.tsafe").write_bytes(bytes(data))
    url = upload(s3, tmp_path / "bad.tsafe", "flip/bad.tsafe")
    with pytest.raises(ts.CorruptionError, match="w"):
        ts.load(url)
    with pytest.raises(ts.CorruptionError):
        ts.verify(url)
    assert ts.load(url, verify=False)["w"].shape == (256, 64)  # the caller's choice


# -- datasets -----------------------------------------------------------------------

def native_dataset(path, n=1000, per_shard=100):
    from tensorsafe import dataset as tds

    with tds.Writer(str(path), shard_samples=per_shard) as w:
        for i in range(n):
            w.add({"x": np.full(4, i * 3, np.int32), "label": i})
    return path


def test_dataset_over_s3_two_ranks_two_workers_exactly_once(s3, tmp_path):
    url = upload_dir(s3, native_dataset(tmp_path / "ds"), "ds/ranks")
    check_two_ranks_two_workers(url, tmp_path / "cache", "label", "x", 1000)


def test_dataset_cache_limit_over_s3(s3, tmp_path):
    from tensorsafe import dataset as tds

    local = native_dataset(tmp_path / "ds")
    url = upload_dir(s3, local, "ds/limit")
    shard_bytes = max(s["bytes"] for s in tds.Dataset(str(local)).shards)
    # Room for 4 of the 10 shards: the one being read (max_open_shards=1),
    # the previous one while the loop's last sample still holds it, and the
    # two the iterator prefetches.
    limit = 4 * shard_bytes
    cache = tmp_path / "cache"
    ds = tds.Dataset(url, cache_dir=cache, max_open_shards=1, cache_limit=limit)
    assert [int(s["label"]) for s in ds] == list(range(1000))
    held = sum(f.stat().st_size for f in (cache / "files").iterdir())
    assert 0 < held <= limit, (held, limit)
    assert tds.verify(url, cache_dir=cache, cache_limit=limit) == []
    with pytest.raises(ts.InvalidArgumentError, match="cache_limit"):
        tds.Dataset(url, cache_dir=cache, cache_limit=-1)


def test_dataset_cli_over_s3(s3, tmp_path):
    from tensorsafe import dataset as tds

    local = native_dataset(tmp_path / "ds")
    url = upload_dir(s3, local, "ds/cli")
    four_shards = 4 * max(s["bytes"] for s in tds.Dataset(str(local)).shards)
    cache = tmp_path / "cache"
    r = cli("dataset", "info", url, "--cache-dir", cache)
    assert r.returncode == 0 and "samples: 1000" in r.stdout.replace("  ", " "), r.stdout + r.stderr
    r = cli("dataset", "verify", url, "--cache-dir", cache, "--cache-limit", four_shards)
    assert r.returncode == 0 and "1000 samples in 10 shards verified" in r.stdout, r.stdout + r.stderr
    r = cli("dataset", "cat", url, "17", "--cache-dir", cache)
    assert r.returncode == 0 and json.loads(r.stdout)["label"] == 17, r.stdout + r.stderr


def test_a_1_gib_safetensors_file_loads_equal_to_the_local_one(s3, moto, tmp_path):
    """Whole-file loads as parallel ranged GETs (8 MiB each): 1 GiB in 4
    tensors, one of them not a multiple of the range size."""
    rng = np.random.default_rng(11)
    block = rng.standard_normal(1 << 20).astype(np.float32)  # 4 MiB, tiled: cheap to make, unequal per tensor
    sizes = [96 << 20, 64 << 20, 63 << 20, (1 << 28) - (96 << 20) - (64 << 20) - (63 << 20)]
    want = {f"w{i}": np.roll(np.resize(block, n), i) for i, n in enumerate(sizes)}
    local = tmp_path / "big.safetensors"
    tsn.save_file(want, str(local))
    assert local.stat().st_size > 1 << 30
    url = upload(s3, local, "big/big.safetensors")
    before = moto.requests("big/big.safetensors")
    got = tsn.load_file(url)
    gets = moto.requests("big/big.safetensors") - before
    assert set(got) == set(want)
    for k in want:
        assert np.array_equal(got[k], want[k]), k
    del got
    assert 128 <= gets <= 160, gets  # 1 GiB / 8 MiB ranges, plus the open
