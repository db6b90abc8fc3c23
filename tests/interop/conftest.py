"""Shared pieces of the interop tests: the seed, the CLI, and how to run it.

The seed comes from TS_SEED or the system; it is printed in the header and
in the closing summary, so any failure can be replayed with TS_SEED=N.
"""
import os
import random
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("TS_SEED") or random.SystemRandom().randrange(2**32))


def pytest_report_header(config):
    return f"interop seed: {SEED} (replay with TS_SEED={SEED})"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"interop seed: {SEED} (replay with TS_SEED={SEED})")


@pytest.fixture
def rng(request):
    """A generator per test, from the session seed and the test's name."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.name.encode())])


@pytest.fixture(scope="session")
def cli():
    """Path of the built `tensorsafe` binary (TENSORSAFE_CLI, else build/bin)."""
    path = Path(os.environ.get("TENSORSAFE_CLI", ROOT / "build" / "bin" / "tensorsafe"))
    if not path.exists():
        message = f"{path} is not built (make build, or set TENSORSAFE_CLI)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def ts(cli):
    """ts("convert", a, b, ...) runs the CLI and returns its stdout; a
    non-zero exit fails the test with the CLI's stderr. check=False returns
    the CompletedProcess instead."""

    def run(*args, check=True):
        p = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True)
        if not check:
            return p
        assert p.returncode == 0, f"tensorsafe {' '.join(map(str, args))} exited {p.returncode}: {p.stderr}"
        return p.stdout

    return run
