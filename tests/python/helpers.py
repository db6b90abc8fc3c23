"""Helpers shared by the tests: dtypes and random arrays of each; a thread
whose exception reaches the test."""

import threading

import ml_dtypes
import numpy as np

# tensorsafe name -> NumPy dtype, for every dtype NumPy (with ml_dtypes) holds.
NUMPY_DTYPES = {
    "bool": np.bool_, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "f16": np.float16,
    "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64, "c64": np.complex64,
    "c128": np.complex128, "f8_e4m3fn": ml_dtypes.float8_e4m3fn, "f8_e5m2": ml_dtypes.float8_e5m2,
    "f8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "f8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "f8_e8m0": ml_dtypes.float8_e8m0fnu,
}
# The ones safetensors also holds (it has no complex128).
SAFETENSORS_NUMPY = {k: v for k, v in NUMPY_DTYPES.items() if k != "c128"}


def random_array(rng, dtype, shape):
    """Random bits of `dtype`: every bit pattern is fair game for a byte-exact
    round trip (NaN payloads included)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        raw = raw & 1
    return raw.view(dtype).reshape(shape)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def in_thread(fn, *args, **kw):
    """Runs fn(*args, **kw) in a daemon thread. Returns join(timeout=60),
    which fails the test if the thread is still running then and re-raises
    what the thread raised."""
    box = {}

    def run():
        try:
            fn(*args, **kw)
        except BaseException as e:  # noqa: BLE001 - re-raised by join()
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join(timeout=60):
        t.join(timeout)
        assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} still running after {timeout} s"
        if "error" in box:
            raise box["error"]

    return join
