#include "formats/common/codec_util.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>
#include <set>

#include "io/atomic_file.h"
#include "util/text.h"

namespace tensorsafe::internal {

std::size_t Pieces::Append(std::string bytes) {
  size_ += bytes.size();
  owned_.push_back(std::move(bytes));
  pieces_.push_back(Piece{true, owned_.size() - 1, {}});
  return owned_.size() - 1;
}

void Pieces::AppendView(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  size_ += bytes.size();
  pieces_.push_back(Piece{false, 0, bytes});
}

void Pieces::AppendZeros(std::uint64_t n) {
  if (n > 0) Append(std::string(static_cast<std::size_t>(n), '\0'));
}

std::span<const std::byte> Pieces::BytesOf(const Piece& p) const {
  return p.is_owned ? AsByteSpan(owned_[p.owned_index]) : p.view;
}

std::string Pieces::Join() const {
  std::string out;
  out.reserve(static_cast<std::size_t>(size_));
  for (const Piece& p : pieces_) {
    const auto b = BytesOf(p);
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return out;
}

Status Pieces::WriteTo(WritableFile& file) const {
  // Pieces below 64 KiB go through the buffer (one write per MiB, not per
  // header); larger ones are written from where they are, which for a mapped
  // source means straight from the page cache.
  constexpr std::size_t kSmall = std::size_t{64} << 10;
  constexpr std::size_t kBuffer = std::size_t{1} << 20;
  std::vector<std::byte> buf;
  auto flush = [&]() -> Status {
    if (buf.empty()) return Status::OK();
    Status s = file.Append(buf);
    buf.clear();
    return s;
  };
  for (const Piece& p : pieces_) {
    const auto b = BytesOf(p);
    if (b.size() < kSmall) {
      buf.insert(buf.end(), b.begin(), b.end());
      if (buf.size() >= kBuffer) TS_RETURN_IF_ERROR(flush());
      continue;
    }
    TS_RETURN_IF_ERROR(flush());
    TS_RETURN_IF_ERROR(file.Append(b));
  }
  return flush();
}

Status WritePiecesAtomically(const std::string& path, const Pieces& pieces, bool sync, Env* env) {
  return WriteAtomically(path, sync, env, [&](WritableFile& f) { return pieces.WriteTo(f); });
}

Tensor OwnedTensor(TensorInfo info, std::vector<std::byte> bytes) {
  auto buf = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  Tensor t;
  t.info = std::move(info);
  t.data = std::span<const std::byte>(buf->data(), buf->size());
  t.owner = std::move(buf);
  return t;
}

Tensor ViewOrCopy(TensorInfo info, std::span<const std::byte> bytes,
                  std::shared_ptr<const void> owner, std::size_t align) {
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

Status CheckDenseSize(DType dtype, std::span<const std::uint64_t> shape, std::uint64_t size,
                      const std::string& what) {
  auto want = DenseByteSize(dtype, shape);
  if (!want.ok()) return want.status().WithContext(what);
  if (*want == size) return Status::OK();
  return InvalidArgument(what + ": " + std::to_string(size) + " data bytes, but shape " +
                         ShapeToString(shape) + " of " + std::string(DTypeName(dtype)) + " needs " +
                         std::to_string(*want));
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
