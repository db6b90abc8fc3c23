// Internals of the safetensors codec shared by its files and its tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tensorsafe/dtype.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::safetensors::internal {

// One safetensors dtype. Its rank is its position in the crate's Dtype enum,
// which is also the writer's sort key (descending).
struct StDType {
  std::string_view name;
  DType dtype;
  std::uint32_t bits;  // per element; sizes are counted in bits, as the crate does
};

inline constexpr int kNumStDTypes = 22;
// Indexed by rank.
const StDType& StDTypeAt(int rank);
// Rank of a safetensors name, or -1.
int RankOfName(std::string_view name);
// Rank of a tensorsafe dtype, or -1 when the format lacks it.
int RankOfDType(DType dtype);

// Appends `s` as a JSON string escaped as serde_json does: `"` and `\`
// backslashed; \b \f \n \r \t short; other bytes below 0x20 as \u00xx (lower
// case); everything else, non-ASCII included, verbatim.
void AppendJsonString(std::string& out, std::string_view s);

// Byte offset of the first invalid UTF-8 sequence in `s`, or s.size().
std::size_t FirstInvalidUtf8(std::string_view s);

}  // namespace tensorsafe::safetensors::internal
