// Compressed MDS shards of every codec of MosaicML's compression.py (br,
// bz2, gz, snappy; zstd in mds_corruption_test.cc): each golden dataset's shard 0
// (tests/golden/mds/make.py) truncated, damaged, of another raw size and
// followed by other bytes, with code and message, and nothing left in the
// cache; then what each codec's Python reader accepts and refuses (gzip
// members and NUL padding, bzip2 streams and the leftovers bz2.decompress
// ignores, bytes after a brotli stream, snappy's raw block).
#include <bzlib.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "dataset/sources/mds/internal.h"
#include "dataset/sources/mds_test_util.h"
#include "support/fault_env.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/mds.h"
#include "tensorsafe/env.h"

namespace tensorsafe {
namespace {

namespace fs = std::filesystem;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

using mds_test::kGolden;

// A copy of tests/golden/mds/<codec>/ whose shard 0's compressed file is
// replaced, read through a cache directory of its own.
class CodecShard {
 public:
  explicit CodecShard(const std::string& codec) {
    fs::copy(kGolden + codec, dir_.path(), fs::copy_options::recursive);
    index_ = nlohmann::json::parse(ReadFileBytes(dir_.File("index.json")));
    zip_name_ = index_["shards"][0]["zip_data"]["basename"].get<std::string>();
    golden_zip_ = ReadFileBytes(ZipPath());
    raw_bytes_ = index_["shards"][0]["raw_data"]["bytes"].get<std::uint64_t>();
  }
  std::string ZipPath() const { return dir_.File(zip_name_); }
  const std::string& golden_zip() const { return golden_zip_; }
  std::uint64_t raw_bytes() const { return raw_bytes_; }

  // Writes `zip` as shard 0's compressed file, with the index's zip size
  // following and its zip digests dropped (so the decoder sees the bytes),
  // empties the cache and opens shard 0. `mutate` edits the index after.
  Status Open(const std::string& zip, const std::function<void(nlohmann::json&)>& mutate = {}) {
    WriteFileBytes(ZipPath(), zip);
    nlohmann::json j = index_;
    j["shards"][0]["zip_data"]["bytes"] = zip.size();
    j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
    if (mutate) mutate(j);
    WriteFileBytes(dir_.File("index.json"), j.dump());
    fs::remove_all(cache_.path());
    fs::create_directories(cache_.path());
    auto ds = mds::OpenIndex(dir_.path().string());
    if (!ds.ok()) return ds.status();
    mds::ShardOptions opt;
    opt.cache_dir = cache_.path().string();
    return mds::OpenShard(*ds, 0, opt).status();
  }
  // Files in the cache (decompressed shards and temporaries).
  std::vector<std::string> CacheFiles() const {
    std::vector<std::string> files;
    for (auto& e : fs::recursive_directory_iterator(cache_.path())) {
      if (e.is_regular_file()) files.push_back(e.path().string());
    }
    return files;
  }
  // The one decompressed shard in the cache.
  std::string Cached() const {
    auto files = CacheFiles();
    return files.size() == 1 ? ReadFileBytes(files[0]) : "";
  }
  // Shard 0's raw bytes, from the golden compressed file.
  std::string Raw() {
    EXPECT_TRUE(Open(golden_zip_).ok());
    return Cached();
  }

