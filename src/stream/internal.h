// Pieces shared by the stream transports (fd, ZeroMQ, LMDB): fd I/O with
// retries, and the tenbin header payloads of a batch.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor_set.h"

namespace tensorsafe::internal {

// 64 zero bytes: the padding iovecs point here.
extern const std::byte kZeros[64];

// Writes every iovec to `fd` (writev, or sendmsg with MSG_NOSIGNAL when
// `socket`), in batches of IOV_MAX, retrying EINTR and short writes. `iov`
// is consumed. Errors: kIOError with errno.
Status WriteAllV(int fd, std::vector<iovec>& iov, bool socket);
// Reads until `out` is full or EOF; returns the bytes read (less than
// out.size() only at EOF). Errors: kIOError with errno.
Result<std::size_t> ReadFull(int fd, std::span<std::byte> out);

// The tenbin header payload of every tensor of `batch`, named as tenbin's
// Encode names them (its kept "tenbin_info", else its non-positional name).
// Metadata that tenbin cannot carry (batch metadata; tensor metadata other
// than {"tenbin_info": ...}) is kUnsupported unless `drop_metadata`.
Result<std::vector<std::string>> TenbinHeaders(const TensorSet& batch, const tenbin::WriteOptions& options,
                                               bool drop_metadata);

}  // namespace tensorsafe::internal
