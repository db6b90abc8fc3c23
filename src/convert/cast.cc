#include "convert/cast.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "formats/gguf/quants_internal.h"
#include "io/scratch.h"
#include "tensorsafe/formats/gguf_quants.h"
#include "util/checked_math.h"

namespace tensorsafe::internal {

Result<TensorSet> CastForConvert(const TensorSet& set, DType dtype, const std::string& out_path) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return InvalidArgument("cannot convert tensors to " + std::string(DTypeName(dtype)) +
                           ": the dtype to convert to is f32, f16 or bf16");
  }
  using gguf::internal::TensorClass;
  TensorSet out;
  TS_ASSIGN_OR_RETURN(out.metadata_json, gguf::internal::WithFileType(set.metadata_json, dtype));
  out.tensors = set.tensors;
  // First every check and size, so nothing is built for a set that fails.
  struct Job {
    std::size_t index;
    TensorInfo info;
    std::uint64_t offset;
  };
  std::vector<Job> jobs;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    const TensorClass c = gguf::internal::Classify(t.info);
    if (c == TensorClass::kKeep || (c == TensorClass::kFloat && t.info.dtype == dtype)) continue;
    auto info = gguf::DequantizedInfo(t, dtype);  // errors name the tensor
    if (!info.ok()) return info.status();
    const auto at = AlignUp(total, 64);
    const auto end = at ? CheckedAdd(*at, info->data_length) : std::nullopt;
    if (!end) return OutOfRange("the converted tensors' size overflows 64 bits");
    jobs.push_back({i, std::move(*info), *at});
    total = *end;
  }
  if (jobs.empty()) return out;
  TS_ASSIGN_OR_RETURN(auto scratch, ScratchRegion::Create(ScratchDirFor(out_path), total));
  for (Job& j : jobs) {
    const std::span<std::byte> dst = scratch->bytes().subspan(j.offset, j.info.data_length);
    TS_RETURN_IF_ERROR(gguf::DequantizeInto(set.tensors[j.index], dtype, dst));
    Tensor& t = out.tensors[j.index];
    t.info = std::move(j.info);
    t.data = dst;
    t.owner = scratch;
  }
  return out;
}

}  // namespace tensorsafe::internal
