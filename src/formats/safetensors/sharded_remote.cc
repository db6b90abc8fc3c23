// Shards and tensor files at URLs (docs/REMOTE.md): opened from their
// headers alone, their tensors' bytes fetched only when read. Downloading a
// whole shard to list its tensors would cost gigabytes for what a few MiB
// of header tell.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "formats/safetensors/sharded_internal.h"
#include "io/scratch.h"
#include "remote/remote_file.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/options.h"
#include "tensorsafe/reader.h"
#include "util/checked_math.h"
#include "util/hash.h"
#include "util/parallel_for.h"

namespace tensorsafe::sharded {
namespace internal {

namespace {

// The format the first bytes of `file` show.
Result<Format> Sniff(const RandomAccessFile& file) {
  std::byte head[16];
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(file.size(), sizeof head));
  TS_RETURN_IF_ERROR(file.ReadAt(0, {head, n}));
  return DetectFormatFromBytes({head, n}, file.name());
}

// Reads through a file already open, which it shares.
class SharedFile final : public RandomAccessFile {
 public:
  explicit SharedFile(std::shared_ptr<const RandomAccessFile> f) : f_(std::move(f)) {}
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override { return f_->ReadAt(offset, out); }
  std::uint64_t size() const override { return f_->size(); }
  const std::string& name() const override { return f_->name(); }

 private:
  std::shared_ptr<const RandomAccessFile> f_;
};

// Hands a Reader the shard's file already open: each open of a URL fetches
// the object's last MiB, which one open then pays once, not twice.
class OneFileEnv final : public Env {
 public:
  explicit OneFileEnv(std::shared_ptr<const RandomAccessFile> f) : f_(std::move(f)) {}
  Result<std::unique_ptr<RandomAccessFile>> OpenRead(const std::string&) override {
    return std::unique_ptr<RandomAccessFile>(std::make_unique<SharedFile>(f_));
  }

 private:
  std::shared_ptr<const RandomAccessFile> f_;
};

// Bytes [begin, end) of a shard that are wanted.
struct Extent {
  std::uint32_t shard;
  std::uint64_t begin, end;
};
// One ranged read, covering extents [first, last).
struct Run {
  std::uint32_t shard;
  std::uint64_t begin, end;
  std::size_t first, last;
};
// Runs of neighbours among `extents` (sorted by shard, then begin): a gap
// under 1 MiB costs less read through than as another request. A run grows
// to at most `max_bytes`, unless one extent alone is larger.
std::vector<Run> PlanRuns(std::span<const Extent> extents, std::uint64_t max_bytes) {
  constexpr std::uint64_t kGap = std::uint64_t{1} << 20;
  std::vector<Run> runs;
  for (std::size_t k = 0; k < extents.size(); ++k) {
    const Extent& x = extents[k];
    if (!runs.empty() && runs.back().shard == x.shard && x.begin <= runs.back().end + kGap &&
        std::max(x.end, runs.back().end) - runs.back().begin <= max_bytes) {
      runs.back().end = std::max(runs.back().end, x.end);
      runs.back().last = k + 1;
    } else {
      runs.push_back({x.shard, x.begin, x.end, k, k + 1});
    }
  }
  return runs;
}

}  // namespace

Result<RemoteShard> OpenRemoteShard(const std::string& path, Format format) {
  RemoteShard out;
  if (format == Format::kTsafe) {
    // The reader fetches the trailer and the index by ranges; the first
    // bytes are fetched only to say what a file that fails is.
    TS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, Env::Default()->OpenRead(path));
    out.file = std::move(file);
    OneFileEnv env(out.file);
    ReaderOptions options;
    options.env = &env;
    Result<std::shared_ptr<Reader>> reader = Reader::Open(path, options);
    if (!reader.ok()) {
      Result<Format> is = Sniff(*out.file);
      if (!is.ok() || *is == Format::kTsafe) return reader.status();
      out.detected = *is;
      return out;
    }
    out.detected = Format::kTsafe;
    if ((*reader)->summary().metadata_bytes != 0) {
      TS_ASSIGN_OR_RETURN(out.metadata_json, (*reader)->Metadata());
    }
    out.infos.reserve((*reader)->size());
    TS_RETURN_IF_ERROR((*reader)->ForEach([&](const TensorInfo& i) {
      out.infos.push_back(i);
      if (out.infos.back().metadata_json == "{}") out.infos.back().metadata_json.clear();
      return true;
    }));
    return out;
  }
  if (format != Format::kSafetensors && format != Format::kGguf) {
    return InvalidArgument(path +
                           ": files at URLs are opened from their headers when safetensors, tsafe or gguf, not " +
                           std::string(FormatName(format)));
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, Env::Default()->OpenRead(path));
  out.file = std::move(file);
  if (format == Format::kGguf) {
    TS_ASSIGN_OR_RETURN(out.detected, Sniff(*out.file));
    if (out.detected != Format::kGguf) return out;
    TS_ASSIGN_OR_RETURN(TensorSet set, gguf::ReadHeader(*out.file));
    out.infos.reserve(set.tensors.size());
    for (Tensor& t : set.tensors) out.infos.push_back(std::move(t.info));
    out.metadata_json = std::move(set.metadata_json);
    return out;
  }
  // The first block of the object holds the magic and, usually, the whole
  // header: one ranged GET serves both. safetensors' sniff is weak: an
  // unknown prefix may still be one, whose header then says what is wrong.
  TS_ASSIGN_OR_RETURN(out.detected, Sniff(*out.file));
  if (out.detected != Format::kSafetensors && out.detected != Format::kUnknown) return out;
  TS_ASSIGN_OR_RETURN(safetensors::Header h, safetensors::ReadHeader(*out.file));
  out.infos = std::move(h.tensors);
  out.metadata_json = std::move(h.metadata_json);
  return out;
}

