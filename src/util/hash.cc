#include "util/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

// Runtime CPU dispatch. XXH_INLINE_ALL compiles XXH3 for the baseline ISA
// (SSE2 on x86-64), which hashes ~2.3x slower than the AVX2/AVX-512 kernels
// libxxhash selects at run time in its *_dispatch entry points (measured on
// this project's bench machine: 9.7 vs 21.6 GB/s on 1 MiB). Those entry points
// exist when libxxhash was built with its x86 dispatcher (Debian/Ubuntu do);
// weak references make them optional: when absent they are null and the
// inlined code runs. Same algorithm, same digests (tests/tsafe/
// fast_paths_test.cc compares them).
//
// A weak reference alone does not keep libxxhash in a link made with
// --as-needed (Debian's default), so the entry points were null in every
// binary and the slow path always ran. CMake defines TS_XXH3_DISPATCH_LINKED
// when the library exports them: then the references are strong.
// TS_XXH3_HAS(f): whether entry point f is there (always, when linked
// strongly: a null test would then draw -Waddress).
#if defined(TS_XXH3_DISPATCH_LINKED)
#define TS_XXH3_WEAK
#define TS_XXH3_HAS(f) true
#else
#define TS_XXH3_WEAK __attribute__((weak))
#define TS_XXH3_HAS(f) ((f) != nullptr)
#endif
#if defined(__x86_64__) && defined(__GNUC__)
extern "C" XXH64_hash_t XXH3_64bits_dispatch(const void* input, size_t len) TS_XXH3_WEAK;
extern "C" XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t* state, const void* input, size_t len) TS_XXH3_WEAK;
#define TS_XXH3_DISPATCH 1
#else
#define TS_XXH3_DISPATCH 0
#endif

namespace tensorsafe::internal {
namespace {
// Below this the vector kernels do not run (XXH3's long-input path starts at
// 241 bytes) and the inlined code is faster than a call through the PLT.
constexpr std::size_t kDispatchMinBytes = 1024;

std::uint64_t Xxh3(const void* p, std::size_t n) {
#if TS_XXH3_DISPATCH
  if (n >= kDispatchMinBytes && TS_XXH3_HAS(XXH3_64bits_dispatch)) return XXH3_64bits_dispatch(p, n);
#endif
  return XXH3_64bits(p, n);
}
}  // namespace

// FORMAT.md §6.3: the seed of the name hash. Persisted by implication (the
// hash table's slot order depends on it): never change.
constexpr std::uint64_t kNameHashSeed = 0x7473616665u;  // "tsafe"

std::uint64_t Hash64(std::span<const std::byte> bytes) { return Xxh3(bytes.data(), bytes.size()); }
std::uint64_t Hash64(std::string_view bytes) { return Xxh3(bytes.data(), bytes.size()); }
std::uint64_t NameHash(std::string_view name) { return XXH3_64bits_withSeed(name.data(), name.size(), kNameHashSeed); }

struct StreamingHash::State {
  XXH3_state_t s;
};
StreamingHash::StreamingHash() : state_(std::make_unique<State>()) { Reset(); }
StreamingHash::~StreamingHash() = default;
void StreamingHash::Reset() { XXH3_64bits_reset(&state_->s); }
void StreamingHash::Update(std::span<const std::byte> bytes) {
#if TS_XXH3_DISPATCH
  if (bytes.size() >= kDispatchMinBytes && TS_XXH3_HAS(XXH3_64bits_update_dispatch)) {
    XXH3_64bits_update_dispatch(&state_->s, bytes.data(), bytes.size());
    return;
  }
#endif
  XXH3_64bits_update(&state_->s, bytes.data(), bytes.size());
}
std::uint64_t StreamingHash::Digest() const { return XXH3_64bits_digest(&state_->s); }

}  // namespace tensorsafe::internal