 private:
  TempDir dir_, cache_;
  nlohmann::json index_;
  std::string zip_name_, golden_zip_;
  std::uint64_t raw_bytes_ = 0;
};

// What each codec says, in the golden dataset's shard 0.
struct CodecCase {
  const char* codec;
  const char* truncated;  // the message of a file cut in half
  const char* trailing;   // of "junk" after the file; nullptr: read as if absent
  bool size_in_header;    // a raw size other than the index's is found before decoding
};

class MdsCodecCorruption : public ::testing::TestWithParam<CodecCase> {
 protected:
  CodecShard shard_{GetParam().codec};
};

TEST_P(MdsCodecCorruption, GoldenShardDecompresses) {
  ASSERT_TRUE(shard_.Open(shard_.golden_zip()).ok());
  EXPECT_EQ(shard_.Cached().size(), shard_.raw_bytes());
}

// Every prefix: kCorruption naming the file, nothing in the cache (gz and
// bz2 read empty input as empty output, as Python does: 0 bytes, not the
// index's).
TEST_P(MdsCodecCorruption, EveryTruncationIsRefusedAndLeavesNothing) {
  const std::string& zip = shard_.golden_zip();
  for (std::size_t len = 0; len < zip.size(); ++len) {
    Status s = shard_.Open(zip.substr(0, len));
    ASSERT_EQ(s.code(), StatusCode::kCorruption) << "prefix " << len << ": " << s.ToString();
    ASSERT_NE(s.message().find(shard_.ZipPath() + ": "), std::string::npos) << s.ToString();
    ASSERT_TRUE(shard_.CacheFiles().empty()) << "prefix " << len;
  }
  EXPECT_STATUS(shard_.Open(zip.substr(0, zip.size() / 2)), StatusCode::kCorruption,
                shard_.ZipPath() + ": " + GetParam().truncated);
  EXPECT_TRUE(shard_.CacheFiles().empty());
}

// Every byte flipped: refused with nothing cached, or the very same raw
// shard (bytes no reader checks: a gzip header's mtime, padding bits).
TEST_P(MdsCodecCorruption, EveryByteFlippedIsRefusedOrReadsTheSameShard) {
  const std::string raw = shard_.Raw();
  ASSERT_EQ(raw.size(), shard_.raw_bytes());
  const std::string& zip = shard_.golden_zip();
  std::size_t refused = 0;
  for (std::size_t at = 0; at < zip.size(); ++at) {
    std::string z = zip;
    z[at] = static_cast<char>(z[at] ^ 0x55);
    Status s = shard_.Open(z);
    if (s.ok()) {
      ASSERT_EQ(shard_.Cached(), raw) << "byte " << at << " read as other bytes";
      continue;
    }
    ++refused;
    ASSERT_EQ(s.code(), StatusCode::kCorruption) << "byte " << at << ": " << s.ToString();
    ASSERT_TRUE(shard_.CacheFiles().empty()) << "byte " << at;
  }
  EXPECT_GT(refused, zip.size() * 9 / 10);
}

TEST_P(MdsCodecCorruption, RawSizeOtherThanTheIndex) {
  const std::uint64_t raw = shard_.raw_bytes();
  auto with_raw = [&](std::uint64_t n) {
    return shard_.Open(shard_.golden_zip(), [n](auto& j) {
      j["shards"][0]["raw_data"]["bytes"] = n;
      j["shards"][0]["raw_data"]["hashes"] = nlohmann::json::object();
    });
  };
  if (GetParam().size_in_header) {
    for (std::uint64_t n : {raw - 1, raw + 1}) {
      EXPECT_STATUS(with_raw(n), StatusCode::kCorruption,
                    shard_.ZipPath() + ": snappy block declares " + std::to_string(raw) +
                        " bytes, the index says the raw shard has " + std::to_string(n));
    }
  } else {
    EXPECT_STATUS(with_raw(raw + 1), StatusCode::kCorruption,
                  shard_.ZipPath() + ": decompresses to " + std::to_string(raw) + " bytes, the index says " +
                      std::to_string(raw + 1));
    EXPECT_TRUE(shard_.CacheFiles().empty());
    EXPECT_STATUS(with_raw(raw - 1), StatusCode::kCorruption,
                  shard_.ZipPath() + ": decompresses to more than the index's " + std::to_string(raw - 1) + " bytes");
  }
  EXPECT_TRUE(shard_.CacheFiles().empty());
  EXPECT_TRUE(with_raw(raw).ok());
}

TEST_P(MdsCodecCorruption, BytesAfterTheEnd) {
  Status s = shard_.Open(shard_.golden_zip() + "junk");
  if (GetParam().trailing == nullptr) {  // bz2.decompress ignores a leftover that is no stream
    EXPECT_TRUE(s.ok()) << s.ToString();
    return;
  }
  EXPECT_STATUS(s, StatusCode::kCorruption, shard_.ZipPath() + ": " + GetParam().trailing);
  EXPECT_TRUE(shard_.CacheFiles().empty());
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, MdsCodecCorruption,
    ::testing::Values(
        CodecCase{"gz", "the input ends inside the deflate data of gzip member 1 (at byte 0) (truncated) after ",
                  "gzip member 2 (at byte 1279): not a gzip member (starts 6a 75, not 1f 8b)", false},
        CodecCase{"bz2",
                  "the input ends inside bzip2 stream 1 (at byte 0) (truncated) after 0 decompressed bytes; "
                  "the index says 2439",
                  nullptr, false},
        CodecCase{"br", "the input ends inside the brotli stream (truncated) after ",
                  "4 bytes after the end of the brotli stream (at byte 1439; brotli.decompress refuses them too)",
                  false},
        CodecCase{"snappy",
                  "the raw snappy block's 828 bytes do not decode to exactly the 2448 bytes it declares (truncated, "
                  "damaged, or followed by other bytes)",
                  "the raw snappy block's 1661 bytes do not decode to exactly the 2448 bytes it declares", true}),
    [](const auto& info) { return std::string(info.param.codec); });

// --- gzip: Python's gzip.decompress ---------------------------------------

// One gzip member of `data` with the header fields `flags` asks for
// (FEXTRA 0x04, FNAME 0x08, FCOMMENT 0x10, FHCRC 0x02 with a CRC that is
// wrong on purpose: Python never checks it), raw deflate at `level`.
std::string GzipMember(const std::string& data, std::uint8_t flags = 0, int level = 6) {
  std::string out = {'\x1f', '\x8b', '\x08', static_cast<char>(flags), 1, 2, 3, 4, 0, 3};
  if (flags & 0x04) out += std::string("\x03\x00xyz", 5);
  if (flags & 0x08) out += std::string("name.mds\0", 9);
  if (flags & 0x10) out += std::string("a comment\0", 10);
  if (flags & 0x02) out += "\xde\xad";
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string deflated(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(deflated.data());
  z.avail_out = static_cast<uInt>(deflated.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  deflated.resize(z.total_out);
  deflateEnd(&z);
  out += deflated;
  const std::uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size()));
  const auto size = static_cast<std::uint32_t>(data.size());
  for (std::uint32_t v : {crc, size}) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i));
  }
  return out;
}

