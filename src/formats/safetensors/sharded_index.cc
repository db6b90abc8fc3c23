// Sharded checkpoints: the index (SHARDED.md §2), found from a directory or
// its path, parsed and checked. Opening the shards it names is sharded.cc.
#include <simdjson.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "formats/safetensors/sharded_internal.h"
#include "remote/remote_file.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/registry.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/reader.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::sharded {
namespace {

namespace dom = simdjson::dom;
using internal::JoinPath;
using internal::ListedTwice;
using internal::ReadIndexImpl;
using tensorsafe::internal::QuoteName;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A shard name must stay inside the index's directory.
Status CheckShardName(std::string_view name) {
  if (name.empty()) return Corruption("is empty");
  if (name.front() == '/') return Corruption("is an absolute path");
  if (name.find('\\') != std::string_view::npos) return Corruption("has a backslash");
  if (name.find('\0') != std::string_view::npos) return Corruption("has a NUL byte");
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    const std::string_view part = name.substr(start, slash == std::string_view::npos ? name.npos : slash - start);
    if (part.empty() || part == "." || part == "..") {
      return Corruption("has a path component \"" + std::string(part) + "\" (empty, . or ..)");
    }
    if (slash == std::string_view::npos) return Status::OK();
    start = slash + 1;
  }
}

// The shards' format, from their names' extension.
Result<Format> FormatOfShard(std::string_view name, const std::string& index) {
  const std::string lower = Lower(name);
  if (EndsWith(lower, ".safetensors")) return Format::kSafetensors;
  if (EndsWith(lower, ".tsafe")) return Format::kTsafe;
  if (EndsWith(lower, ".bin") || EndsWith(lower, ".pt") || EndsWith(lower, ".pth") || EndsWith(lower, ".ckpt")) {
    return Unsupported(index + ": shard " + QuoteName(name) +
                       " is a PyTorch pickle checkpoint; tensorsafe reads safetensors and .tsafe shards "
                       "(save the model with safe_serialization=True, or convert the shards with torch)");
  }
  return Unsupported(index + ": shard " + QuoteName(name) +
                     " is not a .safetensors or .tsafe file; tensorsafe reads sharded checkpoints of those");
}

std::string_view JsonTypeName(dom::element_type t) {
  switch (t) {
    case dom::element_type::ARRAY: return "an array";
    case dom::element_type::OBJECT: return "an object";
    case dom::element_type::INT64:
    case dom::element_type::UINT64:
    case dom::element_type::DOUBLE: return "a number";
    case dom::element_type::STRING: return "a string";
    case dom::element_type::BOOL: return "a boolean";
    case dom::element_type::NULL_VALUE: return "null";
  }
  return "a value";
}

std::string DirOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A URL's last path component, without its query or fragment.
std::string_view UrlName(std::string_view url) {
  url = url.substr(0, url.find_first_of("?#"));
  return url.substr(url.rfind('/') + 1);
}

// True when `name` ends in ".json" or in a format's file extension.
bool HasFileExtension(std::string_view name) {
  const std::string lower = Lower(name);
  const std::size_t dot = lower.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string_view ext = std::string_view(lower).substr(dot + 1);
  if (ext == "json") return true;
  for (const FormatInfo& f : AllFormats()) {
    if (std::find(f.extensions.begin(), f.extensions.end(), ext) != f.extensions.end()) return true;
  }
  return false;
}

// ResolveCheckpoint for a URL: the object itself, or the first checkpoint
// file a folder holds, as huggingface_hub's loaders look for them.
Result<std::string> ResolveUrl(const std::string& url) {
  if (IsIndexName(url)) return url;
  if (url.back() != '/') {
    Result<std::unique_ptr<RandomAccessFile>> f = Env::Default()->OpenRead(url);
    if (f.ok()) return url;
    const Status& s = f.status();
    const bool folder =
        s.code() == StatusCode::kNotFound || (s.code() == StatusCode::kIOError && s.error_number() == EISDIR);
    // A URL with a query (a presigned one) names an object, never a folder.
    if (!folder || url.find_first_of("?#") != std::string::npos) return s;
  }
  std::string base = url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  constexpr const char* kNames[] = {"model.safetensors.index.json", "model.tsafe.index.json", "model.safetensors",
                                    "model.tsafe"};
  for (const char* name : kNames) {
    const std::string candidate = base + "/" + name;
    Result<std::unique_ptr<RandomAccessFile>> f = Env::Default()->OpenRead(candidate);
    if (f.ok()) return candidate;
    if (f.status().code() != StatusCode::kNotFound) return f.status();
  }
  return NotFound(url + ": no checkpoint at this URL: " + (url.back() == '/' ? "" : "no object has this name, and ") +
                  "none of model.safetensors.index.json, model.tsafe.index.json, model.safetensors and model.tsafe "
                  "lies under it");
}

}  // namespace

