// Decoders of compressed MDS shards (docs/formats/mds.md, "Compression and
// hashes"): each reads a whole shard file as MosaicML's
// streaming/base/compression.py decompress() does for its codec (checked
// with mosaicml-streaming 0.13.0 on Python 3.11), with the library its
// Python module wraps: zlib (gzip), libbz2 (bz2), libbrotlidec (brotli),
// libsnappy (python-snappy's raw block through cramjam), libzstd (zstd).
#include <brotli/decode.h>
#include <bzlib.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/sources/mds/internal.h"
#include "tensorsafe/env.h"
#include "util/endian.h"
#include "util/text.h"

namespace tensorsafe::mds::internal {
namespace {

using tensorsafe::WritableFile;
using tensorsafe::internal::QuoteName;

// Every streaming decoder writes through a buffer of this size, whatever the
// index claims.
constexpr std::size_t kBufferBytes = std::size_t{1} << 20;
// zlib's and libbz2's avail_in are 32-bit: input goes in slices this large.
constexpr std::size_t kInputSlice = std::size_t{1} << 30;

// Counts the output against the index's raw size and appends it.
class Output {
 public:
  Output(WritableFile& file, std::uint64_t raw_bytes, const std::string& name)
      : file_(file), raw_bytes_(raw_bytes), name_(name) {}
  // kCorruption as soon as the total passes the index's raw size: nothing
  // past it is decoded.
  Status Put(const void* data, std::size_t n) {
    if (n > raw_bytes_ - total_) {
      return Corruption(name_ + ": decompresses to more than the index's " + std::to_string(raw_bytes_) + " bytes");
    }
    total_ += n;
    return file_.Append({static_cast<const std::byte*>(data), n});
  }
  // The end of the input: `kept` bytes are the shard. bz2 keeps only its
  // whole streams; when they hold the raw size, an ignored stream that
  // wrote anything has already failed Put, so the file holds `kept` bytes.
  Status Finish(std::uint64_t kept) const {
    if (kept != raw_bytes_) {
      return Corruption(name_ + ": decompresses to " + std::to_string(kept) + " bytes, the index says " +
                        std::to_string(raw_bytes_));
    }
    return Status::OK();
  }
  Status Finish() const { return Finish(total_); }
  std::uint64_t total() const { return total_; }
  std::string Truncated(const std::string& where) const {
    return name_ + ": the input ends inside " + where + " (truncated) after " + std::to_string(total_) +
           " decompressed bytes; the index says " + std::to_string(raw_bytes_);
  }

 private:
  WritableFile& file_;
  const std::uint64_t raw_bytes_;
  const std::string& name_;
  std::uint64_t total_ = 0;
};

// zstd (python-zstd's decompress): every frame, skippable frames skipped,
// nothing after the last.
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
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) return Internal("ZSTD_createDCtx failed");
  Output output(file, raw_bytes, zip_path);
  std::vector<std::byte> buf(kBufferBytes);
  ZSTD_inBuffer in{zip.data(), zip.size(), 0};
  std::size_t ret = 0;
  do {
    ZSTD_outBuffer out{buf.data(), buf.size(), 0};
    std::size_t before = in.pos;
    ret = ZSTD_decompressStream(dctx.get(), &out, &in);
    if (ZSTD_isError(ret)) return Corruption(zip_path + ": zstd: " + ZSTD_getErrorName(ret));
    TS_RETURN_IF_ERROR(output.Put(buf.data(), out.pos));
    // Input used up with the frame unfinished and nothing produced: truncated.
    if (in.pos == in.size && ret != 0 && out.pos < out.size && in.pos == before) break;
  } while (in.pos < in.size || ret != 0);
  if (ret != 0) {  // said apart: the output may already have the index's size
    return Corruption(zip_path + ": the input ends inside a zstd frame (truncated frame) after " +
                      std::to_string(output.total()) + " decompressed bytes; the index says " +
                      std::to_string(raw_bytes));
  }
  return output.Finish();
}

