// The table's read and write paths (formats/registry.h): each goes to the
// format's row, or to a generic form over the row's read_file.
#include <algorithm>
#include <filesystem>

#include "formats/internal.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/sharded.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe {
namespace {

// The row of a file's format, detected when `format` is kUnknown; an
// unreadable format is kUnsupported naming the file.
Result<const FormatInfo*> ReadableRow(const std::string& path, Format format, Env* env = nullptr) {
  if (format == Format::kUnknown) {
    TS_ASSIGN_OR_RETURN(format, DetectFormat(path, env));
  }
  const FormatInfo& row = InfoOf(format);
  if (row.read_file == nullptr) {
    return Unsupported(path + ": not a tensor file tensorsafe recognises by its first bytes or its extension (" +
                       FormatList() + "); name its format explicitly");
  }
  return &row;
}

// A sharded checkpoint (an index, or a directory holding one) opened, or
// nullopt for a single file; a directory that holds one tensor file (as
// huggingface_hub's loaders look) is replaced by that file in *path.
Result<std::optional<sharded::Checkpoint>> OpenIfSharded(std::string* path) {
  if (!sharded::IsShardedPath(*path)) return std::optional<sharded::Checkpoint>();
  TS_ASSIGN_OR_RETURN(*path, sharded::ResolveCheckpoint(*path));
  if (!sharded::IsIndexName(*path)) return std::optional<sharded::Checkpoint>();
  TS_ASSIGN_OR_RETURN(sharded::Checkpoint ck, sharded::Open(*path));
  return std::optional<sharded::Checkpoint>(std::move(ck));
}

std::uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  const std::uint64_t n = std::filesystem::file_size(path, ec);
  if (!ec) return n;
  // A URL (docs/REMOTE.md): its size comes with the first ranged GET, whose
  // blocks the describe before this already holds.
  Result<std::unique_ptr<RandomAccessFile>> f = Env::Default()->OpenRead(path);
  return f.ok() ? (*f)->size() : 0;
}

// The row of a format that is written, or an error.
Result<const FormatInfo*> WritableRow(Format to) {
  if (to == Format::kUnknown) return InvalidArgument("no output format");
  const FormatInfo& row = InfoOf(to);
  if (row.write_file == nullptr) {
    return Unsupported(row.not_written.empty() ? std::string(row.name) + " files are read, not written"
                                               : std::string(row.not_written));
  }
  return &row;
}

}  // namespace

namespace internal {
Status CheckChecksums(std::span<const Tensor> tensors, const std::string& path) {
  for (const Tensor& t : tensors) {
    const std::uint64_t got = Hash64(t.data);
    if (got != t.info.data_checksum) {
      return Corruption(path + ": tensor " + QuoteName(t.info.name) + ": data checksum " + std::to_string(got) +
                        " does not match the index's " + std::to_string(t.info.data_checksum) +
                        " (the data is damaged)");
    }
  }
  return Status::OK();
}

FileDescription Describe(const TensorSet& set) {
  FileDescription d;
  d.tensor_count = set.tensors.size();
  for (const Tensor& t : set.tensors) d.data_bytes += t.info.data_length;
  d.metadata_json = set.metadata_json;
  return d;
}
}  // namespace internal

Result<TensorSet> ReadTensorSet(const std::string& path_arg, Format format, const FormatReadOptions& options) {
  std::string path = path_arg;
  TS_ASSIGN_OR_RETURN(auto ck, OpenIfSharded(&path));
  if (ck) {
    // Shards at URLs were opened from their headers: every byte is wanted now.
    TS_RETURN_IF_ERROR(sharded::FetchData(ck->shards, ck->shard_of, ck->set.tensors));
    return std::move(ck->set);
  }
  TS_ASSIGN_OR_RETURN(const FormatInfo* row, ReadableRow(path, format, options.env));
  return row->read_file(path, options);
}

Result<TensorSet> DecodeTensorSet(std::span<const std::byte> bytes, std::shared_ptr<const void> owner, Format format,
                                  const std::string& name) {
  const FormatInfo& row = InfoOf(format);
  if (row.decode == nullptr) return InvalidArgument(name + ": no format to decode it as");
  return row.decode(bytes, std::move(owner), name);
}

Result<FileDescription> DescribeFile(const std::string& path_arg, Format format) {
  std::string path = path_arg;
  TS_ASSIGN_OR_RETURN(auto ck, OpenIfSharded(&path));
  if (ck) {
    FileDescription d = internal::Describe(ck->set);
    d.format = ck->index.format;
    d.path = path;
    d.file_size = FileSize(path);
    for (const sharded::ShardInfo& s : ck->shards) {
      d.shards.push_back({s.name, s.file_size, s.tensor_count});
      d.file_size += s.file_size;
    }
    d.index_metadata_json = ck->index.metadata_json;
    d.shard_of = std::move(ck->shard_of);
    return d;
  }
  TS_ASSIGN_OR_RETURN(const FormatInfo* row, ReadableRow(path, format));
  FileDescription d;
  if (row->describe != nullptr) {
    TS_ASSIGN_OR_RETURN(d, row->describe(path));
  } else {
    TS_ASSIGN_OR_RETURN(TensorSet set, row->read_file(path, {}));
    d = internal::Describe(set);
  }
  d.format = row->format;
  d.path = path;
  d.file_size = FileSize(path);
  return d;
}