class MdsGzip : public ::testing::Test {
 protected:
  void SetUp() override { raw_ = shard_.Raw(); }
  CodecShard shard_{"gz"};
  std::string raw_;
};

// gzip.decompress reads member after member and skips NULs after each
// (.lstrip(b"\x00")); header fields are skipped, the header CRC unchecked.
TEST_F(MdsGzip, MembersNulPaddingAndHeaderFields) {
  const std::string zip = GzipMember(raw_.substr(0, 100), 0x04 | 0x08 | 0x10 | 0x02) + std::string(3, '\0') +
                          GzipMember("") + GzipMember(raw_.substr(100, 1000), 0xe0 /* reserved: ignored */, 1) +
                          GzipMember(raw_.substr(1100), 0x08, 9) + std::string(700, '\0');
  Status s = shard_.Open(zip);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(shard_.Cached(), raw_);
}

TEST_F(MdsGzip, WhatGzipDecompressRefuses) {
  const std::string whole = GzipMember(raw_);
  const std::string path = shard_.ZipPath() + ": ";
  // NULs before the first member are not skipped; bytes after NULs must be a member.
  EXPECT_STATUS(shard_.Open(std::string(1, '\0') + whole), StatusCode::kCorruption,
                path + "gzip member 1 (at byte 0): not a gzip member (starts 00 1f, not 1f 8b)");
  EXPECT_STATUS(shard_.Open(whole + std::string(2, '\0') + "\x1f"), StatusCode::kCorruption,
                path + "gzip member 2 (at byte " + std::to_string(whole.size() + 2) +
                    "): not a gzip member (starts 1f, not 1f 8b)");
  EXPECT_STATUS(shard_.Open(whole + "\x1f\x8b\x08"), StatusCode::kCorruption,
                path + "the input ends inside the header of gzip member 2 (at byte " + std::to_string(whole.size()) +
                    ") (truncated) after 2443 decompressed bytes; the index says 2443");
  std::string z = whole;
  z[2] = 7;
  EXPECT_STATUS(shard_.Open(z), StatusCode::kCorruption,
                path + "gzip member 1 (at byte 0): compression method 7 (only 8, deflate)");
  z = whole;
  z[z.size() - 8] ^= 1;
  EXPECT_STATUS(shard_.Open(z), StatusCode::kCorruption,
                path + "gzip member 1 (at byte 0): CRC-32 of its 2443 bytes is ");
  z = whole;
  z[z.size() - 4] ^= 1;
  EXPECT_STATUS(shard_.Open(z), StatusCode::kCorruption,
                path + "gzip member 1 (at byte 0): decompresses to 2443 bytes, its trailer says 2442 (mod 2^32)");
  EXPECT_STATUS(shard_.Open(whole.substr(0, whole.size() - 3)), StatusCode::kCorruption,
                path + "the input ends inside the 8-byte trailer of gzip member 1 (at byte 0) (truncated)");
  z = whole;
  z[10] = static_cast<char>(0xff);  // deflate block type 3
  EXPECT_STATUS(shard_.Open(z), StatusCode::kCorruption,
                path + "gzip member 1 (at byte 0): deflate: invalid block type");
  // A name running to the end of the input: the deflate data is missing.
  EXPECT_STATUS(shard_.Open(std::string("\x1f\x8b\x08\x08\0\0\0\0\0\3name", 14)), StatusCode::kCorruption,
                path + "the input ends inside the deflate data of gzip member 1 (at byte 0) (truncated) after 0");
  EXPECT_TRUE(shard_.CacheFiles().empty());
}

