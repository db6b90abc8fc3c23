// Format detection: which codec should open a file, by its first bytes and,
// when they do not decide, by its extension.
//
// Thread safety: pure functions (DetectFormat reads the file).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"

namespace tensorsafe {

enum class Format {
  kUnknown,
  kTsafe,        // "\x89TSF\r\n\x1a\n"
  kNpy,          // "\x93NUMPY"
  kNpz,          // a ZIP archive ("PK\x03\x04", or "PK\x05\x06" when empty)
  kSafetensors,  // u64 LE header length, then '{'
  kTenbin,       // "~TenBin~"
  kBtf,          // no magic: by the ".btf" extension only
  kGguf,         // "GGUF"
  kZio,          // single-frame ZIO message: a length prefix, then "ZIO" + level digit
};

// A stable lower-case name: "tsafe", "npy", ..., "unknown".
std::string_view FormatName(Format format);

// Decides from up to the first 16 bytes of a file (`prefix` may be shorter)
// and its name. Magic wins over the extension; a ZIP is kNpz whatever its
// name, since that is the only ZIP container we read.
Format DetectFormatFromBytes(std::span<const std::byte> prefix, std::string_view path);

// Reads the first bytes of `path` and decides. Errors: kIOError / kNotFound
// when the file cannot be read. An empty or unrecognised file is kUnknown,
// not an error.
Result<Format> DetectFormat(const std::string& path);

}  // namespace tensorsafe
