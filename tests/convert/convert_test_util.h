// Helpers for the conversion tests: random tensors of a chosen dtype, a
// .tsafe file written from a TensorSet, and (convert_test.cc,
// convert_refusal_test.cc) a format's file extension and options without sync.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/seed.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {

// All dtypes, in code order.
inline std::vector<DType> AllDTypes() {
  std::vector<DType> out;
  for (int c = 1; c <= kNumDTypes; ++c) out.push_back(static_cast<DType>(c));
  return out;
}

// A tensor of random bytes (valid for every dtype: the codecs never
// interpret values; bool bytes are kept 0/1 so NumPy reads them back
// unchanged) of a random shape whose element count fits the dtype's blocks.
inline Tensor RandomTensor(std::mt19937_64& rng, std::string name, DType dtype, std::size_t max_rank = 3) {
  const DTypeInfo& di = GetDTypeInfo(dtype);
  Shape shape;
  const std::size_t rank = std::uniform_int_distribution<std::size_t>(0, max_rank)(rng);
  for (std::size_t d = 0; d < rank; ++d) shape.push_back(std::uniform_int_distribution<std::uint64_t>(1, 5)(rng));
  if (di.block_elems > 1) {
    if (shape.empty()) shape.push_back(1);
    shape.back() *= di.block_elems;  // a whole number of blocks
  }
  const std::uint64_t n = DenseByteSize(dtype, shape).value();
  auto buf = std::make_shared<std::vector<std::byte>>(n);
  for (auto& b : *buf) b = static_cast<std::byte>(rng());
  if (dtype == DType::kBool) {
    for (auto& b : *buf) b = static_cast<std::byte>(static_cast<unsigned>(b) & 1);
  }
  Tensor t;
  t.info.name = std::move(name);
  t.info.dtype = dtype;
  t.info.shape = std::move(shape);
  t.info.data_length = n;
  t.data = std::span<const std::byte>(buf->data(), buf->size());
  t.owner = buf;
  return t;
}

// Writes `set` as a .tsafe file with the native Writer.
inline void WriteTsafe(const std::string& path, const TensorSet& set) {
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const Tensor& t : set.tensors) {
    ASSERT_TRUE(
        (*w)->Add(t.info.name, TensorView::Contiguous(t.info.dtype, t.info.shape, t.data), t.info.metadata_json).ok());
  }
  if (!set.metadata_json.empty()) ASSERT_TRUE((*w)->SetMetadata(set.metadata_json).ok());
  ASSERT_TRUE((*w)->Finish().ok());
}

inline std::string BytesOf(const Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.data.data()), t.data.size());
}

inline std::string Ext(Format f) { return f == Format::kTenbin ? "ten" : std::string(FormatName(f)); }

inline ConvertOptions Fast() {
  ConvertOptions o;
  o.sync = false;
  return o;
}

}  // namespace tensorsafe::testing
