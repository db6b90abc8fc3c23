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

// ForEachTensor gives every tensor in file order with the bytes Get() gives,
// in both modes, and stops when asked.
TEST(Smoke, ForEachTensorMatchesGet) {
  testing::TempDir dir;
  const std::string path = dir.File("many.tsafe");
  {
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 50; ++i) {
      std::vector<std::int32_t> v(static_cast<std::size_t>(i), i);
      ASSERT_TRUE((*w)->Add("t" + std::to_string(49 - i),
                            TensorView::Contiguous(DType::kI32, {v.size()}, std::as_bytes(std::span(v))))
                      .ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
  }
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(path, opt);
    ASSERT_TRUE(r.ok());
    int k = 0;
    Status s = (*r)->ForEachTensor([&](Tensor&& t) {
      EXPECT_EQ(t.info.name, "t" + std::to_string(49 - k));
      auto g = (*r)->Get(t.info.name);
      EXPECT_TRUE(g.ok());
      EXPECT_EQ(t.info.data_offset, g->info.data_offset);
      EXPECT_EQ(t.data.size(), static_cast<std::size_t>(k) * 4);
      EXPECT_TRUE(t.data.empty() || std::memcmp(t.data.data(), g->data.data(), t.data.size()) == 0);
      for (std::size_t j = 0; j + 4 <= t.data.size(); j += 4) {
        std::int32_t v;
        std::memcpy(&v, t.data.data() + j, 4);
        EXPECT_EQ(v, k);
      }
      return ++k < 30;
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(k, 30);
  }
}

// A zero dimension gives 0 elements whatever the order, and the nonzero
// dimensions must still multiply within 64 bits (as NumPy checks); gguf_fuzz
// found a GGUF tensor [0, 2^32+3, 2^19, 2^34] in ggml order that its reader
// accepted but ElementCount refused once reversed.
TEST(Smoke, ElementCountDoesNotDependOnOrder) {
  const std::uint64_t big = std::uint64_t{1} << 40;
  EXPECT_EQ(*ElementCount(Shape{0, 3, 5}), 0u);
  EXPECT_EQ(*ElementCount(Shape{3, 5, 0}), 0u);
  EXPECT_EQ(*ElementCount(Shape{}), 1u);
  EXPECT_EQ(*ElementCount(Shape{big, 1000, 0}), 0u);
  EXPECT_EQ(*ElementCount(Shape{0, big, 1000}), 0u);
  EXPECT_EQ(ElementCount(Shape{big, big, 0}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ElementCount(Shape{0, big, big}).status().code(), StatusCode::kOutOfRange);
  // The fuzz input's shape: refused in every order, by both readers.
  EXPECT_EQ(DenseByteSize(DType::kF32, Shape{17179869184, 524288, 4294967299, 0}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(DenseByteSize(DType::kF32, Shape{0, 4294967299, 524288, 17179869184}).status().code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tensorsafe
