// Sharded checkpoints, reading: every shard the index (sharded_index.cc)
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
#include <thread>
#include <unordered_map>

#include "formats/safetensors/internal.h"
#include "formats/safetensors/sharded_internal.h"
#include "io/parallel_read.h"
#include "remote/remote_file.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/reader.h"
#include "util/hash.h"
#include "util/parallel_for.h"
#include "util/text.h"

namespace tensorsafe::sharded {
namespace {

using internal::JoinPath;
using internal::ListedTwice;
using internal::ReadIndexImpl;
using tensorsafe::internal::QuoteName;

std::string Count(std::size_t n, std::string_view what) {
  return std::to_string(n) + " " + std::string(what) + (n == 1 ? "" : "s");
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
Status MissingShard(const Index& idx, std::uint32_t shard, std::size_t mapped, const Status& cause) {
  std::string m =
      idx.path + ": shard " + QuoteName(idx.shards[shard]) + " (" + Count(mapped, "tensor") + " mapped to it) ";
  if (cause.code() == StatusCode::kIOError && cause.error_number() == ENOENT) {
    return NotFound(m + "does not exist in " + idx.directory);
  }
  return Status(cause.code(), m + "cannot be opened: " + cause.message(), cause.error_number());
}

// The index's name table, built by the caller of Open while its helpers
// already map and parse shards; they wait for it only to check names.
// On 100 shards and 100,000 tensors, 2 threads (2026-11-29, best of 6
// alternated runs): Open took 24.2 ms this way, 27.2 ms with the table
// built before the helpers start.
class SharedTable {
 public:
  explicit SharedTable(const Index& idx) : table_(idx.weight_map) {}
  // Fills the table; a tensor listed twice ends it with that error.
  void Build(const Index& idx) {
    const auto [first, again] = table_.InsertAll();
    if (first >= 0) {
      status_ = ListedTwice(idx.path, idx.weight_map, static_cast<std::size_t>(first), static_cast<std::size_t>(again),
                            idx.shards);
    }
    ready_.store(true, std::memory_order_release);
    ready_.notify_all();
  }
  // The table once built, or nullptr when building it failed.
  const internal::NameTable* Await() const {
    ready_.wait(false, std::memory_order_acquire);
    return status_.ok() ? &table_ : nullptr;
  }
  const Status& status() const { return status_; }

 private:
  internal::NameTable table_;
  Status status_;
  std::atomic<bool> ready_{false};
};

// The names of one shard's tensors (`count` of them, the i-th
// name_at(i)) checked against the index: each listed, and mapped to this
// shard, and none of those mapped to it missing.
template <typename NameAt>
Status CheckShardNames(const Index& idx, std::uint32_t s, const SharedTable& shared,
                       const std::vector<std::size_t>& expected, std::vector<std::uint8_t>& seen, const ShardInfo& info,
                       std::size_t count, NameAt&& name_at) {
  const internal::NameTable* table = shared.Await();
  if (table == nullptr) return shared.status();  // Open reports it first
  // Shards and weight maps are mostly both in name order: the entry after
  // the last one found is tried first (a hit is exact, names being unique
  // in the map), which spares a hash and a probe of a table too big for
  // the cache.
  // Where the guess misses, the names after it are hashed and their slots
  // prefetched kAhead names ahead, so that a run of misses overlaps theirs.
  constexpr std::size_t kAhead = 8;
  std::uint64_t ahead[kAhead];
  std::size_t hashed = 0;  // ahead[j % kAhead] holds name j's hash for j in [hashed - kAhead, hashed)
  std::size_t guess = idx.weight_map.size();
  for (std::size_t i = 0; i < count; ++i) {
    const std::string& name = name_at(i);
    std::int64_t pos = -1;
    if (guess < idx.weight_map.size() && idx.weight_map[guess].first == name) {
      pos = static_cast<std::int64_t>(guess);
    } else {
      const std::uint64_t h = i < hashed ? ahead[i % kAhead] : tensorsafe::internal::Hash64(name);
      for (hashed = std::max(hashed, i + 1); hashed < std::min(count, i + 1 + kAhead); ++hashed) {
        ahead[hashed % kAhead] = tensorsafe::internal::Hash64(name_at(hashed));
        table->Prefetch(ahead[hashed % kAhead]);
      }
      pos = table->Find(name, h);
    }
    if (pos < 0) {
      return Corruption(idx.path + ": shard " + QuoteName(info.name) + " holds tensor " + QuoteName(name) +
                        ", which the index does not list");
    }
    const std::uint32_t mapped = idx.weight_map[static_cast<std::size_t>(pos)].second;
    if (mapped != s) {
      return Corruption(idx.path + ": shard " + QuoteName(info.name) + " holds tensor " + QuoteName(name) +
                        ", which the index maps to shard " + QuoteName(idx.shards[mapped]));
    }
    seen[static_cast<std::size_t>(pos)] = 1;
    guess = static_cast<std::size_t>(pos) + 1;
  }
  // Names are unique in a shard (its reader checks), so each found one is
  // a distinct mapped name: fewer means some are missing.
  if (count != expected[s]) {
    for (std::size_t i = 0; i < idx.weight_map.size(); ++i) {
      if (idx.weight_map[i].second == s && !seen[i]) {
        return Corruption(idx.path + ": tensor " + QuoteName(idx.weight_map[i].first) + " is mapped to shard " +
                          QuoteName(info.name) + ", which does not hold it (the shard holds " + Count(count, "tensor") +
                          ", the index maps " + std::to_string(expected[s]) + " to it)");
      }
    }
  }
  return Status::OK();
}

// A shard whose first bytes are of another format than the index's.
Status NotOfFormat(const Index& idx, const std::string& shard, Format is) {
  return Corruption(
      idx.path + ": shard " + QuoteName(shard) + " is " +
      (is == Format::kUnknown ? std::string("not a tensor file") : "a " + std::string(FormatName(is)) + " file") +
      ", not " + std::string(FormatName(idx.format)));
}

// One shard of Open: mapped, parsed, its names checked against the index,
// and its tensors moved to `out`, expected[s] slots (the checks prove that
// the shard holds that many). Runs on a helper thread: touches only its own
// ShardInfo and slots, and the `seen` flags of the positions the index maps
// to it.
Status OpenShard(const Index& idx, std::uint32_t s, const SharedTable& table, const std::vector<std::size_t>& expected,
                 std::vector<std::uint8_t>& seen, ShardInfo& info, std::span<Tensor> out) {
  info.name = idx.shards[s];
  info.path = JoinPath(idx.directory, info.name);
  if (tensorsafe::internal::IsRemotePath(info.path)) {
    // Its header only: the tensors hold no bytes until read (FetchData).
    auto remote = internal::OpenRemoteShard(info.path, idx.format);
    if (!remote.ok()) {
      const StatusCode code = remote.status().code();
      return code == StatusCode::kNotFound || code == StatusCode::kIOError
                 ? MissingShard(idx, s, expected[s], remote.status())
                 : remote.status();
    }
    if (remote->detected != idx.format &&
        !(remote->detected == Format::kUnknown && idx.format == Format::kSafetensors)) {
      return NotOfFormat(idx, info.name, remote->detected);
    }
    std::vector<TensorInfo>& infos = remote->infos;
    info.file_size = remote->file->size();
    info.metadata_json = std::move(remote->metadata_json);
    info.tensor_count = infos.size();
    TS_RETURN_IF_ERROR(CheckShardNames(idx, s, table, expected, seen, info, infos.size(),
                                       [&](std::size_t i) -> const std::string& { return infos[i].name; }));
    for (std::size_t i = 0; i < infos.size(); ++i) out[i] = Tensor{std::move(infos[i]), {}, nullptr};
    info.file = std::move(remote->file);
    return Status::OK();
  }
  if (idx.format == Format::kSafetensors) {
    auto mapped = tensorsafe::Env::Default()->MapWithFile(info.path);
    if (!mapped.ok()) return MissingShard(idx, s, expected[s], mapped.status());
    const auto bytes = mapped->region->bytes();
    info.file_size = bytes.size();
    // The header by positional reads, not through the mapping: its pages
    // would cost a fault each to map and their entries to unmap at close
    // (a tenth of opening 100 shards of 1,000 tensors); the tensors view
    // the mapping, untouched until read.
    TS_ASSIGN_OR_RETURN(const safetensors::internal::HeaderBytes prefix,
                        safetensors::internal::ReadHeaderPrefix(*mapped->file, {}, /*length_first=*/true));
    const Format f = DetectFormatFromBytes(prefix.span().first(std::min<std::size_t>(prefix.size, 16)), info.path);
    if (f != Format::kSafetensors && f != Format::kUnknown) return NotOfFormat(idx, info.name, f);
    // Parsed, not Decoded: the infos go straight to their slots.
    auto header = safetensors::ParseHeader(prefix.span(), bytes.size());
    if (!header.ok()) return header.status().WithContext(info.path);
    std::vector<TensorInfo>& infos = header->tensors;
    info.metadata_json = std::move(header->metadata_json);
    info.tensor_count = infos.size();
    TS_RETURN_IF_ERROR(CheckShardNames(idx, s, table, expected, seen, info, infos.size(),
                                       [&](std::size_t i) -> const std::string& { return infos[i].name; }));
    const std::shared_ptr<const void> owner = std::move(mapped->region);
    for (std::size_t i = 0; i < infos.size(); ++i) {
      // ParseHeader proved that every range lies inside the file.
      out[i].data =
          bytes.subspan(static_cast<std::size_t>(infos[i].data_offset), static_cast<std::size_t>(infos[i].data_length));
      out[i].info = std::move(infos[i]);
      out[i].owner = owner;
    }
    return Status::OK();
  }
  auto f = DetectFormat(info.path);
  if (!f.ok()) return MissingShard(idx, s, expected[s], f.status());
  if (*f != Format::kTsafe) return NotOfFormat(idx, info.name, *f);
  auto reader = Reader::Open(info.path);
  if (!reader.ok()) return reader.status();
  info.file_size = (*reader)->summary().file_size;
  if ((*reader)->summary().metadata_bytes != 0) {
    TS_ASSIGN_OR_RETURN(info.metadata_json, (*reader)->Metadata());
  }
  std::vector<Tensor> tensors;
  tensors.reserve((*reader)->size());
  TS_RETURN_IF_ERROR((*reader)->ForEachTensor([&](Tensor&& t) {
    if (t.info.metadata_json == "{}") t.info.metadata_json.clear();
    tensors.push_back(std::move(t));
    return true;
  }));
  info.tensor_count = tensors.size();
  TS_RETURN_IF_ERROR(CheckShardNames(idx, s, table, expected, seen, info, tensors.size(),
                                     [&](std::size_t i) -> const std::string& { return tensors[i].info.name; }));
  std::move(tensors.begin(), tensors.end(), out.begin());
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
  SharedTable table(idx);
  std::vector<std::uint8_t> seen(idx.weight_map.size(), 0);
  ck.shards.resize(n_shards);
  // Each shard's tensors go to their final slots, shard after shard.
  std::vector<std::size_t> first(n_shards + 1, 0);
  for (std::size_t s = 0; s < n_shards; ++s) first[s + 1] = first[s] + expected[s];
  ck.set.tensors.resize(idx.weight_map.size());
  std::vector<Status> status(n_shards);

  // Shards are independent: threads take them in turn. Item 0 builds the
  // name table, which the shards' checks wait for; it is claimed before any
  // shard, so the other threads map and parse meanwhile. The error reported
  // is the first shard's that failed, as one thread would find it.
  // Shards at URLs wait on the network, not the cores.
  const unsigned threads = opt.threads != 0 ? opt.threads
                           : tensorsafe::internal::IsRemotePath(idx.path)
                               ? 16u
                               : std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
  tensorsafe::internal::ForEachItem(n_shards + 1, threads, [&](std::size_t i) {
    if (i == 0) return table.Build(idx);
    const std::size_t s = i - 1;
    status[s] = OpenShard(idx, static_cast<std::uint32_t>(s), table, expected, seen, ck.shards[s],
                          std::span<Tensor>(ck.set.tensors).subspan(first[s], expected[s]));
  });
  TS_RETURN_IF_ERROR(table.status());
  for (std::size_t s = 0; s < n_shards; ++s) TS_RETURN_IF_ERROR(status[s]);

  ck.shard_of.resize(idx.weight_map.size());
  for (std::uint32_t s = 0; s < n_shards; ++s) {
    std::fill(ck.shard_of.begin() + static_cast<std::ptrdiff_t>(first[s]),
              ck.shard_of.begin() + static_cast<std::ptrdiff_t>(first[s + 1]), s);
  }
  MergeMetadata(ck);
  return ck;
}

Result<Checkpoint> OpenFile(const std::string& path, Format format) {
  Checkpoint ck;
  ck.index.format = format;
  ck.index.path = path;
  ShardInfo only;
  only.name = only.path = path;
  if (tensorsafe::internal::IsRemotePath(path) &&
      (format == Format::kSafetensors || format == Format::kTsafe || format == Format::kGguf)) {
    TS_ASSIGN_OR_RETURN(internal::RemoteShard remote, internal::OpenRemoteShard(path, format));
    if (remote.detected != format && !(format == Format::kSafetensors && remote.detected == Format::kUnknown)) {
      return Unsupported(path + " is " +
                         (remote.detected == Format::kUnknown
                              ? std::string("not a tensor file")
                              : "a " + std::string(FormatName(remote.detected)) + " file") +
                         ", not " + std::string(FormatName(format)));
    }
    ck.set.tensors.reserve(remote.infos.size());
    for (TensorInfo& i : remote.infos) ck.set.tensors.push_back(Tensor{std::move(i), {}, nullptr});
    ck.set.metadata_json = std::move(remote.metadata_json);
    only.file_size = remote.file->size();
    only.file = std::move(remote.file);
  } else {
    TS_ASSIGN_OR_RETURN(ck.set, ReadTensorSet(path, format));
    std::error_code ec;
    only.file_size = std::filesystem::file_size(path, ec);
  }
  only.tensor_count = ck.set.tensors.size();
  only.metadata_json = ck.set.metadata_json;
  ck.shards.push_back(std::move(only));
  ck.shard_of.assign(ck.set.tensors.size(), 0);
  return ck;
}

Status Verify(const Checkpoint& ck) {
  if (ck.index.format != Format::kTsafe) return Status::OK();
  // The tensors of shards at URLs are read in 8 MiB pieces (each a set of
  // parallel ranged GETs), hashed as they come.
  std::vector<std::byte> piece;
  for (std::size_t i = 0; i < ck.set.tensors.size(); ++i) {
    const Tensor& t = ck.set.tensors[i];
    const ShardInfo& shard = ck.shards[ck.shard_of[i]];
    std::uint64_t got = 0;
    if (shard.file != nullptr && t.data.size() != t.info.data_length) {
      TS_ASSIGN_OR_RETURN(got, tensorsafe::internal::HashAt(*shard.file, t.info.data_offset, t.info.data_length,
                                                            std::size_t{8} << 20, piece));
    } else {
      got = tensorsafe::internal::Hash64(t.data);
    }
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
  if (ck.index.format != Format::kSafetensors && ck.index.format != Format::kTsafe &&
      ck.index.format != Format::kGguf) {
    return InvalidArgument("ReadTensors reads safetensors, tsafe and gguf files, not " +
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
  std::vector<internal::RemoteRead> remote;  // whole tensors of shards at URLs, read in runs
  std::vector<bool> needed(ck.shards.size(), false);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] >= ck.set.tensors.size())
      return InvalidArgument("ReadTensors: no tensor " + std::to_string(tensors[i]));
    const Tensor& t = ck.set.tensors[tensors[i]];
    if (outs[i].size() != t.info.data_length) {
      return InvalidArgument("tensor " + QuoteName(t.info.name) + ": a buffer of " + std::to_string(outs[i].size()) +
                             " bytes for " + std::to_string(t.info.data_length) + " bytes of data");
    }
    const std::uint32_t shard = ck.shard_of[tensors[i]];
    needed[shard] = true;
    if (t.info.data_length != 0 && tensorsafe::internal::IsRemotePath(ck.shards[shard].path)) {
      remote.push_back({shard, t.info.data_offset, outs[i]});
      continue;
    }
    for (std::uint64_t done = 0; done < t.info.data_length; done += kPiece) {
      const std::uint64_t n = std::min(kPiece, t.info.data_length - done);
      pieces.push_back({shard, t.info.data_offset + done, outs[i].subspan(done, n)});
    }
  }
  std::vector<std::shared_ptr<const tensorsafe::RandomAccessFile>> files(ck.shards.size());
  for (std::size_t s = 0; s < files.size(); ++s) {
    if (!needed[s]) continue;
    if (ck.shards[s].file != nullptr) {
      files[s] = ck.shards[s].file;
      continue;
    }
    TS_ASSIGN_OR_RETURN(files[s], tensorsafe::Env::Default()->OpenRead(ck.shards[s].path));
  }
  if (threads == 0) threads = std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
  TS_RETURN_IF_ERROR(tensorsafe::internal::ForEachItemOrError(pieces.size(), threads, [&](std::size_t i) {
    const Piece& p = pieces[i];
    return files[p.shard]->ReadAt(p.offset, p.out);
  }));
  if (remote.empty()) return Status::OK();
  return internal::ReadRemoteRuns(files, std::move(remote), threads);
}

}  // namespace tensorsafe::sharded
