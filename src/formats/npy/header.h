// The .npy header: the Python dict literal NumPy writes, parsed strictly and
// produced byte for byte as NumPy produces it (docs/formats/npy.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::npy::internal {

// "\x93NUMPY": 0x93 is not ASCII, so text files never start with it.
inline constexpr std::string_view kMagic = "\x93NUMPY";
inline constexpr std::size_t kPrefixV1 = 10;  // magic, major, minor, u16 length
inline constexpr std::size_t kPrefixV2 = 12;  // ... u32 length (2.0 and 3.0)
// NumPy aligns the data to 64 bytes so it can be mapped and loaded with SIMD.
inline constexpr std::size_t kDataAlign = 64;
// NumPy leaves room for the first dimension (the growth axis) to grow in place
// to this many digits, so appending writers can rewrite the header.
inline constexpr std::size_t kGrowthAxisDigits = 21;

struct HeaderDict {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// Parses the dict text (everything after the length field). Accepts exactly
// the keys descr, fortran_order and shape, each once, in any order, with
// Python's whitespace, quoting and trailing-comma variants. Messages say what
// was found and where; the caller adds the file name.
// Errors: kCorruption, kUnsupported (structured descr), kLimitExceeded (rank).
Result<HeaderDict> ParseHeaderDict(std::string_view text, std::uint32_t max_rank);

// The dict text NumPy writes before padding: keys sorted, Python reprs,
// a trailing ", }" and the growth-axis spaces.
std::string FormatHeaderDict(std::string_view descr, bool fortran_order, std::span<const std::uint64_t> shape);

// Magic, version, length and the dict padded with spaces and '\n' so the data
// starts at a multiple of 64; version 1.0 when the length fits 16 bits, else
// 2.0 (3.0 when the text is not Latin-1, which our ASCII descrs never are).
std::string WrapHeader(const std::string& dict);

}  // namespace tensorsafe::npy::internal
