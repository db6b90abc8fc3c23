#include "formats/codec_util.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>
#include <set>

#include "util/text.h"

namespace tensorsafe::internal {

Tensor OwnedTensor(TensorInfo info, std::vector<std::byte> bytes) {
  auto buf = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  Tensor t;
  t.info = std::move(info);
  t.data = std::span<const std::byte>(buf->data(), buf->size());
  t.owner = std::move(buf);
  return t;
}

Tensor ViewOrCopy(TensorInfo info, std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                  std::size_t align) {
  const auto addr = reinterpret_cast<std::uintptr_t>(bytes.data());
  if (align <= 1 || addr % align == 0) {
    Tensor t;
    t.info = std::move(info);
    t.data = bytes;
    t.owner = std::move(owner);
    return t;
  }
  // operator new aligns to at least 16 bytes, enough for every element type.
  return OwnedTensor(std::move(info), std::vector<std::byte>(bytes.begin(), bytes.end()));
}

Status CheckDenseSize(DType dtype, std::span<const std::uint64_t> shape, std::uint64_t size, const std::string& what) {
  auto want = DenseByteSize(dtype, shape);
  if (!want.ok()) return want.status().WithContext(what);
  if (*want == size) return Status::OK();
  return InvalidArgument(what + ": " + std::to_string(size) + " data bytes, but shape " + ShapeToString(shape) +
                         " of " + std::string(DTypeName(dtype)) + " needs " + std::to_string(*want));
}

bool IsPositionalName(std::string_view name, std::size_t i) { return name == std::to_string(i); }

std::vector<std::string> AssignNames(const std::vector<std::string>& preferred) {
  const std::size_t n = preferred.size();
  std::map<std::string_view, int> count;
  for (const auto& p : preferred) {
    if (!p.empty()) ++count[p];
  }
  std::vector<bool> keep(n);
  for (std::size_t i = 0; i < n; ++i) keep[i] = !preferred[i].empty() && count[preferred[i]] == 1;
  // Dropping a preferred name adds a positional one, which may clash with
  // another preferred name: repeat until stable (at most n rounds).
  for (bool changed = true; changed;) {
    changed = false;
    std::set<std::string> positional;
    for (std::size_t i = 0; i < n; ++i) {
      if (!keep[i]) positional.insert(std::to_string(i));
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (keep[i] && positional.count(preferred[i])) {
        keep[i] = false;
        changed = true;
      }
    }
  }
  std::vector<std::string> names(n);
  for (std::size_t i = 0; i < n; ++i) names[i] = keep[i] ? preferred[i] : std::to_string(i);
  return names;
}

std::string Context(std::string_view display_name) {
  if (display_name.empty()) return "";
  return std::string(display_name) + ": ";
}

std::vector<std::string> ReadBackNames(const TensorSet& set, std::string_view key,
                                       std::string (*read)(std::string_view stored)) {
  std::vector<std::string> preferred;
  preferred.reserve(set.tensors.size());
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const TensorInfo& info = set.tensors[i].info;
    std::string stored = IsPositionalName(info.name, i) ? std::string() : info.name;
    if (!info.metadata_json.empty()) {
      auto md = nlohmann::json::parse(info.metadata_json, nullptr, /*allow_exceptions=*/false);
      const std::string k(key);
      if (md.is_object() && md.contains(k) && md[k].is_string()) stored = md[k].get<std::string>();
    }
    preferred.push_back(read(stored));
  }
  return AssignNames(preferred);
}

Status CheckReadBackNames(const TensorSet& set, const std::vector<std::string>& back, bool drop_names,
                          std::string (*why)(const Tensor& t)) {
  for (std::size_t i = 0; i < set.tensors.size(); ++i) {
    const Tensor& t = set.tensors[i];
    if (back[i] == t.info.name || drop_names) continue;
    return InvalidArgument("tensor " + std::to_string(i) + " " + QuoteName(t.info.name) + ": " + why(t) +
                           ", so it would read back as " + QuoteName(back[i]) +
                           " (consent to positional names: drop_names, --drop-names)");
  }
  return Status::OK();
}

}  // namespace tensorsafe::internal
