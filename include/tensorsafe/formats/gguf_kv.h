// Editing GGUF key/values as typed values: parsing the CLI's KEY=TYPE:VALUE
// (`tensorsafe meta FILE.gguf --set`, `convert --gguf-kv`) and applying sets
// and deletions to the metadata JSON that Decode produces and Encode takes
// (docs/formats/gguf.md §4, §11).
//
// Thread safety: the functions are reentrant.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"

namespace tensorsafe::gguf {

// One key to set, with its GGUF type.
struct KeyValueEdit {
  std::string key;
  // A type descriptor as in "tensorsafe.gguf_types": "string", "uint32",
  // "float32", "bool", "array<string>", ...
  std::string type;
  // The value as JSON text, as Decode would give it.
  std::string value_json;
};

// Parses "KEY=TYPE:VALUE". TYPE is a GGUF type name (uint8, int8, uint16,
// int16, uint32, int32, uint64, int64, float32, float64, bool, string) or
// its short form (u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, bool,
// str), or an array of one: "array<T>" or "T[]", whose VALUE is a JSON
// array ('tokens=str[]:["a","b"]'). A string VALUE is taken as it is (UTF-8);
// a number must fit its type; floats also take nan, inf and -inf; bools are
// true/false or 1/0. Errors (kInvalidArgument) quote the argument and say
// what is wrong: no '=', an empty key, the reserved key
// "tensorsafe.gguf_types", no or an unknown TYPE, a VALUE its type cannot
// hold ("300 is out of range for uint8").
Result<KeyValueEdit> ParseKeyValueEdit(std::string_view arg);

// `metadata_json` (as Decode gives it, "" for none) with the keys in `del`
// removed and the `set` keys set, replaced in place or appended in order,
// each with its type recorded in "tensorsafe.gguf_types". Returns "" when
// no key remains. Errors: kNotFound for a key to delete that is not there
// ("no key \"x\""); kInvalidArgument when the result cannot be written as
// GGUF (e.g. general.alignment set to a non-power of two).
Result<std::string> EditKeyValues(std::string_view metadata_json, std::span<const KeyValueEdit> set,
                                  std::span<const std::string> del = {});

}  // namespace tensorsafe::gguf