// --- bzip2: Python's bz2.decompress -----------------------------------------

std::string Bzip2Stream(const std::string& data, int level = 9) {
  std::string out(data.size() + data.size() / 100 + 600, '\0');
  auto n = static_cast<unsigned>(out.size());
  EXPECT_EQ(BZ2_bzBuffToBuffCompress(out.data(), &n, const_cast<char*>(data.data()), static_cast<unsigned>(data.size()),
                                     level, 0, 0),
            BZ_OK);
  out.resize(n);
  return out;
}

class MdsBzip2 : public ::testing::Test {
 protected:
  void SetUp() override { raw_ = shard_.Raw(); }
  CodecShard shard_{"bz2"};
  std::string raw_;
};

TEST_F(MdsBzip2, StreamsOneAfterAnother) {
  Status s = shard_.Open(Bzip2Stream(raw_.substr(0, 10), 1) + Bzip2Stream("") + Bzip2Stream(raw_.substr(10)));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(shard_.Cached(), raw_);
}

// After a whole stream, bz2.decompress ignores a leftover libbz2 calls
// invalid (its OSError), with whatever that stream produced; a leftover that
// is the start of a stream cut short is an error (ValueError).
TEST_F(MdsBzip2, LeftoversBz2DecompressIgnoresOrRefuses) {
  const std::string whole = Bzip2Stream(raw_);
  std::string damaged = Bzip2Stream(raw_);
  damaged[10] ^= 1;  // the block CRC: the block's bytes come out, then BZ_DATA_ERROR
  for (const std::string& ignored : {std::string(1, '\0'), std::string("x"), std::string("BZh0"),
                                     std::string("BZh9") + std::string(40, 'x'), damaged}) {
    Status s = shard_.Open(whole + ignored);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(shard_.Cached(), raw_);
  }
  // What an ignored stream produced is dropped, as Python drops it.
  const std::string path = shard_.ZipPath() + ": ";
  std::string half = Bzip2Stream(raw_.substr(1000));
  half[10] ^= 1;
  EXPECT_STATUS(shard_.Open(Bzip2Stream(raw_.substr(0, 1000)) + half), StatusCode::kCorruption,
                path + "decompresses to 1000 bytes, the index says 2439");
  for (const std::string& cut : {std::string("B"), std::string("BZh9"), whole.substr(0, 30)}) {
    EXPECT_STATUS(shard_.Open(whole + cut), StatusCode::kCorruption,
                  path + "the input ends inside bzip2 stream 2 (at byte " + std::to_string(whole.size()) +
                      ") (truncated) after 2439 decompressed bytes");
  }
  // The first stream gets no such leniency.
  EXPECT_STATUS(shard_.Open("x" + whole), StatusCode::kCorruption,
                path + "bzip2 stream 1 (at byte 0): not a bzip2 stream (BZ_DATA_ERROR_MAGIC)");
  EXPECT_STATUS(shard_.Open(damaged), StatusCode::kCorruption,
                path + "bzip2 stream 1 (at byte 0): damaged data (BZ_DATA_ERROR)");
  EXPECT_TRUE(shard_.CacheFiles().empty());
}

