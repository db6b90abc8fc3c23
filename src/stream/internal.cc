#include "stream/internal.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/codec_util.h"
#include "util/text.h"

namespace tensorsafe::internal {

const std::byte kZeros[64] = {};

Status WriteAllV(int fd, std::vector<iovec>& iov, bool socket) {
  std::size_t first = 0;
  while (first < iov.size()) {
    if (iov[first].iov_len == 0) {
      ++first;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(iov.size() - first, IOV_MAX);
    ssize_t w;
    if (socket) {
      msghdr m{};
      m.msg_iov = &iov[first];
      m.msg_iovlen = n;
      w = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    } else {
      w = ::writev(fd, &iov[first], static_cast<int>(n));
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      return IOError(std::string("write: ") + std::strerror(errno), errno);
    }
    if (w == 0) return IOError("write returned 0", EIO);
    auto left = static_cast<std::size_t>(w);
    while (left > 0) {
      iovec& v = iov[first];
      const std::size_t take = std::min(left, v.iov_len);
      v.iov_base = static_cast<char*>(v.iov_base) + take;
      v.iov_len -= take;
      left -= take;
      if (v.iov_len == 0) ++first;
    }
  }
  return Status::OK();
}

Result<std::size_t> ReadFull(int fd, std::span<std::byte> out) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return IOError(std::string("read: ") + std::strerror(errno), errno);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

Result<std::vector<std::string>> TenbinHeaders(const TensorSet& batch, const tenbin::WriteOptions& opt,
                                               bool drop_metadata) {
  if (!batch.metadata_json.empty() && batch.metadata_json != "{}" && !drop_metadata) {
    return Unsupported("tenbin cannot carry batch metadata (set drop_metadata to send without it)");
  }
  std::vector<std::string> out;
  out.reserve(batch.tensors.size());
  for (std::size_t i = 0; i < batch.tensors.size(); ++i) {
    const Tensor& t = batch.tensors[i];
    const std::string what = "tensor " + std::to_string(i) + " " + QuoteName(t.info.name);
    if (t.info.layout != Layout::kDense) return InvalidArgument(what + ": tenbin stores dense tensors only");
    std::string info;
    bool kept = false;
    if (!t.info.metadata_json.empty()) {
      auto j = nlohmann::json::parse(t.info.metadata_json, nullptr, /*allow_exceptions=*/false);
      kept = j.is_object() && j.size() == 1 && j.contains("tenbin_info") && j["tenbin_info"].is_string();
      if (kept) {
        info = j["tenbin_info"].get<std::string>();
      } else if (j.is_object() && !j.empty() && !drop_metadata) {
        return Unsupported(what + ": tenbin cannot carry tensor metadata (set drop_metadata)");
      }
    }
    if (!opt.names_as_infos) {
      info.clear();
    } else if (!kept && !IsPositionalName(t.info.name, i)) {
      info = t.info.name;
    }
    auto header = tenbin::EncodeHeaderPayload(tenbin::ArrayHeader{t.info.dtype, info, t.info.shape}, opt);
    if (!header.ok()) return header.status().WithContext(what);
    TS_RETURN_IF_ERROR(CheckDenseSize(t.info.dtype, t.info.shape, t.data.size(), what));
    out.push_back(std::move(*header));
  }
  return out;
}

}  // namespace tensorsafe::internal
