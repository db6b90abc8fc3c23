// Sharded checkpoints, reading: the index (SHARDED.md §2), every shard it
// names opened as one TensorSet (§3), and the checkpoint's metadata (§4).
#include <simdjson.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "formats/safetensors/sharded_internal.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/reader.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::sharded {
namespace {

namespace dom = simdjson::dom;
using tensorsafe::internal::QuoteName;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string Count(std::size_t n, std::string_view what) {
  return std::to_string(n) + " " + std::string(what) + (n == 1 ? "" : "s");
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

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir == ".") return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
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

// Merges shard and index metadata (SHARDED.md §4).
void MergeMetadata(Checkpoint& ck) {
  using json = nlohmann::ordered_json;
  auto parse = [](const std::string& text) {
    if (text.empty()) return json::object();
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j : json::object();
  };
  json merged = json::object();
  std::vector<std::string> conflicts;
  if (!ck.shards.empty()) {
    std::vector<json> all;
    all.reserve(ck.shards.size());
    for (const ShardInfo& s : ck.shards) all.push_back(parse(s.metadata_json));
    std::vector<std::string> keys;  // first seen order, over all shards
    std::map<std::string, bool> seen;
    for (const json& j : all) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (seen.emplace(it.key(), true).second) keys.push_back(it.key());
      }
    }
    for (const std::string& k : keys) {
      bool same = true;
      for (const json& j : all) {
        auto it = j.find(k);
        if (it == j.end() || *it != all[0][k]) {
          same = false;
          break;
        }
      }
      if (same) {
        merged[k] = all[0][k];
      } else {
        conflicts.push_back(k);
      }
    }
  }
  const json index_md = parse(ck.index.metadata_json);
  for (auto it = index_md.begin(); it != index_md.end(); ++it) {
    if (it.key() == "total_size" || it.key() == "total_parameters") continue;  // derived
    auto m = merged.find(it.key());
    if (m != merged.end() && *m != it.value()) conflicts.push_back(it.key());
    merged[it.key()] = it.value();
  }
  ck.set.metadata_json = merged.empty() ? std::string() : merged.dump();
  ck.metadata_conflicts = std::move(conflicts);
}

Status ListedTwice(const std::string& index, const std::vector<std::pair<std::string_view, std::uint32_t>>& map,
                   std::size_t first, std::size_t second, const std::vector<std::string>& shards) {
  return Corruption(index + ": tensor " + QuoteName(map[second].first) + " is listed twice in \"weight_map\" (mapped to " +
                    QuoteName(shards[map[first].second]) + " and " + QuoteName(shards[map[second].second]) + ")");
}

Status MissingShard(const Index& idx, std::uint32_t shard, std::size_t mapped, const Status& cause) {
  std::string m = idx.path + ": shard " + QuoteName(idx.shards[shard]) + " (" + Count(mapped, "tensor") +
                  " mapped to it) ";
  if (cause.code() == StatusCode::kIOError && cause.error_number() == ENOENT) {
    return NotFound(m + "does not exist in " + idx.directory);
  }
  return Status(cause.code(), m + "cannot be opened: " + cause.message(), cause.error_number());
}

}  // namespace

