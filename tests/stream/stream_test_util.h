// Batches for the stream tests: every dtype, deterministic bytes, and a deep
// comparison of two batches.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensorsafe/tensor_set.h"

namespace tensorsafe::testing {

// A tensor owning `n` pseudo-random bytes from `seed`.
inline Tensor RandomTensor(std::string name, DType dtype, Shape shape, std::uint32_t seed, std::string metadata = {}) {
  const std::uint64_t n = *DenseByteSize(dtype, shape);
  auto buf = std::shared_ptr<std::byte[]>(new std::byte[n == 0 ? 1 : n]);
  std::mt19937 rng(seed);
  for (std::uint64_t i = 0; i < n; ++i) buf[i] = static_cast<std::byte>(rng());
  Tensor t;
  t.info.name = std::move(name);
  t.info.dtype = dtype;
  t.info.shape = std::move(shape);
  t.info.data_length = n;
  t.info.metadata_json = std::move(metadata);
  t.data = {buf.get(), static_cast<std::size_t>(n)};
  t.owner = std::move(buf);
  return t;
}

// One tensor of every dtype (shape [4, 3]: a multiple of every block), plus
// a scalar, an empty tensor, and metadata on the batch and on one tensor.
inline TensorSet AllDTypesBatch(std::uint32_t seed = 1) {
  TensorSet s;
  for (int code = 1; code <= kNumDTypes; ++code) {
    const DType dt = LookupDType(static_cast<std::uint8_t>(code))->dtype;
    s.tensors.push_back(RandomTensor(std::string(DTypeName(dt)), dt, {4, 3}, seed + code,
                                     code == 12 ? R"({"unit":"m","scale":[1,2]})" : ""));
  }
  s.tensors.push_back(RandomTensor("scalar", DType::kF64, {}, seed + 100));
  s.tensors.push_back(RandomTensor("empty", DType::kI32, {0, 5}, seed + 101));
  s.metadata_json = R"({"epoch":3,"nested":{"a":[1,2,{"b":null}]}})";
  return s;
}

// Only the tensors of `s` that `keep` accepts.
template <typename Pred>
TensorSet Filter(const TensorSet& s, Pred keep) {
  TensorSet out;
  out.metadata_json = s.metadata_json;
  for (const Tensor& t : s.tensors) {
    if (keep(t)) out.tensors.push_back(t);
  }
  return out;
}

inline void ExpectBatchEq(const TensorSet& want, const TensorSet& got, bool compare_metadata = true) {
  if (compare_metadata) EXPECT_EQ(want.metadata_json, got.metadata_json);
  ASSERT_EQ(want.tensors.size(), got.tensors.size());
  for (std::size_t i = 0; i < want.tensors.size(); ++i) {
    const Tensor& a = want.tensors[i];
    const Tensor& b = got.tensors[i];
    SCOPED_TRACE("tensor " + a.info.name);
    EXPECT_EQ(a.info.name, b.info.name);
    EXPECT_EQ(a.info.dtype, b.info.dtype);
    EXPECT_EQ(a.info.shape, b.info.shape);
    if (compare_metadata) EXPECT_EQ(a.info.metadata_json, b.info.metadata_json);
    ASSERT_EQ(a.data.size(), b.data.size());
    EXPECT_TRUE(a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0);
  }
}

inline bool Aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

}  // namespace tensorsafe::testing