namespace internal {

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

Status ListedTwice(const std::string& index, const std::vector<std::pair<std::string_view, std::uint32_t>>& map,
                   std::size_t first, std::size_t second, const std::vector<std::string>& shards) {
  return Corruption(index + ": tensor " + QuoteName(map[second].first) +
                    " is listed twice in \"weight_map\" (mapped to " + QuoteName(shards[map[first].second]) + " and " +
                    QuoteName(shards[map[second].second]) + ")");
}

NameTable::NameTable(const std::vector<std::pair<std::string_view, std::uint32_t>>& names) : names_(&names) {
  std::size_t cap = 16;
  while (cap < names.size() * 2) cap <<= 1;
  mask_ = cap - 1;
  slots_.assign(cap, 0);
}

std::int64_t NameTable::Insert(std::uint32_t pos, std::uint64_t h) {
  const std::string_view name = (*names_)[pos].first;
  const std::uint64_t tag = h & 0xFFFF'FFFF'0000'0000ull;
  std::size_t i = h & mask_;
  while (slots_[i] != 0) {
    if ((slots_[i] & 0xFFFF'FFFF'0000'0000ull) == tag) {
      const auto other = static_cast<std::uint32_t>(slots_[i]) - 1;
      if ((*names_)[other].first == name) return other;
    }
    i = (i + 1) & mask_;
  }
  slots_[i] = tag | (std::uint64_t{pos} + 1);
  return -1;
}

std::pair<std::int64_t, std::int64_t> NameTable::InsertAll() {
  // The slots are spread over a table too big for the cache: each name's
  // slot is prefetched kAhead names before it is probed, so that its miss
  // overlaps the work on the names between.
  constexpr std::size_t kAhead = 8;
  const auto n = static_cast<std::uint32_t>(names_->size());
  std::uint64_t ring[kAhead];
  for (std::uint32_t i = 0; i < n && i < kAhead; ++i) {
    ring[i] = tensorsafe::internal::Hash64((*names_)[i].first);
    Prefetch(ring[i]);
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t h = ring[i % kAhead];
    if (i + kAhead < n) {
      ring[i % kAhead] = tensorsafe::internal::Hash64((*names_)[i + kAhead].first);
      Prefetch(ring[i % kAhead]);
    }
    const std::int64_t other = Insert(i, h);
    if (other >= 0) return {other, i};
  }
  return {-1, -1};
}

std::int64_t NameTable::Find(std::string_view name, std::uint64_t h) const {
  const std::uint64_t tag = h & 0xFFFF'FFFF'0000'0000ull;
  std::size_t i = h & mask_;
  while (slots_[i] != 0) {
    if ((slots_[i] & 0xFFFF'FFFF'0000'0000ull) == tag) {
      const auto pos = static_cast<std::uint32_t>(slots_[i]) - 1;
      if ((*names_)[pos].first == name) return pos;
    }
    i = (i + 1) & mask_;
  }
  return -1;
}

}  // namespace internal

bool IsIndexName(std::string_view path) { return EndsWith(Lower(path), ".index.json"); }

bool IsShardedPath(const std::string& path) {
  if (IsIndexName(path)) return true;
  if (tensorsafe::internal::IsRemotePath(path)) return !HasFileExtension(UrlName(path));
  return IsDir(path);
}

Result<std::string> ResolveCheckpoint(const std::string& path) {
  if (tensorsafe::internal::IsRemotePath(path)) return ResolveUrl(path);
  if (!IsDir(path)) return path;
  std::error_code ec;
  std::vector<std::string> indexes, pickle_indexes, files, pickles;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
    std::error_code ec2;
    if (!entry.is_regular_file(ec2)) continue;
    const std::string name = entry.path().filename().string();
    const std::string lower = Lower(name);
    if (EndsWith(lower, ".safetensors.index.json") || EndsWith(lower, ".tsafe.index.json")) {
      indexes.push_back(name);
    } else if (EndsWith(lower, ".bin.index.json") || EndsWith(lower, ".pt.index.json")) {
      pickle_indexes.push_back(name);
    } else if (EndsWith(lower, ".safetensors") || EndsWith(lower, ".tsafe")) {
      files.push_back(name);
    } else if (EndsWith(lower, ".bin") || EndsWith(lower, ".pt") || EndsWith(lower, ".pth")) {
      pickles.push_back(name);
    }
  }
  if (ec) return IOError(path + ": cannot list the directory: " + ec.message(), ec.value());
  std::sort(indexes.begin(), indexes.end());
  std::sort(files.begin(), files.end());
  auto pick = [&](const std::vector<std::string>& found, std::initializer_list<const char*> preferred,
                  const char* what) -> Result<std::string> {
    for (const char* p : preferred) {
      if (std::find(found.begin(), found.end(), p) != found.end()) return JoinPath(path, p);
    }
    if (found.size() == 1) return JoinPath(path, found[0]);
    std::string list;
    for (const std::string& f : found) list += (list.empty() ? "" : ", ") + f;
    return InvalidArgument(path + ": holds several " + what + " (" + list + "); name the one to open");
  };
  if (!indexes.empty()) {
    return pick(indexes, {"model.safetensors.index.json", "model.tsafe.index.json"}, "checkpoint indexes");
  }
  // Shard files of an index-less directory are not one checkpoint: only a
  // directory with a single tensor file (or a model.* one) is.
  if (!files.empty()) return pick(files, {"model.safetensors", "model.tsafe"}, "tensor files");
  if (!pickle_indexes.empty() || !pickles.empty()) {
    return Unsupported(path + ": holds only PyTorch pickle checkpoints (" +
                       (pickle_indexes.empty() ? pickles[0] : pickle_indexes[0]) +
                       "); tensorsafe reads safetensors and .tsafe checkpoints (save the model with "
                       "safe_serialization=True, or convert the file with torch first)");
  }
  return NotFound(path +
                  ": no checkpoint in the directory (no \"*.safetensors.index.json\", "
                  "\"*.tsafe.index.json\", \"*.safetensors\" or \"*.tsafe\" file)");
}

namespace {

// The weight map's entries, checked one by one and made into an Index's
// weight map: names copied into one arena, shard ids in first-seen order.
// Nothing reaches the Index before Finish.
class WeightMapBuilder {
 public:
  // `name_bytes`: at least the total length of the names (the arena never
  // moves); `entries`: a guess of their number.
  WeightMapBuilder(const std::string& index, const ReadOptions& opt, std::size_t name_bytes, std::size_t entries)
      : index_(index), opt_(opt), arena_(std::make_shared<std::string>()) {
    arena_->reserve(name_bytes);
    map_.reserve(entries);
  }

