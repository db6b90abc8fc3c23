#include "util/fork_local.h"

#include <pthread.h>

namespace tensorsafe::internal {
namespace {
std::atomic<std::uint64_t> g_generation{0};
void OnForkChild() { g_generation.fetch_add(1, std::memory_order_acq_rel); }
}  // namespace

std::uint64_t ForkGeneration() {
  static const bool registered = (pthread_atfork(nullptr, nullptr, &OnForkChild) == 0);
  (void)registered;
  return g_generation.load(std::memory_order_acquire);
}

}  // namespace tensorsafe::internal
