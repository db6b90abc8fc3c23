// AllocProbe: records every operator new request made by this thread while a
// probe is alive, so a test can show that a hostile file claiming huge sizes
// fails before anything large is allocated. The replacement operators live in
// alloc_probe.cc and are linked only into tensorsafe_limits_tests.
#pragma once

#include <cstddef>

namespace tensorsafe::testing {

class AllocProbe {
 public:
  AllocProbe();
  ~AllocProbe();
  AllocProbe(const AllocProbe&) = delete;
  AllocProbe& operator=(const AllocProbe&) = delete;
  // The largest single request, and the sum of all requests, so far.
  std::size_t peak() const;
  std::size_t total() const;
};

}  // namespace tensorsafe::testing
