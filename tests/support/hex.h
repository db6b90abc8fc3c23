// Bytes as hex text and back, as the golden vectors under tests/golden/
// store them, and the FNV-1a digest they store for long outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace tensorsafe::testing {

inline std::string Hex(std::span<const std::byte> b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (std::byte x : b) {
    s += kDigits[std::to_integer<unsigned>(x) >> 4];
    s += kDigits[std::to_integer<unsigned>(x) & 15];
  }
  return s;
}

// Raw bytes in a string; a trailing odd digit is ignored.
inline std::string Unhex(const std::string& h) {
  std::string out(h.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

inline std::vector<std::byte> UnhexBytes(const std::string& h) {
  const std::string s = Unhex(h);
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// FNV-1a 64 as 16 hex digits (make_vectors.py's digest of long outputs).
inline std::string Fnv1a64(std::span<const std::byte> b) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::byte x : b) h = (h ^ std::to_integer<std::uint64_t>(x)) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace tensorsafe::testing