  // The views must outlive the builder (they key its shard table).
  Status Add(std::string_view name, std::string_view shard) {
    if (shard != last_shard_ || map_.empty()) {
      auto [it, inserted] = shard_ids_.emplace(shard, static_cast<std::uint32_t>(shard_names_.size()));
      if (inserted) {
        if (Status s = CheckShardName(shard); !s.ok()) {
          return Corruption(index_ + ": tensor " + QuoteName(name) + " is mapped to shard " + QuoteName(shard) +
                            ", whose name " + s.message());
        }
        if (shard_names_.size() >= opt_.max_shards) {
          return LimitExceeded(index_ + ": index names more than " + std::to_string(opt_.max_shards) +
                               " shards (ReadOptions::max_shards)");
        }
        shard_names_.emplace_back(shard);
      }
      last_shard_ = shard;  // runs of names share a shard: the next ones skip the hash
      last_id_ = it->second;
    }
    if (sorted_ && !map_.empty() && name < map_.back().first) sorted_ = false;
    const std::size_t at = arena_->size();
    arena_->append(name);
    map_.emplace_back(std::string_view(arena_->data() + at, name.size()), last_id_);
    return Status::OK();
  }

  void Finish(Index& idx, std::vector<std::string>& shard_names) {
    idx.weight_map = std::move(map_);
    idx.name_arena = std::move(arena_);
    idx.names_sorted = sorted_;
    shard_names = std::move(shard_names_);
  }

