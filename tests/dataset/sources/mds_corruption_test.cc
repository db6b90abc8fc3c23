// Damaged MDS shards (docs/formats/mds.md): a copy of golden plain/'s shard 0
// (tests/golden/mds/make.py) truncated, flipped and rewritten field by field,
// and zstd/'s compressed shard damaged, each with its code and message and
// nothing left in the cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "dataset/internal.h"
#include "dataset/sources/mds_test_util.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/mds.h"
#include "util/endian.h"

namespace tensorsafe {
namespace {

namespace fs = std::filesystem;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;
using namespace mds_test;  // NOLINT: kGolden

// A copy of plain/ whose shard 0 is mutated; the index's raw size follows.
class MdsShardCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(kGolden + "plain", dir_.path(), fs::copy_options::recursive);
    bytes_ = ReadFileBytes(dir_.File("shard.00000.mds"));
    auto ds = mds::OpenIndex(dir_.path().string());
    ASSERT_TRUE(ds.ok());
    info_ = ds->shards[0];
  }
  std::uint32_t Get32(std::size_t at) const {
    return internal::Load32(reinterpret_cast<const std::byte*>(&bytes_[at]));
  }
  void Set32(std::size_t at, std::uint32_t v) { internal::Store32(reinterpret_cast<std::byte*>(&bytes_[at]), v); }
  Result<std::unique_ptr<dataset::ShardSource>> Open() {
    WriteFileBytes(dir_.File("shard.00000.mds"), bytes_);
    mds::ShardEntry info = info_;
    info.raw.bytes = bytes_.size();
    return mds::OpenShardFile(dir_.File("shard.00000.mds"), info);
  }
  TempDir dir_;
  mds::ShardEntry info_;
  std::string bytes_;
};

TEST_F(MdsShardCorruption, EveryTruncationIsRefused) {
  const std::string whole = bytes_;
  ASSERT_TRUE(Open().ok());
  for (std::size_t len = 0; len < whole.size(); ++len) {
    bytes_ = whole.substr(0, len);
    EXPECT_EQ(Open().status().code(), StatusCode::kCorruption) << "prefix " << len;
  }
  bytes_ = whole.substr(0, whole.size() - 1);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption,
                "offsets[4] = " + std::to_string(whole.size()) + " is past the file's " +
                    std::to_string(whole.size() - 1) + " bytes");
  bytes_ = whole + std::string(3, '\0');
  EXPECT_STATUS(
      Open().status(), StatusCode::kCorruption,
      "offsets[4] = " + std::to_string(whole.size()) + " is not the file size " + std::to_string(whole.size() + 3));
}

TEST_F(MdsShardCorruption, EveryByteFlippedOpensOrFailsAndReadsOrFails) {
  const std::string whole = bytes_;
  std::vector<dataset::FieldView> v;
  std::size_t opened = 0, read_errors = 0;
  for (std::size_t at = 0; at < whole.size(); ++at) {
    bytes_ = whole;
    bytes_[at] = static_cast<char>(bytes_[at] ^ 0xFF);
    auto src = Open();
    if (!src.ok()) continue;
    ++opened;
    for (std::uint64_t i = 0; i < (*src)->num_samples(); ++i) read_errors += !(*src)->Read(i, v).ok();
  }
  // Most flips land in values (not checksummed in MDS); some break the layout.
  EXPECT_GT(opened, whole.size() / 2);
  EXPECT_GT(read_errors, 0u);
}

TEST_F(MdsShardCorruption, SizeDisagreeingWithTheIndex) {
  WriteFileBytes(dir_.File("shard.00000.mds"), bytes_ + "x");
  auto ds = mds::OpenIndex(dir_.path().string());
  ASSERT_TRUE(ds.ok());
  EXPECT_STATUS(mds::OpenShard(*ds, 0).status(), StatusCode::kCorruption,
                std::to_string(bytes_.size() + 1) + " bytes, the index says " + std::to_string(bytes_.size()));
}

TEST_F(MdsShardCorruption, SampleCount) {
  Set32(0, Get32(0) + 1);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "holds 5 samples, the index says 4");
}

TEST_F(MdsShardCorruption, OffsetsOutOfOrder) {
  std::uint32_t a = Get32(8), b = Get32(12);
  Set32(8, b);
  Set32(12, a);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption,
                "offsets[2] = " + std::to_string(a) + " is below offsets[1] = " + std::to_string(b));
}

TEST_F(MdsShardCorruption, FirstOffsetInsideTheTable) {
  Set32(4, 8);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "offsets[0] = 8 is inside the offset table (ends at 24)");
}

TEST_F(MdsShardCorruption, FirstOffsetPastTheFile) {
  Set32(4, 1u << 20);
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "offsets[0] = 1048576 is past the file's");
}

TEST_F(MdsShardCorruption, ConfigDisagreeingWithTheIndex) {
  std::size_t at = bytes_.find("\"blob\"", 28);
  ASSERT_NE(at, std::string::npos);
  bytes_[at + 1] = 'B';
  EXPECT_STATUS(Open().status(), StatusCode::kCorruption, "config column 1 disagrees with the index's \"blob\"");
}

