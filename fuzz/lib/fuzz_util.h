// Helpers shared by the fuzz checks: failing loudly, reading the input as a
// stream of choices, describing statuses and tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::fuzz {

// Prints "fuzz property failed: <what>" with the place and aborts.
[[noreturn]] void Fail(const char* file, int line, const std::string& what);

#define TS_FUZZ_CHECK(cond, msg)                                                                  \
  do {                                                                                            \
    if (!(cond)) ::tensorsafe::fuzz::Fail(__FILE__, __LINE__, std::string(#cond) + ": " + (msg)); \
  } while (0)

inline std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
inline std::string_view AsText(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// "ok" or "<code>: <message>".
std::string Describe(const Status& s);

// A per-process scratch file under /tmp for checks that need a real file
// (pread paths): created on first use, removed at exit. WriteScratch
// replaces its contents and returns its path.
const std::string& WriteScratch(std::span<const std::byte> data);

// Reads the fuzz input as a sequence of choices; past the end every read
// returns zeros, so any input is a valid program.
class Input {
 public:
  explicit Input(std::span<const std::byte> data) : data_(data) {}
  std::uint8_t Byte() { return pos_ < data_.size() ? static_cast<std::uint8_t>(data_[pos_++]) : 0; }
  std::uint32_t U32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{Byte()} << (8 * i);
    return v;
  }
  // A value in [0, n) (n >= 1).
  std::uint32_t Below(std::uint32_t n) { return n <= 256 ? Byte() % n : U32() % n; }
  bool Bool() { return Byte() & 1; }
  // Up to `n` bytes of the input (fewer at its end).
  std::string Bytes(std::size_t n) {
    const std::size_t k = std::min(n, data_.size() - pos_);
    std::string s(reinterpret_cast<const char*>(data_.data() + pos_), k);
    pos_ += k;
    return s;
  }
  std::size_t remaining() const { return data_.size() - pos_; }

 private:
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
};

// Touches every byte of every tensor (so ASan sees any view past its buffer)
// and checks data.size() against the dtype and shape; metadata texts must be
// "" or a JSON object. Returns a digest of the set for comparisons.
std::uint64_t CheckSetInvariants(const TensorSet& set, std::string_view codec);

// True when two sets hold the same tensors (name, dtype, shape, bytes and
// per-tensor metadata as parsed JSON) in the same order, and the same file
// metadata (as JSON, or both empty). *why receives the first difference.
bool SameSet(const TensorSet& a, const TensorSet& b, std::string* why, bool compare_order = true);

// The .tsafe image with every checksum its structure still lets us find
// recomputed (native_checks.cc), so mutations reach the checks behind them.
std::string Reseal(std::span<const std::byte> data);

// A tensor owning a copy of `bytes`.
Tensor OwnedTensor(std::string name, DType dtype, Shape shape, std::string bytes, std::string metadata = "");

}  // namespace tensorsafe::fuzz
