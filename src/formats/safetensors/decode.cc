// Decode and ReadFile: a validated header turned into zero-copy tensors;
// ReadHeader: the header alone, read through a file.
#include <algorithm>
#include <vector>

#include "formats/safetensors/internal.h"
#include "io/internal.h"
#include "tensorsafe/formats/safetensors.h"
#include "util/endian.h"

namespace tensorsafe::safetensors {

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& options) {
  Result<Header> parsed = ParseHeader(bytes, options);
  if (!parsed.ok()) {
    return display_name.empty() ? parsed.status() : parsed.status().WithContext(display_name);
  }
  Header& h = *parsed;
  TensorSet set;
  set.metadata_json = std::move(h.metadata_json);
  set.tensors.reserve(h.tensors.size());
  for (TensorInfo& info : h.tensors) {
    // ParseHeader proved that every range lies inside `bytes`.
    auto data = bytes.subspan(static_cast<std::size_t>(info.data_offset), static_cast<std::size_t>(info.data_length));
    set.tensors.push_back(Tensor{std::move(info), data, owner});
  }
  return set;
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<tensorsafe::MappedRegion> region,
                      tensorsafe::internal::EnvOr(options.env)->Map(path));
  const auto bytes = region->bytes();
  return Decode(bytes, std::move(region), path, options);
}

namespace internal {

Result<std::vector<std::byte>> ReadHeaderPrefix(const RandomAccessFile& file, const ReadOptions& options) {
  const std::uint64_t size = file.size();
  std::vector<std::byte> prefix(static_cast<std::size_t>(std::min<std::uint64_t>(size, 64 << 10)));
  TS_RETURN_IF_ERROR(file.ReadAt(0, prefix));
  if (prefix.size() < 8) return prefix;
  const std::uint64_t n = tensorsafe::internal::Load64(prefix.data());
  // Only a length ParseHeader would accept is read on; any other gets its
  // error from the bytes read.
  if (n > options.max_header_bytes || n > size - 8) return prefix;
  const std::size_t had = prefix.size();
  prefix.resize(static_cast<std::size_t>(8 + n));
  if (prefix.size() > had) TS_RETURN_IF_ERROR(file.ReadAt(had, std::span(prefix).subspan(had)));
  return prefix;
}

}  // namespace internal

Result<Header> ReadHeader(const RandomAccessFile& file, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(std::vector<std::byte> prefix, internal::ReadHeaderPrefix(file, options));
  Result<Header> parsed = ParseHeader(prefix, file.size(), options);
  if (!parsed.ok()) return parsed.status().WithContext(file.name());
  return parsed;
}

}  // namespace tensorsafe::safetensors
