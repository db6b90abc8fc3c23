// State that belongs to one process. fork() copies memory but only the
// calling thread: a child inherits connection pools whose sockets the parent
// still uses, mutexes that another thread held at the instant of the fork,
// and std::thread objects of threads it does not have (DataLoader workers
// fork by default on Linux). ForkLocal<T> gives each process its own T: the
// first use after a fork makes a fresh one and leaves the inherited one
// untouched, leaked (closing the parent's connections or joining its threads
// from the child would be wrong), as pyzmq does with its contexts.
#pragma once

#include <atomic>
#include <cstdint>

namespace tensorsafe::internal {

// 0 in a process that was not forked; incremented in every child of fork()
// (a pthread_atfork handler, registered by the first call).
std::uint64_t ForkGeneration();

// Thread-safe. T must be default-constructible.
template <typename T>
class ForkLocal {
 public:
  ForkLocal() : slot_(new Slot(ForkGeneration())) {}
  ~ForkLocal() {
    Slot* s = slot_.load(std::memory_order_acquire);
    if (s->generation == ForkGeneration()) delete s;  // an inherited one is left alone
  }
  ForkLocal(const ForkLocal&) = delete;
  ForkLocal& operator=(const ForkLocal&) = delete;

  T& operator*() const { return Current()->value; }
  T* operator->() const { return &Current()->value; }

 private:
  struct Slot {
    explicit Slot(std::uint64_t g) : generation(g) {}
    std::uint64_t generation;
    T value;
  };
  Slot* Current() const {
    Slot* s = slot_.load(std::memory_order_acquire);
    const std::uint64_t g = ForkGeneration();
    if (s->generation == g) return s;
    Slot* fresh = new Slot(g);
    if (slot_.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return fresh;
    delete fresh;  // another thread of this process made one first
    return s;
  }
  mutable std::atomic<Slot*> slot_;
};

}  // namespace tensorsafe::internal
