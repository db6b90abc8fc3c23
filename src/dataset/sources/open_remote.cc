// Datasets at http://, https:// and s3:// URLs (docs/REMOTE.md, "Datasets"):
// native datasets and MosaicML MDS datasets by their index.json, WebDataset
// tar shards by a brace pattern, a .tar URL or (s3:// only) a listing. Every
// shard goes through the ShardCache: downloaded once per node, checked,
// pinned while a reader has it open.
#include <algorithm>
#include <filesystem>

#include "dataset/internal.h"
#include "dataset/sources/mds/internal.h"
#include "dataset/sources/open_internal.h"
#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/dataset/remote.h"
#include "tensorsafe/dataset/shard.h"
#include "tensorsafe/dataset/wds.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::dataset::sources {

namespace fs = std::filesystem;
using tensorsafe::internal::QuoteName;

namespace {

std::uint64_t HexValue(const std::string& h) { return std::stoull(h, nullptr, 16); }

Result<std::shared_ptr<ShardCache>> OpenCache(const std::string& base_url, const DatasetOptions& options,
                                              std::string* cache_dir) {
  ShardCacheOptions copt = options.remote;
  if (copt.cache_dir.empty()) copt.cache_dir = options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir;
  copt.max_index_bytes = std::min<std::uint64_t>(copt.max_index_bytes, options.shard.limits.max_index_bytes);
  *cache_dir = copt.cache_dir;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<ShardCache> owned, ShardCache::Open(base_url, copt));
  return std::shared_ptr<ShardCache>(std::move(owned));
}

// A shard source that keeps its cached file pinned for as long as it is used.
// The aliasing pointer still points at the source itself, so dynamic casts
// (Verify() looks for a TsafeShard) see through it.
template <typename Source>
std::shared_ptr<const ShardSource> Pinned(CachedFile file, std::shared_ptr<Source> src) {
  struct Holder {
    CachedFile file;
    std::shared_ptr<Source> src;
  };
  auto holder = std::make_shared<Holder>(Holder{std::move(file), std::move(src)});
  const ShardSource* raw = holder->src.get();
  return std::shared_ptr<const ShardSource>(holder, raw);
}

// The cache's prefetcher for a list of files.
SourcePrefetcher PrefetchOf(std::shared_ptr<ShardCache> cache, std::shared_ptr<const std::vector<RemoteFile>> files) {
  return [cache, files](std::span<const std::size_t> ks) {
    std::vector<RemoteFile> next;
    for (std::size_t k : ks) next.push_back(files->at(k));
    cache->Prefetch(next);
  };
}

// ---- native ----

Result<std::shared_ptr<Dataset>> OpenNative(const std::string& url, std::shared_ptr<ShardCache> cache,
                                            const std::string& cache_dir, const std::string& text,
                                            const DatasetOptions& options) {
  const std::string base = cache->base_url();
  const std::string what = base + std::string(kIndexFileName);
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
  const std::string decompressed = (fs::path(cache_dir) / "decompressed").string();
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
    return Pinned(std::move(cached), std::move(shard));
  };
  // Readers name the shards they will need next (their own order, shuffled
  // or not); the cache skips those it holds and downloads the rest.
  SourcePrefetcher fetch_ahead = PrefetchOf(cache, shared_files);
  ShardPrefetcher prefetch = [fetch_ahead](std::span<const std::size_t> ids) { fetch_ahead(ids); };
  return Dataset::FromShards(url, index.schema, std::move(index.shards), std::move(opener), options,
                             std::move(index.metadata_json), std::move(prefetch));
}

// ---- MosaicML MDS ----

// The cache entry of an MDS file: checked by its xxh3_64 when the index has
// one, else by size, under an identity made of the URL and what the index
// says about the file (a rewritten dataset gets new entries).
RemoteFile MdsRemoteFile(const std::string& base, const mds::FileRef& ref) {
  for (const mds::HashDigest& h : ref.hashes) {
    if (h.algorithm == "xxh3_64" && h.hex.size() == 16 &&
        h.hex.find_first_not_of("0123456789abcdef") == std::string::npos) {
      return RemoteFile{ref.basename, ref.bytes, HexValue(h.hex)};
    }
  }
  std::string id = base + ref.basename + '\n' + std::to_string(ref.bytes);
  for (const mds::HashDigest& h : ref.hashes) id += '\n' + h.algorithm + ':' + h.hex;
  RemoteFile f{ref.basename, ref.bytes, tensorsafe::internal::Hash64(id)};
  f.check_xxh3 = false;
  return f;
}

