"""A real S3 server for tests: moto_server from .venv on 127.0.0.1, started
once per test module and stopped after it, with fake credentials; requests
are counted in its log. Also the job that reads a dataset at a URL from 2
ranks x 2 DataLoader workers."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

MOTO = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
BUCKET = "tensors"


class Moto:
    def __init__(self, log_path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log_path = log_path
        env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([MOTO, "-H", "127.0.0.1", "-p", str(self.port)], env=env,
                                     stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start: " + open(log_path).read()[-2000:])
                time.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def requests(self, key, method="GET|HEAD|PUT|POST|DELETE"):
        """Requests (of ``method``, a regex alternation) for objects whose
        key contains ``key`` so far."""
        time.sleep(0.1)
        # werkzeug colours some status lines (206 among them): strip the codes.
        lines = (re.sub(r"\x1b\[[0-9;]*m", "", line) for line in open(self.log_path, errors="replace"))
        return sum(1 for line in lines if f"/{BUCKET}/" in line and key in line
                   and re.search(rf'"({method}) ', line))

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    server = Moto(str(tmp_path_factory.mktemp("moto") / "server.log"))
    yield server
    server.stop()


@pytest.fixture
def s3(moto, monkeypatch, tmp_path):
    """A client of the server, and the environment the AWS tools read (which
    tensorsafe reads too), with no ~/.aws in the way."""
    for k, v in dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1",
                     AWS_ENDPOINT_URL=moto.endpoint, AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
                     AWS_CONFIG_FILE=str(tmp_path / "none")).items():
        monkeypatch.setenv(k, v)
    boto3 = pytest.importorskip("boto3")
    for k in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "S3_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    client = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1")
    try:
        client.create_bucket(Bucket=BUCKET)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    return client


def upload(s3, local, key):
    s3.upload_file(str(local), BUCKET, key)
    return f"s3://{BUCKET}/{key}"



def upload_dir(s3, local, prefix):
    for name in sorted(os.listdir(local)):
        upload(s3, os.path.join(local, name), f"{prefix}/{name}")
    return f"s3://{BUCKET}/{prefix}"


# One rank: 2 epochs of StreamingDataset(URL, shuffle) through 2 persistent
# forked workers, batches by default_collate or as lists; prints each
# epoch's (label, first value of field) pairs.
RANK_SCRIPT = r"""
import json, sys, torch
from tensorsafe import dataset as tds
url, cache, label, field, collate = sys.argv[1:6]
ds = tds.StreamingDataset(url, shuffle=True, seed=7, cache_dir=cache)
seen = []
for epoch in range(2):
    ds.set_epoch(epoch)
    # "list": lists of samples, for fields with a shape per sample.
    loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2, persistent_workers=True,
                                         collate_fn=list if collate == "list" else None)
    got = []
    for batch in loader:
        if collate == "list":
            got += [(int(s[label]), int(s[field][0])) for s in batch]
        else:
            got += [(int(l), int(x[0])) for l, x in zip(batch[label], batch[field])]
    seen.append(got)
print("RESULT " + json.dumps(seen))
"""


def check_two_ranks_two_workers(url, cache, label, field, samples, collate="default"):
    """Runs RANK_SCRIPT as ranks 0 and 1 of one node (one cache directory)
    and checks that each epoch sees every sample exactly once, with
    field[0] == 3 * label as the datasets here are written, and that the
    two epochs differ."""
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, url, str(cache), label, field, collate], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-4000:]
        seen = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
        results.append([[tuple(pair) for pair in epoch] for epoch in seen])
    for epoch in range(2):
        got = results[0][epoch] + results[1][epoch]
        assert sorted(lab for lab, _ in got) == list(range(samples)), epoch  # exactly once
        assert all(v == 3 * lab for lab, v in got)  # equal to what was written
        assert not set(results[0][epoch]) & set(results[1][epoch])
    assert [lab for lab, _ in results[0][0]] != [lab for lab, _ in results[0][1]]  # epochs differ
