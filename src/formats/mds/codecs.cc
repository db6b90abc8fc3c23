// Decoders of compressed MDS shards (docs/formats/mds.md, "Compression and
// hashes"): each reads a whole shard file as MosaicML's
// streaming/base/compression.py decompress() does for its codec.
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/mds/mds_internal.h"
#include "io/env.h"
#include "util/text.h"

namespace tensorsafe::mds::internal {
namespace {

using tensorsafe::internal::QuoteName;
using tensorsafe::internal::WritableFile;

Status DecodeZstd(std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& zip_path,
                  WritableFile& file) {
  // MDSWriter writes one frame with its content size: a wrong raw size fails
  // here before anything is written. Several frames (skippable ones too) are
  // read one after another, as python-zstd's decompress in StreamingDataset
  // does, and only their total is checked, below.
  if (std::size_t first = ZSTD_findFrameCompressedSize(zip.data(), zip.size());
      !ZSTD_isError(first) && first == zip.size()) {
    unsigned long long declared = ZSTD_getFrameContentSize(zip.data(), zip.size());
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != ZSTD_CONTENTSIZE_ERROR && declared != raw_bytes) {
      return Corruption(zip_path + ": frame declares " + std::to_string(declared) +
                        " bytes, the index says the raw shard has " + std::to_string(raw_bytes));
    }
  }
  // Streams through a 1 MiB buffer: memory does not depend on what the
  // index claims, and output past its raw size stops us.
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) return Internal("ZSTD_createDCtx failed");
  std::vector<std::byte> buf(1 << 20);
  ZSTD_inBuffer in{zip.data(), zip.size(), 0};
  std::uint64_t total = 0;
  std::size_t ret = 0;
  do {
    ZSTD_outBuffer out{buf.data(), buf.size(), 0};
    std::size_t before = in.pos;
    ret = ZSTD_decompressStream(dctx.get(), &out, &in);
    if (ZSTD_isError(ret)) return Corruption(zip_path + ": zstd: " + ZSTD_getErrorName(ret));
    total += out.pos;
    if (total > raw_bytes) {
      return Corruption(zip_path + ": decompresses to more than the index's " + std::to_string(raw_bytes) +
                        " bytes");
    }
    TS_RETURN_IF_ERROR(file.Append(std::span<const std::byte>(buf.data(), out.pos)));
    // Input used up with the frame unfinished and nothing produced: truncated.
    if (in.pos == in.size && ret != 0 && out.pos < out.size && in.pos == before) break;
  } while (in.pos < in.size || ret != 0);
  if (ret != 0) {  // said apart: the output may already have the index's size
    return Corruption(zip_path + ": the input ends inside a zstd frame (truncated frame) after " +
                      std::to_string(total) + " decompressed bytes; the index says " + std::to_string(raw_bytes));
  }
  if (total != raw_bytes) {
    return Corruption(zip_path + ": decompresses to " + std::to_string(total) + " bytes, the index says " +
                      std::to_string(raw_bytes));
  }
  return Status::OK();
}

}  // namespace

Result<Codec> ParseCompression(std::string_view c) {
  std::uint64_t level = 3;
  bool ok = c == "zstd";
  if (c.starts_with("zstd:")) {
    std::string_view l = c.substr(5);
    // compression.py names levels f"zstd:{level}": no sign, no leading zero.
    ok = !l.empty() && l.size() <= 2 && l[0] != '0' && std::all_of(l.begin(), l.end(), [](char ch) {
           return ch >= '0' && ch <= '9';
         });
    if (ok) level = std::stoull(std::string(l));
    ok = ok && level >= 1 && level <= 22;
    if (!ok) return Corruption("compression " + QuoteName(c) + " (zstd levels are 1..22)");
  }
  if (!ok) return Unsupported("compression " + QuoteName(c) + " (only zstd is read)");
  return Codec::kZstd;
}

Status DecodeShard(Codec codec, std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& name,
                   WritableFile& out) {
  switch (codec) {
    case Codec::kZstd:
      return DecodeZstd(zip, raw_bytes, name, out);
  }
  return Internal(name + ": unknown codec");
}

}  // namespace tensorsafe::mds::internal
