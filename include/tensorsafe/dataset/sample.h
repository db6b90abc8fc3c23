// Samples of a sharded dataset: the schema of their fields, non-owning views
// of one sample's fields, and ShardSource, the random-access interface that
// every kind of shard implements (native .tsafe shards, MosaicML MDS shards,
// WebDataset tar shards), so partitioning, shuffling, caching and the Python
// iterators work over all of them alike.
//
// Thread safety: Schema, FieldSpec and FieldView are values. A ShardSource is
// immutable after it is opened: Read() may be called from several threads at
// once, each with its own output vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dtype.h"
#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// What a field holds. Persisted by name (FieldKindName) in dataset indexes and
// shard metadata, never by number.
enum class FieldKind : std::uint8_t {
  kTensor,  // an array of `dtype`; bytes are row-major little-endian
  kBytes,   // opaque bytes
  kStr,     // UTF-8 text
  kInt,     // one little-endian int64 (8 bytes)
  kFloat,   // one little-endian float64 (8 bytes)
  kJson,    // UTF-8 JSON text
};

// "tensor", "bytes", "str", "int", "float", "json".
std::string_view FieldKindName(FieldKind kind);
// The inverse of FieldKindName; kInvalidArgument for anything else.
Result<FieldKind> ParseFieldKind(std::string_view name);

// A dimension that varies from sample to sample.
inline constexpr std::int64_t kAnyDim = -1;

struct FieldSpec {
  std::string name;  // UTF-8, unique within the schema
  FieldKind kind = FieldKind::kBytes;
  // kTensor: the element type, and the shape, whose rank is fixed and whose
  // dims are >= 0 or kAnyDim. Other kinds: dtype and shape are unused.
  DType dtype = DType::kU8;
  std::vector<std::int64_t> shape;

  // True when every sample's value has the same byte size (kInt, kFloat, and
  // tensors without kAnyDim).
  bool fixed_size() const;
};

struct Schema {
  std::vector<FieldSpec> fields;

  // The field named `name`, or nullptr.
  const FieldSpec* Find(std::string_view name) const;
};

// One field of one sample. `bytes` points into memory owned by the
// ShardSource that produced it (usually a mapped shard) and is valid while
// that source lives.
struct FieldView {
  const FieldSpec* spec = nullptr;  // owned by the source's schema()
  // kTensor: this sample's shape (rank == spec->shape.size()). Reusing a
  // FieldView across Read() calls reuses this vector's capacity.
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;
};

// A shard: samples 0..num_samples()-1, each read in O(1).
class ShardSource {
 public:
  virtual ~ShardSource() = default;

  virtual std::uint64_t num_samples() const = 0;
  virtual const Schema& schema() const = 0;

  // Fills `out` with views of sample `i`, one per schema field in schema
  // order (resizing it). `out` is an out-parameter so that an iterator can
  // reuse one vector for millions of samples without allocating. Errors:
  // kOutOfRange for i >= num_samples(), kCorruption (naming the shard, the
  // sample and the numbers) when the stored bytes contradict the format.
  virtual Status Read(std::uint64_t i, std::vector<FieldView>& out) const = 0;

  // Checks the whole shard for Dataset::Verify (a full read): the hashes or
  // checksums its format keeps of its bytes, and what Read() checks of each
  // sample. Returns OK or the first problem (kCorruption naming the file and
  // the numbers, kIOError). The default reads every sample.
  virtual Status VerifyData() const;
};

}  // namespace tensorsafe::dataset
