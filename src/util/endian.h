// Explicit little-endian loads and stores: persisted structures are encoded
// field by field, never by copying a struct (STYLE.md).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tensorsafe::internal {

static_assert(sizeof(std::byte) == 1);
// The format is little-endian; so far only little-endian hosts are built.
static_assert(std::endian::native == std::endian::little,
              "tensorsafe needs byte swapping in endian.h for big-endian hosts");

template <typename T>
inline T LoadLE(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
inline std::uint8_t Load8(const std::byte* p) { return static_cast<std::uint8_t>(*p); }
inline std::uint16_t Load16(const std::byte* p) { return LoadLE<std::uint16_t>(p); }
inline std::uint32_t Load32(const std::byte* p) { return LoadLE<std::uint32_t>(p); }
inline std::uint64_t Load64(const std::byte* p) { return LoadLE<std::uint64_t>(p); }

inline void Store8(std::byte* p, std::uint8_t v) { *p = static_cast<std::byte>(v); }
inline void Store16(std::byte* p, std::uint16_t v) { std::memcpy(p, &v, 2); }
inline void Store32(std::byte* p, std::uint32_t v) { std::memcpy(p, &v, 4); }
inline void Store64(std::byte* p, std::uint64_t v) { std::memcpy(p, &v, 8); }

// Appends to a growing byte string.
inline void Put8(std::string& s, std::uint8_t v) { s.push_back(static_cast<char>(v)); }
inline void Put16(std::string& s, std::uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
inline void Put32(std::string& s, std::uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
inline void Put64(std::string& s, std::uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace tensorsafe::internal
