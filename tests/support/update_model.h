// A model of a .tsafe file's content and random transactions over it, applied
// to the model and (optionally) to a real Updater with the same random draws,
// so a test can replay exactly what a crashed process committed.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "tensorsafe/reader.h"
#include "tensorsafe/updater.h"

namespace tensorsafe::testing {

struct ModelTensor {
  DType dtype = DType::kU8;
  Shape shape;
  std::string bytes;
  std::string metadata;
  bool operator==(const ModelTensor&) const = default;
};

struct Model {
  std::vector<std::string> order;  // file order
  std::map<std::string, ModelTensor> tensors;
  std::string metadata;  // "" = none
  bool operator==(const Model&) const = default;
};

// Reads a file into a model; errors (including Verify failures) as Status.
Result<Model> LoadModel(const std::string& path, ReaderOptions opt = {});
// Writes `m` as a fresh file.
Status WriteModel(const std::string& path, const Model& m);
// One random transaction of 1-4 operations, applied to `m` and, when `u` is
// not null, staged in `u` and committed. Returns the updater's first error.
Status RandomTransaction(std::mt19937_64& rng, Model& m, Updater* u);
std::string Describe(const Model& m);

}  // namespace tensorsafe::testing
