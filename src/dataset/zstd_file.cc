// Whole-file digests and zstd compression of shard files (DATASET.md §4).
#include <zstd.h>

#include <memory>
#include <optional>
#include <vector>

#include "dataset/internal.h"
#include "io/atomic_file.h"
#include "tensorsafe/env.h"
#include "util/hash.h"

namespace tensorsafe::dataset::internal {
namespace {

constexpr std::size_t kChunk = std::size_t{1} << 20;

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// An AtomicFile that digests what it is given.
class TempOut {
 public:
  Status Open(const std::string& dst) {
    TS_ASSIGN_OR_RETURN(tensorsafe::internal::AtomicFile f, tensorsafe::internal::AtomicFile::Create(dst));
    file_.emplace(std::move(f));
    return Status::OK();
  }
  Status Append(std::span<const std::byte> b) {
    hash_.Update(b);
    bytes_ += b.size();
    return file_->file().Append(b);
  }
  Status Commit(bool sync) { return file_->Commit(sync); }
  FileDigest digest() const { return {bytes_, hash_.Digest()}; }

 private:
  std::optional<tensorsafe::internal::AtomicFile> file_;
  tensorsafe::internal::StreamingHash hash_;
  std::uint64_t bytes_ = 0;
};

}  // namespace

Result<FileDigest> DigestFile(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto file, Env::Default()->OpenRead(path));
  tensorsafe::internal::StreamingHash h;
  std::vector<std::byte> buf(std::min<std::uint64_t>(kChunk * 4, file->size()));
  for (std::uint64_t off = 0; off < file->size();) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), file->size() - off));
    TS_RETURN_IF_ERROR(file->ReadAt(off, std::span(buf.data(), n)));
    h.Update(std::span(buf.data(), n));
    off += n;
  }
  return FileDigest{file->size(), h.Digest()};
}

Result<FileDigest> ZstdCompressFile(const std::string& src, const std::string& dst, int level, bool sync) {
  TS_ASSIGN_OR_RETURN(auto in, Env::Default()->OpenRead(src));
  std::unique_ptr<ZSTD_CCtx, CCtxFree> cctx(ZSTD_createCCtx());
  if (!cctx) return Internal("zstd: cannot create a compression context");
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setPledgedSrcSize(cctx.get(), in->size());
  TempOut out;
  TS_RETURN_IF_ERROR(out.Open(dst));
  std::vector<std::byte> ibuf(ZSTD_CStreamInSize()), obuf(ZSTD_CStreamOutSize());
  std::uint64_t off = 0;
  const std::uint64_t size = in->size();
  for (;;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(ibuf.size(), size - off));
    TS_RETURN_IF_ERROR(in->ReadAt(off, std::span(ibuf.data(), n)));
    off += n;
    const bool last = off == size;
    ZSTD_inBuffer input{ibuf.data(), n, 0};
    for (;;) {
      ZSTD_outBuffer output{obuf.data(), obuf.size(), 0};
      const std::size_t rem = ZSTD_compressStream2(cctx.get(), &output, &input, last ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(rem)) return Internal(src + ": zstd compression failed: " + ZSTD_getErrorName(rem));
      TS_RETURN_IF_ERROR(out.Append(std::span(obuf.data(), output.pos)));
      if (last ? rem == 0 : input.pos == input.size) break;
    }
    if (last) break;
  }
  TS_RETURN_IF_ERROR(out.Commit(sync));
  return out.digest();
}

Status ZstdDecompressFile(const std::string& src, const FileDigest& src_expect, const std::string& dst,
                          const FileDigest& dst_expect, std::string_view what) {
  const std::string w(what);
  TS_ASSIGN_OR_RETURN(auto in, Env::Default()->OpenRead(src));
  if (in->size() != src_expect.bytes) {
    return Corruption(w + ": " + src + " has " + std::to_string(in->size()) + " bytes, the index says " +
                      std::to_string(src_expect.bytes));
  }
  std::unique_ptr<ZSTD_DCtx, DCtxFree> dctx(ZSTD_createDCtx());
  if (!dctx) return Internal("zstd: cannot create a decompression context");
  // Bounds the decoder's window memory (zstd's own default is 2^27).
  ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, 27);
  TempOut out;
  TS_RETURN_IF_ERROR(out.Open(dst));
  tensorsafe::internal::StreamingHash in_hash;
  std::vector<std::byte> ibuf(ZSTD_DStreamInSize()), obuf(ZSTD_DStreamOutSize());
  std::size_t last_rem = 1;
  for (std::uint64_t off = 0; off < in->size();) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(ibuf.size(), in->size() - off));
    TS_RETURN_IF_ERROR(in->ReadAt(off, std::span(ibuf.data(), n)));
    in_hash.Update(std::span(ibuf.data(), n));
    off += n;
    ZSTD_inBuffer input{ibuf.data(), n, 0};
    while (input.pos < input.size) {
      ZSTD_outBuffer output{obuf.data(), obuf.size(), 0};
      last_rem = ZSTD_decompressStream(dctx.get(), &output, &input);
      if (ZSTD_isError(last_rem)) {
        return Corruption(w + ": " + src + ": zstd: " + ZSTD_getErrorName(last_rem));
      }
      if (out.digest().bytes + output.pos > dst_expect.bytes) {
        return Corruption(w + ": " + src + " decompresses to more than the " + std::to_string(dst_expect.bytes) +
                          " bytes the index says");
      }
      TS_RETURN_IF_ERROR(out.Append(std::span(obuf.data(), output.pos)));
    }
  }
  if (in_hash.Digest() != src_expect.xxh3) {
    return Corruption(w + ": " + src + ": XXH3 " + HashHex(in_hash.Digest()) + " differs from the index's " +
                      HashHex(src_expect.xxh3));
  }
  if (last_rem != 0) return Corruption(w + ": " + src + ": truncated zstd frame");
  const FileDigest got = out.digest();
  if (got.bytes != dst_expect.bytes || got.xxh3 != dst_expect.xxh3) {
    return Corruption(w + ": " + src + " decompresses to " + std::to_string(got.bytes) + " bytes with XXH3 " +
                      HashHex(got.xxh3) + ", the index says " + std::to_string(dst_expect.bytes) + " bytes, " +
                      HashHex(dst_expect.xxh3));
  }
  return out.Commit(/*sync=*/false);
}

}  // namespace tensorsafe::dataset::internal
