// Convert (convert.h): read the input through its row of the format table,
// select and verify, and write it through WriteTensorSet (which prepares the
// set for the target's capabilities, prepare.cc) with an Env that counts
// the bytes written, for progress.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "convert/cast.h"
#include "convert/internal.h"
#include "convert/sharded.h"
#include "formats/internal.h"
#include "io/internal.h"
#include "remote/object_store.h"
#include "remote/remote_file.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/env.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

// Calls the callback as bytes are written: at most once per kReportEvery
// bytes, so a file of many small tensors does not flood it.
class ProgressCounter {
 public:
  static constexpr std::uint64_t kReportEvery = std::uint64_t{4} << 20;

  ProgressCounter(const ConvertOptions& opt, const TensorSet& set) : callback_(opt.progress) {
    p_.tensor_count = set.tensors.size();
    for (const Tensor& t : set.tensors) p_.bytes_total += t.data.size();
  }
  void Add(std::uint64_t n) {
    p_.bytes_written += n;
    if (callback_ && p_.bytes_written - reported_ >= kReportEvery) {
      reported_ = p_.bytes_written;
      callback_(p_);
    }
  }
  void Done() {
    p_.done = true;
    if (callback_) callback_(p_);
  }

 private:
  std::function<void(const ConvertProgress&)> callback_;
  ConvertProgress p_;
  std::uint64_t reported_ = 0;
};

// Large appends are split so progress moves during one big tensor.
constexpr std::size_t kChunk = std::size_t{8} << 20;

class CountingFile final : public WritableFile {
 public:
  CountingFile(std::unique_ptr<WritableFile> f, ProgressCounter* c) : f_(std::move(f)), c_(c) {}
  Status Append(std::span<const std::byte> b) override {
    while (!b.empty()) {
      const std::size_t n = std::min(b.size(), kChunk);
      TS_RETURN_IF_ERROR(f_->Append(b.first(n)));
      c_->Add(n);
      b = b.subspan(n);
    }
    return Status::OK();
  }
  bool seekable() const override { return f_->seekable(); }
  Status WriteAt(std::uint64_t o, std::span<const std::byte> b) override { return f_->WriteAt(o, b); }
  Status Sync() override { return f_->Sync(); }
  Status Close() override { return f_->Close(); }
  std::uint64_t position() const override { return f_->position(); }
  const std::string& name() const override { return f_->name(); }
  Result<std::span<std::byte>> MapForWrite(std::uint64_t size) override { return f_->MapForWrite(size); }

 private:
  std::unique_ptr<WritableFile> f_;
  ProgressCounter* c_;
};

// `base`, except that the temporary files the writers create count what is
// appended to them.
class ProgressEnv final : public Env {
 public:
  ProgressEnv(Env* base, ProgressCounter* c) : base_(base), c_(c) {}
  Result<std::unique_ptr<WritableFile>> NewTempFile(const std::string& final_path, std::string* tmp_path) override {
    TS_ASSIGN_OR_RETURN(auto file, base_->NewTempFile(final_path, tmp_path));
    return std::unique_ptr<WritableFile>(std::make_unique<CountingFile>(std::move(file), c_));
  }
  std::unique_ptr<WritableFile> WrapFd(int fd, std::string name) override { return base_->WrapFd(fd, name); }
  Result<std::unique_ptr<WritableFile>> OpenForUpdate(const std::string& path) override {
    return base_->OpenForUpdate(path);
  }
  Result<std::unique_ptr<RandomAccessFile>> OpenRead(const std::string& path) override { return base_->OpenRead(path); }
  Result<std::shared_ptr<MappedRegion>> Map(const std::string& path) override { return base_->Map(path); }
  Result<MappedFile> MapWithFile(const std::string& path) override { return base_->MapWithFile(path); }
  Status Rename(const std::string& from, const std::string& to) override { return base_->Rename(from, to); }
  Status Remove(const std::string& path) override { return base_->Remove(path); }
  Status SyncDirOf(const std::string& path) override { return base_->SyncDirOf(path); }

 private:
  Env* base_;
  ProgressCounter* c_;
};

// The tensors `names` picks, in its order.
Result<TensorSet> Select(TensorSet set, const std::vector<std::string>& names, const std::string& path) {
  if (names.empty()) return set;
  std::map<std::string_view, std::size_t> index;
  for (std::size_t i = 0; i < set.tensors.size(); ++i) index.emplace(set.tensors[i].info.name, i);
  TensorSet out;
  out.metadata_json = set.metadata_json;
  std::set<std::string_view> seen;
  for (const std::string& n : names) {
    auto it = index.find(n);
    if (it == index.end()) return NotFound(path + ": no tensor named " + internal::QuoteName(n));
    if (!seen.insert(n).second) return InvalidArgument("tensor " + internal::QuoteName(n) + " is selected twice");
    out.tensors.push_back(set.tensors[it->second]);
  }
  return out;
}

}  // namespace

