#include "tensorsafe/dataset/sample.h"

#include <algorithm>
#include <array>
#include <utility>

namespace tensorsafe::dataset {
namespace {

constexpr std::array<std::pair<FieldKind, std::string_view>, 6> kKindNames = {{
    {FieldKind::kTensor, "tensor"},
    {FieldKind::kBytes, "bytes"},
    {FieldKind::kStr, "str"},
    {FieldKind::kInt, "int"},
    {FieldKind::kFloat, "float"},
    {FieldKind::kJson, "json"},
}};

}  // namespace

Status ShardSource::VerifyData() const {
  std::vector<FieldView> views;
  for (std::uint64_t i = 0; i < num_samples(); ++i) TS_RETURN_IF_ERROR(Read(i, views));
  return Status::OK();
}

std::string_view FieldKindName(FieldKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

Result<FieldKind> ParseFieldKind(std::string_view name) {
  for (const auto& [k, n] : kKindNames) {
    if (n == name) return k;
  }
  return Status(StatusCode::kInvalidArgument,
                "unknown field kind \"" + std::string(name) + "\" (expected tensor, bytes, str, int, float or json)");
}

bool FieldSpec::fixed_size() const {
  switch (kind) {
    case FieldKind::kInt:
    case FieldKind::kFloat: return true;
    case FieldKind::kTensor: return std::none_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; });
    default: return false;
  }
}

const FieldSpec* Schema::Find(std::string_view name) const {
  for (const FieldSpec& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace tensorsafe::dataset
