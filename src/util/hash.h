// Checksums: XXH3-64 from libxxhash (FORMAT.md §2 says why XXH3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace tensorsafe::internal {

std::uint64_t Hash64(std::span<const std::byte> bytes);
std::uint64_t Hash64(std::string_view bytes);
// Seeded hash of tensor names for the index hash table (FORMAT.md §6.3).
std::uint64_t NameHash(std::string_view name);

// Streaming XXH3-64 for data arriving in chunks.
class StreamingHash {
 public:
  StreamingHash();
  ~StreamingHash();
  StreamingHash(const StreamingHash&) = delete;
  StreamingHash& operator=(const StreamingHash&) = delete;
  void Reset();
  void Update(std::span<const std::byte> bytes);
  std::uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tensorsafe::internal
