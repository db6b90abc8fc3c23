#!/usr/bin/env python3
"""Writes the .npy/.npz golden files of tests/formats/npy_test.cc with the real
NumPy and ml_dtypes. Run from the repo root:

    python3 -m venv .venv && .venv/bin/pip install 'numpy<2.2' ml-dtypes
    .venv/bin/python tests/golden/npy/make_golden.py

Made with numpy 2.1.3 and ml_dtypes 0.6.0. The files are committed; the test
checks our reader against them and our writer's bytes against them.

Naming: <what>.npy is little-endian C order (the writer must reproduce it
byte for byte); be_*, fortran_*, v2_*, v3_* are reader-only inputs whose
decoded tensor must equal the file named in PAIRS.txt.
"""
import os
import numpy as np
import ml_dtypes

OUT = os.path.dirname(os.path.abspath(__file__))


def save(name, a, **kw):
    with open(os.path.join(OUT, name), "wb") as f:
        np.lib.format.write_array(f, a, allow_pickle=False, **kw)


def main():
    ar = np.arange
    # Writer goldens: every dtype NumPy or ml_dtypes can hold.
    save("f32_2x3.npy", ar(6, dtype="<f4").reshape(2, 3) / 4)
    save("f64_scalar.npy", np.array(1.5, dtype="<f8"))
    save("i32_0x3.npy", np.zeros((0, 3), dtype="<i4"))
    save("bool_5.npy", np.array([True, False, True, True, False]))
    save("u8_4.npy", ar(250, 254, dtype="u1"))
    save("i8_4.npy", ar(-2, 2, dtype="i1"))
    save("u16_3.npy", np.array([0, 1, 65535], dtype="<u2"))
    save("i16_3.npy", np.array([-32768, 0, 32767], dtype="<i2"))
    save("u32_3.npy", np.array([0, 7, 2**32 - 1], dtype="<u4"))
    save("i64_3.npy", np.array([-(2**63), 0, 2**63 - 1], dtype="<i8"))
    save("u64_2x1.npy", np.array([[2**64 - 1], [3]], dtype="<u8"))
    save("f16_4.npy", np.array([0, 1, -2.5, 65504], dtype="<f2"))
    save("c64_2.npy", np.array([1 + 2j, -3.5 - 0.25j], dtype="<c8"))
    save("c128_2.npy", np.array([1 + 2j, -3.5 - 0.25j], dtype="<c16"))
    save("bf16_2x2.npy", np.array([[1, -2], [0.5, 3]], dtype=ml_dtypes.bfloat16))
    save("f8_e5m2_3.npy", np.array([1, -2, 0.5], dtype=ml_dtypes.float8_e5m2))
    save("f8_e4m3fn_3.npy", np.array([1, -2, 0.5], dtype=ml_dtypes.float8_e4m3fn))
    # 36 dims of 1: the dict ends exactly on a 64-byte boundary, so NumPy
    # pads a whole extra 64 bytes.
    save("f32_rank36.npy", np.zeros((1,) * 36, dtype="<f4"))
    save("i64_big_dims.npy", np.zeros((12345678901, 0, 7), dtype="<i8"))

    # Reader-only inputs and the LE C-order file each must decode to.
    pairs = []
    base = ar(24, dtype="<f4").reshape(2, 3, 4)
    save("f32_2x3x4.npy", base)
    save("fortran_f32_2x3x4.npy", np.asfortranarray(base))
    pairs.append(("fortran_f32_2x3x4.npy", "f32_2x3x4.npy"))
    save("be_i32_2x3.npy", ar(-3, 3, dtype=">i4").reshape(2, 3))
    save("i32_2x3.npy", ar(-3, 3, dtype="<i4").reshape(2, 3))
    pairs.append(("be_i32_2x3.npy", "i32_2x3.npy"))
    save("be_c128_2.npy", np.array([1 + 2j, -3.5 - 0.25j], dtype=">c16"))
    pairs.append(("be_c128_2.npy", "c128_2.npy"))
    save("be_fortran_f64_3x2.npy", np.asfortranarray(ar(6, dtype=">f8").reshape(3, 2)))
    save("f64_3x2.npy", ar(6, dtype="<f8").reshape(3, 2))
    pairs.append(("be_fortran_f64_3x2.npy", "f64_3x2.npy"))
    save("v2_f32_2x3.npy", ar(6, dtype="<f4").reshape(2, 3) / 4, version=(2, 0))
    pairs.append(("v2_f32_2x3.npy", "f32_2x3.npy"))
    save("v3_f32_2x3.npy", ar(6, dtype="<f4").reshape(2, 3) / 4, version=(3, 0))
    pairs.append(("v3_f32_2x3.npy", "f32_2x3.npy"))
    with open(os.path.join(OUT, "PAIRS.txt"), "w") as f:
        for a, b in pairs:
            f.write(f"{a} {b}\n")

    # npz: stored and deflated, with a non-ASCII member name (UTF-8 flag).
    arrays = {"w": ar(6, dtype="<f4").reshape(2, 3), "b": np.array([1, 2], dtype="<i8"),
              "\u00e9t\u00e9": np.array(True)}
    np.savez(os.path.join(OUT, "stored.npz"), **arrays)
    np.savez_compressed(os.path.join(OUT, "deflated.npz"), **arrays)
    # The empty key: np.savez names its member ".npy", np.load reads "" back.
    np.savez(os.path.join(OUT, "empty_name.npz"), **{"": np.array([1, 2, 3], dtype="<i4")})


if __name__ == "__main__":
    main()