 private:
  const std::string& index_;
  const ReadOptions& opt_;
  std::shared_ptr<std::string> arena_;
  std::vector<std::pair<std::string_view, std::uint32_t>> map_;
  std::unordered_map<std::string_view, std::uint32_t> shard_ids_;  // few shards
  std::vector<std::string> shard_names_;
  std::string_view last_shard_;
  std::uint32_t last_id_ = 0;
  bool sorted_ = true;
};

// The general reader: simdjson's DOM, every error worded.
Status ParseIndexDom(std::string_view text, const std::string& p, const ReadOptions& opt, Index& idx,
                     std::vector<std::string>& shard_names) {
  dom::parser parser;
  const std::size_t depth = std::max<std::uint32_t>(1, std::min<std::uint32_t>(opt.max_json_depth, 1024));
  if (parser.allocate(std::max<std::size_t>(text.size(), 64), depth)) {
    return Internal(p + ": cannot allocate the JSON parser");
  }
  simdjson::padded_string padded(text.data(), text.size());
  dom::element root;
  if (auto e = parser.parse(padded).get(root)) {
    if (e == simdjson::DEPTH_ERROR) {
      return LimitExceeded(p + ": index JSON is nested deeper than " + std::to_string(depth) + " levels");
    }
    if (e == simdjson::UTF8_ERROR) return Corruption(p + ": index is not valid UTF-8");
    return Corruption(p + ": index is not valid JSON: " + std::string(simdjson::error_message(e)));
  }
  if (!root.is_object()) {
    return Corruption(p + ": index is " + std::string(JsonTypeName(root.type())) + ", not a JSON object");
  }
  dom::object top = root.get_object().value_unsafe();
  dom::element weight_map, metadata;
  bool has_map = false, has_meta = false;
  for (auto field : top) {
    if (field.key == "weight_map") {
      if (has_map) return Corruption(p + ": index has a second \"weight_map\" key");
      has_map = true;
      weight_map = field.value;
    } else if (field.key == "metadata") {
      if (has_meta) return Corruption(p + ": index has a second \"metadata\" key");
      has_meta = true;
      metadata = field.value;
    }
  }
  if (!has_map) return Corruption(p + ": index has no \"weight_map\" (not a sharded-checkpoint index)");
  if (!weight_map.is_object()) {
    return Corruption(p + ": \"weight_map\" is " + std::string(JsonTypeName(weight_map.type())) + ", not an object");
  }
  if (has_meta && !metadata.is_null()) {
    if (!metadata.is_object()) {
      return Corruption(p + ": \"metadata\" is " + std::string(JsonTypeName(metadata.type())) + ", not an object");
    }
    idx.metadata_json = simdjson::minify(metadata);
  }
  dom::object map = weight_map.get_object().value_unsafe();
  std::size_t name_bytes = 0;
  for (auto field : map) name_bytes += field.key.size();
  WeightMapBuilder builder(p, opt, name_bytes, map.size());
  for (auto field : map) {
    std::string_view shard;
    if (field.value.get_string().get(shard)) {
      return Corruption(p + ": tensor " + QuoteName(field.key) + " is mapped to " +
                        std::string(JsonTypeName(field.value.type())) + ", not a shard file name");
    }
    TS_RETURN_IF_ERROR(builder.Add(field.key, shard));
  }
  builder.Finish(idx, shard_names);
  return Status::OK();
}

Status IndexTooLong(const std::string& index_path, std::uint64_t size, const ReadOptions& opt) {
  return LimitExceeded(index_path + ": index of " + std::to_string(size) + " bytes exceeds the limit of " +
                       std::to_string(opt.max_index_bytes) + " (ReadOptions::max_index_bytes)");
}

// ParseIndex; without `check_duplicates` a tensor listed twice is left to
// the caller (Open finds it while building its own name table).
Result<Index> ParseIndexImpl(std::string_view text, const std::string& index_path, const ReadOptions& opt,
                             bool check_duplicates, bool fast_path = true) {
  const std::string& p = index_path;
  if (text.size() > opt.max_index_bytes) return IndexTooLong(p, text.size(), opt);
  Index idx;
  idx.path = index_path;
  idx.directory = DirOf(index_path);
  std::vector<std::string> shard_names;
  // The fast path reads depth 2; it runs only under limits of 3 and more,
  // which leaves every depth error to the general reader.
  // It builds the map as it scans (names are shorter than the text, about
  // 75 bytes an entry as the hub writes it); an entry the builder refuses
  // sends the text to the general reader too, which reports errors in order.
  bool fast = false;
  if (fast_path && opt.max_json_depth >= 3) {
    WeightMapBuilder builder(p, opt, text.size(), text.size() / 64);
    fast = internal::ScanCommonIndex(text, idx.metadata_json, [&](std::string_view name, std::string_view shard) {
      return builder.Add(name, shard).ok();
    });
    if (fast) builder.Finish(idx, shard_names);
  }
  if (!fast) {
    idx.metadata_json.clear();
    TS_RETURN_IF_ERROR(ParseIndexDom(text, p, opt, idx, shard_names));
  }
  if (check_duplicates) {
    internal::NameTable table(idx.weight_map);
    const auto [first, again] = table.InsertAll();
    if (first >= 0) {
      return ListedTwice(p, idx.weight_map, static_cast<std::size_t>(first), static_cast<std::size_t>(again),
                         shard_names);
    }
  }
  // Shards in name order; remap the ids.
  std::vector<std::uint32_t> order(shard_names.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return shard_names[a] < shard_names[b]; });
  std::vector<std::uint32_t> rank(order.size());
  for (std::uint32_t r = 0; r < order.size(); ++r) rank[order[r]] = r;
  idx.shards.reserve(order.size());
  for (std::uint32_t id : order) idx.shards.push_back(std::move(shard_names[id]));
  for (auto& [name, shard] : idx.weight_map) shard = rank[shard];
  for (const std::string& s : idx.shards) {
    TS_ASSIGN_OR_RETURN(Format f, FormatOfShard(s, p));
    if (idx.format == Format::kUnknown) {
      idx.format = f;
    } else if (f != idx.format) {
      return Unsupported(p + ": shard " + QuoteName(s) + " is " + std::string(FormatName(f)) + " while " +
                         QuoteName(idx.shards[0]) + " is " + std::string(FormatName(idx.format)) +
                         "; a checkpoint's shards must share one format");
    }
  }
  if (idx.format == Format::kUnknown) {
    // No tensors: the index's own name says which format it is for.
    const std::string lower = Lower(index_path);
    idx.format = EndsWith(lower, ".tsafe.index.json") ? Format::kTsafe : Format::kSafetensors;
  }
  return idx;
}

}  // namespace