TEST_F(MdsShardCorruption, ValueSizeRunningPastTheSample) {
  Set32(Get32(8), 0xFFFF);  // sample 1's first size prefix (column "any")
  auto src = Open();
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kCorruption, "sample 1 column \"any\": value of 65535 bytes at 36");
  EXPECT_TRUE((*src)->Read(2, v).ok());  // the others stay readable
}

TEST_F(MdsShardCorruption, NdarrayDtypeCode) {
  bytes_[Get32(8) + 36] = static_cast<char>(99);  // sample 1, "any"'s dtype byte after 9 sizes
  auto src = Open();
  ASSERT_TRUE(src.ok());
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kCorruption, "sample 1 column \"any\": unknown ndarray dtype code 99");
}

TEST_F(MdsShardCorruption, NdarrayDtypeOtherThanTheFields) {
  bytes_[Get32(8) + 36] = static_cast<char>(34);  // float32 where sample 0 has float64
  auto src = Open();
  ASSERT_TRUE(src.ok());
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kUnsupported,
                "ndarray of f32 rank 2, but the shard's field is f64 rank 2");
}

TEST_F(MdsShardCorruption, TextThatIsNotUtf8) {
  std::size_t at = bytes_.find("sample-1-");
  ASSERT_NE(at, std::string::npos);
  bytes_[at] = static_cast<char>(0xFF);
  auto src = Open();
  ASSERT_TRUE(src.ok());
  std::vector<dataset::FieldView> v;
  EXPECT_STATUS((*src)->Read(1, v), StatusCode::kCorruption, "sample 1 column \"name\": text is not valid UTF-8");
}

// PERMISSIVE.md, MDS 4: str_decimal text is handed out as stored, even
// text Decimal() refuses (StreamingDataset raises InvalidOperation).
TEST_F(MdsShardCorruption, StrDecimalTextIsNotParsed) {
  std::size_t at = bytes_.find("1.25");  // sample 1's "sd"
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(bytes_.find("1.25", at + 1), std::string::npos);
  bytes_[at + 3] = 'x';
  auto src = Open();
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  std::vector<dataset::FieldView> v;
  ASSERT_TRUE((*src)->Read(1, v).ok());
  const dataset::FieldView& sd = v[(*src)->schema().Find("sd") - (*src)->schema().fields.data()];
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(sd.bytes.data()), sd.bytes.size()), "1.2x");
}

TEST_F(MdsShardCorruption, SymlinkedShardIsNotFollowed) {
  fs::rename(dir_.File("shard.00000.mds"), dir_.File("elsewhere"));
  fs::create_symlink(dir_.File("elsewhere"), dir_.File("shard.00000.mds"));
  auto ds = mds::OpenIndex(dir_.path().string());
  ASSERT_TRUE(ds.ok());
  EXPECT_STATUS(mds::OpenShard(*ds, 0).status(), StatusCode::kCorruption,
                "not a regular file (symlinks are not followed)");
}

class MdsZstdCorruption : public ::testing::Test {
 protected:
  void SetUp() override { fs::copy(kGolden + "zstd", dir_.path(), fs::copy_options::recursive); }
  Status Open(const std::function<void(nlohmann::json&)>& mutate = {}) {
    if (mutate) {
      nlohmann::json j = nlohmann::json::parse(ReadFileBytes(dir_.File("index.json")));
      mutate(j);
      WriteFileBytes(dir_.File("index.json"), j.dump());
    }
    auto ds = mds::OpenIndex(dir_.path().string());
    if (!ds.ok()) return ds.status();
    mds::ShardOptions opt;
    opt.cache_dir = cache_.path().string();
    return mds::OpenShard(*ds, 0, opt).status();
  }
  std::size_t CacheFiles() const {
    std::size_t n = 0;
    for (auto& e : fs::recursive_directory_iterator(cache_.path())) n += e.is_regular_file();
    return n;
  }
  void Flip(std::size_t at) {
    std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
    z[at] ^= 1;
    WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z);
  }
  TempDir dir_, cache_;
};

TEST_F(MdsZstdCorruption, NeedsACacheDirectory) {
  auto ds = mds::OpenIndex(dir_.path().string());
  ASSERT_TRUE(ds.ok());
  EXPECT_STATUS(mds::OpenShard(*ds, 0).status(), StatusCode::kFailedPrecondition, "needs a cache directory");
}

TEST_F(MdsZstdCorruption, ZipHashMismatchLeavesNothingCached) {
  Flip(40);
  Status s = Open();
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("shard.00000.mds.zstd: xxh3_64 is "), std::string::npos) << s.ToString();
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, RawHashMismatchAfterDecompression) {
  EXPECT_STATUS(Open([](auto& j) { j["shards"][0]["raw_data"]["hashes"]["xxh64"] = "0123456789abcdef"; }),
                StatusCode::kCorruption, "(decompressed): xxh64 is ");
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, DamagedFrameWithoutHashes) {
  Flip(40);
  Status s = Open([](auto& j) { j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object(); });
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, RawSizeOtherThanTheFrames) {
  std::uint64_t raw = 0;
  EXPECT_STATUS(Open([&](auto& j) {
                  raw = j["shards"][0]["raw_data"]["bytes"].template get<std::uint64_t>();
                  j["shards"][0]["raw_data"]["bytes"] = raw + 1;
                }),
                StatusCode::kCorruption, "bytes, the index says the raw shard has ");
  EXPECT_EQ(CacheFiles(), 0u);
}

