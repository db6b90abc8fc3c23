// Golden bytes both ways for docs/FORMAT.md §11.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

const std::string kGolden = TS_SOURCE_DIR "/tests/golden/tsafe/small.tsafe";

TEST(Golden, WriterReproducesSmallFile) {
  TempDir dir;
  const std::string path = dir.File("small.tsafe");
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  const std::uint16_t v[3] = {1, 2, 3};
  ASSERT_TRUE((*w)->Add("w", TensorView::Contiguous(DType::kU16, {3}, std::as_bytes(std::span(v)))).ok());
  ASSERT_TRUE((*w)->SetMetadata(R"({"k":1})").ok());
  ASSERT_TRUE((*w)->Finish().ok());
  const std::string got = ReadFileBytes(path);
  const std::string want = ReadFileBytes(kGolden);
  ASSERT_EQ(want.size(), 392u);
  EXPECT_EQ(want[10], 1);  // version 1.1
  EXPECT_EQ(got, want);
}

TEST(Golden, ReaderDecodesSmallFile) {
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(kGolden, opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->size(), 1u);
    auto s = (*r)->summary();
    EXPECT_EQ(s.version_major, 1);
    EXPECT_EQ(s.alignment, 64u);
    EXPECT_EQ(s.sequence, 1u);
    EXPECT_EQ(s.index_offset, 0x88u);
    EXPECT_EQ(s.index_length, 208u);
    EXPECT_EQ(*(*r)->Metadata(), R"({"k":1})");
    auto t = (*r)->Get("w");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->info.dtype, DType::kU16);
    EXPECT_EQ(t->info.shape, Shape{3});
    EXPECT_EQ(t->info.data_offset, 128u);
    std::uint16_t v[3];
    std::memcpy(v, t->data.data(), 6);
    EXPECT_EQ(v[0], 1);
    EXPECT_EQ(v[1], 2);
    EXPECT_EQ(v[2], 3);
    EXPECT_TRUE((*r)->Verify().ok());
  }
}

}  // namespace
}  // namespace tensorsafe::testing
