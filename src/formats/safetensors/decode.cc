// Decode and ReadFile: a validated header turned into zero-copy tensors.
#include "io/internal.h"
#include "tensorsafe/formats/safetensors.h"

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

}  // namespace tensorsafe::safetensors
