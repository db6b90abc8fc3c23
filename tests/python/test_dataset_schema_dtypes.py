"""Dtype strings in dataset schemas read as NumPy reads them; strings NumPy
and tensorsafe read differently are refused naming both readings; the list
form (DATASET.md §2.1, what Dataset.schema returns) keeps the format's
names."""

import ml_dtypes
import numpy as np
import pytest

import tensorsafe
from tensorsafe import dataset as tds


@pytest.mark.parametrize("spec,want", [
    ("int64", "i64"), ("<i8", "i64"), ("i2", "i16"), ("f4", "f32"), ("float16", "f16"), ("u1", "u8"),
    ("bool", "bool"), ("c8", "c64"),  # NumPy spellings, NumPy's meaning
    ("bf16", "bf16"), ("f32", "f32"), ("i32", "i32"), ("f8_e4m3fn", "f8_e4m3fn"),  # names NumPy has no other reading of
    (np.int8, "i8"), (np.dtype("uint32"), "u32"), (ml_dtypes.bfloat16, "bf16"),
])
def test_schema_dtype_strings_mean_what_numpy_says(tmp_path, spec, want):
    with tds.Writer(tmp_path / "ds", schema={"x": (spec, (2,))}, sync=False) as w:
        assert w.schema == [{"name": "x", "kind": "tensor", "dtype": want, "shape": [2]}]


@pytest.mark.parametrize("text,numpy_reading,ours", [
    ("i8", "int64", "int8"), ("u8", "uint64", "uint8"), ("i4", "int32", "i4"), ("u4", "uint32", "u4"),
    ("f16", "float128", "float16"),
])
def test_ambiguous_strings_are_refused_naming_both(tmp_path, text, numpy_reading, ours):
    with pytest.raises(tensorsafe.InvalidArgumentError) as e:
        tds.Writer(tmp_path / "ds", schema={"x": (text, (2,))})
    msg = str(e.value)
    assert f"dtype {text!r} is ambiguous: NumPy reads it as {numpy_reading}" in msg, msg
    assert f"tensorsafe's name {text!r} is {ours}" in msg, msg
    assert not (tmp_path / "ds" / "index.json").exists()


def test_list_schema_keeps_the_format_names(tmp_path):
    with tds.Writer(tmp_path / "a", schema={"x": (np.int8, (3,))}, sync=False) as w:
        w.add({"x": np.arange(3, dtype=np.int8)})
    listed = tds.Dataset(tmp_path / "a").schema  # [{"dtype": "i8", ...}]: the format's name for int8
    assert listed[0]["dtype"] == "i8"
    with tds.Writer(tmp_path / "b", schema=listed, sync=False) as w:  # round-trips unchanged
        w.add({"x": np.arange(3, dtype=np.int8)})
    assert tds.Dataset(tmp_path / "b")[0]["x"].dtype == np.int8
