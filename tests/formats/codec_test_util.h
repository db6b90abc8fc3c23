// Helpers shared by the foreign-format codec tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "support/seed.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/tensor_set.h"
#include "util/endian.h"

namespace tensorsafe::testing {

inline std::string SharedFixture(const std::string& rel) {
  return ReadFileBytes(std::string(TS_SHARED_DIR) + "/fixtures/" + rel);
}

inline std::span<const std::byte> Bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// A tensor owning a copy of `bytes`.
inline Tensor MakeTensor(std::string name, DType dtype, Shape shape, std::string bytes, std::string metadata = "") {
  auto buf = std::make_shared<std::string>(std::move(bytes));
  Tensor t;
  t.info.name = std::move(name);
  t.info.dtype = dtype;
  t.info.shape = std::move(shape);
  t.info.metadata_json = std::move(metadata);
  t.data = Bytes(*buf);
  t.owner = buf;
  return t;
}

// Overwrites the 8 bytes at `off` with `v`, little-endian.
inline void Set64(std::string& s, std::size_t off, std::int64_t v) {
  internal::Store64(reinterpret_cast<std::byte*>(s.data() + off), static_cast<std::uint64_t>(v));
}

template <typename T>
std::string Raw(std::initializer_list<T> v) {
  std::vector<T> x(v);
  return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(T));
}

// A file of tests/golden/gguf/.
inline std::string GgufGolden(const std::string& f) { return std::string(TS_SOURCE_DIR) + "/tests/golden/gguf/" + f; }

// A tensor's bytes as a string.
inline std::string DataOf(const Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.data.data()), t.data.size());
}

inline std::string Str(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

inline Shape RandomShape(std::mt19937_64& rng, std::size_t max_rank, std::uint64_t max_dim) {
  Shape s(rng() % (max_rank + 1));
  for (auto& d : s) d = rng() % (max_dim + 1);
  return s;
}

inline std::string RandomBytes(std::mt19937_64& rng, std::uint64_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

}  // namespace tensorsafe::testing