namespace internal {

Result<Index> ReadIndexImpl(const std::string& path, const ReadOptions& opt, bool check_duplicates) {
  TS_ASSIGN_OR_RETURN(std::string index_path, ResolveCheckpoint(path));
  if (!IsIndexName(index_path)) {
    return InvalidArgument(index_path + ": is a single tensor file, not a sharded-checkpoint index");
  }
  if (!tensorsafe::internal::IsRemotePath(index_path)) {
    // Mapped, not read: the page cache's pages as they are, no copy of
    // 6 MB into fresh memory (the shards are mapped the same way). The
    // size limit is ParseIndexImpl's first check, before a byte is read.
    TS_ASSIGN_OR_RETURN(auto region, tensorsafe::Env::Default()->Map(index_path));
    const auto bytes = region->bytes();
    return ParseIndexImpl(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), index_path, opt,
                          check_duplicates);
  }
  TS_ASSIGN_OR_RETURN(auto file, tensorsafe::Env::Default()->OpenRead(index_path));
  if (file->size() > opt.max_index_bytes) return IndexTooLong(index_path, file->size(), opt);
  // Not a std::string: its zero fill would touch 6 MB for nothing.
  const auto size = static_cast<std::size_t>(file->size());
  std::unique_ptr<char[]> text(new char[std::max<std::size_t>(size, 1)]);
  TS_RETURN_IF_ERROR(file->ReadAt(0, std::as_writable_bytes(std::span<char>(text.get(), size))));
  return ParseIndexImpl(std::string_view(text.get(), size), index_path, opt, check_duplicates);
}

}  // namespace internal

Result<Index> ParseIndex(std::string_view text, const std::string& index_path, const ReadOptions& opt) {
  return ParseIndexImpl(text, index_path, opt, /*check_duplicates=*/true);
}

Result<Index> internal::ParseIndexWith(std::string_view text, const std::string& index_path, const ReadOptions& opt,
                                       bool fast_path) {
  return ParseIndexImpl(text, index_path, opt, /*check_duplicates=*/true, fast_path);
}

Result<Index> ReadIndex(const std::string& path, const ReadOptions& opt) {
  return ReadIndexImpl(path, opt, /*check_duplicates=*/true);
}
}  // namespace tensorsafe::sharded