// python-zstd's decompress (StreamingDataset's) reads every frame of the
// file and skips skippable ones; MDSWriter writes one frame, other tools may
// write several. Only the frames' total must be the raw size.
TEST_F(MdsZstdCorruption, SeveralFramesAndASkippableOne) {
  ASSERT_TRUE(Open().ok());
  std::string raw;
  for (auto& e : fs::directory_iterator(cache_.path())) raw = ReadFileBytes(e.path().string());
  ASSERT_FALSE(raw.empty());
  TempDir parts;
  std::string zip = std::string(
      "\x50\x2a\x4d\x18\x03\x00\x00\x00"
      "abc",
      11);  // skippable frame, 3 bytes
  for (std::string part : {raw.substr(0, 1000), raw.substr(1000)}) {
    WriteFileBytes(parts.File("in"), part);
    ASSERT_TRUE(dataset::internal::ZstdCompressFile(parts.File("in"), parts.File("out"), 3, false).ok());
    zip += ReadFileBytes(parts.File("out"));
  }
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), zip);
  fs::remove_all(cache_.path());
  fs::create_directories(cache_.path());
  Status s = Open([&](auto& j) {
    j["shards"][0]["zip_data"]["bytes"] = zip.size();
    j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(CacheFiles(), 1u);
  // A raw size other than the frames' total is still refused, with nothing cached.
  fs::remove_all(cache_.path());
  EXPECT_STATUS(Open([&](auto& j) { j["shards"][0]["raw_data"]["bytes"] = raw.size() - 1; }), StatusCode::kCorruption,
                "decompresses to more than the index's " + std::to_string(raw.size() - 1));
  EXPECT_EQ(CacheFiles(), 0u);
}

// Errors in a shard decompressed into the cache name the .zstd file it came
// from, not only the cache file's digest name.
TEST_F(MdsZstdCorruption, ErrorsInACachedShardNameItsZstdFile) {
  ASSERT_TRUE(Open().ok());
  std::string cached;
  for (auto& e : fs::directory_iterator(cache_.path())) cached = e.path().string();
  std::string raw = ReadFileBytes(cached);
  internal::Store32(reinterpret_cast<std::byte*>(raw.data()), 5);
  WriteFileBytes(cached, raw);
  EXPECT_STATUS(
      Open(), StatusCode::kCorruption,
      dir_.File("shard.00000.mds.zstd") + " (decompressed as " + cached + "): holds 5 samples, the index says 4");
}

TEST_F(MdsZstdCorruption, TrailingGarbageAfterTheFrame) {
  std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z + "junk");
  EXPECT_STATUS(Open([&](auto& j) {
                  j["shards"][0]["zip_data"]["bytes"] = z.size() + 4;
                  j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
                }),
                StatusCode::kCorruption, "shard.00000.mds.zstd: zstd: ");
  EXPECT_EQ(CacheFiles(), 0u);
}

// The start of a second frame after a whole one: the output already has the
// index's size, and the message must not read "decompresses to 2466 bytes
// (truncated frame), the index says 2466".
TEST_F(MdsZstdCorruption, TruncatedSecondFrame) {
  std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
  z += std::string("\x28\xb5\x2f\xfd", 4);  // a zstd frame's magic and nothing more
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z);
  std::uint64_t raw = 0;
  EXPECT_STATUS(Open([&](auto& j) {
                  raw = j["shards"][0]["raw_data"]["bytes"].template get<std::uint64_t>();
                  j["shards"][0]["zip_data"]["bytes"] = z.size();
                  j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
                }),
                StatusCode::kCorruption,
                "shard.00000.mds.zstd: the input ends inside a zstd frame (truncated frame) after " +
                    std::to_string(raw) + " decompressed bytes; the index says " + std::to_string(raw));
  EXPECT_EQ(CacheFiles(), 0u);
}

TEST_F(MdsZstdCorruption, TruncatedZip) {
  std::string z = ReadFileBytes(dir_.File("shard.00000.mds.zstd"));
  WriteFileBytes(dir_.File("shard.00000.mds.zstd"), z.substr(0, z.size() / 2));
  EXPECT_STATUS(Open([&](auto& j) {
                  j["shards"][0]["zip_data"]["bytes"] = z.size() / 2;
                  j["shards"][0]["zip_data"]["hashes"] = nlohmann::json::object();
                }),
                StatusCode::kCorruption, "(truncated frame)");
  EXPECT_EQ(CacheFiles(), 0u);
}

}  // namespace
}  // namespace tensorsafe