// --- brotli and snappy ------------------------------------------------------

TEST(MdsBrotli, EmptyInputAndAnotherStreamAfterIt) {
  CodecShard shard("br");
  const std::string path = shard.ZipPath() + ": ";
  EXPECT_STATUS(shard.Open(""), StatusCode::kCorruption,
                path + "the input ends inside the brotli stream (truncated) after 0 decompressed bytes");
  const std::string& zip = shard.golden_zip();
  EXPECT_STATUS(shard.Open(zip + zip), StatusCode::kCorruption,
                path + std::to_string(zip.size()) + " bytes after the end of the brotli stream");
  EXPECT_TRUE(shard.CacheFiles().empty());
}

// python-snappy's decompress is the raw block (cramjam's decompress_raw):
// the framed format is refused, its stream identifier read as a length.
TEST(MdsSnappy, WhatIsNotARawBlock) {
  CodecShard shard("snappy");
  const std::string framed =
      std::string("\xff\x06\x00\x00sNaPpY", 10) + std::string("\x01\x09\x00\x00", 4) + std::string("\0\0\0\0abcde", 9);
  EXPECT_STATUS(shard.Open(framed), StatusCode::kCorruption,
                shard.ZipPath() + ": snappy block declares 895 bytes, the index says the raw shard has 2448");
  EXPECT_STATUS(shard.Open(""), StatusCode::kCorruption,
                shard.ZipPath() + ": not a raw snappy block: its 0 bytes do not start with a length");
  // A length varint padded past 5 bytes: cramjam reads up to 10, libsnappy
  // 5 (mds.md, "Differences"); no writer pads it.
  EXPECT_STATUS(shard.Open(std::string("\x80\x80\x80\x80\x80\x00", 6)), StatusCode::kCorruption,
                shard.ZipPath() + ": not a raw snappy block: its 6 bytes do not start with a length");
  EXPECT_TRUE(shard.CacheFiles().empty());
}

// A raw block's copies may reach any earlier output byte (the writers keep
// within 64 KiB; the format does not): decoded whole, not through a window.
TEST(MdsSnappy, CopiesFromFarBack) {
  std::string lit(70000, '\0');
  for (std::size_t i = 0; i < lit.size(); ++i) lit[i] = static_cast<char>(i * 7 + i / 251);
  std::string block;
  auto varint = [&](std::uint64_t v) {
    for (; v >= 0x80; v >>= 7) block += static_cast<char>(v | 0x80);
    block += static_cast<char>(v);
  };
  varint(lit.size() + 64);
  block += static_cast<char>(62 << 2);  // literal, length - 1 in the next 3 bytes
  for (int i = 0; i < 3; ++i) block += static_cast<char>((lit.size() - 1) >> (8 * i));
  block += lit;
  block += static_cast<char>((63 << 2) | 3);  // copy of 64 with a 4-byte offset
  for (int i = 0; i < 4; ++i) block += static_cast<char>(std::uint32_t{70000} >> (8 * i));
  TempDir dir;
  const std::string tmp = dir.File("out");
  auto* env = Env::Default();
  std::string tmp_name;
  auto file = env->NewTempFile(tmp, &tmp_name);
  ASSERT_TRUE(file.ok());
  Status s = mds::internal::DecodeShard(mds::internal::Codec::kSnappy,
                                        {reinterpret_cast<const std::byte*>(block.data()), block.size()},
                                        lit.size() + 64, "far.snappy", **file);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(ReadFileBytes(tmp_name), lit + lit.substr(0, 64));
  // One offset further reaches before the start.
  block[block.size() - 4] = static_cast<char>(std::uint32_t{70065} & 0xff);
  block[block.size() - 3] = static_cast<char>(std::uint32_t{70065} >> 8);
  auto again = env->NewTempFile(tmp, &tmp_name);
  ASSERT_TRUE(again.ok());
  EXPECT_STATUS(mds::internal::DecodeShard(mds::internal::Codec::kSnappy,
                                           {reinterpret_cast<const std::byte*>(block.data()), block.size()},
                                           lit.size() + 64, "far.snappy", **again),
                StatusCode::kCorruption, "far.snappy: the raw snappy block's 70012 bytes do not decode");
}

