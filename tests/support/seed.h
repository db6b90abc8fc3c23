// The seed of a randomised test.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace tensorsafe::testing {

// $TS_SEED, or a fresh seed when it is unset; printed, so that a failure can
// be replayed with TS_SEED=<seed>.
inline std::uint64_t TestSeed() {
  std::uint64_t seed;
  if (const char* e = std::getenv("TS_SEED")) {
    seed = std::strtoull(e, nullptr, 10);
  } else {
    seed = std::random_device{}();
  }
  std::printf("seed %llu (replay with TS_SEED=%llu)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace tensorsafe::testing