Status ForEachTensorInfo(const std::string& path_arg, Format format, const std::function<bool(const TensorInfo&)>& fn) {
  std::string path = path_arg;
  TS_ASSIGN_OR_RETURN(auto ck, OpenIfSharded(&path));
  if (ck) {
    for (const Tensor& t : ck->set.tensors) {
      if (!fn(t.info)) break;
    }
    return Status::OK();
  }
  TS_ASSIGN_OR_RETURN(const FormatInfo* row, ReadableRow(path, format));
  if (row->for_each_info != nullptr) return row->for_each_info(path, fn);
  TS_ASSIGN_OR_RETURN(TensorSet set, row->read_file(path, {}));
  for (const Tensor& t : set.tensors) {
    if (!fn(t.info)) break;
  }
  return Status::OK();
}

Result<Tensor> ReadTensor(const std::string& path_arg, Format format, std::string_view name) {
  std::string path = path_arg;
  TS_ASSIGN_OR_RETURN(auto ck, OpenIfSharded(&path));
  if (ck) {
    for (std::size_t i = 0; i < ck->set.tensors.size(); ++i) {
      if (ck->set.tensors[i].info.name != name) continue;
      const sharded::ShardInfo& shard = ck->shards[ck->shard_of[i]];
      return ReadTensor(shard.path, ck->index.format, name);  // the shard's checks, its checksum included
    }
    return NotFound(path + ": no tensor named " + internal::QuoteName(name));
  }
  TS_ASSIGN_OR_RETURN(const FormatInfo* row, ReadableRow(path, format));
  if (row->read_tensor != nullptr) return row->read_tensor(path, name);
  TS_ASSIGN_OR_RETURN(TensorSet set, row->read_file(path, {}));
  for (Tensor& t : set.tensors) {
    if (t.info.name != name) continue;
    if (row->caps.checksums) TS_RETURN_IF_ERROR(internal::CheckChecksums({&t, 1}, path));
    return std::move(t);
  }
  return NotFound(path + ": no tensor named " + internal::QuoteName(name));
}

Status VerifyFile(const std::string& path_arg, Format format, std::vector<std::string>* damaged) {
  std::string path = path_arg;
  TS_ASSIGN_OR_RETURN(auto ck, OpenIfSharded(&path));
  if (ck) return sharded::Verify(*ck);
  TS_ASSIGN_OR_RETURN(const FormatInfo* row, ReadableRow(path, format));
  if (row->verify != nullptr) return row->verify(path, damaged);
  TS_ASSIGN_OR_RETURN(TensorSet set, row->read_file(path, {}));
  return row->caps.checksums ? internal::CheckChecksums(set.tensors, path) : Status::OK();
}

Status ExplainFormatMismatch(const std::string& path, Format want, Status error) {
  if (error.ok() || error.code() == StatusCode::kIOError || error.code() == StatusCode::kNotFound) return error;
  Result<Format> is = DetectFormat(path);
  if (!is.ok() || *is == Format::kUnknown || *is == want) return error;
  const FormatInfo& target = InfoOf(want);
  std::string hint;
  if (InfoOf(*is).read_file != nullptr && target.write_file != nullptr && !target.extensions.empty()) {
    const std::string out = std::filesystem::path(path).replace_extension(target.extensions.front()).string();
    hint = "; `tensorsafe convert " + path + " " + out + "` rewrites it";
  }
  return Unsupported(path + " is not a " + std::string(target.name) + " file: its format is " +
                     std::string(FormatName(*is)) + hint);
}

Status WriteTensorSet(const std::string& path, const TensorSet& in, Format to, const FormatWriteOptions& options,
                      const Consent& consent) {
  return WriteTensorSet(path, TensorSet(in), to, options, consent);
}

Status WriteTensorSet(const std::string& path, TensorSet&& in, Format to, const FormatWriteOptions& options,
                      const Consent& consent) {
  TS_ASSIGN_OR_RETURN(const FormatInfo* row, WritableRow(to));
  auto set = PrepareForFormat(std::move(in), to, consent, options);
  if (!set.ok()) return set.status().WithContext(path);
  return row->write_file(path, *set, options);
}

Result<std::string> EncodeTensorSet(const TensorSet& in, Format to, const FormatWriteOptions& options,
                                    const Consent& consent) {
  TS_ASSIGN_OR_RETURN(const FormatInfo* row, WritableRow(to));
  if (row->encode == nullptr) return Unsupported(std::string(row->name) + " is written to files only");
  TS_ASSIGN_OR_RETURN(TensorSet set, PrepareForFormat(in, to, consent, options));
  return row->encode(set, options);
}

}  // namespace tensorsafe
