// Sparse COO tensors in the native format (spec 1.1, FORMAT.md §6.2): round
// trips, the writer's checks, and the reader checks R27a, R30 (COO) and R42.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include <filesystem>
#include "support/temp_dir.h"
#include "support/tsafe_files.h"
#include "support/tsafe_image.h"

#include "tensorsafe/convert.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/updater.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

// 3x4 f32 with nonzeros at (0,1)=1.5, (2,0)=-2, (2,3)=4; plus a dense tensor.
std::string MakeCooFile(const TempDir& dir, bool coalesced = true, std::uint32_t alignment = 64) {
  const std::string path = dir.File("coo.tsafe");
  WriterOptions opt;
  opt.alignment = alignment;
  auto w = Writer::Create(path, opt);
  EXPECT_TRUE(w.ok());
  const std::int64_t idx[] = {0, 1, 2, 0, 2, 3};
  const float val[] = {1.5f, -2.0f, 4.0f};
  EXPECT_TRUE(
      (*w)->AddCoo("s", DType::kF32, {3, 4}, idx, std::as_bytes(std::span(val)), coalesced, R"({"kind":"sparse"})")
          .ok());
  const std::int32_t d[2] = {7, 8};
  EXPECT_TRUE((*w)->Add("d", TensorView::Contiguous(DType::kI32, {2}, std::as_bytes(std::span(d)))).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  return ReadFileBytes(path);
}

TEST(Coo, RoundTrip) {
  TempDir dir;
  MakeCooFile(dir);
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(dir.File("coo.tsafe"), opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE((*r)->Verify().ok());
    auto t = (*r)->Get("s");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->info.layout, Layout::kCoo);
    EXPECT_EQ(t->info.shape, (Shape{3, 4}));
    EXPECT_EQ(t->info.nnz, 3u);
    EXPECT_TRUE(t->info.coalesced);
    EXPECT_EQ(t->info.coo_values_offset, 64u);  // 48 bytes of indices, aligned to 64
    EXPECT_EQ(t->info.data_length, 64u + 12u);
    EXPECT_EQ(t->info.metadata_json, R"({"kind":"sparse"})");
    auto parts = SplitCoo(t->info, t->data);
    ASSERT_TRUE(parts.ok());
    std::int64_t idx[6];
    float val[3];
    std::memcpy(idx, parts->indices.data(), 48);
    std::memcpy(val, parts->values.data(), 12);
    EXPECT_EQ(idx[4], 2);
    EXPECT_EQ(idx[5], 3);
    EXPECT_EQ(val[1], -2.0f);
    EXPECT_EQ((*r)->summary().version_minor, 1);
    std::vector<std::byte> out(6);
    SliceDim sl[2] = {{0, 1, 1}, {0, 1, 1}};
    EXPECT_EQ((*r)->ReadSlice("s", sl, out).code(), StatusCode::kUnsupported);
  }
}

TEST(Coo, RandomRoundTripsAndCompaction) {
  const std::uint64_t seed = std::random_device{}();
  std::printf("Coo.RandomRoundTripsAndCompaction seed %llu\n", static_cast<unsigned long long>(seed));
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string path = dir.File("r.tsafe");
  struct Want {
    DType dtype;
    Shape shape;
    std::vector<std::int64_t> idx;
    std::string values;
  };
  std::vector<std::pair<std::string, Want>> want;
  WriterOptions opt;
  opt.alignment = 1u << (rng() % 8);
  auto w = Writer::Create(path, opt);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 20; ++i) {
    Want t;
    t.dtype = static_cast<DType>(1 + rng() % kNumDTypes);
    const auto& di = GetDTypeInfo(t.dtype);
    const std::size_t rank = rng() % 4;
    for (std::size_t d = 0; d < rank; ++d) t.shape.push_back(1 + rng() % 6);
    std::uint64_t nnz = (rank == 0 ? rng() % 2 : rng() % 8) * di.block_elems;
    if (rank == 0) nnz = di.block_elems * (rng() % 2);
    for (std::uint64_t k = 0; k < nnz * rank; ++k)
      t.idx.push_back(static_cast<std::int64_t>(rng() % t.shape[k % rank]));
    t.values.resize(nnz / di.block_elems * di.block_bytes);
    for (auto& c : t.values) c = static_cast<char>(rng());
    const std::string name = "s" + std::to_string(i);
    ASSERT_TRUE((*w)->AddCoo(name, t.dtype, t.shape, t.idx, std::as_bytes(std::span(t.values)), false).ok());
    want.emplace_back(name, std::move(t));
  }
  ASSERT_TRUE((*w)->Finish().ok());
  // Through the updater (a rename) and compaction too: COO entries survive both.
  {
    auto u = Updater::Open(path);
    ASSERT_TRUE(u.ok());
    ASSERT_TRUE((*u)->Rename("s0", "renamed").ok());
    ASSERT_TRUE((*u)->Commit().ok());
    want[0].first = "renamed";
  }
  ASSERT_TRUE(Compact(path).ok());
  auto r = Reader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE((*r)->Verify().ok());
  for (const auto& [name, t] : want) {
    auto g = (*r)->Get(name);
    ASSERT_TRUE(g.ok()) << name;
    EXPECT_EQ(g->info.dtype, t.dtype);
    EXPECT_EQ(g->info.shape, t.shape);
    auto parts = SplitCoo(g->info, g->data);
    ASSERT_TRUE(parts.ok());
    EXPECT_EQ(parts->indices.size(), t.idx.size() * 8);
    // Compared as containers: with nnz == 0 both spans may be null, and
    // memcmp(nullptr, ..., 0) is undefined behaviour (UBSan reports it).
    EXPECT_TRUE(
        std::equal(parts->indices.begin(), parts->indices.end(), reinterpret_cast<const std::byte*>(t.idx.data())));
    EXPECT_EQ(std::string(parts->values.size() == 0 ? "" : reinterpret_cast<const char*>(parts->values.data()),
                          parts->values.size()),
              t.values);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(parts->values.data()) % opt.alignment, 0u);
  }
}