Status ReadRemoteRuns(std::span<const std::shared_ptr<const RandomAccessFile>> files, std::vector<RemoteRead> reads,
                      unsigned threads) {
  std::sort(reads.begin(), reads.end(), [](const RemoteRead& a, const RemoteRead& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.offset < b.offset;
  });
  std::vector<Extent> extents;
  extents.reserve(reads.size());
  for (const RemoteRead& r : reads) extents.push_back({r.shard, r.offset, r.offset + r.out.size()});
  const std::vector<Run> runs = PlanRuns(extents, std::uint64_t{64} << 20);  // the bounce buffer's bound
  return tensorsafe::internal::ForEachItemOrError(runs.size(), threads, [&](std::size_t i) -> Status {
    const Run& run = runs[i];
    const RandomAccessFile& file = *files[run.shard];
    if (run.last - run.first == 1 && reads[run.first].offset == run.begin) {
      return file.ReadAt(run.begin, reads[run.first].out);  // one read: straight into its buffer
    }
    std::vector<std::byte> bounce(static_cast<std::size_t>(run.end - run.begin));
    TS_RETURN_IF_ERROR(file.ReadAt(run.begin, bounce));
    for (std::size_t k = run.first; k < run.last; ++k) {
      const RemoteRead& r = reads[k];
      if (!r.out.empty()) std::memcpy(r.out.data(), bounce.data() + (r.offset - run.begin), r.out.size());
    }
    return Status::OK();
  });
}

}  // namespace internal

namespace {

// Fresh memory for one run of a file's bytes, placed at the run's offset
// modulo 4096 so that every tensor in it is aligned as in the file (as a
// mapping of it would be). Not zeroed: every byte is read into.
class RunBuffer {
 public:
  RunBuffer(std::uint64_t file_offset, std::size_t bytes) : shift_(static_cast<std::size_t>(file_offset % kPage)) {
    base_ = static_cast<std::byte*>(std::aligned_alloc(kPage, (shift_ + bytes + kPage - 1) / kPage * kPage));
  }
  ~RunBuffer() { std::free(base_); }
  RunBuffer(const RunBuffer&) = delete;
  RunBuffer& operator=(const RunBuffer&) = delete;
  std::byte* data() const { return base_ == nullptr ? nullptr : base_ + shift_; }

 private:
  static constexpr std::size_t kPage = 4096;
  std::size_t shift_;
  std::byte* base_;
};

}  // namespace

