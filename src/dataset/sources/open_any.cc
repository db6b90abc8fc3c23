// OpenAny: one entry point for every dataset location kind (DATASET.md
// "Locations"): native directories, MosaicML MDS directories and WebDataset
// tar shards here; the same kinds over http(s) and s3:// in open_remote.cc.
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "dataset/internal.h"
#include "dataset/sources/open_internal.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/dataset/remote.h"
#include "tensorsafe/dataset/shard.h"
#include "tensorsafe/dataset/wds.h"
#include "util/text.h"

namespace tensorsafe::dataset {

namespace fs = std::filesystem;
using tensorsafe::internal::QuoteName;

namespace {

// A shard whose own schema differs from the dataset's merged one only in dims
// that the merged schema leaves open: Read() points the views at the merged
// specs so that every sample of the dataset carries one schema.
class MergedSchemaShard final : public ShardSource {
 public:
  MergedSchemaShard(std::shared_ptr<const ShardSource> inner, std::shared_ptr<const Schema> schema)
      : inner_(std::move(inner)), schema_(std::move(schema)) {}
  std::uint64_t num_samples() const override { return inner_->num_samples(); }
  const Schema& schema() const override { return *schema_; }
  Status VerifyData() const override { return inner_->VerifyData(); }
  Status Read(std::uint64_t i, std::vector<FieldView>& out) const override {
    TS_RETURN_IF_ERROR(inner_->Read(i, out));
    for (std::size_t k = 0; k < out.size() && k < schema_->fields.size(); ++k) out[k].spec = &schema_->fields[k];
    return Status::OK();
  }