// gz: Python's gzip.decompress (3.11): members one after another, each a
// header read as gzip._read_gzip_header reads it (magic, method 8; the flag
// fields skipped, reserved flags and the header CRC not checked), raw
// deflate, then CRC-32 and the length mod 2^32; NUL bytes after a member are
// skipped, and the input may end there. Anything else after a member must
// be another member (BadGzipFile). Empty input is empty output.
Status DecodeGzip(std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& name,
                  WritableFile& file) {
  Output output(file, raw_bytes, name);
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Internal("inflateInit2 failed");
  std::unique_ptr<z_stream, decltype(&inflateEnd)> guard(&z, inflateEnd);
  std::vector<std::byte> buf(kBufferBytes);
  auto at = [&](std::size_t i) { return static_cast<std::uint8_t>(zip[i]); };
  std::size_t pos = 0;
  for (std::uint64_t member = 1; pos < zip.size(); ++member) {
    const std::string m = "gzip member " + std::to_string(member) + " (at byte " + std::to_string(pos) + ")";
    // RFC 1952 §2.3: ID1 ID2 CM FLG MTIME(4) XFL OS, then the optional fields.
    if (zip.size() - pos < 2 || at(pos) != 0x1f || at(pos + 1) != 0x8b) {
      std::string got = Hex(at(pos), 2) + (zip.size() - pos >= 2 ? " " + Hex(at(pos + 1), 2) : "");
      return Corruption(name + ": " + m + ": not a gzip member (starts " + got + ", not 1f 8b)");
    }
    auto truncated_header = [&] { return Corruption(output.Truncated("the header of " + m)); };
    if (zip.size() - pos < 10) return truncated_header();
    if (at(pos + 2) != 8) {
      return Corruption(name + ": " + m + ": compression method " + std::to_string(at(pos + 2)) + " (only 8, deflate)");
    }
    const std::uint8_t flags = at(pos + 3);
    std::size_t p = pos + 10;
    if (flags & 0x04) {  // FEXTRA: u16 length, then that many bytes
      if (zip.size() - p < 2) return truncated_header();
      std::size_t xlen = at(p) | std::size_t{at(p + 1)} << 8;
      p += 2;
      if (zip.size() - p < xlen) return truncated_header();
      p += xlen;
    }
    for (std::uint8_t field : {std::uint8_t{0x08}, std::uint8_t{0x10}}) {  // FNAME, FCOMMENT: to a NUL
      if (!(flags & field)) continue;
      while (p < zip.size() && at(p) != 0) ++p;
      // gzip stops at the end of the input too; the deflate data is then missing.
      if (p < zip.size()) ++p;
    }
    if (flags & 0x02) {  // FHCRC: skipped, as Python does (zlib would check it)
      if (zip.size() - p < 2) return truncated_header();
      p += 2;
    }
    // Raw deflate from p, streamed; CRC-32 and length of this member's output.
    if (inflateReset(&z) != Z_OK) return Internal("inflateReset failed");
    uLong crc = crc32(0L, Z_NULL, 0);
    std::uint64_t length = 0;
    int ret = Z_OK;
    while (ret != Z_STREAM_END) {
      if (z.avail_in == 0 && p < zip.size()) {
        const std::size_t n = std::min(zip.size() - p, kInputSlice);
        z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(zip.data() + p));
        z.avail_in = static_cast<uInt>(n);
        p += n;
      }
      z.next_out = reinterpret_cast<Bytef*>(buf.data());
      z.avail_out = static_cast<uInt>(buf.size());
      ret = inflate(&z, Z_NO_FLUSH);
      if (ret == Z_DATA_ERROR) {
        return Corruption(name + ": " + m + ": deflate: " + (z.msg ? z.msg : "invalid data"));
      }
      if (ret == Z_MEM_ERROR) return Internal(name + ": inflate: out of memory");
      if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) {
        return Internal(name + ": inflate returned " + std::to_string(ret));
      }
      const std::size_t produced = buf.size() - z.avail_out;
      crc = crc32_z(crc, reinterpret_cast<const Bytef*>(buf.data()), produced);
      length += produced;
      TS_RETURN_IF_ERROR(output.Put(buf.data(), produced));
      // Z_BUF_ERROR: no progress possible; with the input all given, it ends
      // inside the deflate data.
      if ((ret == Z_BUF_ERROR || (ret == Z_OK && z.avail_out != 0)) && z.avail_in == 0 && p == zip.size()) {
        return Corruption(output.Truncated("the deflate data of " + m));
      }
    }
    p -= z.avail_in;  // what inflate did not use follows the deflate data
    z.avail_in = 0;
    if (zip.size() - p < 8) return Corruption(output.Truncated("the 8-byte trailer of " + m));
    const std::uint32_t want_crc = tensorsafe::internal::Load32(zip.data() + p);
    const std::uint32_t want_len = tensorsafe::internal::Load32(zip.data() + p + 4);
    if (want_crc != static_cast<std::uint32_t>(crc)) {
      return Corruption(name + ": " + m + ": CRC-32 of its " + std::to_string(length) + " bytes is " +
                        Hex(static_cast<std::uint32_t>(crc), 8) + ", its trailer says " + Hex(want_crc, 8));
    }
    if (want_len != static_cast<std::uint32_t>(length)) {
      return Corruption(name + ": " + m + ": decompresses to " + std::to_string(length) + " bytes, its trailer says " +
                        std::to_string(want_len) + " (mod 2^32)");
    }
    pos = p + 8;
    while (pos < zip.size() && at(pos) == 0) ++pos;  // gzip.decompress: .lstrip(b"\x00")
  }
  return output.Finish();
}

