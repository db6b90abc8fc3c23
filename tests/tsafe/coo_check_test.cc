// CheckCooIndices (tensor.h): FORMAT.md R42 on indices handed over by a
// reader that deferred it, e.g. before the Python bindings build a
// torch.sparse_coo_tensor. Unaligned input is read bytewise.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tensorsafe/tensor.h"

namespace tensorsafe {
namespace {

TensorInfo Info(std::uint64_t nnz, bool coalesced) {
  TensorInfo info;
  info.name = "s";
  info.dtype = DType::kF32;
  info.layout = Layout::kCoo;
  info.shape = {3, 4};
  info.nnz = nnz;
  info.coalesced = coalesced;
  return info;
}

// The indices as bytes at offset 1 of a buffer, so they are never 8-aligned.
std::vector<std::byte> Unaligned(const std::vector<std::int64_t>& idx) {
  std::vector<std::byte> b(1 + idx.size() * 8);
  if (!idx.empty()) std::memcpy(b.data() + 1, idx.data(), idx.size() * 8);  // data() may be null
  return b;
}

Status Check(const TensorInfo& info, const std::vector<std::int64_t>& idx) {
  std::vector<std::byte> b = Unaligned(idx);
  return CheckCooIndices(info, std::span<const std::byte>(b).subspan(1));
}

TEST(CheckCooIndices, AcceptsValidAndEmpty) {
  EXPECT_TRUE(Check(Info(3, true), {0, 1, 2, 0, 2, 3}).ok());
  EXPECT_TRUE(Check(Info(3, false), {2, 3, 0, 1, 2, 3}).ok());  // repeats allowed when not coalesced
  EXPECT_TRUE(Check(Info(0, true), {}).ok());
}

TEST(CheckCooIndices, RefusesOutOfRangeNegativeAndUnordered) {
  Status s = Check(Info(3, false), {0, 1, 2, 4, 0, 0});
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "tensor \"s\": COO index of element 1 in dimension 1 is 4, outside [0, 4)");
  s = Check(Info(1, false), {-1, 0});
  EXPECT_EQ(s.message(), "tensor \"s\": COO index of element 0 in dimension 0 is -1, outside [0, 3)");
  s = Check(Info(3, true), {0, 1, 2, 0, 2, 0});
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(), "tensor \"s\": marked coalesced, but COO element 2 does not follow element 1 in order");
}

TEST(CheckCooIndices, RefusesWrongSize) {
  Status s = Check(Info(3, false), {0, 1, 2, 0});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor \"s\": 32 index bytes for 3 COO elements of rank 2");
  TensorInfo huge = Info(std::uint64_t{1} << 62, false);
  EXPECT_EQ(Check(huge, {}).code(), StatusCode::kInvalidArgument);  // nnz x rank overflows
}

}  // namespace
}  // namespace tensorsafe
