// The .npz codec: zip.h for the container, internal.h for the members.
#include <set>

#include "formats/npy/internal.h"
#include "formats/npy/zip.h"
#include "io/atomic_file.h"
#include "io/internal.h"
#include "io/string_file.h"
#include "tensorsafe/formats/npz.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe::npz {
namespace {

constexpr std::string_view kSuffix = ".npy";

Status WriteTo(WritableFile& f, const TensorSet& set, const WriteOptions& opt) {
  internal::zip::Writer zw(f);
  std::set<std::string_view> seen;
  for (const Tensor& t : set.tensors) {
    const std::string& name = t.info.name;
    // An empty name is the member ".npy", as np.savez(**{"": a}) writes it.
    if (!internal::IsValidUtf8(name))
      return InvalidArgument("tensor name " + internal::QuoteName(name) + " is not UTF-8");
    // Python's zipfile (so np.load) cuts a member name at its first NUL:
    // "w\0a" and "w\0b" would both load as "w", one array lost.
    if (const std::size_t z = name.find('\0'); z != std::string::npos) {
      return InvalidArgument("tensor name " + internal::QuoteName(name) + " holds a NUL byte at " + std::to_string(z) +
                             "; .npz readers (zipfile, np.load) cut member names there");
    }
    if (!seen.insert(name).second) return InvalidArgument("duplicate tensor name " + internal::QuoteName(name));
    auto header = npy::EncodeHeader(t.info.dtype, t.info.shape);
    if (!header.ok()) return header.status().WithContext("tensor " + internal::QuoteName(name));
    TS_ASSIGN_OR_RETURN(std::uint64_t want, DenseByteSize(t.info.dtype, t.info.shape));
    if (want != t.data.size()) {
      return InvalidArgument("tensor " + internal::QuoteName(name) + ": shape " + ShapeToString(t.info.shape) +
                             " needs " + std::to_string(want) + " bytes, data has " + std::to_string(t.data.size()));
    }
    const std::span<const std::byte> pieces[2] = {std::as_bytes(std::span(*header)), t.data};
    TS_RETURN_IF_ERROR(zw.Add(name + std::string(kSuffix), pieces,
                              opt.compress ? internal::zip::kDeflated : internal::zip::kStored, opt.level));
  }
  return zw.Finish();
}

}  // namespace

Result<TensorSet> Decode(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                         const std::string& display_name, const ReadOptions& opt) {
  TS_ASSIGN_OR_RETURN(auto entries, internal::zip::ReadDirectory(bytes, display_name, opt.max_members));
  TensorSet set;
  set.tensors.reserve(entries.size());
  std::set<std::string> names;
  std::uint64_t inflated = 0;
  for (const auto& e : entries) {
    const std::string where = display_name + ": member " + internal::QuoteName(e.name);
    // ".npy" alone is the name "" (np.load reads it so).
    if (e.name.size() < kSuffix.size() ||
        e.name.compare(e.name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
      return Unsupported(where + ": not a .npy member (np.load would return raw bytes for it)");
    }
    std::string name = e.name.substr(0, e.name.size() - kSuffix.size());
    if (!names.insert(name).second) return Corruption(where + ": duplicate member name");
    if (e.method != internal::zip::kStored) {
      auto total = internal::CheckedAdd(inflated, e.size);
      if (!total || *total > opt.max_inflated_bytes) {
        return LimitExceeded(where + ": inflating " + std::to_string(e.size) + " more bytes exceeds the limit of " +
                             std::to_string(opt.max_inflated_bytes) + " inflated bytes");
      }
      inflated = *total;
    }
    std::shared_ptr<std::byte> buffer;
    TS_ASSIGN_OR_RETURN(auto member, internal::zip::Extract(bytes, e, opt.verify_crc, &buffer, where));
    std::shared_ptr<const void> member_owner = buffer ? std::shared_ptr<const void>(buffer) : owner;
    TS_ASSIGN_OR_RETURN(Tensor t, npy::internal::DecodeArray(member, std::move(member_owner), name, where, opt.npy));
    // Report offsets in the archive when the member is a view of it.
    if (!buffer) t.info.data_offset += e.data_offset;
    set.tensors.push_back(std::move(t));
  }
  return set;
}

Result<TensorSet> ReadFile(const std::string& path, const ReadOptions& options) {
  TS_ASSIGN_OR_RETURN(auto region, internal::EnvOr(options.env)->Map(path));
  std::span<const std::byte> bytes = region->bytes();
  return Decode(bytes, std::move(region), path, options);
}

Status WriteFile(const std::string& path, const TensorSet& set, const WriteOptions& options) {
  Status s = internal::WriteAtomically(path, options.sync, options.env,
                                       [&](WritableFile& f) { return WriteTo(f, set, options); });
  return s.WithContext(path);
}

Result<std::string> Encode(const TensorSet& set, const WriteOptions& options) {
  // In memory, so Encode shares WriteFile's code path.
  internal::StringFile f;
  TS_RETURN_IF_ERROR(WriteTo(f, set, options));
  return std::move(f.str());
}

}  // namespace tensorsafe::npz
