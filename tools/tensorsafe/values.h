// Element decoding and numpy-like printing for `cat`.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "tensorsafe/tensor.h"

namespace tensorsafe::cli {

float HalfToFloat(std::uint16_t h);
float BFloat16ToFloat(std::uint16_t b);
// Decodes one 8-, 6- or 4-bit float of `dtype` from its low bits.
double MiniFloatToDouble(DType dtype, std::uint32_t bits);

// Element `i` of dense little-endian `data` as text ("1.5", "True", "(1+2j)").
// Packed types follow FORMAT.md §5: f4/i4/u4 element 2k is the low nibble of
// byte k; f6 element 4k+j is bits 6j..6j+5 of group k read as a 24-bit LE int.
std::string FormatElement(DType dtype, std::span<const std::byte> data, std::uint64_t i);

// The values in a numpy-like nested layout. Unless `all`, a tensor of more
// than 1000 elements shows the first and last 3 entries of each axis with
// "..." between.
std::string FormatTensor(DType dtype, const Shape& shape, std::span<const std::byte> data, bool all);

// Element `i` as a JSON value: integers and bools as themselves, floats as
// numbers (NaN and infinities as the strings "nan", "inf", "-inf": JSON has
// no such numbers), complex as [re, im].
nlohmann::json ElementJson(DType dtype, std::span<const std::byte> data, std::uint64_t i);
// The values as nested JSON arrays, one level per dimension (a bare value
// for rank 0).
nlohmann::json TensorJson(DType dtype, const Shape& shape, std::span<const std::byte> data);

}  // namespace tensorsafe::cli
