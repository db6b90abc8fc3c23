// Convert to and from sharded checkpoints (convert/sharded.h, SHARDED.md §6).
// The input opens as one TensorSet of views (every shard mapped; shards at
// URLs fetched as each output shard is written, or all for one file), and each
// output shard goes through WriteTensorSet, so a sharded conversion streams,
// checks and refuses exactly as a single-file one does.
#include "convert/sharded.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "convert/internal.h"
#include "formats/internal.h"
#include "formats/safetensors/sharded_internal.h"
#include "io/scratch.h"
#include "remote/object_store.h"
#include "remote/remote_file.h"
#include "tensorsafe/formats/sharded.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::internal {
namespace {

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A name without a tensor file's extension is a directory once a shard
// size is asked for: a file of no known format could not be written.
bool IsShardedOutput(const std::string& out, const ConvertOptions& opt) {
  if (sharded::IsIndexName(out) || (!out.empty() && out.back() == '/') || IsDir(out)) return true;
  return opt.max_shard_size != 0 && DetectFormatFromBytes({}, out) == Format::kUnknown;
}

std::uint64_t FileSize(const std::string& path) {
  if (IsRemotePath(path)) {
    Result<std::uint64_t> size = ObjectSize(path);
    return size.ok() ? *size : 0;
  }
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}

// Where and how a sharded output goes.
struct ShardedOut {
  std::string dir;
  std::string pattern;
  Format format = Format::kUnknown;
  bool always_index = false;
};

Result<ShardedOut> ParseShardedOut(const std::string& out, Format from, Format to) {
  ShardedOut o;
  if (sharded::IsIndexName(out)) {
    const std::filesystem::path p(out);
    o.dir = p.has_parent_path() ? p.parent_path().string() : ".";
    std::string base = p.filename().string();
    base.resize(base.size() - std::string_view(".index.json").size());  // "model.safetensors"
    const auto dot = base.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : base.substr(dot + 1);
    std::optional<Format> f = ParseFormat(ext);
    if (!f || (*f != Format::kSafetensors && *f != Format::kTsafe)) {
      return InvalidArgument(out +
                             ": a sharded checkpoint's index is named <name>.safetensors.index.json or "
                             "<name>.tsafe.index.json");
    }
    if (to != Format::kUnknown && to != *f) {
      return InvalidArgument(out + ": the index names " + std::string(FormatName(*f)) + " shards, but " +
                             std::string(FormatName(to)) + " was asked for");
    }
    o.format = *f;
    o.pattern = base.substr(0, dot) + "{suffix}" + base.substr(dot);
    o.always_index = true;
    return o;
  }
  o.dir = out;
  o.format = to != Format::kUnknown ? to : (from == Format::kTsafe ? Format::kTsafe : Format::kSafetensors);
  if (o.format != Format::kSafetensors && o.format != Format::kTsafe) {
    return InvalidArgument(out + ": sharded checkpoints hold safetensors or tsafe shards, not " +
                           std::string(FormatName(o.format)));
  }
  o.pattern = "model{suffix}." + std::string(FormatName(o.format));
  return o;
}

}  // namespace

bool IsShardedConversion(const std::string& in, const std::string& out, const ConvertOptions& opt) {
  return sharded::IsShardedPath(in) || opt.max_shard_size != 0 || IsShardedOutput(out, opt);
}

bool OpensFromHeaderAtUrl(const std::string& in, Format from) {
  return IsRemotePath(in) && (from == Format::kSafetensors || from == Format::kTsafe || from == Format::kGguf);
}