// bz2: Python's bz2.decompress: streams one after another until the input
// ends; after the first, a stream libbz2 finds invalid (BZ_DATA_ERROR or
// BZ_DATA_ERROR_MAGIC: Python's OSError) is ignored with everything after
// it, and what it produced is dropped; one that is cut short is an error.
Status DecodeBzip2(std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& name,
                   WritableFile& file) {
  Output output(file, raw_bytes, name);
  std::vector<std::byte> buf(kBufferBytes);
  std::uint64_t kept = 0;  // the output of the whole streams
  std::size_t pos = 0;
  for (std::uint64_t stream = 1; pos < zip.size(); ++stream) {
    const std::string what = "bzip2 stream " + std::to_string(stream) + " (at byte " + std::to_string(pos) + ")";
    bz_stream s{};
    if (BZ2_bzDecompressInit(&s, 0, 0) != BZ_OK) return Internal("BZ2_bzDecompressInit failed");
    std::unique_ptr<bz_stream, decltype(&BZ2_bzDecompressEnd)> guard(&s, BZ2_bzDecompressEnd);
    std::size_t p = pos;
    int ret = BZ_OK;
    while (ret != BZ_STREAM_END) {
      if (s.avail_in == 0 && p < zip.size()) {
        const std::size_t n = std::min(zip.size() - p, kInputSlice);
        s.next_in = reinterpret_cast<char*>(const_cast<std::byte*>(zip.data() + p));
        s.avail_in = static_cast<unsigned>(n);
        p += n;
      }
      s.next_out = reinterpret_cast<char*>(buf.data());
      s.avail_out = static_cast<unsigned>(buf.size());
      ret = BZ2_bzDecompress(&s);
      if (ret == BZ_DATA_ERROR || ret == BZ_DATA_ERROR_MAGIC) {
        if (stream > 1) return output.Finish(kept);  // "Leftover data is not a valid bzip2 stream; ignore it."
        return Corruption(
            name + ": " + what + ": " +
            (ret == BZ_DATA_ERROR_MAGIC ? "not a bzip2 stream (BZ_DATA_ERROR_MAGIC)" : "damaged data (BZ_DATA_ERROR)"));
      }
      if (ret == BZ_MEM_ERROR) return Internal(name + ": BZ2_bzDecompress: out of memory");
      if (ret != BZ_OK && ret != BZ_STREAM_END) {
        return Internal(name + ": BZ2_bzDecompress returned " + std::to_string(ret));
      }
      TS_RETURN_IF_ERROR(output.Put(buf.data(), buf.size() - s.avail_out));
      // Output room left, no input left: the stream needs bytes that are not there.
      if (ret == BZ_OK && s.avail_out != 0 && s.avail_in == 0 && p == zip.size()) {
        return Corruption(output.Truncated(what));
      }
    }
    pos = p - s.avail_in;
    kept = output.total();
  }
  return output.Finish(kept);
}

// br: brotli.decompress (brotli 1.2.1): one stream; bytes after it, and
// empty input, are errors ("brotli: decoder failed").
Status DecodeBrotli(std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& name,
                    WritableFile& file) {
  Output output(file, raw_bytes, name);
  std::unique_ptr<BrotliDecoderState, decltype(&BrotliDecoderDestroyInstance)> st(
      BrotliDecoderCreateInstance(nullptr, nullptr, nullptr), BrotliDecoderDestroyInstance);
  if (!st) return Internal("BrotliDecoderCreateInstance failed");
  std::vector<std::byte> buf(kBufferBytes);
  const std::uint8_t* next_in = reinterpret_cast<const std::uint8_t*>(zip.data());
  std::size_t avail_in = zip.size();
  while (true) {
    std::uint8_t* next_out = reinterpret_cast<std::uint8_t*>(buf.data());
    std::size_t avail_out = buf.size();
    BrotliDecoderResult r =
        BrotliDecoderDecompressStream(st.get(), &avail_in, &next_in, &avail_out, &next_out, nullptr);
    if (r == BROTLI_DECODER_RESULT_ERROR) {
      return Corruption(name + ": brotli: " + BrotliDecoderErrorString(BrotliDecoderGetErrorCode(st.get())) +
                        " (input byte " + std::to_string(zip.size() - avail_in) + ")");
    }
    TS_RETURN_IF_ERROR(output.Put(buf.data(), buf.size() - avail_out));
    if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT) return Corruption(output.Truncated("the brotli stream"));
    if (r == BROTLI_DECODER_RESULT_SUCCESS) break;
  }
  if (avail_in != 0) {
    return Corruption(name + ": " + std::to_string(avail_in) + " bytes after the end of the brotli stream (at byte " +
                      std::to_string(zip.size() - avail_in) + "; brotli.decompress refuses them too)");
  }
  return output.Finish();
}