Result<std::shared_ptr<Dataset>> OpenMdsRemote(const std::string& url, std::shared_ptr<ShardCache> cache,
                                               const std::string& cache_dir, const std::string& text,
                                               const DatasetOptions& options) {
  const std::string base = cache->base_url();
  const std::string what = base + std::string(kIndexFileName);
  TS_ASSIGN_OR_RETURN(mds::Index parsed, mds::ParseIndex(std::as_bytes(std::span(text.data(), text.size())), what));
  parsed.root = base;
  std::vector<RemoteFile> files;
  for (std::size_t s = 0; s < parsed.shards.size(); ++s) {
    const mds::ShardEntry& m = parsed.shards[s];
    Status st = ValidateRelativeName(m.raw.basename);
    if (st.ok() && m.compressed) st = ValidateRelativeName(m.zip.basename);
    if (!st.ok()) return Corruption(what + ": shard " + std::to_string(s) + ": " + st.message());
    files.push_back(MdsRemoteFile(base, m.compressed ? m.zip : m.raw));
  }
  auto index = std::make_shared<const mds::Index>(std::move(parsed));
  auto shared_files = std::make_shared<const std::vector<RemoteFile>>(std::move(files));
  const std::string decompressed = (fs::path(cache_dir) / "decompressed").string();
  const mds::Limits limits;
  SourceOpener open = [cache, index, shared_files, decompressed, base,
                       limits](std::size_t k) -> Result<std::shared_ptr<const ShardSource>> {
    const mds::ShardEntry& m = index->shards.at(k);
    const RemoteFile& f = shared_files->at(k);
    TS_ASSIGN_OR_RETURN(CachedFile cached, cache->Fetch(f));
    std::string path = cached.path();
    if (m.compressed) {
      // As for native zstd shards: content-addressed, outside files/ (the
      // cache's accounting), renamed into place by DecompressShard.
      std::string name;
      if (const mds::HashDigest* h = mds::internal::NamingDigest(m.raw)) {
        name = "mds-raw-" + h->algorithm + "-" + h->hex;
      } else {
        const std::string id = m.compression + '\n' + base + f.name + '\n' + mds::internal::Hex(f.xxh3, 16);
        name = "mds-of-" + mds::internal::Hex(tensorsafe::internal::Hash64(id), 16);
      }
      path = decompressed + "/" + name + "-" + std::to_string(m.raw.bytes) + ".mds";
      std::error_code ec;
      fs::create_directories(decompressed, ec);
      if (fs::file_size(path, ec) != m.raw.bytes || ec) {
        TS_RETURN_IF_ERROR(mds::internal::DecompressShard(cached.path(), m, path));
      }
    }
    TS_ASSIGN_OR_RETURN(auto src, mds::OpenShardFile(path, m, limits));
    return Pinned(std::move(cached), std::shared_ptr<ShardSource>(std::move(src)));
  };
  return OpenMdsWith(url, index, std::move(open), PrefetchOf(cache, shared_files), options);
}

// ---- WebDataset ----

