// PlanLoad: where each wanted tensor's bytes lie (docs/LOAD.md §Plans).
// Reads indexes only; the format table (and FormatLoadsInPlace in its Capabilities)
// says which formats hold their tensors in place and which carry
// checksums, so nothing here names a format.
#include <algorithm>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "load/internal.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/load.h"
#include "util/checked_math.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

using internal::QuoteName;

using tensorsafe::internal::Str;

// The ranges of `item` for `slice` (or the whole tensor).
Status ApplySlice(const std::string& path, const std::optional<RankSlice>& slice, LoadItem& item) {
  const TensorInfo& info = item.info;
  item.shape = info.shape;
  if (!slice || info.shape.size() < std::max<std::uint32_t>(slice->min_rank, slice->dim + 1)) {
    item.ranges.push_back({info.data_offset, info.data_length});
    item.bytes = info.data_length;
    return Status::OK();
  }
  const RankSlice& s = *slice;
  const std::uint32_t bits = GetDTypeInfo(info.dtype).bits;
  if (bits % 8 != 0) {
    return Unsupported(path + ": tensor " + QuoteName(info.name) + ": a slice of a " +
                       std::string(DTypeName(info.dtype)) + " tensor (sub-byte elements)");
  }
  const std::uint64_t extent = info.shape[s.dim];
  const std::uint64_t per = extent / s.parts;
  const std::uint64_t begin = per * s.index;
  const std::uint64_t end = s.index + 1 == s.parts ? extent : begin + per;
  // Bytes of one step along dim (everything after it), and the count of
  // blocks before it.
  std::uint64_t inner = bits / 8;
  for (std::size_t d = s.dim + 1; d < info.shape.size(); ++d) inner *= info.shape[d];
  std::uint64_t outer = 1;
  for (std::size_t d = 0; d < s.dim; ++d) outer *= info.shape[d];
  item.shape[s.dim] = end - begin;
  const std::uint64_t stride = extent * inner;
  const std::uint64_t run = (end - begin) * inner;
  for (std::uint64_t o = 0; o < outer && run > 0; ++o) {
    item.ranges.push_back({info.data_offset + o * stride + begin * inner, run});
  }
  item.bytes = run * outer;
  return Status::OK();
}

struct Builder {
  const PlanOptions& options;
  LoadPlan plan;
  // Views of options.names' strings and of the plan's own names (stable
  // once every item is in): no name is copied to look it up.
  std::optional<std::unordered_set<std::string_view>> wanted;  // nullopt: all
  std::unordered_map<std::string_view, std::uint32_t> seen;    // name -> its item, filled by CheckNamesOnce
  int sources = 0;  // files and local checkpoints added, each with names of its own unique

  Status Add(const std::string& path, Format format, const TensorInfo& info) {
    if (wanted && !wanted->count(info.name)) return Status::OK();
    const std::uint32_t file = static_cast<std::uint32_t>(plan.files.size() - 1);
    if (info.layout != Layout::kDense) {
      return Unsupported(path + ": tensor " + QuoteName(info.name) + " is sparse; the loader reads dense tensors");
    }
    if (!internal::RangeWithin(info.data_offset, info.data_length, plan.files.back().size)) {
      return Corruption(path + ": tensor " + QuoteName(info.name) + ": offset " + Str(info.data_offset) + " + " +
                        Str(info.data_length) + " bytes exceeds the file size " + Str(plan.files.back().size));
    }
    LoadItem item;
    item.file = file;
    item.info = info;
    TS_RETURN_IF_ERROR(ApplySlice(path, options.slice, item));
    item.checksum = InfoOf(format).caps.checksums && item.ranges.size() == 1 && item.bytes == item.info.data_length;
    plan.bytes += item.bytes;
    plan.items.push_back(std::move(item));
    return Status::OK();
  }