// snappy: python-snappy 0.7.3's decompress is cramjam's decompress_raw: one
// raw block (a varint length, then tags; not the framed format), exactly
// filling its length, nothing after it. A raw block's copies may reach any
// earlier byte of the output, so it cannot be decoded through a window:
// it is validated first (libsnappy's IsValidCompressedBuffer, which writes
// nothing) and then decoded in one call into the output file mapped for
// writing, whose pages the kernel writes back: no heap of its size.
Status DecodeSnappy(std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& name,
                    WritableFile& file) {
  const char* in = reinterpret_cast<const char*>(zip.data());
  std::size_t declared = 0;
  if (!snappy::GetUncompressedLength(in, zip.size(), &declared)) {
    return Corruption(name + ": not a raw snappy block: its " + std::to_string(zip.size()) +
                      " bytes do not start with a length (a varint below 2^32)");
  }
  if (declared != raw_bytes) {
    return Corruption(name + ": snappy block declares " + std::to_string(declared) +
                      " bytes, the index says the raw shard has " + std::to_string(raw_bytes));
  }
  if (!snappy::IsValidCompressedBuffer(in, zip.size())) {
    return Corruption(name + ": the raw snappy block's " + std::to_string(zip.size()) +
                      " bytes do not decode to exactly the " + std::to_string(declared) +
                      " bytes it declares (truncated, damaged, or followed by other bytes)");
  }
  TS_ASSIGN_OR_RETURN(std::span<std::byte> out, file.MapForWrite(declared));
  if (!snappy::RawUncompress(in, zip.size(), reinterpret_cast<char*>(out.data()))) {
    return Corruption(name + ": snappy: RawUncompress failed on a block it validated");
  }
  return Status::OK();
}

struct Family {
  std::string_view name;  // compression.py's extension: "gz", and "gz:<level>"
  Codec codec;
  int min_level, max_level;  // -1: no levels
};
// compression.py: Brotli levels range(12), Bzip2 range(1, 10), Gzip
// range(10), Zstandard range(1, 23); Snappy is not a LevelledCompression.
constexpr std::array<Family, 5> kFamilies = {{
    {"br", Codec::kBrotli, 0, 11},
    {"bz2", Codec::kBzip2, 1, 9},
    {"gz", Codec::kGzip, 0, 9},
    {"snappy", Codec::kSnappy, -1, -1},
    {"zstd", Codec::kZstd, 1, 22},
}};

}  // namespace

std::string_view CodecName(Codec codec) {
  for (const Family& f : kFamilies) {
    if (f.codec == codec) return f.name;
  }
  return "?";
}

Result<Codec> ParseCompression(std::string_view c) {
  const std::string_view family = c.substr(0, c.find(':'));
  for (const Family& f : kFamilies) {
    if (f.name != family) continue;
    if (family.size() == c.size()) return f.codec;
    if (f.min_level < 0)
      return Corruption("compression " + QuoteName(c) + " (" + std::string(f.name) + " has no levels)");
    // compression.py names levels f"{extension}:{level}": decimal, no sign,
    // no leading zero ("zstd:01" is no algorithm of is_compression).
    std::string_view l = c.substr(family.size() + 1);
    bool ok = !l.empty() && l.size() <= 2 && (l[0] != '0' || l.size() == 1) &&
              std::all_of(l.begin(), l.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    const int level = ok ? std::stoi(std::string(l)) : -1;
    if (!ok || level < f.min_level || level > f.max_level) {
      return Corruption("compression " + QuoteName(c) + " (" + std::string(f.name) + " levels are " +
                        std::to_string(f.min_level) + ".." + std::to_string(f.max_level) + ")");
    }
    return f.codec;
  }
  return Unsupported("compression " + QuoteName(c) + " (read: br, bz2, gz, snappy, zstd)");
}

Status DecodeShard(Codec codec, std::span<const std::byte> zip, std::uint64_t raw_bytes, const std::string& name,
                   WritableFile& out) {
  switch (codec) {
    case Codec::kBrotli: return DecodeBrotli(zip, raw_bytes, name, out);
    case Codec::kBzip2: return DecodeBzip2(zip, raw_bytes, name, out);
    case Codec::kGzip: return DecodeGzip(zip, raw_bytes, name, out);
    case Codec::kSnappy: return DecodeSnappy(zip, raw_bytes, name, out);
    case Codec::kZstd: return DecodeZstd(zip, raw_bytes, name, out);
  }
  return Internal(name + ": unknown codec");
}

}  // namespace tensorsafe::mds::internal
