"""Shared fixtures of the Python tests. Tests are hermetic: files go to
pytest's tmp_path; random data comes from a seed printed in the header."""

import os
import random

import numpy as np
import pytest

SEED = int(os.environ.get("TS_TEST_SEED", random.SystemRandom().randrange(1 << 31)))


def pytest_report_header(config):
    return f"tensorsafe python tests: seed {SEED} (rerun with TS_TEST_SEED={SEED})"


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)
