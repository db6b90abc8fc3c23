// Helpers of the dataset tests: an in-memory model of samples, random
// schemas and samples, and a raw shard writer for corruption tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/seed.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/writer.h"

namespace tensorsafe::testing {

// One field value as the model keeps it.
struct ModelValue {
  dataset::FieldKind kind = dataset::FieldKind::kBytes;
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;
  std::string bytes;  // kInt/kFloat: the 8 little-endian bytes
};
using ModelSample = std::vector<ModelValue>;  // schema order

// A random schema of 1..max_fields fields over every kind and dtype; names
// include dots, slashes and non-ASCII.
dataset::Schema RandomSchema(std::mt19937_64& rng, int max_fields = 5);
ModelSample RandomSample(std::mt19937_64& rng, const dataset::Schema& schema, std::size_t max_bytes = 64);
// Views of `s` for DatasetWriter::Add (valid while `s` lives).
std::vector<dataset::NamedValue> ToNamed(const dataset::Schema& schema, const ModelSample& s);
// Compares a read sample with the model; empty when equal.
std::string Diff(const dataset::Schema& schema, const ModelSample& want, const dataset::Sample& got);

}  // namespace tensorsafe::testing