namespace internal {

Result<ConvertStats> ConvertSet(TensorSet set, const std::string& out_path, const ConvertOptions& opt) {
  ConvertStats stats;
  stats.from = opt.from;
  stats.to = opt.to;
  const FormatInfo& target = InfoOf(stats.to);
  if (!opt.gguf_kv.empty()) {  // docs/formats/gguf.md §11
    if (target.edit_metadata == nullptr) {
      std::string typed;
      for (const FormatInfo& row : AllFormats()) {
        if (row.edit_metadata != nullptr) typed += (typed.empty() ? "" : ", ") + std::string(row.name);
      }
      return InvalidArgument("typed key/values (--gguf-kv) apply to " + typed + " outputs only");
    }
    auto edited = target.edit_metadata(set.metadata_json, opt.gguf_kv, {});
    if (!edited.ok()) return edited.status();
    set.metadata_json = std::move(*edited);
  }
  if (opt.dtype) {
    auto cast = CastForConvert(set, *opt.dtype, out_path);
    if (!cast.ok()) return cast.status().WithContext(out_path);
    set = std::move(*cast);
  }
  ProgressCounter progress(opt, set);
  ProgressEnv env(EnvOr(opt.env), &progress);
  FormatWriteOptions wo = opt;
  wo.env = &env;
  TS_RETURN_IF_ERROR(WriteTensorSet(out_path, set, stats.to, wo, opt));
  progress.Done();
  if (target.write_warnings != nullptr) {
    for (const std::string& w : target.write_warnings(set)) stats.warnings.push_back(out_path + ": " + w);
  }
  stats.tensor_count = set.tensors.size();
  for (const Tensor& t : set.tensors) stats.data_bytes += t.data.size();
  if (IsRemotePath(out_path)) {
    TS_ASSIGN_OR_RETURN(stats.file_size, ObjectSize(out_path));
  } else {
    std::error_code ec;
    stats.file_size = std::filesystem::file_size(out_path, ec);
  }
  return stats;
}

}  // namespace internal

Result<ConvertStats> Convert(const std::string& in_path, const std::string& out_path, const ConvertOptions& opt) {
  // A sharded checkpoint on either side is a directory of files
  // (docs/SHARDED.md §6).
  if (internal::IsShardedConversion(in_path, out_path, opt)) return internal::ConvertSharded(in_path, out_path, opt);
  ConvertOptions o = opt;
  if (o.from == Format::kUnknown) {
    TS_ASSIGN_OR_RETURN(o.from, DetectFormat(in_path, opt.env));
  }
  if (o.to == Format::kUnknown) {
    o.to = DetectFormatFromBytes({}, out_path);
    if (o.to == Format::kUnknown) {
      return InvalidArgument(out_path + ": cannot tell the output format from the name; name it explicitly");
    }
    if (InfoOf(o.to).write_file == nullptr) {
      return InvalidArgument(out_path + ": the extension names " + std::string(FormatName(o.to)) +
                             ", which tensorsafe reads but does not write; name another format (.safetensors, "
                             ".tsafe, or --to FMT)");
    }
  }
  const FormatInfo& source = InfoOf(o.from);
  if (!opt.discard_names.empty() && !source.reads_for_target) {
    std::string takers;
    for (const FormatInfo& row : AllFormats()) {
      if (row.reads_for_target) takers += (takers.empty() ? "" : ", ") + std::string(row.name);
    }
    return InvalidArgument("discard names (--discard-name) apply to " + takers + " inputs only");
  }
  if (opt.env == nullptr && internal::OpensFromHeaderAtUrl(in_path, o.from)) {
    return internal::ConvertSharded(in_path, out_path, o);
  }
  FormatReadOptions ro;
  ro.env = opt.env;
  ro.target = o.to;
  ro.discard_names = opt.discard_names;
  TS_ASSIGN_OR_RETURN(TensorSet read, ReadTensorSet(in_path, o.from, ro));
  TS_ASSIGN_OR_RETURN(TensorSet set, Select(std::move(read), opt.tensors, in_path));
  if (source.caps.checksums && opt.verify) TS_RETURN_IF_ERROR(internal::CheckChecksums(set.tensors, in_path));
  return internal::ConvertSet(std::move(set), out_path, o);
}

}  // namespace tensorsafe
