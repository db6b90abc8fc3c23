#include "io/parallel_read.h"

#include <algorithm>
#include <thread>

#include "util/hash.h"
#include "util/parallel_for.h"

namespace tensorsafe::internal {
namespace {

constexpr std::size_t kPiece = std::size_t{8} << 20;
constexpr std::size_t kParallelFrom = std::size_t{32} << 20;
constexpr unsigned kDefaultMaxThreads = 4;
constexpr unsigned kMaxThreads = 64;

}  // namespace

Status ReadAtParallel(const RandomAccessFile& f, std::uint64_t offset, std::span<std::byte> out, unsigned threads) {
  const unsigned n =
      threads != 0 ? std::min(threads, kMaxThreads) : std::min(std::thread::hardware_concurrency(), kDefaultMaxThreads);
  if (out.size() < kParallelFrom || n < 2) return f.ReadAt(offset, out);
  const std::size_t pieces = (out.size() + kPiece - 1) / kPiece;
  return ForEachItemOrError(pieces, n, [&](std::size_t i) {
    const std::size_t begin = i * kPiece;
    return f.ReadAt(offset + begin, out.subspan(begin, std::min(kPiece, out.size() - begin)));
  });
}

Result<std::uint64_t> HashAt(const RandomAccessFile& f, std::uint64_t offset, std::uint64_t length, std::size_t piece,
                             std::vector<std::byte>& buffer) {
  StreamingHash hash;
  buffer.resize(static_cast<std::size_t>(std::min<std::uint64_t>(length, piece)));
  for (std::uint64_t done = 0; done < length;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(length - done, buffer.size()));
    TS_RETURN_IF_ERROR(f.ReadAt(offset + done, {buffer.data(), n}));
    hash.Update({buffer.data(), n});
    done += n;
  }
  return hash.Digest();
}

}  // namespace tensorsafe::internal