namespace internal {

NameTable::NameTable(const std::vector<std::pair<std::string_view, std::uint32_t>>& names) : names_(&names) {
  std::size_t cap = 16;
  while (cap < names.size() * 2) cap <<= 1;
  mask_ = cap - 1;
  slots_.assign(cap, 0);
}

std::int64_t NameTable::Insert(std::uint32_t pos) {
  const std::string_view name = (*names_)[pos].first;
  const std::uint64_t h = tensorsafe::internal::Hash64(name);
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

std::int64_t NameTable::Find(std::string_view name) const {
  const std::uint64_t h = tensorsafe::internal::Hash64(name);
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
  return IsDir(path);
}

Result<std::string> ResolveCheckpoint(const std::string& path) {
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
  return NotFound(path + ": no checkpoint in the directory (no \"*.safetensors.index.json\", "
                         "\"*.tsafe.index.json\", \"*.safetensors\" or \"*.tsafe\" file)");
}

namespace {

// ParseIndex; without `check_duplicates` a tensor listed twice is left to
// the caller (Open finds it while building its own name table).
Result<Index> ParseIndexImpl(std::string_view text, const std::string& index_path, const ReadOptions& opt,
                             bool check_duplicates) {
  const std::string& p = index_path;
  if (text.size() > opt.max_index_bytes) {
    return LimitExceeded(p + ": index of " + std::to_string(text.size()) + " bytes exceeds the limit of " +
                         std::to_string(opt.max_index_bytes) + " (ReadOptions::max_index_bytes)");
  }
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
  Index idx;
  idx.path = index_path;
  idx.directory = DirOf(index_path);
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
  idx.weight_map.reserve(map.size());
  // All names in one buffer, sized first so that it never moves.
  std::size_t name_bytes = 0;
  for (auto field : map) name_bytes += field.key.size();
  auto arena = std::make_shared<std::string>();
  arena->reserve(name_bytes);
  std::unordered_map<std::string_view, std::uint32_t> shard_ids;  // few shards
  std::vector<std::string> shard_names;
  for (auto field : map) {
    std::string_view shard;
    if (field.value.get_string().get(shard)) {
      return Corruption(p + ": tensor " + QuoteName(field.key) + " is mapped to " +
                        std::string(JsonTypeName(field.value.type())) + ", not a shard file name");
    }
    auto [it, inserted] = shard_ids.emplace(shard, static_cast<std::uint32_t>(shard_names.size()));
    if (inserted) {
      if (Status s = CheckShardName(shard); !s.ok()) {
        return Corruption(p + ": tensor " + QuoteName(field.key) + " is mapped to shard " + QuoteName(shard) +
                          ", whose name " + s.message());
      }
      if (shard_names.size() >= opt.max_shards) {
        return LimitExceeded(p + ": index names more than " + std::to_string(opt.max_shards) +
                             " shards (ReadOptions::max_shards)");
      }
      shard_names.emplace_back(shard);
    }
    const std::size_t at = arena->size();
    arena->append(field.key);
    idx.weight_map.emplace_back(std::string_view(arena->data() + at, field.key.size()), it->second);
  }
  idx.name_arena = std::move(arena);
  if (check_duplicates) {
    internal::NameTable table(idx.weight_map);
    for (std::uint32_t i = 0; i < idx.weight_map.size(); ++i) {
      const std::int64_t other = table.Insert(i);
      if (other >= 0) return ListedTwice(p, idx.weight_map, static_cast<std::size_t>(other), i, shard_names);
    }
  }
  // Shards in name order; remap the ids.
  std::vector<std::uint32_t> order(shard_names.size());
  for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return shard_names[a] < shard_names[b]; });
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

Result<Index> ReadIndexImpl(const std::string& path, const ReadOptions& opt, bool check_duplicates) {
  TS_ASSIGN_OR_RETURN(std::string index_path, ResolveCheckpoint(path));
  if (!IsIndexName(index_path)) {
    return InvalidArgument(index_path + ": is a single tensor file, not a sharded-checkpoint index");
  }
  TS_ASSIGN_OR_RETURN(auto file, tensorsafe::Env::Default()->OpenRead(index_path));
  if (file->size() > opt.max_index_bytes) {
    return LimitExceeded(index_path + ": index of " + std::to_string(file->size()) +
                         " bytes exceeds the limit of " + std::to_string(opt.max_index_bytes) +
                         " (ReadOptions::max_index_bytes)");
  }
  std::string text(static_cast<std::size_t>(file->size()), '\0');
  TS_RETURN_IF_ERROR(file->ReadAt(0, std::as_writable_bytes(std::span<char>(text.data(), text.size()))));
  return ParseIndexImpl(text, index_path, opt, check_duplicates);
}

}  // namespace

Result<Index> ParseIndex(std::string_view text, const std::string& index_path, const ReadOptions& opt) {
  return ParseIndexImpl(text, index_path, opt, /*check_duplicates=*/true);
}

Result<Index> ReadIndex(const std::string& path, const ReadOptions& opt) {
  return ReadIndexImpl(path, opt, /*check_duplicates=*/true);
}

namespace {

// One shard of Open: mapped, parsed, and its names checked against the
// index. Runs on a helper thread: touches only its own ShardInfo and
// tensors, and the `seen` flags of the positions the index maps to it.
Status OpenShard(const Index& idx, std::uint32_t s, const internal::NameTable& table,
                 const std::vector<std::size_t>& expected, std::vector<std::uint8_t>& seen, ShardInfo& info,
                 std::vector<Tensor>& tensors) {
  info.name = idx.shards[s];
  info.path = JoinPath(idx.directory, info.name);
  if (idx.format == Format::kSafetensors) {
    auto region = tensorsafe::Env::Default()->Map(info.path);
    if (!region.ok()) return MissingShard(idx, s, expected[s], region.status());
    const auto bytes = (*region)->bytes();
    info.file_size = bytes.size();
    const Format f = DetectFormatFromBytes(bytes.first(std::min<std::size_t>(bytes.size(), 16)), info.path);
    if (f != Format::kSafetensors && f != Format::kUnknown) {
      return Corruption(idx.path + ": shard " + QuoteName(info.name) + " is a " + std::string(FormatName(f)) +
                        " file, not safetensors");
    }
    auto set = safetensors::Decode(bytes, *region, info.path);
    if (!set.ok()) return set.status();
    info.metadata_json = std::move(set->metadata_json);
    tensors = std::move(set->tensors);
  } else {
    auto f = DetectFormat(info.path);
    if (!f.ok()) return MissingShard(idx, s, expected[s], f.status());
    if (*f != Format::kTsafe) {
      return Corruption(idx.path + ": shard " + QuoteName(info.name) + " is " +
                        (*f == Format::kUnknown ? std::string("not a tensor file")
                                                : "a " + std::string(FormatName(*f)) + " file") +
                        ", not tsafe");
    }
    auto reader = Reader::Open(info.path);
    if (!reader.ok()) return reader.status();
    info.file_size = (*reader)->summary().file_size;
    if ((*reader)->summary().metadata_bytes != 0) {
      TS_ASSIGN_OR_RETURN(info.metadata_json, (*reader)->Metadata());
    }
    tensors.reserve((*reader)->size());
    TS_RETURN_IF_ERROR((*reader)->ForEachTensor([&](Tensor&& t) {
      if (t.info.metadata_json == "{}") t.info.metadata_json.clear();
      tensors.push_back(std::move(t));
      return true;
    }));
  }
  info.tensor_count = tensors.size();
  for (const Tensor& t : tensors) {
    const std::int64_t pos = table.Find(t.info.name);
    if (pos < 0) {
      return Corruption(idx.path + ": shard " + QuoteName(info.name) + " holds tensor " + QuoteName(t.info.name) +
                        ", which the index does not list");
    }
    const std::uint32_t mapped = idx.weight_map[static_cast<std::size_t>(pos)].second;
    if (mapped != s) {
      return Corruption(idx.path + ": shard " + QuoteName(info.name) + " holds tensor " + QuoteName(t.info.name) +
                        ", which the index maps to shard " + QuoteName(idx.shards[mapped]));
    }
    seen[static_cast<std::size_t>(pos)] = 1;
  }
  // Names are unique in a shard (its reader checks), so each found one is
  // a distinct mapped name: fewer means some are missing.
  if (tensors.size() != expected[s]) {
    for (std::size_t i = 0; i < idx.weight_map.size(); ++i) {
      if (idx.weight_map[i].second == s && !seen[i]) {
        return Corruption(idx.path + ": tensor " + QuoteName(idx.weight_map[i].first) + " is mapped to shard " +
                          QuoteName(info.name) + ", which does not hold it (the shard holds " +
                          Count(info.tensor_count, "tensor") + ", the index maps " + std::to_string(expected[s]) +
                          " to it)");
      }
    }
  }
  return Status::OK();
}

}  // namespace

Result<Checkpoint> Open(const std::string& path, const ReadOptions& opt) {
  Checkpoint ck;
  TS_ASSIGN_OR_RETURN(ck.index, ReadIndexImpl(path, opt, /*check_duplicates=*/false));
  const Index& idx = ck.index;
  const std::size_t n_shards = idx.shards.size();
  std::vector<std::size_t> expected(n_shards, 0);
  for (const auto& [name, shard] : idx.weight_map) ++expected[shard];
  internal::NameTable table(idx.weight_map);
  for (std::uint32_t i = 0; i < idx.weight_map.size(); ++i) {
    const std::int64_t other = table.Insert(i);
    if (other >= 0) return ListedTwice(idx.path, idx.weight_map, static_cast<std::size_t>(other), i, idx.shards);
  }
  std::vector<std::uint8_t> seen(idx.weight_map.size(), 0);
  ck.shards.resize(n_shards);
  std::vector<std::vector<Tensor>> per_shard(n_shards);
  std::vector<Status> status(n_shards);

  // Shards are independent: helpers take them in turn. The error reported
  // is the first shard's that failed, as one thread would find it.
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t s; (s = next.fetch_add(1)) < n_shards;) {
      status[s] = OpenShard(idx, static_cast<std::uint32_t>(s), table, expected, seen, ck.shards[s], per_shard[s]);
    }
  };
  unsigned threads = opt.threads != 0 ? opt.threads : std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<unsigned>(std::min<std::size_t>({threads, n_shards, 64}));
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the caller takes the shards
    }
  }
  work();
  for (std::thread& h : helpers) h.join();
  for (std::size_t s = 0; s < n_shards; ++s) TS_RETURN_IF_ERROR(status[s]);

  ck.set.tensors.reserve(idx.weight_map.size());
  ck.shard_of.reserve(idx.weight_map.size());
  for (std::uint32_t s = 0; s < n_shards; ++s) {
    for (Tensor& t : per_shard[s]) {
      ck.set.tensors.push_back(std::move(t));
      ck.shard_of.push_back(s);
    }
  }
  MergeMetadata(ck);
  return ck;
}