TEST(Coo, WriterRefusesBadIndices) {
  TempDir dir;
  auto w = Writer::Create(dir.File("w.tsafe"));
  ASSERT_TRUE(w.ok());
  const float val[2] = {1, 2};
  const std::int64_t out_of_range[] = {0, 0, 3, 0};
  Status s = (*w)->AddCoo("a", DType::kF32, {3, 4}, out_of_range, std::as_bytes(std::span(val)), false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor \"a\": COO index of element 1 in dimension 0 is 3, outside [0, 3)");
  const std::int64_t unordered[] = {1, 0, 0, 3};
  s = (*w)->AddCoo("b", DType::kF32, {3, 4}, unordered, std::as_bytes(std::span(val)), true);
  EXPECT_EQ(s.message(), "tensor \"b\": marked coalesced, but element 1 does not follow element 0 in order");
  EXPECT_TRUE((*w)->AddCoo("b", DType::kF32, {3, 4}, unordered, std::as_bytes(std::span(val)), false).ok());
  const std::int64_t three[] = {0, 0, 1};
  s = (*w)->AddCoo("c", DType::kF32, {3, 4}, three, std::as_bytes(std::span(val)), false);
  EXPECT_EQ(s.message(), "tensor \"c\": 3 indices do not form rows of rank 2");
  EXPECT_TRUE((*w)->Finish().ok());
}

class CooCorruption : public ::testing::Test {
 protected:
  void Expect(TsafeImage& img, const std::string& what) {
    Status s = OpenAndVerify(dir_, img.bytes());
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
  TempDir dir_;
};

TEST_F(CooCorruption, FeatureBitMissing) {
  TsafeImage img(MakeCooFile(dir_));
  img.Set64(32 + 8, 0);
  img.Set64(img.trailer(), 0);
  img.Reseal();
  Expect(img, "entry 0 \"s\": a COO entry in a file whose header does not declare the sparse feature (bit 0)");
}

TEST_F(CooCorruption, ReservedFlags) {
  TsafeImage img(MakeCooFile(dir_));
  img.Set64(img.entry(0) + 40 + 16 + 16, 2);  // coo_flags after rank-2 dims, nnz, values_offset
  img.Reseal();
  Expect(img, "entry 0: COO flags 2 have reserved bits set");
}

TEST_F(CooCorruption, ValuesOffsetAndLength) {
  {
    TsafeImage img(MakeCooFile(dir_));
    img.Set64(img.entry(0) + 40 + 16 + 8, 48);  // values_offset not aligned to 64
    img.Reseal();
    Expect(img, "entry 0 \"s\": COO values offset 48 is not 64 (the indices' 48 bytes, aligned)");
  }
  {
    TsafeImage img(MakeCooFile(dir_));
    img.Set64(img.entry(0) + 40 + 16, 4);  // nnz 4: 64 bytes of indices, values at 64, 16 bytes
    img.Reseal();
    Expect(img, "entry 0 \"s\": data length 76 does not match 4 COO elements of f32 (80 bytes)");
  }
  {
    TsafeImage img(MakeCooFile(dir_));
    img.Set64(img.entry(0) + 40 + 16, 1ull << 62);
    img.Reseal();
    Expect(img, "entry 0 \"s\": COO sizes of 4611686018427387904 elements of rank 2 overflow");
  }
}

TEST_F(CooCorruption, R42_IndexOutOfRangeAndOrder) {
  {
    TsafeImage img(MakeCooFile(dir_));
    const std::uint64_t data = img.Get64(img.entry(0) + 16);
    img.Set64(data + 8, 4);  // element 0, dimension 1: 4 is outside [0, 4)
    // Fix the data checksum so the index check is reached.
    img.Set64(img.entry(0) + 32, img.HashRange(data, 76));
    img.Reseal();
    Expect(img, "entry 0 \"s\": COO index of element 0 in dimension 1 is 4, outside [0, 4)");
  }
  {
    TsafeImage img(MakeCooFile(dir_));
    const std::uint64_t data = img.Get64(img.entry(0) + 16);
    img.Set64(data + 32, 0);  // element 2 becomes (2,0): equal to element 1
    img.Set64(data + 40, 0);
    img.Set64(img.entry(0) + 32, img.HashRange(data, 76));
    img.Reseal();
    Expect(img, "entry 0 \"s\": marked coalesced, but COO element 2 does not follow element 1 in order");
  }
}

}  // namespace
}  // namespace tensorsafe::testing

namespace tensorsafe::testing {
namespace {

TEST(Coo, ConvertKeepsCooInTsafeAndRefusesOtherTargets) {
  TempDir dir;
  MakeCooFile(dir);
  const std::string in = dir.File("coo.tsafe");
  auto ok = Convert(in, dir.File("copy.tsafe"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto r = Reader::Open(dir.File("copy.tsafe"));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->Verify().ok());
  EXPECT_EQ((*r)->Find("s")->layout, Layout::kCoo);
  EXPECT_EQ((*r)->Find("s")->nnz, 3u);
  auto bad = Convert(in, dir.File("x.safetensors"));
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(bad.status().message().find("\"s\": a sparse COO tensor cannot be stored in safetensors"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir.File("x.safetensors")));
}

}  // namespace
}  // namespace tensorsafe::testing