// `base` + `names`: the shards' sizes and ETags from the server (one HEAD
// each), cached by size under an identity from the ETag.
Result<std::shared_ptr<Dataset>> OpenWdsRemote(const std::string& location, std::shared_ptr<ShardCache> cache,
                                               std::vector<RemoteObject> objects, const DatasetOptions& options) {
  const std::string base = cache->base_url();
  std::vector<RemoteFile> files;
  std::vector<WdsShardRef> refs;
  for (RemoteObject& o : objects) {
    TS_RETURN_IF_ERROR(ValidateRelativeName(o.name));
    RemoteFile f{o.name, o.bytes,
                 tensorsafe::internal::Hash64(base + o.name + '\n' + std::to_string(o.bytes) + '\n' + o.etag)};
    f.check_xxh3 = false;
    files.push_back(std::move(f));
    refs.push_back({base + o.name, o.bytes});
  }
  auto shared_files = std::make_shared<const std::vector<RemoteFile>>(std::move(files));
  SourceOpener open = [cache, shared_files](std::size_t k) -> Result<std::shared_ptr<const ShardSource>> {
    TS_ASSIGN_OR_RETURN(CachedFile cached, cache->Fetch(shared_files->at(k)));
    TS_ASSIGN_OR_RETURN(auto src, wds::OpenShard(cached.path()));
    return Pinned(std::move(cached), std::shared_ptr<ShardSource>(std::move(src)));
  };
  return OpenWdsWith(location, std::move(refs), std::move(open), PrefetchOf(cache, shared_files), options);
}

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace

Result<std::shared_ptr<Dataset>> OpenRemote(const std::string& url, const DatasetOptions& options) {
  std::string cache_dir;
  // Shards named by the URL itself: a brace pattern or one .tar file. The
  // base is the URL up to the last '/' before the pattern.
  const std::size_t brace = url.find('{');
  if (brace != std::string::npos || EndsWith(url, ".tar")) {
    const std::size_t scheme_end = url.find("://");
    const std::size_t slash = url.rfind('/', brace == std::string::npos ? url.size() : brace);
    if (scheme_end == std::string::npos || slash == std::string::npos || slash < scheme_end + 3) {
      return InvalidArgument(url + ": no path before the shard names");
    }
    TS_ASSIGN_OR_RETURN(std::shared_ptr<ShardCache> cache, OpenCache(url.substr(0, slash + 1), options, &cache_dir));
    std::vector<std::string> names;
    if (brace != std::string::npos) {
      TS_ASSIGN_OR_RETURN(names, wds::ExpandBraces(url.substr(slash + 1)));
    } else {
      names.push_back(url.substr(slash + 1));
    }
    std::vector<RemoteObject> objects;
    for (const std::string& n : names) {
      if (Status st = ValidateRelativeName(n); !st.ok()) return InvalidArgument(url + ": " + st.message());
      TS_ASSIGN_OR_RETURN(RemoteObject o, cache->Stat(n));
      objects.push_back(std::move(o));
    }
    return OpenWdsRemote(url, std::move(cache), std::move(objects), options);
  }
  TS_ASSIGN_OR_RETURN(std::shared_ptr<ShardCache> cache, OpenCache(url, options, &cache_dir));
  const std::string what = cache->base_url() + std::string(kIndexFileName);
  Result<std::string> fetched = cache->FetchBytes(kIndexFileName);
  if (!fetched.ok() && fetched.status().code() == StatusCode::kNotFound) {
    // No index: WebDataset shards, found by listing (s3:// only).
    Result<std::vector<RemoteObject>> listed = cache->List();
    if (!listed.ok()) {
      return NotFound(fetched.status().message() + "; without an index.json, name WebDataset shards with a brace " +
                      "pattern (" + cache->base_url() + "shard-{0000..0099}.tar): " + listed.status().message());
    }
    std::vector<RemoteObject> tars;
    for (RemoteObject& o : *listed) {
      if (EndsWith(o.name, ".tar")) tars.push_back(std::move(o));
    }
    if (tars.empty()) {
      return NotFound(fetched.status().message() + "; and no .tar shards under " + cache->base_url() +
                      " (a dataset is an index.json, MDS or tensorsafe, or WebDataset .tar shards)");
    }
    return OpenWdsRemote(url, std::move(cache), std::move(tars), options);
  }
  TS_ASSIGN_OR_RETURN(std::string text, std::move(fetched));
  if (Result<std::string> kind = IndexKindOf(text, what); kind.ok() && *kind == "mds") {
    return OpenMdsRemote(url, std::move(cache), cache_dir, text, options);
  }
  return OpenNative(url, std::move(cache), cache_dir, text, options);
}

}  // namespace tensorsafe::dataset::sources
