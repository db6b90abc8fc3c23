// Shared by `send`, `recv` and `lmdb`: stream addresses, turning a tensor
// file into batches, and writing received batches to a .tsafe file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorsafe/formats/registry.h"
#include "tensorsafe/tensor_set.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::cli {

// "-" (stdin/stdout), "tcp-raw://HOST:PORT", "unix://PATH" (fd framing), or a
// ZeroMQ endpoint "tcp://...", "ipc://...", "inproc://...".
struct Address {
  enum class Kind { kStdio, kTcpRaw, kUnix, kZmq } kind = Kind::kStdio;
  std::string host;
  std::uint16_t port = 0;
  std::string path;      // kUnix
  std::string endpoint;  // kZmq
};
Result<Address> ParseAddress(const std::string& text);

// The tensors of the file at `path` (any format) in file order, `per_batch`
// to a batch (0 = all in one). A file with checksums (.tsafe) is verified
// first and then sent from the mapping. The file metadata travels with the
// first batch.
Result<std::vector<TensorSet>> SourceBatches(const std::string& path, std::uint32_t per_batch);

// Collects received batches into a .tsafe file: every tensor in arrival
// order; the file metadata is the first non-empty batch metadata.
class TsafeSink {
 public:
  static Result<std::unique_ptr<TsafeSink>> Create(const std::string& path);
  Status Add(const TensorSet& batch);
  Status Finish();

 private:
  std::unique_ptr<Writer> writer_;
  bool have_metadata_ = false;
};

}  // namespace tensorsafe::cli
