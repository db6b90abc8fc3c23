#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tensorsafe::internal {

// FORMAT.md §6.3: the seed of the name hash. Persisted by implication (the
// hash table's slot order depends on it): never change.
constexpr std::uint64_t kNameHashSeed = 0x7473616665u;  // "tsafe"

std::uint64_t Hash64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}
std::uint64_t Hash64(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }
std::uint64_t NameHash(std::string_view name) {
  return XXH3_64bits_withSeed(name.data(), name.size(), kNameHashSeed);
}

struct StreamingHash::State {
  XXH3_state_t s;
};
StreamingHash::StreamingHash() : state_(std::make_unique<State>()) { Reset(); }
StreamingHash::~StreamingHash() = default;
void StreamingHash::Reset() { XXH3_64bits_reset(&state_->s); }
void StreamingHash::Update(std::span<const std::byte> bytes) {
  XXH3_64bits_update(&state_->s, bytes.data(), bytes.size());
}
std::uint64_t StreamingHash::Digest() const { return XXH3_64bits_digest(&state_->s); }

}  // namespace tensorsafe::internal
