// DatasetWriter: writes samples into a sharded dataset directory
// (docs/DATASET.md): native .tsafe shards closed at a byte and/or sample
// limit, optionally zstd-compressed, then index.json.
//
// Nothing half-written is visible: each shard is written to a temp name and
// renamed, and index.json, which is what makes a directory a dataset, is
// written last in Finish(). Abandon() (or destroying an unfinished writer, or
// any error) removes the shards this writer renamed into place. Memory is
// bounded by one shard: a shard's columns are buffered until it closes.
//
// Independent writers (processes, hosts) each write their own directory (a
// "part"); Merge() in index.h joins the parts without copying shards.
//
// Thread safety: a DatasetWriter is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensorsafe/dataset/index.h"
#include "tensorsafe/dataset/sample.h"
#include "tensorsafe/dtype.h"
#include "tensorsafe/status.h"

namespace tensorsafe::dataset {

// One field value of a sample to write. Byte spans are not owned: they must
// stay valid during the Add() call only.
struct FieldValue {
  FieldKind kind = FieldKind::kBytes;
  DType dtype = DType::kU8;          // kTensor
  std::vector<std::int64_t> shape;   // kTensor: every dim >= 0
  std::span<const std::byte> bytes;  // kTensor (row-major LE), kBytes, kStr, kJson
  std::int64_t int_value = 0;        // kInt
  double float_value = 0;            // kFloat

  static FieldValue Tensor(DType dtype, std::vector<std::int64_t> shape, std::span<const std::byte> bytes);
  static FieldValue Bytes(std::span<const std::byte> bytes);
  static FieldValue Str(std::string_view text);
  static FieldValue Json(std::string_view json);
  static FieldValue Int(std::int64_t v);
  static FieldValue Float(double v);
  // A value read from a dataset (copying a dataset); views `view`'s bytes.
  static FieldValue FromView(const FieldView& view);
};

struct NamedValue {
  std::string_view name;
  FieldValue value;
};

struct DatasetWriterOptions {
  // The schema; when empty, the first sample fixes it: its fields in the
  // order given, tensor shapes exactly as in that sample (declare kAnyDim
  // dims to allow shapes to vary).
  Schema schema;
  // A shard closes when its payload (values, offsets, shapes and alignment
  // padding) reaches this many bytes; a sample bigger than the limit gets a
  // shard of its own. 0 = no byte limit. The shard file adds a small fixed
  // overhead (tsafe header, index, metadata: about 1 KiB + 200 B per field).
  std::uint64_t max_shard_bytes = std::uint64_t{64} << 20;
  // A shard closes when it holds this many samples; 0 = no count limit.
  std::uint64_t max_shard_samples = 0;
  // Shard file names: "<prefix>-00000.tsafe", numbered from `first_shard`.
  // Writers sharing a directory need distinct prefixes; the prefix may hold
  // '/' to place shards in a subdirectory (created as needed).
  std::string shard_prefix = "shard";
  std::uint64_t first_shard = 0;
  // zstd level 1..22 compresses each shard file; 0 = uncompressed.
  int zstd_level = 0;
  // User metadata stored in index.json (a JSON object), "" for none.
  std::string metadata_json;
  // fsync shards, index and directory.
  bool sync = true;
  // Called after each shard closes (progress bars): shards and samples so far.
  std::function<void(const ShardInfo&)> on_shard;
};

class DatasetWriter {
 public:
  // Starts a dataset in `dir` (created if missing). Errors:
  // kInvalidArgument (options, schema), kFailedPrecondition (dir already
  // holds an index.json), kIOError.
  static Result<std::unique_ptr<DatasetWriter>> Create(const std::string& dir,
                                                       const DatasetWriterOptions& options = {});
  ~DatasetWriter();  // abandons an unfinished dataset
  DatasetWriter(const DatasetWriter&) = delete;
  DatasetWriter& operator=(const DatasetWriter&) = delete;

  // Adds one sample: one value per schema field, in any order. Errors:
  // kInvalidArgument naming the sample number and field (missing, unknown or
  // duplicate field, wrong kind/dtype/shape/byte size, invalid UTF-8 or JSON);
  // the sample is then skipped and the writer stays usable. kIOError when a
  // shard cannot be written (the writer is then abandoned).
  Status Add(std::span<const NamedValue> sample);

  // Closes the last shard and writes index.json; returns the index. After an
  // error, everything this writer wrote is removed.
  Result<DatasetIndex> Finish();
  // Removes every shard written so far; no index is written.
  void Abandon();

  const Schema& schema() const;  // empty until fixed
  std::uint64_t samples_written() const;
  std::uint64_t shards_written() const;
  std::uint64_t bytes_written() const;  // shard file bytes as stored

  class Impl;
  explicit DatasetWriter(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorsafe::dataset
