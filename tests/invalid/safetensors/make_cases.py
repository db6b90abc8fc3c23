#!/usr/bin/env python3
"""Writes the named edge-case files of this folder and cases.json.

Each case is a tiny file with our expected verdict (status code name and a
message fragment; "ok" for files we accept) and the reference crate's verdict,
observed by running the real `safetensors` package on it when this script
runs: the script stops if the crate's verdict differs from what the case
claims, so cases.json documents the crate's behaviour, not a guess.

Run from the worktree root:
    .venv/bin/python tests/invalid/safetensors/make_cases.py
tests/formats/safetensors_cases_test.cc replays cases.json against our reader.
"""
import json
import os
import struct

import safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
U64_MAX = 2**64 - 1


def st(header, data=b"", n=None):
    """A file: u64 LE length (n, default len(header)), header bytes, data."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    return struct.pack("<Q", len(header) if n is None else n) + header + data


def entry(dtype, shape, begin, end, extra=""):
    return ('{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]%s}'
            % (dtype, json.dumps(shape).replace(" ", ""), begin, end, extra))


def one(name, dtype, shape, begin, end, extra=""):
    return "{%s:%s}" % (json.dumps(name), entry(dtype, shape, begin, end, extra))


F32_2 = one("a", "F32", [2], 0, 8)
Z = one("a", "F32", [0], 0, 0)  # a valid zero-size tensor
DEEP = lambda levels: '{"a":%s}' % entry("F32", [0], 0, 0, ',"x":' + "[" * levels + "]" * levels)

# (name, bytes, crate accepts?, our code, our message fragment, note)
CASES = [
    # Accepted by the crate and by us.
    ("ok_whitespace_around", st(" \t\r\n" + Z + " \n"), True, "ok", "", "JSON whitespace before and after"),
    ("ok_n_not_multiple_of_8", st("{}"), True, "ok", "", "N = 2"),
    ("ok_extra_fields", st(one("a", "F32", [0], 0, 0, ',"x":{"y":[1,{"z":null}],"f":-1.5e3,"b":true}')), True, "ok", "",
     "unknown fields in an entry are ignored"),
    ("ok_metadata_null", st('{"__metadata__":null}'), True, "ok", "", "null metadata reads as absent"),
    ("ok_metadata_last", st('{"a":%s,"__metadata__":{"k":"v"}}' % entry("F32", [0], 0, 0)), True, "ok", "", ""),
    ("ok_metadata_escaped_key", st('{"\\u005f_metadata__":{"k":"v"}}'), True, "ok", "", "escapes in keys are decoded"),
    ("ok_empty_name", st(one("", "U8", [1], 0, 1), b"\x07"), True, "ok", "", ""),
    ("ok_zero_size_shared", st('{"a":%s,"b":%s,"c":%s}' % (entry("F32", [0], 0, 0), entry("I8", [2, 0], 0, 0),
                                                           entry("U8", [1], 0, 1)), b"\x01"), True, "ok", "", ""),
    ("ok_any_key_order", st('{"b":%s,"a":%s}' % (entry("U8", [1], 1, 2), entry("U8", [1], 0, 1)), b"\x01\x02"),
     True, "ok", "", "reader sorts by offsets"),
    ("ok_unaligned_offsets", st('{"a":%s,"b":%s}' % (entry("U8", [1], 0, 1), entry("F32", [1], 1, 5)), b"\0" * 5),
     True, "ok", "", "no alignment is required"),
    ("ok_del_in_name", st('{"a\x7fb":%s}' % entry("U8", [0], 0, 0)), True, "ok", "", ""),
    ("ok_tiny_float_extra", st(one("a", "U8", [0], 0, 0, ',"x":1e-400')), True, "ok", "", "underflows to 0"),
    ("ok_bigint_extra", st(one("a", "U8", [0], 0, 0, ',"x":123456789012345678901234567890')), True, "ok", "", ""),
    ("ok_depth_127", st(DEEP(125)), True, "ok", "", "the deepest nesting the crate accepts"),
    ("ok_scalar", st(one("s", "F64", [], 0, 8), b"\0" * 8), True, "ok", "", "shape [] is one element"),
    ("ok_f6_four", st(one("f", "F6_E2M3", [4], 0, 3), b"\0" * 3), True, "ok", "", ""),
    ("ok_bool_value_2", st(one("b", "BOOL", [1], 0, 1), b"\x02"), True, "ok", "", "values are not checked"),
    # Rejected by the crate and by us, in the crate's check order.
    ("too_small_empty", b"", False, "corruption", "too short for the 8-byte header length", "HeaderTooSmall"),
    ("too_small_7", b"\x02\0\0\0\0\0\0", False, "corruption", "too short for the 8-byte header length", "HeaderTooSmall"),
    ("header_too_large", st("{}", n=100_000_001), False, "limit exceeded", "exceeds the limit of 100000000",
     "HeaderTooLarge"),
    ("header_len_u64_max", st("{}", n=U64_MAX), False, "limit exceeded", "exceeds the limit", "HeaderTooLarge"),
    ("header_past_eof", st("{}", n=100), False, "corruption", "runs past the end of the file", "InvalidHeaderLength"),
    ("bad_utf8", st(b'{"\xff":1}'), False, "corruption", "not valid UTF-8 (bad sequence at byte 10", "InvalidHeader"),
    ("overlong_utf8", st(b'{"\xc0\xaf":1}'), False, "corruption", "not valid UTF-8", "InvalidHeader"),
    ("not_json", st("hello"), False, "corruption", "not valid JSON", ""),
    ("empty_header", st(""), False, "corruption", "it is empty", ""),
    ("spaces_only", st("        "), False, "corruption", "it is empty", ""),
    ("top_array", st("[]"), False, "corruption", "header is an array, not a JSON object", ""),
    ("top_string", st('"x"'), False, "corruption", "header is a string, not a JSON object", ""),
    ("bom", st(b"\xef\xbb\xbf{}"), False, "corruption", "byte order mark", ""),
    ("nul_padding", st(b"{}\0\0\0\0\0\0"), False, "corruption", "ends with NUL bytes", ""),
    ("trailing_object", st("{}{}"), False, "corruption", "trailing characters", ""),
    ("trailing_word", st("{} x"), False, "corruption", "not valid JSON", ""),
    ("comment", st("{/*c*/}"), False, "corruption", "not valid JSON", ""),
    ("trailing_comma", st('{"__metadata__":{},}'), False, "corruption", "not valid JSON", ""),
    ("unclosed", st('{"a":' + entry("F32", [0], 0, 0)), False, "corruption", "not valid JSON", ""),
    ("control_char_in_name", st('{"a\nb":%s}' % entry("U8", [0], 0, 0)), False, "corruption", "not valid JSON", ""),
    ("lone_surrogate", st('{"a\\udc00":%s}' % entry("U8", [0], 0, 0)), False, "corruption", "not valid JSON", ""),
    ("bad_escape", st('{"a\\x":%s}' % entry("U8", [0], 0, 0)), False, "corruption", "not valid JSON", ""),
    ("entry_null", st('{"a":null}'), False, "corruption", 'tensor "a": the entry is null', ""),
    ("entry_string", st('{"a":"F32"}'), False, "corruption", 'tensor "a": the entry is a string', ""),
    ("missing_dtype", st('{"a":{"shape":[0],"data_offsets":[0,0]}}'), False, "corruption", 'missing field "dtype"', ""),
    ("missing_shape", st('{"a":{"dtype":"U8","data_offsets":[0,0]}}'), False, "corruption", 'missing field "shape"', ""),
    ("missing_offsets", st('{"a":{"dtype":"U8","shape":[0]}}'), False, "corruption", 'missing field "data_offsets"', ""),
    ("duplicate_field", st('{"a":{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}}'), False, "corruption",
     'duplicate field "dtype"', ""),
    ("unknown_dtype", st(one("a", "F128", [0], 0, 0)), False, "unsupported", 'unknown dtype "F128"', ""),
    ("lowercase_dtype", st(one("a", "f32", [0], 0, 0)), False, "unsupported", 'unknown dtype "f32"', ""),
    ("dtype_number", st('{"a":{"dtype":32,"shape":[0],"data_offsets":[0,0]}}'), False, "corruption",
     "dtype is a number", ""),
    ("shape_float", st(one("a", "F32", [2.0], 0, 8), b"\0" * 8), False, "corruption", "shape[0] is 2.0, not an integer", ""),
    ("shape_exponent", st('{"a":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}', b"\0" * 8), False, "corruption",
     "shape[0] is 2e0", ""),
    ("shape_negative", st(one("a", "F32", [-2], 0, 0)), False, "corruption", "shape[0] is -2", ""),
    ("shape_negative_zero", st('{"a":{"dtype":"F32","shape":[1,-0],"data_offsets":[0,0]}}'), False, "corruption",
     "shape[1] is -0", "serde reads -0 as a float"),
    ("shape_string", st('{"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}', b"\0" * 8), False, "corruption",
     "shape[0] is a string", ""),
    ("shape_null", st('{"a":{"dtype":"F32","shape":null,"data_offsets":[0,0]}}'), False, "corruption",
     "shape is null, not an array", ""),
    ("shape_leading_zero", st('{"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}', b"\0"), False, "corruption",
     "shape[0] is not a valid JSON number: 01", ""),
    ("offsets_one", st('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0]}}'), False, "corruption",
     "data_offsets has 1 element", ""),
    ("offsets_three", st('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}}'), False, "corruption",
     "data_offsets has more than 2 elements", ""),
    ("offsets_strings", st('{"a":{"dtype":"U8","shape":[0],"data_offsets":["0","0"]}}'), False, "corruption",
     "data_offsets[0] is a string", ""),
    ("offsets_past_u64", st('{"a":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551616,0]}}'), False,
     "corruption", "data_offsets[0] is 18446744073709551616, not an integer from 0 to 2^64-1", ""),
    ("metadata_nested", st('{"__metadata__":{"a":{"b":"c"}}}'), False, "corruption",
     'the value of "a" is an object; metadata maps strings to strings', ""),
    ("metadata_number", st('{"__metadata__":{"a":1}}'), False, "corruption", 'the value of "a" is a number', ""),
    ("metadata_array", st('{"__metadata__":[]}'), False, "corruption", '"__metadata__" is an array', ""),
    ("metadata_twice", st('{"__metadata__":{},"__metadata__":{}}'), False, "corruption",
     'second "__metadata__" key', ""),
    ("depth_128", st(DEEP(126)), False, "limit exceeded", "nested deeper than 127 levels", "serde's recursion limit"),
    ("number_out_of_range", st(one("a", "U8", [0], 0, 0, ',"x":1e400')), False, "corruption", "out of range", ""),
    ("bad_atom", st(one("a", "U8", [0], 0, 0, ',"x":tru')), False, "corruption", "not valid JSON", ""),
    ("duplicate_name_differing", st('{"a":%s,"a":%s}' % (entry("F32", [1], 0, 4), entry("F32", [0], 0, 0)),
                                    b"\0" * 4), False, "corruption", 'tensor name "a" appears twice', ""),
    ("hole_at_start", st(one("a", "U8", [4], 4, 8), b"\0" * 8), False, "corruption",
     'tensor "a": data_offsets [4, 8] begin at 4, but the first tensor\'s data must begin at 0', "InvalidOffset"),
    ("gap", st('{"a":%s,"b":%s}' % (entry("U8", [4], 0, 4), entry("U8", [4], 8, 12)), b"\0" * 12), False,
     "corruption", 'tensor "b": data_offsets [8, 12] leave a gap of 4 bytes after tensor "a"', "InvalidOffset"),
    ("overlap", st('{"a":%s,"b":%s}' % (entry("U8", [8], 0, 8), entry("U8", [8], 4, 12)), b"\0" * 12), False,
     "corruption", 'tensor "b": data_offsets [4, 12] overlap tensor "a", which ends at 8', "InvalidOffset"),
    ("end_before_begin", st('{"a":%s,"b":%s}' % (entry("U8", [4], 0, 4), entry("U8", [0], 4, 0)), b"\0" * 4), False,
     "corruption", 'tensor "b": data_offsets [4, 0] end before they begin', "InvalidOffset"),
    ("same_offsets_attack", st("{%s}" % ",".join('"t%d":%s' % (i, entry("F32", [1], 0, 4)) for i in range(10)),
                               b"\0" * 4), False, "corruption", "overlap tensor", "InvalidOffset"),
    ("offsets_u64_max", st(one("a", "U8", [0], U64_MAX, U64_MAX)), False, "corruption",
     "must begin at 0", "InvalidOffset"),
    ("overflow_elements", st(one("a", "F32", [2**62, 4], 0, 0)), False, "corruption", "overflows 64 bits",
     "ValidationOverflow"),
    ("overflow_bits", st(one("a", "U8", [2**62], 0, 0)), False, "corruption", "U8 [4611686018427387904] overflows",
     "ValidationOverflow: counted in bits"),
    ("misaligned_f4", st(one("a", "F4", [3], 0, 2), b"\0\0"), False, "corruption",
     "F4 [3] takes 12 bits, not a whole number of bytes", "MisalignedSlice"),
    ("misaligned_f6", st(one("a", "F6_E3M2", [2], 0, 2), b"\0\0"), False, "corruption",
     "F6_E3M2 [2] takes 12 bits", "MisalignedSlice"),
    ("size_mismatch", st(one("a", "F32", [2], 0, 4), b"\0" * 4), False, "corruption",
     'tensor "a": data_offsets [0, 4] hold 4 bytes, but F32 [2] takes 8', "TensorInvalidInfo"),
    ("size_huge_end", st(one("a", "U8", [1], 0, U64_MAX)), False, "corruption", "but U8 [1] takes 1",
     "TensorInvalidInfo"),
    ("trailing_byte", st(F32_2, b"\0" * 9), False, "corruption", "file has 1 byte after the tensor data, which ends at byte 70",
     "MetadataIncompleteBuffer: no polyglots"),
    ("truncated_data", st(F32_2, b"\0" * 7), False, "corruption", "ends at byte 70 (8 + 54 + 8), past the end of the file (69 bytes): truncated",
     "MetadataIncompleteBuffer"),
    # Accepted by the crate, refused by us (docs/PERMISSIVE.md, "Stricter").
    ("strict_duplicate_name_identical", st('{"a":%s,"a":%s}' % (entry("U8", [0], 0, 0), entry("U8", [0], 0, 0))),
     True, "corruption", 'tensor name "a" appears twice', "the crate keeps the last: a parser differential"),
    ("strict_metadata_duplicate_key", st('{"__metadata__":{"k":"a","k":"b"}}'), True, "corruption",
     'has the key "k" twice', "the crate keeps the last"),
    ("strict_entry_array", st('{"a":["F32",[2],[0,8]]}', b"\0" * 8), True, "corruption", "the entry is an array",
     "serde's positional form of a struct"),
    ("strict_dtype_object", st('{"a":{"dtype":{"F32":null},"shape":[2],"data_offsets":[0,8]}}', b"\0" * 8), True,
     "corruption", "dtype is an object", "serde's map form of an enum"),
]


def crate_verdict(data):
    try:
        safetensors.deserialize(data)
        return "ok"
    except Exception as e:  # SafetensorError; the message is the crate's
        return str(e)


def main():
    out = {"generator": "tests/invalid/safetensors/make_cases.py",
           "safetensors_version": safetensors.__version__, "cases": []}
    names = set()
    for name, data, accepts, code, fragment, note in CASES:
        assert name not in names, name
        names.add(name)
        verdict = crate_verdict(data)
        if (verdict == "ok") != accepts:
            raise SystemExit(f"{name}: the crate says {verdict!r}, the case claims accepts={accepts}")
        with open(os.path.join(HERE, name + ".safetensors"), "wb") as f:
            f.write(data)
        out["cases"].append({"name": name, "code": code, "message": fragment,
                             "crate": verdict, "note": note})
    with open(os.path.join(HERE, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(CASES)} cases")


if __name__ == "__main__":
    main()
