// OpenAny: one entry point for every dataset location kind (DATASET.md
// "Locations"): native directories, native datasets over http(s) through the
// ShardCache, MosaicML MDS directories and WebDataset tar shards.
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "dataset/internal.h"
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

// Folds `next` (the schema of shard `s`) into `merged`: same field names,
// kinds, dtypes and ranks in the same order; dims that differ become kAnyDim.
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

// Wraps `src` when its schema is not exactly `schema` (the merge made it so).
std::shared_ptr<const ShardSource> Adapt(std::shared_ptr<const ShardSource> src,
                                         const std::shared_ptr<const Schema>& schema) {
  if (SameSchema(*schema, src->schema())) return src;
  return std::make_shared<MergedSchemaShard>(std::move(src), schema);
}

std::uint64_t HexValue(const std::string& h) { return std::stoull(h, nullptr, 16); }

// What index.json text declares: "native", "mds" or an error naming `what`.
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

// ---- remote (native dataset over http/https) ----

Result<std::shared_ptr<Dataset>> OpenRemote(const std::string& url, const DatasetOptions& options) {
  ShardCacheOptions copt = options.remote;
  if (copt.cache_dir.empty()) copt.cache_dir = options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir;
  copt.max_index_bytes = std::min<std::uint64_t>(copt.max_index_bytes, options.shard.limits.max_index_bytes);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<ShardCache> owned, ShardCache::Open(url, copt));
  std::shared_ptr<ShardCache> cache(std::move(owned));
  const std::string base = cache->base_url();
  const std::string what = base + std::string(kIndexFileName);
  Result<std::string> fetched = cache->FetchBytes(kIndexFileName);
  if (!fetched.ok() && fetched.status().code() == StatusCode::kNotFound) {
    return NotFound(fetched.status().message() +
                    "; over S3 and http(s) a dataset is a tensorsafe dataset with its index.json (WebDataset "
                    "shards are read from local files: docs/REMOTE.md)");
  }
  TS_ASSIGN_OR_RETURN(std::string text, std::move(fetched));
  if (Result<std::string> kind = IndexKindOf(text, what); kind.ok() && *kind == "mds") {
    return Unsupported(what +
                       ": a MosaicML MDS index; MDS datasets are read from local directories, not yet over "
                       "S3 or http(s) (download the directory, or convert it with `tensorsafe dataset create`)");
  }
  TS_ASSIGN_OR_RETURN(DatasetIndex index, ParseIndex(text, what, options.shard.limits));
  // SECURITY.md "Paths and URLs": every name is checked before anything is
  // fetched, so a hostile index fails at open, not mid-epoch.
  std::vector<RemoteFile> files;
  files.reserve(index.shards.size());
  for (std::size_t s = 0; s < index.shards.size(); ++s) {
    const ShardInfo& info = index.shards[s];
    const std::string& stored = info.zstd ? info.zstd->name : info.name;
    Status st = ValidateRelativeName(info.name);
    if (st.ok()) st = ValidateRelativeName(stored);
    if (!st.ok()) return Corruption(what + ": shard " + std::to_string(s) + ": " + st.message());
    files.push_back(info.zstd ? RemoteFile{stored, info.zstd->bytes, HexValue(info.zstd->xxh3)}
                              : RemoteFile{stored, info.bytes, HexValue(info.xxh3)});
  }
  auto schema = std::make_shared<const Schema>(index.schema);
  const std::string decompressed = (fs::path(copt.cache_dir) / "decompressed").string();
  auto shared_files = std::make_shared<const std::vector<RemoteFile>>(std::move(files));
  ShardOpener opener = [cache, schema, shared_files, decompressed, base, options](
                           const ShardInfo& info, std::size_t s) -> Result<std::shared_ptr<const ShardSource>> {
    const std::vector<RemoteFile>& all = *shared_files;
    const std::string display = base + info.name;
    TS_ASSIGN_OR_RETURN(CachedFile cached, cache->Fetch(all.at(s)));
    std::string path = cached.path();
    if (info.zstd) {
      // Outside files/ so that the cache's accounting never counts (or
      // evicts) a file it did not download; content-addressed, so datasets
      // and processes may share it (ZstdDecompressFile renames atomically).
      std::error_code ec;
      fs::create_directories(decompressed, ec);
      path = (fs::path(decompressed) / (info.xxh3 + "-" + std::to_string(info.bytes) + std::string(kShardSuffix)))
                 .string();
      if (!fs::exists(path, ec)) {
        TS_RETURN_IF_ERROR(internal::ZstdDecompressFile(cached.path(), {all[s].bytes, all[s].xxh3}, path,
                                                        {info.bytes, HexValue(info.xxh3)}, display));
      }
    }
    TS_ASSIGN_OR_RETURN(auto shard, TsafeShard::Open(path, options.shard, schema.get(), display));
    // The shard keeps the CachedFile (and so its pin) for as long as it is
    // used; the aliasing pointer still points at the TsafeShard so that
    // Verify() finds it.
    struct Holder {
      CachedFile file;
      std::shared_ptr<TsafeShard> shard;
    };
    auto holder = std::make_shared<Holder>(Holder{std::move(cached), std::move(shard)});
    const ShardSource* raw = holder->shard.get();
    return std::shared_ptr<const ShardSource>(holder, raw);
  };
  // Readers name the shards they will need next (their own order, shuffled
  // or not); the cache skips those it holds and downloads the rest.
  ShardPrefetcher prefetch = [cache, shared_files](std::span<const std::size_t> ids) {
    std::vector<RemoteFile> next;
    for (std::size_t k : ids) next.push_back(shared_files->at(k));
    cache->Prefetch(next);
  };
  return Dataset::FromShards(url, index.schema, std::move(index.shards), std::move(opener), options,
                             std::move(index.metadata_json), std::move(prefetch));
}