// A full disk while decoding: every codec's first write into the output
// (snappy's is the reservation of its mapped file) fails with the errno, the
// message naming the output, and nothing is decoded past it.
TEST(MdsCodecFaults, AFailedWriteIsAnIOErrorWithItsErrno) {
  const std::pair<std::string, mds::internal::Codec> codecs[] = {{"br", mds::internal::Codec::kBrotli},
                                                                 {"bz2", mds::internal::Codec::kBzip2},
                                                                 {"gz", mds::internal::Codec::kGzip},
                                                                 {"snappy", mds::internal::Codec::kSnappy}};
  for (const auto& [ext, codec] : codecs) {
    SCOPED_TRACE(ext);
    const std::string zip = ReadFileBytes(kGolden + ext + "/shard.00000.mds." + ext);
    const nlohmann::json index = nlohmann::json::parse(ReadFileBytes(kGolden + ext + "/index.json"));
    const std::uint64_t raw = index["shards"][0]["raw_data"]["bytes"];
    TempDir dir;
    testing::FaultEnv env;
    env.fail_write = 1;
    env.error_number = ENOSPC;
    std::string tmp;
    auto file = env.NewTempFile(dir.File("out.mds"), &tmp);
    ASSERT_TRUE(file.ok());
    Status s = mds::internal::DecodeShard(codec, {reinterpret_cast<const std::byte*>(zip.data()), zip.size()}, raw,
                                          "in." + ext, **file);
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_EQ(s.error_number(), ENOSPC) << s.ToString();
    EXPECT_NE(s.message().find(tmp), std::string::npos) << s.ToString();
    EXPECT_EQ(env.writes, 1);
  }
}

// --- the cache keeps codecs apart ------------------------------------------

// A name from the zip's digest carries the codec: the same bytes read as
// another codec are decoded (and refused) as that codec, never served the
// file the first one made.
TEST(MdsCodecCache, ZipDigestNamesCarryTheCodec) {
  TempDir a, b, cache;
  const std::string zip = ReadFileBytes(kGolden + "gz/shard.00000.mds.gz");
  std::string digest;  // as Python's xxhash writes it
  ASSERT_TRUE(mds::internal::XxhDigest("xxh64", {reinterpret_cast<const std::byte*>(zip.data()), zip.size()}, &digest));
  for (const TempDir* d : {&a, &b}) {
    fs::copy(kGolden + "gz", d->path(), fs::copy_options::recursive);
    nlohmann::json j = nlohmann::json::parse(ReadFileBytes(d->File("index.json")));
    j["shards"][0]["raw_data"]["hashes"] = nlohmann::json::object();  // so the zip's xxh64 names the file
    j["shards"][0]["zip_data"]["hashes"] = {{"xxh64", digest}};
    if (d == &b) j["shards"][0]["compression"] = "br:4";
    WriteFileBytes(d->File("index.json"), j.dump());
  }
  mds::ShardOptions opt;
  opt.cache_dir = cache.path().string();
  auto da = mds::OpenIndex(a.path().string());
  ASSERT_TRUE(da.ok());
  ASSERT_TRUE(mds::OpenShard(*da, 0, opt).ok());
  EXPECT_TRUE(fs::exists(cache.File("zip-gz-xxh64-" + digest + "-2443.mds")));
  auto db = mds::OpenIndex(b.path().string());
  ASSERT_TRUE(db.ok());
  EXPECT_STATUS(mds::OpenShard(*db, 0, opt).status(), StatusCode::kCorruption,
                b.File("shard.00000.mds.gz") + ": brotli: ");
}

}  // namespace
}  // namespace tensorsafe