Status FetchData(std::span<const ShardInfo> shards, std::span<const std::uint32_t> shard_of, std::span<Tensor> tensors,
                 const FetchOptions& options) {
  if (shard_of.size() != tensors.size()) {
    return InvalidArgument("FetchData: " + std::to_string(tensors.size()) + " tensors but " +
                           std::to_string(shard_of.size()) + " shard numbers");
  }
  // The tensors to read, by shard and offset.
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (shard_of[i] >= shards.size()) return InvalidArgument("FetchData: no shard " + std::to_string(shard_of[i]));
    const Tensor& t = tensors[i];
    if (shards[shard_of[i]].file != nullptr && t.info.data_length != 0 && t.data.size() != t.info.data_length) {
      todo.push_back(i);
    }
  }
  std::sort(todo.begin(), todo.end(), [&](std::size_t a, std::size_t b) {
    if (shard_of[a] != shard_of[b]) return shard_of[a] < shard_of[b];
    return tensors[a].info.data_offset < tensors[b].info.data_offset;
  });
  // Runs of neighbours, each read into memory the tensors then keep: no bound.
  std::vector<internal::Extent> extents;
  extents.reserve(todo.size());
  for (std::size_t i : todo) {
    const TensorInfo& info = tensors[i].info;
    extents.push_back({shard_of[i], info.data_offset, info.data_offset + info.data_length});
  }
  const std::vector<internal::Run> runs = internal::PlanRuns(extents, UINT64_MAX);
  // Each run's memory, and what keeps it alive.
  std::vector<std::span<std::byte>> into(runs.size());
  std::vector<std::shared_ptr<const void>> owners(runs.size());
  if (!options.scratch_dir.empty() && !runs.empty()) {
    // One scratch file, each run at its file offset modulo 4096 as RunBuffer places it.
    constexpr std::uint64_t kPage = 4096;
    std::vector<std::uint64_t> at(runs.size());
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      at[i] = total + runs[i].begin % kPage;
      const auto end = tensorsafe::internal::CheckedAdd(at[i], runs[i].end - runs[i].begin);
      const auto next = end ? tensorsafe::internal::AlignUp(*end, kPage) : std::nullopt;
      if (!next) return OutOfRange("FetchData: the tensors' sizes overflow 64 bits");
      total = *next;
    }
    auto scratch = tensorsafe::internal::ScratchRegion::Create(options.scratch_dir, total);
    if (!scratch.ok()) {
      return scratch.status().WithContext("fetching " + std::to_string(todo.size()) +
                                          (todo.size() == 1 ? " tensor of " : " tensors of ") +
                                          shards[runs[0].shard].path);
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
      into[i] = (*scratch)->bytes().subspan(at[i], static_cast<std::size_t>(runs[i].end - runs[i].begin));
      owners[i] = *scratch;
    }
  } else {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const internal::Run& r = runs[i];
      const std::uint64_t n = r.end - r.begin;
      auto buffer = std::make_shared<RunBuffer>(r.begin, static_cast<std::size_t>(n));
      if (buffer->data() == nullptr) {
        return IOError(shards[r.shard].path + ": cannot allocate " + std::to_string(n) + " bytes to read into", ENOMEM);
      }
      into[i] = {buffer->data(), static_cast<std::size_t>(n)};
      owners[i] = std::move(buffer);
    }
  }
  // A run of 4 MiB or more is itself read by parallel ranged GETs.
  TS_RETURN_IF_ERROR(tensorsafe::internal::ForEachItemOrError(
      runs.size(), options.threads != 0 ? options.threads : 4,
      [&](std::size_t i) { return shards[runs[i].shard].file->ReadAt(runs[i].begin, into[i]); }));
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const internal::Run& r = runs[i];
    for (std::size_t k = r.first; k < r.last; ++k) {
      Tensor& t = tensors[todo[k]];
      t.data = into[i].subspan(static_cast<std::size_t>(t.info.data_offset - r.begin),
                               static_cast<std::size_t>(t.info.data_length));
      t.owner = owners[i];
    }
  }
  return Status::OK();
}

}  // namespace tensorsafe::sharded
