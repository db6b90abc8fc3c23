// Decode and ReadFile: a validated header turned into zero-copy tensors;
// ReadHeader: the header alone, read through a file.
#include <algorithm>
#include <cstring>
#include <memory>
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

Result<HeaderBytes> ReadHeaderPrefix(const RandomAccessFile& file, const ReadOptions& options, bool length_first) {
  const std::uint64_t size = file.size();
  constexpr std::uint64_t kFirst = 64 << 10;
  // 8 + n for a length ParseHeader would accept; 0 for any other, whose
  // error the first bytes give.
  const auto wanted = [&](std::uint64_t n) -> std::uint64_t {
    return n <= options.max_header_bytes && n <= size - 8 ? 8 + n : 0;
  };
  HeaderBytes out;
  const auto read = [&](std::uint64_t bytes, std::uint64_t from) -> Status {
    std::unique_ptr<std::byte[]> data(new std::byte[std::max<std::uint64_t>(bytes, 1)]);  // not zeroed: all read
    if (from != 0) std::memcpy(data.get(), out.data.get(), static_cast<std::size_t>(from));
    out.data = std::move(data);
    out.size = static_cast<std::size_t>(bytes);
    return file.ReadAt(from, out.span().subspan(static_cast<std::size_t>(from)));
  };
  if (size < 8) {
    TS_RETURN_IF_ERROR(read(size, 0));
    return out;
  }
  if (length_first) {
    std::byte length[8];
    TS_RETURN_IF_ERROR(file.ReadAt(0, length));
    const std::uint64_t want = wanted(tensorsafe::internal::Load64(length));
    // At least 16 bytes, which format detection reads.
    TS_RETURN_IF_ERROR(read(want != 0 ? std::max(want, std::min<std::uint64_t>(size, 16)) : std::min(size, kFirst), 0));
    return out;
  }
  TS_RETURN_IF_ERROR(read(std::min(size, kFirst), 0));
  const std::uint64_t want = wanted(tensorsafe::internal::Load64(out.data.get()));
  if (want > out.size) TS_RETURN_IF_ERROR(read(want, out.size));
  return out;
}

}  // namespace internal

Result<Header> ReadHeader(const RandomAccessFile& file, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(internal::HeaderBytes prefix, internal::ReadHeaderPrefix(file, options));
  Result<Header> parsed = ParseHeader(prefix.span(), file.size(), options);
  if (!parsed.ok()) return parsed.status().WithContext(file.name());
  return parsed;
}

}  // namespace tensorsafe::safetensors
