#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe {
namespace {

TEST(Smoke, WriteThenRead) {
  testing::TempDir dir;
  const std::string path = dir.File("a.tsafe");
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  {
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    auto bytes = std::as_bytes(std::span(x));
    ASSERT_TRUE((*w)->Add("x", TensorView::Contiguous(DType::kF32, {2, 3}, bytes)).ok());
    ASSERT_TRUE((*w)->SetMetadata(R"({"a":{"b":[1,2]}})").ok());
    Status s = (*w)->Finish();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(path, opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto t = (*r)->Get("x");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->info.shape, (Shape{2, 3}));
    EXPECT_EQ(std::memcmp(t->data.data(), x.data(), 24), 0);
    EXPECT_EQ(t->info.data_offset % 64, 0u);
    EXPECT_TRUE((*r)->Verify().ok());
    EXPECT_EQ(*(*r)->Metadata(), R"({"a":{"b":[1,2]}})");
    EXPECT_EQ((*r)->Find("y").status().code(), StatusCode::kNotFound);
  }
}

}  // namespace
}  // namespace tensorsafe
