"""Makes nul_infos.ten with the real webdataset tenbin module.

Run from the repository root: .venv/bin/python tests/golden/tenbin/make.py
(webdataset 1.0.2 made the checked-in file; its sha256 is in README.md).
"""
from pathlib import Path

import numpy as np
from webdataset import tenbin

arrays = [np.array([7, 8, 9], dtype="int32"), np.array([1, 2], dtype="uint8")]
data = bytes(tenbin.encode_buffer(arrays, infos=["\0x", "a\0b"]))
assert tenbin.decode_buffer(data, infos=True)[1] == ["x", "a\0b"]
Path(__file__).with_name("nul_infos.ten").write_bytes(data)
