#include "support/tsafe_files.h"

#include <cstdint>

namespace tensorsafe::testing {

std::string MakeBaseFile(const TempDir& dir, const WriterOptions& opt) {
  const std::string path = dir.File("base.tsafe");
  auto w = Writer::Create(path, opt);
  EXPECT_TRUE(w.ok());
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const std::int32_t b[6] = {-1, 0, 1, 2, 3, 0x7fffffff};
  const std::uint8_t c = 7;
  EXPECT_TRUE(
      (*w)->Add("a", TensorView::Contiguous(DType::kF32, {2, 3}, std::as_bytes(std::span(a))), R"({"unit":"m"})").ok());
  EXPECT_TRUE((*w)->Add("b", TensorView::Contiguous(DType::kI32, {6}, std::as_bytes(std::span(b)))).ok());
  EXPECT_TRUE((*w)->Add("c", TensorView{DType::kU8, {}, reinterpret_cast<const std::byte*>(&c), {}}).ok());
  EXPECT_TRUE((*w)->Add("d", TensorView{DType::kBF16, {0}, nullptr, {}}).ok());
  EXPECT_TRUE((*w)->SetMetadata(R"({"k":[1,{"x":2}]})").ok());
  EXPECT_TRUE((*w)->Finish().ok());
  return ReadFileBytes(path);
}

Status OpenAndVerify(const TempDir& dir, const std::string& bytes, ReaderOptions opt) {
  const std::string path = dir.File("case.tsafe");
  WriteFileBytes(path, bytes);
  Status results[2];
  int k = 0;
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    opt.access = access;
    auto r = Reader::Open(path, opt);
    if (!r.ok()) {
      results[k++] = r.status();
      continue;
    }
    results[k++] = (*r)->Verify();
  }
  EXPECT_EQ(results[0].code(), results[1].code()) << results[0].ToString() << " vs " << results[1].ToString();
  EXPECT_EQ(results[0].message(), results[1].message());
  return results[0];
}

}  // namespace tensorsafe::testing
