"""A real S3 server for tests: moto_server from .venv on 127.0.0.1, started
once per test module and stopped after it, with fake credentials; requests
are counted in its log."""

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

    def requests(self, key):
        """Requests for objects whose key contains ``key`` so far."""
        time.sleep(0.1)
        # werkzeug colours some status lines (206 among them): strip the codes.
        lines = (re.sub(r"\x1b\[[0-9;]*m", "", line) for line in open(self.log_path, errors="replace"))
        return sum(1 for line in lines if f"/{BUCKET}/" in line and key in line
                   and re.search(r'"(GET|HEAD|PUT|POST|DELETE) ', line))

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
