// The native format's row of the format table (tensorsafe/formats/registry.h):
// .tsafe files as TensorSets through Reader and Writer, the one place where
// that mapping is written.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/formats/registry.h"

namespace tensorsafe::internal {

// Every tensor in index order, viewing the mapping (or read into buffers
// with options.pread), info.data_checksum as stored. Per-tensor metadata
// "{}" reads as ""; file metadata as "" when the file has none, and "{}" when
// an empty object is stored as such.
Result<TensorSet> ReadTsafe(const std::string& path, const FormatReadOptions& options);
Result<TensorSet> DecodeTsafe(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                              const std::string& name);
// The whole index at open and every data checksum (Reader::Verify).
Status VerifyTsafe(const std::string& path, std::vector<std::string>* damaged);
Result<FileDescription> DescribeTsafe(const std::string& path);
// Reader::ForEach: the index streamed, no tensor data touched.
Status ForEachTsafeInfo(const std::string& path, const std::function<bool(const TensorInfo&)>& fn);
// An O(1) lookup, the bytes copied with their checksum checked.
Result<Tensor> ReadTsafeTensor(const std::string& path, std::string_view name);
// Dense tensors through Writer::Add (small ones staged, large ones streamed
// from their memory), COO tensors through AddTensor.
Status WriteTsafe(const std::string& path, const TensorSet& set, const FormatWriteOptions& options);
Result<std::string> EncodeTsafe(const TensorSet& set, const FormatWriteOptions& options);

}  // namespace tensorsafe::internal