Result<ConvertStats> ConvertSharded(const std::string& in_arg, const std::string& out, const ConvertOptions& opt) {
  ConvertStats stats;
  std::string in = in_arg;
  std::optional<sharded::Checkpoint> ck;
  if (sharded::IsShardedPath(in)) {
    TS_ASSIGN_OR_RETURN(in, sharded::ResolveCheckpoint(in));
    if (sharded::IsIndexName(in)) {
      TS_ASSIGN_OR_RETURN(ck, sharded::Open(in));
      if (opt.from != Format::kUnknown && opt.from != ck->index.format) {
        return InvalidArgument(in + ": the checkpoint's shards are " + std::string(FormatName(ck->index.format)) +
                               ", not " + std::string(FormatName(opt.from)));
      }
      if (!ck->metadata_conflicts.empty() && !opt.drop_metadata) {
        std::string keys;
        for (const std::string& k : ck->metadata_conflicts) keys += (keys.empty() ? "" : ", ") + QuoteName(k);
        return Unsupported(in + ": the shards' metadata disagree on " + keys +
                           " (or the index's metadata does); --drop-metadata writes the metadata they agree on");
      }
    }
  }
  TensorSet set;
  std::vector<std::uint32_t> shard_of;
  if (!ck) {
    stats.from = opt.from;
    if (stats.from == Format::kUnknown) {
      TS_ASSIGN_OR_RETURN(stats.from, DetectFormat(in));
    }
    // One file at a URL opens from its header, as a checkpoint of one
    // shard, so that its bytes are fetched as the output needs them.
    if (OpensFromHeaderAtUrl(in, stats.from)) {
      TS_ASSIGN_OR_RETURN(ck, sharded::OpenFile(in, stats.from));
    } else {
      TS_ASSIGN_OR_RETURN(set, ReadTensorSet(in, stats.from));
    }
  }
  if (ck) {
    stats.from = ck->index.format;
    set = std::move(ck->set);
    shard_of = std::move(ck->shard_of);
  }
  if (!opt.tensors.empty()) {
    std::map<std::string_view, std::size_t> index;
    for (std::size_t i = 0; i < set.tensors.size(); ++i) index.emplace(set.tensors[i].info.name, i);
    TensorSet picked;
    picked.metadata_json = set.metadata_json;
    std::vector<std::uint32_t> picked_shards;
    std::set<std::string_view> seen;
    for (const std::string& n : opt.tensors) {
      auto it = index.find(n);
      if (it == index.end()) return NotFound(in + ": no tensor named " + QuoteName(n));
      if (!seen.insert(n).second) return InvalidArgument("tensor " + QuoteName(n) + " is selected twice");
      picked.tensors.push_back(set.tensors[it->second]);
      if (!shard_of.empty()) picked_shards.push_back(shard_of[it->second]);
    }
    set = std::move(picked);
    shard_of = std::move(picked_shards);
  }
  // Shards at URLs were opened from their headers: only the tensors chosen
  // are fetched, and into a sharded output one output shard at a time (the
  // memory of one shard, not of the model).
  const bool sharded_out = IsShardedOutput(out, opt);
  const bool fetch_per_shard =
      ck && sharded_out &&
      std::any_of(ck->shards.begin(), ck->shards.end(), [](const sharded::ShardInfo& s) { return s.file != nullptr; });
  const bool check = InfoOf(stats.from).caps.checksums && opt.verify;
  if (ck && !fetch_per_shard) {
    sharded::FetchOptions fo;
    if (!sharded_out) fo.scratch_dir = ScratchDirFor(out);
    TS_RETURN_IF_ERROR(sharded::FetchData(ck->shards, shard_of, set.tensors, fo));
  }
  if (check && !fetch_per_shard) TS_RETURN_IF_ERROR(CheckChecksums(set.tensors, in));
  stats.tensor_count = set.tensors.size();
  for (const Tensor& t : set.tensors) stats.data_bytes += t.data.empty() ? t.info.data_length : t.data.size();

  if (!sharded_out) {
    if (opt.max_shard_size != 0) {
      return InvalidArgument(out +
                             ": a shard size (max_shard_size, --max-shard-size) splits the output into "
                             "shards, but this names one file; name a directory or NAME.safetensors.index.json / "
                             "NAME.tsafe.index.json");
    }
    stats.to = opt.to != Format::kUnknown ? opt.to : DetectFormatFromBytes({}, out);
    if (stats.to == Format::kUnknown) {
      return InvalidArgument(out + ": cannot tell the output format from the name; name it explicitly");
    }
    ConvertOptions single = opt;
    single.to = stats.to;
    single.from = stats.from;
    TS_ASSIGN_OR_RETURN(ConvertStats written, ConvertSet(std::move(set), out, single));
    stats.file_size = written.file_size;
    stats.warnings = std::move(written.warnings);
    return stats;
  }

  TS_ASSIGN_OR_RETURN(ShardedOut so, ParseShardedOut(out, stats.from, opt.to));
  stats.to = so.format;
  sharded::WriteOptions wo;
  wo.format = so.format;
  wo.filename_pattern = so.pattern;
  wo.max_shard_size = opt.max_shard_size != 0 ? opt.max_shard_size : sharded::kDefaultMaxShardSize;
  wo.always_index = so.always_index;
  wo.sync = opt.sync;
  wo.alignment = so.format == Format::kTsafe ? opt.alignment : 0;
  wo.shard_metadata_json = set.metadata_json;
  wo.single_metadata_json = set.metadata_json;
  if (opt.alignment != 0 && so.format != Format::kTsafe) {
    return InvalidArgument("--alignment applies to tsafe and gguf outputs, not " + std::string(FormatName(so.format)));
  }

  // Keep the input's shards (same split, each shard's own metadata, the
  // index metadata as it was) unless a size was asked for.
  std::vector<std::vector<std::size_t>> fixed;
  std::vector<std::string> shard_metadata;
  const std::string* index_metadata = nullptr;
  if (ck && opt.max_shard_size == 0) {
    std::vector<std::vector<std::size_t>> by_shard(ck->shards.size());
    for (std::size_t i = 0; i < set.tensors.size(); ++i) by_shard[shard_of[i]].push_back(i);
    for (std::size_t s = 0; s < by_shard.size(); ++s) {
      if (by_shard[s].empty()) continue;
      fixed.push_back(std::move(by_shard[s]));
      shard_metadata.push_back(opt.drop_metadata ? std::string() : ck->shards[s].metadata_json);
    }
    if (!ck->index.metadata_json.empty() && opt.tensors.empty()) index_metadata = &ck->index.metadata_json;
  }

  // One progress over every shard: each WriteTensorSet reports its own.
  ConvertOptions shard_opt = opt;
  std::uint64_t before = 0, current = 0;
  if (opt.progress) {
    shard_opt.progress = [&](const ConvertProgress& p) {
      current = p.bytes_written;
      ConvertProgress q;
      q.bytes_written = before + p.bytes_written;
      q.bytes_total = stats.data_bytes;
      q.tensor_count = stats.tensor_count;
      opt.progress(q);
    };
  }
  shard_opt.from = stats.from;
  shard_opt.to = so.format;
  // Each tensor's input shard, for the tensors fetched shard by shard.
  std::unordered_map<std::string_view, std::uint32_t> input_shard;
  if (fetch_per_shard) {
    for (std::size_t i = 0; i < set.tensors.size(); ++i) input_shard.emplace(set.tensors[i].info.name, shard_of[i]);
  }
  auto write = [&](const std::string& path, const TensorSet& shard) -> Status {
    current = 0;
    TensorSet fetched;
    if (fetch_per_shard) {
      fetched = shard;
      std::vector<std::uint32_t> from;
      from.reserve(fetched.tensors.size());
      for (const Tensor& t : fetched.tensors) from.push_back(input_shard.at(t.info.name));
      sharded::FetchOptions fo;
      fo.scratch_dir = ScratchDirFor(path);
      TS_RETURN_IF_ERROR(sharded::FetchData(ck->shards, from, fetched.tensors, fo));
      if (check) TS_RETURN_IF_ERROR(CheckChecksums(fetched.tensors, in));
    }
    auto written = ConvertSet(fetch_per_shard ? std::move(fetched) : shard, path, shard_opt);
    before += current;
    if (!written.ok()) return written.status();
    for (std::string& w : written->warnings) stats.warnings.push_back(std::move(w));
    stats.file_size += written->file_size;
    return Status::OK();
  };
  auto written = sharded::internal::WriteShardedWith(so.dir, set, wo, {}, write, fixed, shard_metadata, index_metadata);
  if (!written.ok()) return written.status();
  if (!written->index_path.empty()) stats.file_size += FileSize(written->index_path);
  if (opt.progress) {
    ConvertProgress q;
    q.bytes_written = before;
    q.bytes_total = stats.data_bytes;
    q.tensor_count = stats.tensor_count;
    q.done = true;
    opt.progress(q);
  }
  return stats;
}

}  // namespace tensorsafe::internal