Status Verify(const Checkpoint& ck) {
  if (ck.index.format != Format::kTsafe) return Status::OK();
  for (std::size_t i = 0; i < ck.set.tensors.size(); ++i) {
    const Tensor& t = ck.set.tensors[i];
    const std::uint64_t got = tensorsafe::internal::Hash64(t.data);
    if (got != t.info.data_checksum) {
      return Corruption(ck.shards[ck.shard_of[i]].path + ": tensor " + QuoteName(t.info.name) + ": data checksum " +
                        std::to_string(got) + " does not match the index's " + std::to_string(t.info.data_checksum) +
                        " (the data is damaged)");
    }
  }
  return Status::OK();
}

Status ReadTensors(const Checkpoint& ck, std::span<const std::size_t> tensors,
                   std::span<const std::span<std::byte>> outs, unsigned threads) {
  if (ck.index.format != Format::kSafetensors && ck.index.format != Format::kTsafe) {
    return InvalidArgument("ReadTensors reads safetensors and tsafe files, not " +
                           std::string(FormatName(ck.index.format)));
  }
  if (tensors.size() != outs.size()) {
    return InvalidArgument("ReadTensors: " + std::to_string(tensors.size()) + " tensors but " +
                           std::to_string(outs.size()) + " buffers");
  }
  // 8 MiB pieces, so one large tensor is shared by every thread too.
  constexpr std::uint64_t kPiece = std::uint64_t{8} << 20;
  struct Piece {
    std::uint32_t shard;
    std::uint64_t offset;
    std::span<std::byte> out;
  };
  std::vector<Piece> pieces;
  std::vector<bool> needed(ck.shards.size(), false);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] >= ck.set.tensors.size()) return InvalidArgument("ReadTensors: no tensor " + std::to_string(tensors[i]));
    const Tensor& t = ck.set.tensors[tensors[i]];
    if (outs[i].size() != t.info.data_length) {
      return InvalidArgument("tensor " + QuoteName(t.info.name) + ": a buffer of " + std::to_string(outs[i].size()) +
                             " bytes for " + std::to_string(t.info.data_length) + " bytes of data");
    }
    const std::uint32_t shard = ck.shard_of[tensors[i]];
    needed[shard] = true;
    for (std::uint64_t done = 0; done < t.info.data_length; done += kPiece) {
      const std::uint64_t n = std::min(kPiece, t.info.data_length - done);
      pieces.push_back({shard, t.info.data_offset + done, outs[i].subspan(done, n)});
    }
  }
  std::vector<std::unique_ptr<tensorsafe::RandomAccessFile>> files(ck.shards.size());
  for (std::size_t s = 0; s < files.size(); ++s) {
    if (!needed[s]) continue;
    TS_ASSIGN_OR_RETURN(files[s], tensorsafe::Env::Default()->OpenRead(ck.shards[s].path));
  }
  if (threads == 0) threads = std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(std::min<std::size_t>(pieces.size(), 64))));
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  Status first;
  std::size_t first_at = pieces.size();
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      const Piece& p = pieces[i];
      Status s = files[p.shard]->ReadAt(p.offset, p.out);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < first_at) {
          first = s;
          first_at = i;
        }
      }
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // the caller takes the pieces
    }
  }
  work();
  for (std::thread& h : helpers) h.join();
  return first;
}

}  // namespace tensorsafe::sharded
