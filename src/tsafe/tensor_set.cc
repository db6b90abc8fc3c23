#include "tsafe/tensor_set.h"

#include <algorithm>
#include <limits>

#include "io/string_file.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::internal {
namespace {

Result<TensorSet> FromReader(const Reader& reader) {
  TensorSet set;
  set.tensors.reserve(reader.size());
  TS_RETURN_IF_ERROR(reader.ForEachTensor([&](Tensor&& t) {
    if (t.info.metadata_json == "{}") t.info.metadata_json.clear();
    set.tensors.push_back(std::move(t));
    return true;
  }));
  // Metadata() gives "{}" for a file without any.
  if (reader.summary().metadata_bytes != 0) {
    TS_ASSIGN_OR_RETURN(set.metadata_json, reader.Metadata());
  }
  return set;
}

WriterOptions WriterOptionsOf(const FormatWriteOptions& options) {
  WriterOptions wo;
  if (options.alignment != 0) wo.alignment = options.alignment;
  wo.sync = options.sync;
  wo.env = options.env;
  return wo;
}

Status WriteAll(Writer& writer, const TensorSet& set) {
  for (const Tensor& t : set.tensors) TS_RETURN_IF_ERROR(writer.AddTensor(t));
  if (!set.metadata_json.empty()) TS_RETURN_IF_ERROR(writer.SetMetadata(set.metadata_json));
  return writer.Finish();
}

}  // namespace

Result<TensorSet> ReadTsafe(const std::string& path, const FormatReadOptions& options) {
  ReaderOptions ro;
  ro.access = options.pread ? ReaderOptions::Access::kPread : ReaderOptions::Access::kMmap;
  ro.env = options.env;
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> reader, Reader::Open(path, ro));
  return FromReader(*reader);
}

Result<TensorSet> DecodeTsafe(std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                              const std::string& name) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> reader, Reader::OpenBuffer(bytes, std::move(owner), name));
  return FromReader(*reader);
}

Status VerifyTsafe(const std::string& path, std::vector<std::string>* damaged) {
  ReaderOptions ro;
  ro.eager_index_bytes = std::numeric_limits<std::uint64_t>::max();
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> reader, Reader::Open(path, ro));
  return reader->Verify(damaged);
}

Result<FileDescription> DescribeTsafe(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> reader, Reader::Open(path));
  const FileSummary s = reader->summary();
  FileDescription l;
  l.tensor_count = s.tensor_count;
  l.data_bytes = s.data_bytes;
  if (s.metadata_bytes != 0) {
    TS_ASSIGN_OR_RETURN(l.metadata_json, reader->Metadata());
  }
  l.version = std::to_string(s.version_major) + "." + std::to_string(s.version_minor);
  l.alignment = s.alignment;
  l.index_offset = s.index_offset;
  l.index_length = s.index_length;
  l.unused_bytes = s.unused_bytes;
  l.header_sequence = s.via_trailer ? 0 : s.sequence;
  return l;
}

Status ForEachTsafeInfo(const std::string& path, const std::function<bool(const TensorInfo&)>& fn) {
  // The index alone is read (into memory of its own, checked once), not the
  // whole file mapped.
  ReaderOptions o;
  o.access = ReaderOptions::Access::kPread;
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> reader, Reader::Open(path, o));
  return reader->ForEach(fn);
}

Result<Tensor> ReadTsafeTensor(const std::string& path, std::string_view name) {
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> reader, Reader::Open(path));
  TS_ASSIGN_OR_RETURN(TensorInfo info, reader->Find(name));
  auto buf = std::shared_ptr<std::byte[]>(new std::byte[std::max<std::uint64_t>(info.data_length, 1)]);
  TS_RETURN_IF_ERROR(reader->ReadInto(name, {buf.get(), static_cast<std::size_t>(info.data_length)}, /*verify=*/true));
  Tensor t;
  t.info = std::move(info);
  t.data = {buf.get(), static_cast<std::size_t>(t.info.data_length)};
  t.owner = std::move(buf);
  return t;
}

Status WriteTsafe(const std::string& path, const TensorSet& set, const FormatWriteOptions& options) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Writer> writer, Writer::Create(path, WriterOptionsOf(options)));
  return WriteAll(*writer, set);
}

Result<std::string> EncodeTsafe(const TensorSet& set, const FormatWriteOptions& options) {
  auto file = std::make_unique<StringFile>();
  StringFile* bytes = file.get();
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Writer> writer, Writer::ToFile(std::move(file), WriterOptionsOf(options)));
  TS_RETURN_IF_ERROR(WriteAll(*writer, set));
  return std::move(bytes->str());
}

}  // namespace tensorsafe::internal
