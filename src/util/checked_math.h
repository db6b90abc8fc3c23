// Overflow-checked arithmetic. Every offset + length and every shape product
// x element size computed from untrusted bytes goes through these (STYLE.md).
#pragma once

#include <cstdint>
#include <optional>

namespace tensorsafe::internal {

inline std::optional<std::uint64_t> CheckedAdd(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<std::uint64_t> CheckedMul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// True when [offset, offset + length) lies within [0, size).
inline bool RangeWithin(std::uint64_t offset, std::uint64_t length, std::uint64_t size) {
  return offset <= size && length <= size - offset;
}

// Rounds `v` up to a multiple of `align` (a power of two); nullopt on overflow.
inline std::optional<std::uint64_t> AlignUp(std::uint64_t v, std::uint64_t align) {
  auto r = CheckedAdd(v, align - 1);
  if (!r) return std::nullopt;
  return *r & ~(align - 1);
}

// a * b / c, the product taken in 128 bits (c != 0; the quotient must fit).
inline std::int64_t MulDiv(std::int64_t a, std::int64_t b, std::int64_t c) {
  return static_cast<std::int64_t>(static_cast<__int128>(a) * b / c);
}

inline bool IsPowerOfTwo(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace tensorsafe::internal
