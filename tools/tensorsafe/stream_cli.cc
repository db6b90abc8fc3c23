#include "stream_cli.h"

#include <charconv>

namespace tensorsafe::cli {

Result<Address> ParseAddress(const std::string& text) {
  Address a;
  if (text == "-") return a;
  auto host_port = [&](std::string_view rest) -> Status {
    const auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) return InvalidArgument("address \"" + text + "\" needs HOST:PORT");
    a.host = std::string(rest.substr(0, colon));
    if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
    const auto p = rest.substr(colon + 1);
    unsigned v = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (ec != std::errc() || end != p.data() + p.size() || v > 65535) {
      return InvalidArgument("address \"" + text + "\": bad port");
    }
    a.port = static_cast<std::uint16_t>(v);
    return Status::OK();
  };
  std::string_view t = text;
  if (t.starts_with("tcp-raw://")) {
    a.kind = Address::Kind::kTcpRaw;
    TS_RETURN_IF_ERROR(host_port(t.substr(10)));
    return a;
  }
  if (t.starts_with("unix://")) {
    a.kind = Address::Kind::kUnix;
    a.path = std::string(t.substr(7));
    return a;
  }
  if (t.starts_with("tcp://") || t.starts_with("ipc://") || t.starts_with("inproc://")) {
    a.kind = Address::Kind::kZmq;
    a.endpoint = text;
    return a;
  }
  return InvalidArgument("address \"" + text + "\": use -, tcp-raw://HOST:PORT, unix://PATH, or a ZeroMQ "
                         "endpoint tcp://HOST:PORT / ipc://PATH");
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
    TS_RETURN_IF_ERROR(writer_->Add(t.info.name, TensorView::Contiguous(t.info.dtype, t.info.shape, t.data),
                                    t.info.metadata_json));
  }
  return Status::OK();
}

Status TsafeSink::Finish() { return writer_->Finish(); }

}  // namespace tensorsafe::cli
