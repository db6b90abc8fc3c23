"""Shared fixtures of the Python tests. Tests are hermetic: files go to
pytest's tmp_path; random data comes from a seed printed in the header."""

import os
import random
import socket
import subprocess
import time

import numpy as np
import pytest

SEED = int(os.environ.get("TS_TEST_SEED", random.SystemRandom().randrange(1 << 31)))


def pytest_report_header(config):
    return f"tensorsafe python tests: seed {SEED} (rerun with TS_TEST_SEED={SEED})"


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def nginx(tmp_path):
    """A foreground, single-process nginx serving tmp_path/www at /data/."""
    binary = os.environ.get("TS_NGINX", "/usr/sbin/nginx")
    if not os.path.exists(binary):
        pytest.skip("nginx not installed (scripts/install-deps.sh)")
    www, run = tmp_path / "www", tmp_path / "nginx"
    www.mkdir()
    run.mkdir()
    port = _free_port()
    conf = run / "nginx.conf"
    user = "user root;\n" if os.geteuid() == 0 else ""
    temps = "".join(f"  {k}_temp_path {run}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf.write_text(f"{user}daemon off;\nmaster_process off;\nworker_processes 1;\npid {run}/nginx.pid;\n"
                    f"error_log {run}/error.log warn;\nevents {{ worker_connections 64; }}\nhttp {{\n"
                    f"  access_log {run}/access.log;\n{temps}  types {{ }}\n  default_type application/octet-stream;\n"
                    f"  server {{ listen 127.0.0.1:{port}; location /data/ {{ alias {www}/; }} }}\n}}\n")
    proc = subprocess.Popen([binary, "-p", f"{run}/", "-c", str(conf), "-e", f"{run}/error.log"])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("nginx did not start: " + (run / "error.log").read_text())
        yield www, f"http://127.0.0.1:{port}/data"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
