// Metadata as `info` and `meta` print it: long arrays summarised (length,
// element type, first items) unless --full, and GGUF key/values listed one
// per line with their GGUF types (docs/formats/gguf.md §11).
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace tensorsafe::cli {

// Arrays with more items than this are summarised.
inline constexpr std::size_t kSummaryItems = 8;

// `md` with every array of more than kSummaryItems items (at any depth)
// replaced by {"summary": TYPE, "length": N, "first": [the first items]},
// TYPE being the key's GGUF type from "tensorsafe.gguf_types" when the
// metadata has one ("array<string>"), else "array".
nlohmann::ordered_json SummariseMetadata(const nlohmann::ordered_json& md);

// GGUF metadata (as gguf::Decode gives it) as lines "  KEY  TYPE  VALUE",
// without the types member; unless `full`, long arrays are shown as
// "[N items] first, ..." and strings over 160 bytes are cut, with their
// length.
std::string FormatGgufKeyValues(const nlohmann::ordered_json& md, bool full);

}  // namespace tensorsafe::cli
