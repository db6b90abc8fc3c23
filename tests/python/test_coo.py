"""Native sparse COO tensors (format 1.1) in Python: the file lists, verifies
and serves its dense tensors, and the dense readers refuse the sparse one with
a clear error rather than misread its bytes."""
import os

import numpy as np
import pytest

import tensorsafe

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "golden", "tsafe", "coo.tsafe")


def test_dense_neighbour_reads_and_sparse_is_refused():
    r = tensorsafe.open(GOLDEN)
    assert r.keys() == ["s", "d"]
    np.testing.assert_array_equal(r["d"], np.array([7, 8], dtype=np.int32))
    with pytest.raises(tensorsafe.UnsupportedError, match='"s" is sparse COO'):
        r["s"]
    # 48 bytes of indices padded to 64, then 3 f32 values; plus d's 8 bytes.
    assert tensorsafe.verify(GOLDEN) == {"tensors": 2, "data_bytes": 76 + 8}