// ---- MosaicML MDS ----

bool MdsColumnsStatic(const mds::ShardEntry& shard) {
  for (const mds::Column& c : shard.columns) {
    if (c.codec == mds::ColumnCodec::kNdarray && !(c.dtype_fixed && c.shape_fixed)) return false;
  }
  return true;
}

Result<std::shared_ptr<Dataset>> OpenMds(const std::string& dir, const DatasetOptions& options) {
  TS_ASSIGN_OR_RETURN(mds::Index parsed, mds::OpenIndex(dir));
  auto ds = std::make_shared<const mds::Index>(std::move(parsed));
  mds::ShardOptions mopt;
  // As for native zstd shards: decompressed next to the compressed file
  // unless a cache directory is given.
  mopt.cache_dir = options.cache_dir.empty() ? dir : options.cache_dir;
  mopt.verify_existing = options.verify_on_open;
  std::vector<ShardInfo> shards;
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
    all_static = all_static && MdsColumnsStatic(m);
  }
  // Map our shard numbers (empty MDS shards skipped) to MDS's.
  std::vector<std::size_t> mds_index;
  for (std::size_t s = 0; s < ds->shards.size(); ++s) {
    if (ds->shards[s].samples != 0) mds_index.push_back(s);
  }
  if (shards.empty()) return Unsupported(dir + ": the MDS dataset holds no samples");
  // The schema: shard 0's when every column has a fixed dtype and shape (and
  // every shard lists the same columns); else ndarray dtypes and ranks come
  // from each shard's sample 0, so every shard is opened now and the schemas
  // merged (mds.md: "which dims are any").
  Schema schema;
  {
    TS_ASSIGN_OR_RETURN(auto first, mds::OpenShard(*ds, mds_index[0], mopt));
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
        return Unsupported(dir + ": MDS shard " + QuoteName(m.raw.basename) +
                           " has other columns than the first shard; a dataset has one schema");
      }
      continue;
    }
    TS_ASSIGN_OR_RETURN(auto src, mds::OpenShard(*ds, mds_index[s], mopt));
    TS_RETURN_IF_ERROR(MergeInto(schema, src->schema(), dir, QuoteName(m.raw.basename)));
  }
  auto shared_schema = std::make_shared<const Schema>(schema);
  ShardOpener opener = [ds, mopt, shared_schema, mds_index](
                           const ShardInfo&, std::size_t s) -> Result<std::shared_ptr<const ShardSource>> {
    TS_ASSIGN_OR_RETURN(auto src, mds::OpenShard(*ds, mds_index.at(s), mopt));
    return Adapt(std::shared_ptr<const ShardSource>(std::move(src)), shared_schema);
  };
  return Dataset::FromShards(dir, std::move(schema), std::move(shards), std::move(opener), options);
}

// ---- WebDataset ----

Result<std::shared_ptr<Dataset>> OpenWds(const std::string& location, std::vector<std::string> paths,
                                         const DatasetOptions& options) {
  if (paths.empty()) return NotFound(location + ": no .tar shards");
  std::vector<ShardInfo> shards;
  std::vector<std::string> kept;
  Schema schema;
  // Counting samples needs a scan of each shard's headers (and the schema is
  // each shard's first sample): done once here, the shards closed again.
  for (const std::string& p : paths) {
    TS_ASSIGN_OR_RETURN(auto src, wds::OpenShard(p));
    if (src->num_samples() == 0) continue;
    if (shards.empty()) {
      schema = src->schema();
    } else {
      TS_RETURN_IF_ERROR(MergeInto(schema, src->schema(), location, QuoteName(p)));
    }
    ShardInfo info;
    info.name = p;
    info.samples = src->num_samples();
    std::error_code ec;
    info.bytes = fs::file_size(p, ec);
    info.kind = "wds";
    shards.push_back(std::move(info));
  }
  if (shards.empty()) return Unsupported(location + ": the WebDataset shards hold no samples");
  auto shared_schema = std::make_shared<const Schema>(schema);
  ShardOpener opener = [shared_schema](const ShardInfo& info,
                                       std::size_t) -> Result<std::shared_ptr<const ShardSource>> {
    TS_ASSIGN_OR_RETURN(auto src, wds::OpenShard(info.name));
    return Adapt(std::shared_ptr<const ShardSource>(std::move(src)), shared_schema);
  };
  return Dataset::FromShards(location, std::move(schema), std::move(shards), std::move(opener), options);
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
  if (IsRemoteUrl(location)) return OpenRemote(location, options);
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
