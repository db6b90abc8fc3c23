"""The progress bars of `tensorsafe dataset create` / `verify`, drawn on a
terminal: samples and shards counted as counts, not shown as bytes."""

import os
import pty
import re
import subprocess
import sys

from tensorsafe import dataset as tds


def run_in_pty(*args):
    """Runs the CLI with stderr on a terminal (where it draws its bars)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tensorsafe"), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + b"".join(chunks).decode()
    return b"".join(chunks).decode()


def test_progress_bars_count_samples_and_shards(tmp_path):
    src = tmp_path / "src"
    with tds.Writer(src, shard_samples=10, sync=False) as w:
        for i in range(1234):
            w.add({"id": i})
    err = run_in_pty("dataset", "create", tmp_path / "copy", "--from", src, "--max-shard-samples", "100")
    assert re.search(r"writing \[#+\] 100%  1,234 of 1,234 samples", err), err
    assert "KiB" not in err and " B " not in err
    err = run_in_pty("dataset", "verify", tmp_path / "copy")
    assert re.search(r"verifying \[#+\] 100%  13 of 13 shards", err), err
    assert "KiB" not in err
