#include "tensorsafe/tensor.h"

#include "util/checked_math.h"

namespace tensorsafe {

Result<std::uint64_t> ElementCount(std::span<const std::uint64_t> shape) {
  std::uint64_t n = 1;
  bool zero = false;
  for (std::uint64_t d : shape) {
    if (d == 0) {
      zero = true;
      continue;
    }
    auto r = internal::CheckedMul(n, d);
    if (!r) return OutOfRange("element count of shape " + ShapeToString(shape) + " overflows 64 bits");
    n = *r;
  }
  return zero ? 0 : n;
}

Result<std::uint64_t> DenseByteSize(DType dtype, std::span<const std::uint64_t> shape) {
  TS_ASSIGN_OR_RETURN(std::uint64_t n, ElementCount(shape));
  const DTypeInfo& info = GetDTypeInfo(dtype);
  if (n % info.block_elems != 0) {
    return InvalidArgument(std::to_string(n) + " elements of " + std::string(info.name) +
                           " do not fill whole blocks of " + std::to_string(info.block_elems));
  }
  auto bytes = internal::CheckedMul(n / info.block_elems, info.block_bytes);
  if (!bytes) return OutOfRange("byte size of shape " + ShapeToString(shape) + " overflows 64 bits");
  return *bytes;
}

std::string ShapeToString(std::span<const std::uint64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "]";
  return s;
}

}  // namespace tensorsafe

namespace tensorsafe {

Result<CooParts> SplitCoo(const TensorInfo& info, std::span<const std::byte> data) {
  if (info.layout != Layout::kCoo) return InvalidArgument("tensor \"" + info.name + "\" is not sparse COO");
  auto idx = internal::CheckedMul(info.nnz, info.shape.size());
  auto idx_bytes = idx ? internal::CheckedMul(*idx, 8) : std::nullopt;
  const Shape values_shape{info.nnz};
  auto val_bytes = DenseByteSize(info.dtype, values_shape);
  if (!idx_bytes || !val_bytes.ok() || info.coo_values_offset < *idx_bytes || info.coo_values_offset > data.size() ||
      data.size() - info.coo_values_offset != *val_bytes) {
    return InvalidArgument("tensor \"" + info.name + "\": COO sizes disagree with its " + std::to_string(data.size()) +
                           " data bytes");
  }
  return CooParts{data.first(static_cast<std::size_t>(*idx_bytes)),
                  data.subspan(static_cast<std::size_t>(info.coo_values_offset))};
}

Status CheckCooIndices(const TensorInfo& info, std::span<const std::byte> indices) {
  const std::uint64_t rank = info.shape.size();
  const std::string who = "tensor \"" + info.name + "\"";
  auto want = internal::CheckedMul(info.nnz, rank);
  if (!want || *want > indices.size() / 8 || *want * 8 != indices.size()) {
    return InvalidArgument(who + ": " + std::to_string(indices.size()) + " index bytes for " +
                           std::to_string(info.nnz) + " COO elements of rank " + std::to_string(rank));
  }
  const std::byte* p = indices.data();
  auto at = [&](std::uint64_t k) {  // little-endian i64, read bytewise: any alignment
    std::uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | static_cast<std::uint8_t>(p[8 * k + b]);
    return v;
  };
  for (std::uint64_t r = 0; r < info.nnz && rank > 0; ++r) {
    int order = r == 0 ? 1 : 0;  // vs the previous row: -1, 0, 1
    for (std::uint64_t d = 0; d < rank; ++d) {
      const std::uint64_t v = at(r * rank + d);
      if (v >= info.shape[d]) {  // negative i64 values are huge as u64
        return Corruption(who + ": COO index of element " + std::to_string(r) + " in dimension " + std::to_string(d) +
                          " is " + std::to_string(static_cast<std::int64_t>(v)) + ", outside [0, " +
                          std::to_string(info.shape[d]) + ")");
      }
      if (order == 0) {
        const std::uint64_t prev = at((r - 1) * rank + d);
        if (v != prev) order = v > prev ? 1 : -1;
      }
    }
    if (info.coalesced && order <= 0) {
      return Corruption(who + ": marked coalesced, but COO element " + std::to_string(r) + " does not follow element " +
                        std::to_string(r - 1) + " in order");
    }
  }
  return Status::OK();
}

}  // namespace tensorsafe
