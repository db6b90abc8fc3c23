// Shared pieces of the GGUF codec: the value-type codes, a bounds-checked
// cursor over untrusted bytes, the key/value <-> JSON mapping, and the
// writer's Env seam for tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/env.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/status.h"
#include "util/endian.h"

namespace tensorsafe::gguf::internal {

inline constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as LE u32
inline constexpr std::uint64_t kHeaderBytes = 24;    // magic, version, 2 counts
inline constexpr std::string_view kTypesKey = "tensorsafe.gguf_types";
inline constexpr std::string_view kAlignmentKey = "general.alignment";

// GGUF metadata value types (persisted: codes are the spec's).
enum class ValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
inline constexpr std::uint32_t kMaxValueType = 12;

// Spec-style lower-case names ("uint8", "float32", "string", "array").
std::string_view ValueTypeName(ValueType t);
std::optional<ValueType> ParseValueTypeName(std::string_view name);
// Bytes of a fixed-size value; 0 for string and array.
std::uint32_t ValueTypeSize(ValueType t);

// A read position in untrusted bytes. Load* do not check: call Need first.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& file) : bytes_(bytes), file_(file) {}
  std::uint64_t pos() const { return pos_; }
  std::uint64_t size() const { return bytes_.size(); }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }
  const std::string& file() const { return file_; }
  std::span<const std::byte> bytes() const { return bytes_; }

  // kCorruption naming `what` when fewer than `n` bytes remain.
  Status Need(std::uint64_t n, std::string_view what) const;
  // Whether `n` bytes remain. Every check of a count or length against the
  // bytes remaining goes through Need or Fits, which note a failure: a
  // header read from a prefix of the file (ReadHeader) then knows that more
  // of the file might pass.
  bool Fits(std::uint64_t n) const {
    if (n <= remaining()) return true;
    ran_short_ = true;
    return false;
  }
  // A size that overflowed (nullopt) fits nowhere; it is noted too, as its
  // message names the bytes remaining.
  bool Fits(std::optional<std::uint64_t> n) const { return n ? Fits(*n) : (ran_short_ = true, false); }
  bool ran_short() const { return ran_short_; }
  std::uint8_t Load8() { return LoadT<std::uint8_t>(); }
  std::uint32_t Load32() { return LoadT<std::uint32_t>(); }
  std::uint64_t Load64() { return LoadT<std::uint64_t>(); }
  const std::byte* Take(std::uint64_t n) {
    const std::byte* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  // A gguf_string: u64 length + bytes, bounded by the bytes remaining and by
  // `max_bytes` (kLimitExceeded). `what` names it in messages.
  Result<std::string_view> String(std::string_view what, std::uint64_t max_bytes);

 private:
  template <typename T>
  T LoadT() {
    T v = tensorsafe::internal::LoadLE<T>(bytes_.data() + pos_);
    pos_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> bytes_;
  const std::string& file_;
  std::uint64_t pos_ = 0;
  mutable bool ran_short_ = false;
};

// The key/value section decoded into the metadata JSON of docs/formats/gguf.md.
struct KeyValues {
  std::string json;  // "" when there are no pairs
  std::uint32_t alignment = kDefaultAlignment;
};
// Reads `count` pairs starting at the cursor.
Result<KeyValues> ReadKeyValues(Cursor& c, std::uint64_t count, const ReadOptions& options);

// The key/value section encoded from metadata JSON, for the writer.
struct EncodedKeyValues {
  std::string bytes;
  std::uint64_t count = 0;
  std::uint32_t alignment = kDefaultAlignment;
};
Result<EncodedKeyValues> EncodeKeyValues(std::string_view metadata_json, const WriteOptions& options);

// `metadata_json` without the "tensorsafe.gguf_types" entries a writer
// would infer anyway (strings typed "string"), and without the member when
// none remains, so that metadata that came from a format of strings goes
// back to it unchanged (docs/formats/gguf.md §4). Used by convert for every
// target but GGUF.
std::string DropRedundantTypes(const std::string& metadata_json);

// What a GGUF file with this metadata lacks for llama.cpp and transformers:
// a warning when general.architecture is missing (llama.cpp cannot load the
// file as a model; transformers' GGUF loader stops with an IndexError).
std::vector<std::string> ConsumerWarnings(const std::string& metadata_json);

// JSON text helpers shared by the reader's hand-written JSON.
void AppendJsonString(std::string& out, std::string_view utf8);
void AppendF32(std::string& out, float v);
void AppendF64(std::string& out, double v);

}  // namespace tensorsafe::gguf::internal
