// WriteTensorSet and Convert (convert.h): prepare the set for the target,
// then hand it to the target's streaming writer through an Env that counts
// the bytes written, for progress.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "convert/sharded.h"
#include "formats/common/env_write.h"
#include "formats/gguf/gguf_internal.h"
#include "formats/safetensors/internal.h"
#include "io/env.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/writer.h"
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

class CountingFile final : public internal::WritableFile {
 public:
  CountingFile(std::unique_ptr<internal::WritableFile> f, ProgressCounter* c) : f_(std::move(f)), c_(c) {}
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

 private:
  std::unique_ptr<internal::WritableFile> f_;
  ProgressCounter* c_;
};

// The default Env, except that the temporary files the writers create count
// what is appended to them.
class ProgressEnv final : public internal::Env {
 public:
  explicit ProgressEnv(ProgressCounter* c) : c_(c) {}
  Result<std::unique_ptr<internal::WritableFile>> NewTempFile(const std::string& final_path,
                                                              std::string* tmp_path) override {
    TS_ASSIGN_OR_RETURN(auto file, Env::Default()->NewTempFile(final_path, tmp_path));
    return std::unique_ptr<internal::WritableFile>(std::make_unique<CountingFile>(std::move(file), c_));
  }

 private:
  ProgressCounter* c_;
};

// .tsafe through the native Writer, each tensor streamed in chunks.
Status WriteTsafe(const std::string& path, const TensorSet& set, const ConvertOptions& opt,
                  ProgressCounter& progress) {
  WriterOptions wo;
  if (opt.alignment != 0) wo.alignment = opt.alignment;
  wo.sync = opt.sync;
  TS_ASSIGN_OR_RETURN(auto writer, Writer::Create(path, wo));
  for (const Tensor& t : set.tensors) {
    if (t.info.layout == Layout::kCoo) {  // indices and values: one region, copied as is
      TS_RETURN_IF_ERROR(writer->AddTensor(t));
      progress.Add(t.data.size());
      continue;
    }
    TS_RETURN_IF_ERROR(writer->BeginTensor(t.info.name, t.info.dtype, t.info.shape, t.info.metadata_json));
    for (std::span<const std::byte> rest = t.data; !rest.empty();) {
      const std::size_t n = std::min(rest.size(), kChunk);
      TS_RETURN_IF_ERROR(writer->Append(rest.first(n)));
      progress.Add(n);
      rest = rest.subspan(n);
    }
    TS_RETURN_IF_ERROR(writer->EndTensor());
  }
  if (!set.metadata_json.empty()) TS_RETURN_IF_ERROR(writer->SetMetadata(set.metadata_json));
  return writer->Finish();
}

Status WritePrepared(const std::string& path, const TensorSet& set, Format format,
                     const ConvertOptions& opt, ProgressCounter& progress) {
  ProgressEnv env(&progress);
  switch (format) {
    case Format::kTsafe:
      return WriteTsafe(path, set, opt, progress);
    case Format::kSafetensors: {
      safetensors::WriteOptions o;
      o.sync = opt.sync;
      return safetensors::internal::WriteFileWithEnv(&env, path, set, o);
    }
    case Format::kNpy: {
      npy::WriteOptions o;
      o.sync = opt.sync;
      return internal::WriteNpyWithEnv(&env, path, set, o);
    }
    case Format::kNpz: {
      npz::WriteOptions o;
      o.sync = opt.sync;
      o.compress = opt.compress;
      return internal::WriteNpzWithEnv(&env, path, set, o);
    }
    case Format::kGguf: {
      gguf::WriteOptions o;
      o.sync = opt.sync;
      return gguf::internal::WriteFileWithEnv(path, set, o, &env);
    }
    case Format::kTenbin: {
      tenbin::WriteOptions o;
      o.sync = opt.sync;
      return internal::WriteTenbinWithEnv(&env, path, set, o);
    }
    case Format::kBtf: {
      btf::WriteOptions o;
      o.sync = opt.sync;
      return internal::WriteBtfWithEnv(&env, path, set, o);
    }
    case Format::kZio: {
      zio::WriteOptions o;
      o.sync = opt.sync;
      return internal::WriteZioWithEnv(&env, path, set, o);
    }
    case Format::kUnknown:
      break;
  }
  return InvalidArgument("no output format");
}

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

// A .tsafe input's checksums (FORMAT.md §6.2), checked before its bytes go
// anywhere that has none.
Status VerifyChecksums(const TensorSet& set, const std::string& path) {
  for (const Tensor& t : set.tensors) {
    const std::uint64_t got = internal::Hash64(t.data);
    if (got != t.info.data_checksum) {
      return Corruption(path + ": tensor " + internal::QuoteName(t.info.name) + ": data checksum " +
                        std::to_string(got) + " does not match the index's " +
                        std::to_string(t.info.data_checksum) + " (the data is damaged)");
    }
  }
  return Status::OK();
}

}  // namespace

Status WriteTensorSet(const std::string& path, const TensorSet& in, Format format, const ConvertOptions& opt) {
  auto set = PrepareForFormat(in, format, opt);
  if (!set.ok()) return set.status().WithContext(path);
  ProgressCounter progress(opt, *set);
  Status s = WritePrepared(path, *set, format, opt, progress);
  if (!s.ok()) return s;
  progress.Done();
  return Status::OK();
}

Result<ConvertStats> Convert(const std::string& in_path, const std::string& out_path, const ConvertOptions& opt) {
  if (internal::IsShardedConversion(in_path, out_path)) return internal::ConvertSharded(in_path, out_path, opt);
  ConvertStats stats;
  stats.from = opt.from;
  if (stats.from == Format::kUnknown) {
    TS_ASSIGN_OR_RETURN(stats.from, DetectFormat(in_path));
  }
  stats.to = opt.to != Format::kUnknown ? opt.to : DetectFormatFromBytes({}, out_path);
  if (stats.to == Format::kUnknown) {
    return InvalidArgument(out_path + ": cannot tell the output format from the name; name it explicitly");
  }
  TS_ASSIGN_OR_RETURN(TensorSet read, ReadTensorSet(in_path, stats.from));
  TS_ASSIGN_OR_RETURN(TensorSet set, Select(std::move(read), opt.tensors, in_path));
  if (stats.from == Format::kTsafe && opt.verify) TS_RETURN_IF_ERROR(VerifyChecksums(set, in_path));
  TS_RETURN_IF_ERROR(WriteTensorSet(out_path, set, stats.to, opt));
  stats.tensor_count = set.tensors.size();
  for (const Tensor& t : set.tensors) stats.data_bytes += t.data.size();
  std::error_code ec;
  stats.file_size = std::filesystem::file_size(out_path, ec);
  return stats;
}

}  // namespace tensorsafe
