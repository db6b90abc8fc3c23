// Test-side GGUF byte builder, independent of src/formats/gguf: the invalid
// suite and the model-based random test write files with it.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tensorsafe::testing {

class GgufBuilder {
 public:
  GgufBuilder& U8(std::uint8_t v) { return Raw(&v, 1); }
  GgufBuilder& U16(std::uint16_t v) { return Raw(&v, 2); }
  GgufBuilder& U32(std::uint32_t v) { return Raw(&v, 4); }
  GgufBuilder& U64(std::uint64_t v) { return Raw(&v, 8); }
  GgufBuilder& F32(float v) { return Raw(&v, 4); }
  GgufBuilder& F64(double v) { return Raw(&v, 8); }
  GgufBuilder& Str(std::string_view s) {
    U64(s.size());
    b_.append(s);
    return *this;
  }
  GgufBuilder& Bytes(std::string_view s) {
    b_.append(s);
    return *this;
  }
  // magic, version, counts
  GgufBuilder& Header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    b_.append("GGUF");
    U32(version);
    U64(n_tensors);
    return U64(n_kv);
  }
  // key + type code (the value follows)
  GgufBuilder& Key(std::string_view key, std::uint32_t type) {
    Str(key);
    return U32(type);
  }
  // A tensor info with dims given innermost-first (GGUF order).
  GgufBuilder& Info(std::string_view name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset) {
    Str(name);
    U32(static_cast<std::uint32_t>(ne.size()));
    for (auto d : ne) U64(d);
    U32(type);
    return U64(offset);
  }
  GgufBuilder& PadTo(std::uint64_t align) {
    while (b_.size() % align != 0) b_.push_back('\0');
    return *this;
  }
  GgufBuilder& Zeros(std::size_t n) {
    b_.append(n, '\0');
    return *this;
  }
  std::size_t size() const { return b_.size(); }
  const std::string& str() const { return b_; }

 private:
  GgufBuilder& Raw(const void* p, std::size_t n) {
    b_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string b_;
};

}  // namespace tensorsafe::testing
