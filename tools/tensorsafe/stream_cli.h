// Shared by `send`, `recv` and `lmdb`: stream addresses (the grammar of
// include/tensorsafe/stream/url.h), turning a tensor
// file into batches, and writing received batches to a .tsafe file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorsafe/formats/registry.h"
#include "tensorsafe/stream/url.h"
#include "tensorsafe/tensor_set.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::cli {

// The address in the stream grammar (include/tensorsafe/stream/url.h) for
// `role`; an old spelling prints its deprecation note on stderr, prefixed by
// "tensorsafe <command>: warning: ".
Result<StreamUrl> ParseAddress(const std::string& text, StreamRole role, bool pubsub, std::string_view command);

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
