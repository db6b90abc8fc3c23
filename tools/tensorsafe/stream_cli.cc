#include "stream_cli.h"

#include <fmt/core.h>

namespace tensorsafe::cli {

Result<StreamUrl> ParseAddress(const std::string& text, StreamRole role, bool pubsub, std::string_view command) {
  StreamUrlOptions o;
  o.role = role;
  o.pubsub = pubsub;
  TS_ASSIGN_OR_RETURN(StreamUrl u, ParseStreamUrl(text, o));
  if (!u.deprecation.empty()) fmt::print(stderr, "tensorsafe {}: warning: {}\n", command, u.deprecation);
  return u;
}

Result<std::vector<TensorSet>> SourceBatches(const std::string& path, std::uint32_t per_batch) {
  TS_ASSIGN_OR_RETURN(const Format format, DetectFormat(path));
  TS_ASSIGN_OR_RETURN(TensorSet set, ReadTensorSet(path, format));
  // Send only what the file's checksums vouch for: the stream's checksums
  // are computed afresh, so damage found later would be laundered.
  if (InfoOf(format).caps.checksums) TS_RETURN_IF_ERROR(VerifyFile(path, format));
  std::vector<Tensor> tensors = std::move(set.tensors);
  std::string metadata = std::move(set.metadata_json);
  if (metadata == "{}") metadata.clear();
  std::vector<TensorSet> out;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (out.empty() || (per_batch != 0 && out.back().tensors.size() == per_batch)) out.emplace_back();
    out.back().tensors.push_back(std::move(tensors[i]));
  }
  if (out.empty()) out.emplace_back();
  out.front().metadata_json = metadata;
  return out;
}

Result<std::unique_ptr<TsafeSink>> TsafeSink::Create(const std::string& path) {
  auto s = std::make_unique<TsafeSink>();
  TS_ASSIGN_OR_RETURN(s->writer_, Writer::Create(path));
  return s;
}

Status TsafeSink::Add(const TensorSet& batch) {
  if (!have_metadata_ && !batch.metadata_json.empty()) {
    TS_RETURN_IF_ERROR(writer_->SetMetadata(batch.metadata_json));
    have_metadata_ = true;
  }
  for (const Tensor& t : batch.tensors) {
    TS_RETURN_IF_ERROR(
        writer_->Add(t.info.name, TensorView::Contiguous(t.info.dtype, t.info.shape, t.data), t.info.metadata_json));
  }
  return Status::OK();
}

Status TsafeSink::Finish() { return writer_->Finish(); }

}  // namespace tensorsafe::cli
