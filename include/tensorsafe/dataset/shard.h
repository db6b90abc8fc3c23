// Native dataset shards (docs/DATASET.md §2): a .tsafe file storing its
// samples column by column, and the ShardSource that serves them from a
// mapping with zero copies.
//
// Column tensors of field number k (0-based, schema order; decimal, no
// leading zeros) are named:
//   "col/<k>/values"   fixed-size field: [n, ...shape] of the field's dtype
//                      (int: i64 [n]; float: f64 [n])
//   "col/<k>/data"     variable field: u8 [total], the values concatenated
//   "col/<k>/offsets"  variable field: u64 [n + 1], where each value starts
//   "col/<k>/shapes"   variable-shape tensor field: i64 [n, rank]
// Field names live only in the metadata, so they may hold any UTF-8.
//
// Thread safety: OpenTsafeShard is reentrant; the returned source is
// immutable and its Read() may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tensorsafe/dataset/index.h"
#include "tensorsafe/dataset/sample.h"
#include "tensorsafe/options.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::dataset {

// DATASET.md §2.2: the shard's tsafe file metadata is
// {"format": "tensorsafe-dataset-shard", "version": 1, "samples": n,
//  "schema": [...]} (plus nothing else a reader needs).
inline constexpr std::string_view kShardFormatName = "tensorsafe-dataset-shard";
inline constexpr std::int64_t kShardVersion = 1;
inline constexpr std::string_view kShardSuffix = ".tsafe";
inline constexpr std::string_view kZstdSuffix = ".zst";

// "col/<k>/<part>" (part is "values", "data", "offsets" or "shapes").
std::string ColumnTensorName(std::size_t field, std::string_view part);

struct ShardOptions {
  // Only kMmap gives zero-copy reads; kPread copies each column tensor into
  // memory at open (for file systems where mapping is unwise).
  ReaderOptions reader;
  IndexLimits limits;
};

// A native shard as a ShardSource, plus what it knows of its file.
class TsafeShard : public ShardSource {
 public:
  // Opens and validates `path` completely (DATASET.md §5.2, checks S1..S10):
  // tsafe header and index, shard metadata, every column tensor's dtype and
  // shape, every offset (monotone, aligned, within the data) and every stored
  // shape (rank, fixed dims, byte size within its slot), so Read() never
  // reads out of bounds. Does not hash the data (Verify() does). `display`
  // names the shard in messages (default: path). When `expected` is given
  // (from an index) the schema and sample count must match it. Errors:
  // kIOError, kCorruption (naming shard, field, sample and numbers),
  // kUnsupported (a newer shard version), kLimitExceeded.
  static Result<std::shared_ptr<TsafeShard>> Open(const std::string& path, const ShardOptions& options = {},
                                                  const Schema* expected_schema = nullptr, std::string display = {});
  // The same over bytes already in memory, kept alive by `owner`.
  static Result<std::shared_ptr<TsafeShard>> OpenBuffer(std::span<const std::byte> bytes,
                                                        std::shared_ptr<const void> owner, std::string display,
                                                        const ShardOptions& options = {},
                                                        const Schema* expected_schema = nullptr);

  std::uint64_t num_samples() const override;
  const Schema& schema() const override;
  Status Read(std::uint64_t i, std::vector<FieldView>& out) const override;

  // The name used in messages (the path unless given).
  const std::string& display_name() const;
  // Every data checksum of the tsafe file (Reader::Verify), and str/json
  // values' UTF-8 and syntax.
  Status VerifyData() const override;

  class Impl;
  explicit TsafeShard(std::unique_ptr<Impl> impl);
  ~TsafeShard() override;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorsafe::dataset