  Status AddFile(const std::string& path, Format format) {
    const FormatInfo& row = InfoOf(format);
    if (!FormatLoadsInPlace(format)) {
      return Unsupported(path +
                         ": the loader reads formats whose tensors lie in the file as stored "
                         "(tsafe, safetensors, gguf), not " +
                         std::string(row.name) +
                         "; tensorsafe.safe_open or tensorsafe.read reads it (C++: ReadTensorSet)");
    }
    std::error_code ec;
    const std::uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) return IOError(path + ": " + ec.message(), ec.value());
    plan.files.push_back({path, format, size});
    ++sources;
    const std::size_t first = plan.items.size();
    Status inner;
    TS_RETURN_IF_ERROR(ForEachTensorInfo(path, format, [&](const TensorInfo& info) {
      inner = Add(path, format, info);
      return inner.ok();
    }));
    TS_RETURN_IF_ERROR(inner);
    std::stable_sort(plan.items.begin() + first, plan.items.end(),
                     [](const LoadItem& a, const LoadItem& b) { return a.info.data_offset < b.info.data_offset; });
    return Status::OK();
  }

  // A local sharded checkpoint through sharded::Open: every header parsed
  // on several threads and checked against the weight map, as safe_open
  // opens it (100,000 tensors in 100 shards: about half the time of reading
  // the index, then each shard, on one thread).
  Status AddCheckpoint(const std::string& index_path) {
    TS_ASSIGN_OR_RETURN(sharded::Checkpoint ck, sharded::Open(index_path));
    ++sources;
    if (!FormatLoadsInPlace(ck.index.format))
      return Unsupported(index_path + ": shards the loader cannot read in place");
    std::size_t t = 0;  // ck.set.tensors holds the shards' tensors shard after shard, each in data order
    for (std::size_t s = 0; s < ck.shards.size(); ++s) {
      plan.files.push_back({ck.shards[s].path, ck.index.format, ck.shards[s].file_size});
      const std::size_t first = plan.items.size();
      for (; t < ck.set.tensors.size() && ck.shard_of[t] == s; ++t) {
        TS_RETURN_IF_ERROR(Add(ck.shards[s].path, ck.index.format, ck.set.tensors[t].info));
      }
      std::stable_sort(plan.items.begin() + first, plan.items.end(),
                       [](const LoadItem& a, const LoadItem& b) { return a.info.data_offset < b.info.data_offset; });
    }
    return Status::OK();
  }

  // A name twice (in two files, or in two paths naming one file) is an
  // error naming both files; runs once, when every item is in.
  Status CheckNamesOnce() {
    seen.reserve(plan.items.size());
    for (std::uint32_t i = 0; i < plan.items.size(); ++i) {
      auto [it, fresh] = seen.emplace(plan.items[i].info.name, i);
      if (!fresh) {
        return InvalidArgument("tensor " + QuoteName(plan.items[i].info.name) + " is in both " +
                               plan.files[plan.items[it->second].file].path + " and " +
                               plan.files[plan.items[i].file].path);
      }
    }
    return Status::OK();
  }

  Status AddPath(const std::string& path_arg) {
    std::string path = path_arg;
    if (sharded::IsShardedPath(path)) {
      TS_ASSIGN_OR_RETURN(path, sharded::ResolveCheckpoint(path));
      if (sharded::IsIndexName(path)) {
        if (path.find("://") == std::string::npos) return AddCheckpoint(path);
        TS_ASSIGN_OR_RETURN(sharded::Index index, sharded::ReadIndex(path));
        for (const std::string& shard : index.shards) {
          TS_RETURN_IF_ERROR(AddFile(index.directory + "/" + shard, index.format));
        }
        return Status::OK();
      }
    }
    TS_ASSIGN_OR_RETURN(Format format, DetectFormat(path));
    if (format == Format::kUnknown) return Unsupported(path + ": unrecognised file format");
    return AddFile(path, format);
  }
};

}  // namespace

Result<LoadPlan> PlanLoad(std::span<const std::string> paths, const PlanOptions& options) {
  if (options.slice) {
    const RankSlice& s = *options.slice;
    if (s.dim > 1 || s.parts == 0 || s.index >= s.parts) {
      return InvalidArgument("slice: block " + Str(s.index) + " of " + Str(s.parts) + " along dim " + Str(s.dim) +
                             " (dim must be 0 or 1, index below parts)");
    }
  }
  Builder b{options, {}, {}, {}, 0};
  if (options.names) b.wanted.emplace(options.names->begin(), options.names->end());
  for (const std::string& p : paths) TS_RETURN_IF_ERROR(b.AddPath(p));
  // One source's names are unique already: every reader refuses a name
  // twice in a file, and sharded::Open one in two shards. Only several (two
  // paths, one file named twice, the shards of a checkpoint at a URL) can
  // repeat one.
  if (b.sources > 1) TS_RETURN_IF_ERROR(b.CheckNamesOnce());
  if (b.wanted && b.plan.items.size() != b.wanted->size()) {
    if (b.seen.empty()) TS_RETURN_IF_ERROR(b.CheckNamesOnce());
    for (const std::string& n : *options.names) {
      if (!b.seen.count(n)) {
        return NotFound("no tensor " + QuoteName(n) + " in " +
                        (paths.size() == 1 ? paths[0] : Str(paths.size()) + " paths"));
      }
    }
  }
  return std::move(b.plan);
}

namespace internal {

// Buffers that share bytes would be written by two threads at once (tied
// weights are one tensor: Python's load reads them once, as one item).
Status CheckBuffers(const LoadPlan& plan, std::span<const std::span<std::byte>> outs) {
  if (outs.size() != plan.items.size()) {
    return InvalidArgument("LoadInto: " + Str(plan.items.size()) + " tensors but " + Str(outs.size()) + " buffers");
  }
  std::vector<std::size_t> order;
  order.reserve(outs.size());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const LoadItem& it = plan.items[i];
    if (outs[i].size() != it.bytes) {
      return InvalidArgument(plan.files[it.file].path + ": tensor " + QuoteName(it.info.name) + ": a buffer of " +
                             Str(outs[i].size()) + " bytes for " + Str(it.bytes) + " bytes");
    }
    if (!outs[i].empty()) order.push_back(i);
  }
  auto at = [&](std::size_t i) { return reinterpret_cast<std::uintptr_t>(outs[i].data()); };
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return at(a) < at(b); });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const std::size_t a = order[k - 1], b = order[k];
    if (at(a) + outs[a].size() > at(b)) {
      return InvalidArgument("LoadInto: the buffers of tensors " + QuoteName(plan.items[a].info.name) + " and " +
                             QuoteName(plan.items[b].info.name) + " overlap (the second starts " + Str(at(b) - at(a)) +
                             " bytes into the first's " + Str(outs[a].size()) + ")");
    }
  }
  return Status::OK();
}

}  // namespace internal
}  // namespace tensorsafe