 private:
  std::shared_ptr<const ShardSource> inner_;
  std::shared_ptr<const Schema> schema_;
};

// Wraps `src` when its schema is not exactly `schema` (the merge made it so).
std::shared_ptr<const ShardSource> Adapt(std::shared_ptr<const ShardSource> src,
                                         const std::shared_ptr<const Schema>& schema) {
  if (SameSchema(*schema, src->schema())) return src;
  return std::make_shared<MergedSchemaShard>(std::move(src), schema);
}

bool MdsColumnsStatic(const mds::ShardEntry& shard) {
  for (const mds::Column& c : shard.columns) {
    if (c.codec == mds::ColumnCodec::kNdarray && !(c.dtype_fixed && c.shape_fixed)) return false;
  }
  return true;
}

// The Dataset over the shards the adapter kept: `kept[s]` is the caller's
// number of the Dataset's shard s (empty shards are skipped), for the
// opener and the prefetcher alike; every shard is adapted to the merged
// schema.
Result<std::shared_ptr<Dataset>> FromKeptShards(const std::string& location, Schema schema,
                                                std::vector<ShardInfo> shards, sources::SourceOpener open,
                                                std::vector<std::size_t> kept, sources::SourcePrefetcher prefetch,
                                                const DatasetOptions& options) {
  auto shared_schema = std::make_shared<const Schema>(schema);
  auto shared_kept = std::make_shared<const std::vector<std::size_t>>(std::move(kept));
  ShardOpener opener = [open = std::move(open), shared_schema, shared_kept](
                           const ShardInfo&, std::size_t s) -> Result<std::shared_ptr<const ShardSource>> {
    TS_ASSIGN_OR_RETURN(auto src, open(shared_kept->at(s)));
    return Adapt(std::move(src), shared_schema);
  };
  ShardPrefetcher mapped;
  if (prefetch) {
    mapped = [prefetch = std::move(prefetch), shared_kept](std::span<const std::size_t> ids) {
      std::vector<std::size_t> ks;
      ks.reserve(ids.size());
      for (std::size_t i : ids) ks.push_back(shared_kept->at(i));
      prefetch(ks);
    };
  }
  return Dataset::FromShards(location, std::move(schema), std::move(shards), std::move(opener), options, "",
                             std::move(mapped));
}

}  // namespace

namespace sources {

Status MergeInto(Schema& merged, const Schema& next, const std::string& location, const std::string& shard) {
  auto fail = [&](const std::string& why) {
    return Unsupported(location + ": shard " + shard + " has another schema than the first shard (" + why +
                       "); a dataset has one schema");
  };
  if (merged.fields.size() != next.fields.size()) {
    return fail(std::to_string(next.fields.size()) + " fields, the first shard has " +
                std::to_string(merged.fields.size()));
  }
  for (std::size_t k = 0; k < merged.fields.size(); ++k) {
    FieldSpec& a = merged.fields[k];
    const FieldSpec& b = next.fields[k];
    const std::string f = "field " + std::to_string(k) + " " + QuoteName(b.name);
    if (a.name != b.name) return fail(f + " where the first shard has " + QuoteName(a.name));
    if (a.kind != b.kind) {
      return fail(f + " is " + std::string(FieldKindName(b.kind)) + ", not " + std::string(FieldKindName(a.kind)));
    }
    if (a.kind != FieldKind::kTensor) continue;
    if (a.dtype != b.dtype) {
      return fail(f + " has dtype " + std::string(DTypeName(b.dtype)) + ", not " + std::string(DTypeName(a.dtype)));
    }
    if (a.shape.size() != b.shape.size()) {
      return fail(f + " has rank " + std::to_string(b.shape.size()) + ", not " + std::to_string(a.shape.size()));
    }
    for (std::size_t d = 0; d < a.shape.size(); ++d) {
      if (a.shape[d] != b.shape[d]) a.shape[d] = kAnyDim;
    }
  }
  return Status::OK();
}

Result<std::string> IndexKindOf(const std::string& text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corruption(what + ": not a JSON object");
  auto f = j.find("format");
  if (f != j.end() && f->is_string() && f->get<std::string>() == kIndexFormatName) return std::string("native");
  auto v = j.find("version");
  if (v != j.end() && v->is_number_integer() && v->get<std::int64_t>() == 2 && j.contains("shards")) {
    return std::string("mds");
  }
  return Unsupported(what + ": neither a tensorsafe dataset index (\"format\": \"" + std::string(kIndexFormatName) +
                     "\") nor a MosaicML MDS index (\"version\": 2)");
}

Result<std::shared_ptr<Dataset>> OpenMdsWith(const std::string& location, std::shared_ptr<const mds::Index> ds,
                                             SourceOpener open, SourcePrefetcher prefetch,
                                             const DatasetOptions& options) {
  std::vector<ShardInfo> shards;
  std::vector<std::size_t> mds_index;  // our shard numbers (empty MDS shards skipped) to MDS's
  bool all_static = true;
  for (std::size_t s = 0; s < ds->shards.size(); ++s) {
    const mds::ShardEntry& m = ds->shards[s];
    if (m.samples == 0) continue;  // FromShards refuses empty shards; they hold nothing
    ShardInfo info;
    info.name = m.raw.basename;
    info.samples = m.samples;
    info.bytes = m.raw.bytes;
    info.kind = "mds";
    shards.push_back(std::move(info));
    mds_index.push_back(s);
    all_static = all_static && MdsColumnsStatic(m);
  }
  if (shards.empty()) return Unsupported(location + ": the MDS dataset holds no samples");
  // The schema: shard 0's when every column has a fixed dtype and shape (and
  // every shard lists the same columns); else ndarray dtypes and ranks come
  // from each shard's sample 0, so every shard is opened now and the schemas
  // merged (mds.md: "which dims are any").
  Schema schema;
  {
    TS_ASSIGN_OR_RETURN(auto first, open(mds_index[0]));
    schema = first->schema();
  }
  const mds::ShardEntry& m0 = ds->shards[mds_index[0]];
  for (std::size_t s = 1; s < mds_index.size(); ++s) {
    const mds::ShardEntry& m = ds->shards[mds_index[s]];
    if (all_static) {
      bool same = m.columns.size() == m0.columns.size();
      for (std::size_t c = 0; same && c < m.columns.size(); ++c) {
        same = m.columns[c].name == m0.columns[c].name && m.columns[c].encoding == m0.columns[c].encoding;
      }
      if (!same) {
        return Unsupported(location + ": MDS shard " + QuoteName(m.raw.basename) +
                           " has other columns than the first shard; a dataset has one schema");
      }
      continue;
    }
    if (prefetch) {
      std::vector<std::size_t> next(mds_index.begin() + static_cast<std::ptrdiff_t>(s),
                                    mds_index.begin() + static_cast<std::ptrdiff_t>(std::min(s + 4, mds_index.size())));
      prefetch(next);
    }
    TS_ASSIGN_OR_RETURN(auto src, open(mds_index[s]));
    TS_RETURN_IF_ERROR(MergeInto(schema, src->schema(), location, QuoteName(m.raw.basename)));
  }
  return FromKeptShards(location, std::move(schema), std::move(shards), std::move(open), std::move(mds_index),
                        std::move(prefetch), options);
}

Result<std::shared_ptr<Dataset>> OpenWdsWith(const std::string& location, std::vector<WdsShardRef> refs,
                                             SourceOpener open, SourcePrefetcher prefetch,
                                             const DatasetOptions& options) {
  if (refs.empty()) return NotFound(location + ": no .tar shards");
  std::vector<ShardInfo> shards;
  std::vector<std::size_t> kept;
  Schema schema;
  // Counting samples needs a scan of each shard's headers (and the schema is
  // each shard's first sample): done once here, the shards closed again.
  for (std::size_t k = 0; k < refs.size(); ++k) {
    if (prefetch) {
      std::vector<std::size_t> next;
      for (std::size_t j = k; j < std::min(k + 4, refs.size()); ++j) next.push_back(j);
      prefetch(next);
    }
    TS_ASSIGN_OR_RETURN(auto src, open(k));
    if (src->num_samples() == 0) continue;
    if (shards.empty()) {
      schema = src->schema();
    } else {
      TS_RETURN_IF_ERROR(MergeInto(schema, src->schema(), location, QuoteName(refs[k].name)));
    }
    ShardInfo info;
    info.name = refs[k].name;
    info.samples = src->num_samples();
    info.bytes = refs[k].bytes;
    info.kind = "wds";
    shards.push_back(std::move(info));
    kept.push_back(k);
  }
  if (shards.empty()) return Unsupported(location + ": the WebDataset shards hold no samples");
  return FromKeptShards(location, std::move(schema), std::move(shards), std::move(open), std::move(kept),
                        std::move(prefetch), options);
}

}  // namespace sources

namespace {

using sources::IndexKindOf;

Result<std::shared_ptr<Dataset>> OpenMds(const std::string& dir, const DatasetOptions& options) {
  TS_ASSIGN_OR_RETURN(mds::Index parsed, mds::OpenIndex(dir));
  auto ds = std::make_shared<const mds::Index>(std::move(parsed));
  mds::ShardOptions mopt;
  // As for native zstd shards: decompressed next to the compressed file
  // unless a cache directory is given.
  mopt.cache_dir = options.cache_dir.empty() ? dir : options.cache_dir;
  mopt.verify_existing = options.verify_on_open;
  sources::SourceOpener open = [ds, mopt](std::size_t k) -> Result<std::shared_ptr<const ShardSource>> {
    TS_ASSIGN_OR_RETURN(auto src, mds::OpenShard(*ds, k, mopt));
    return std::shared_ptr<const ShardSource>(std::move(src));
  };
  return sources::OpenMdsWith(dir, ds, std::move(open), nullptr, options);
}

Result<std::shared_ptr<Dataset>> OpenWds(const std::string& location, std::vector<std::string> paths,
                                         const DatasetOptions& options) {
  std::vector<sources::WdsShardRef> refs;
  for (std::string& p : paths) {
    std::error_code ec;
    const std::uint64_t bytes = fs::file_size(p, ec);
    refs.push_back({std::move(p), ec ? 0 : bytes});
  }
  auto names = std::make_shared<std::vector<std::string>>();
  for (const auto& r : refs) names->push_back(r.name);
  sources::SourceOpener open = [names](std::size_t k) -> Result<std::shared_ptr<const ShardSource>> {
    TS_ASSIGN_OR_RETURN(auto src, wds::OpenShard(names->at(k)));
    return std::shared_ptr<const ShardSource>(std::move(src));
  };
  return sources::OpenWdsWith(location, std::move(refs), std::move(open), nullptr, options);
}

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// What index.json in `dir` declares: "native", "mds" or an error.
Result<std::string> IndexKind(const std::string& dir, const DatasetOptions& options) {
  const std::string path = (fs::path(dir) / kIndexFileName).string();
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) return IOError(path + ": " + ec.message(), ec.value());
  if (size > options.shard.limits.max_index_bytes) {
    return LimitExceeded(path + ": " + std::to_string(size) + " bytes, above the limit of " +
                         std::to_string(options.shard.limits.max_index_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return IndexKindOf(text, path);
}

}  // namespace

Result<std::shared_ptr<Dataset>> OpenAny(const std::string& location, const DatasetOptions& options) {
  if (IsRemoteUrl(location)) return sources::OpenRemote(location, options);
  std::error_code ec;
  if (location.find('{') != std::string::npos) {
    TS_ASSIGN_OR_RETURN(std::vector<std::string> names, wds::ExpandBraces(location));
    for (const std::string& n : names) {
      if (!fs::is_regular_file(n, ec)) return NotFound(location + ": shard " + QuoteName(n) + " does not exist");
    }
    return OpenWds(location, std::move(names), options);
  }
  if (fs::is_regular_file(location, ec)) {
    if (EndsWith(location, ".tar")) return OpenWds(location, {location}, options);
    return InvalidArgument(location +
                           ": a file that is not a .tar shard; give a dataset directory, a .tar "
                           "file, a brace pattern or an http(s) URL");
  }
  if (!fs::is_directory(location, ec))
    return IOError(location + ": no such dataset file, directory or pattern", ENOENT);
  if (fs::exists(fs::path(location) / kIndexFileName, ec)) {
    TS_ASSIGN_OR_RETURN(std::string kind, IndexKind(location, options));
    if (kind == "mds") return OpenMds(location, options);
    return Dataset::Open(location, options);
  }
  // A directory of .tar files. Each must resolve inside the directory (a
  // symlink elsewhere is refused, SECURITY.md "Paths and URLs").
  fs::path real = fs::canonical(location, ec);
  if (ec) return IOError(location + ": " + ec.message(), ec.value());
  std::vector<std::string> tars;
  for (const auto& e : fs::directory_iterator(location, ec)) {
    const std::string name = e.path().filename().string();
    if (!EndsWith(name, ".tar")) continue;
    TS_ASSIGN_OR_RETURN(std::string p,
                        internal::ContainedRealPath(real.string(), e.path().string(), location + ": " + name));
    if (fs::is_regular_file(p, ec)) tars.push_back(e.path().string());
  }
  if (ec) return IOError(location + ": " + ec.message(), ec.value());
  if (tars.empty()) {
    return IOError(location + ": neither " + std::string(kIndexFileName) + " nor .tar shards in the directory", ENOENT);
  }
  std::sort(tars.begin(), tars.end());
  return OpenWds(location, std::move(tars), options);
}

}  // namespace tensorsafe::dataset
