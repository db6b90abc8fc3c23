// The dtype cast kernel (include/tensorsafe/cast.h, docs/CAST.md).
#include "tensorsafe/cast.h"

#include <cstring>
#include <string>
#include <vector>

#include "formats/codec_util.h"
#include "util/aligned_alloc.h"
#include "util/float16.h"
#include "util/parallel_for.h"
#include "util/text.h"

// Element loops that GCC vectorises at -O2 only with the dynamic cost model
// (see formats/gguf/quants_internal.h); the rounding is integer code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

namespace tensorsafe {
namespace {

using internal::BF16ToFloat;
using internal::FloatToBF16;
using internal::FloatToHalf;
using internal::HalfToFloat;

bool IsSource(DType d) { return d == DType::kF64 || d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }
bool IsTarget(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// Element i of `in` as f32 (f64 rounds here: torch's f64 -> f16/bf16 goes
// through f32 too).
template <DType From>
inline float Load(const std::byte* in, std::size_t i) {
  if constexpr (From == DType::kF64) {
    double d;
    std::memcpy(&d, in + 8 * i, 8);
    return static_cast<float>(d);
  } else if constexpr (From == DType::kF32) {
    float f;
    std::memcpy(&f, in + 4 * i, 4);
    return f;
  } else {
    std::uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    return From == DType::kF16 ? HalfToFloat(h) : BF16ToFloat(h);
  }
}

template <DType To>
inline void Store(std::byte* out, std::size_t i, float f) {
  if constexpr (To == DType::kF32) {
    std::memcpy(out + 4 * i, &f, 4);
  } else {
    const std::uint16_t h = To == DType::kF16 ? FloatToHalf(f) : FloatToBF16(f);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

template <DType From, DType To>
void Run(const std::byte* in, std::byte* out, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) Store<To>(out, i, Load<From>(in, i));
}

using Kernel = void (*)(const std::byte*, std::byte*, std::size_t, std::size_t);

template <DType From>
Kernel KernelTo(DType to) {
  switch (to) {
    case DType::kF32: return &Run<From, DType::kF32>;
    case DType::kF16: return &Run<From, DType::kF16>;
    default: return &Run<From, DType::kBF16>;
  }
}

Kernel KernelFor(DType from, DType to) {
  switch (from) {
    case DType::kF64: return KernelTo<DType::kF64>(to);
    case DType::kF32: return KernelTo<DType::kF32>(to);
    case DType::kF16: return KernelTo<DType::kF16>(to);
    default: return KernelTo<DType::kBF16>(to);
  }
}

std::string Name(DType d) { return std::string(DTypeName(d)); }

}  // namespace

bool CanCast(DType from, DType to) { return IsSource(from) && IsTarget(to); }

Status Cast(DType from, std::span<const std::byte> in, DType to, std::span<std::byte> out, unsigned threads) {
  if (!CanCast(from, to)) {
    return Unsupported("cannot cast " + Name(from) + " to " + Name(to) +
                       ": casts go from f64, f32, f16 or bf16 to f32, f16 or bf16");
  }
  const std::size_t in_size = ElementSize(from);
  const std::size_t out_size = ElementSize(to);
  if (in.size() % in_size != 0) {
    return InvalidArgument(std::to_string(in.size()) + " bytes are not a whole number of " + Name(from) + " elements");
  }
  const std::size_t n = in.size() / in_size;
  if (out.size() != n * out_size) {
    return InvalidArgument("casting " + std::to_string(n) + " " + Name(from) + " elements needs " +
                           std::to_string(n * out_size) + " output bytes, not " + std::to_string(out.size()));
  }
  if (from == to) {
    if (n != 0) std::memcpy(out.data(), in.data(), in.size());
    return Status::OK();
  }
  const Kernel k = KernelFor(from, to);
  internal::ParallelFor(n, std::size_t{1} << 20, threads,
                        [&](std::size_t b, std::size_t e) { k(in.data(), out.data(), b, e); });
  return Status::OK();
}

Result<Tensor> CastTensor(const Tensor& t, DType to, unsigned threads) {
  const std::string what = "tensor " + internal::QuoteName(t.info.name);
  if (t.info.dtype == to) return t;
  if (t.info.layout != Layout::kDense) return Unsupported(what + ": only dense tensors can be cast");
  if (!CanCast(t.info.dtype, to)) {
    return Unsupported(what + ": cannot cast " + Name(t.info.dtype) + " to " + Name(to) +
                       " (casts go from f64, f32, f16 or bf16 to f32, f16 or bf16)");
  }
  TS_RETURN_IF_ERROR(internal::CheckDenseSize(t.info.dtype, t.info.shape, t.data.size(), what));
  const std::size_t n = t.data.size() / ElementSize(t.info.dtype);
  const std::size_t size = n * ElementSize(to);
  std::shared_ptr<std::byte> bytes = internal::AllocAligned(size);  // huge pages from 4 MiB
  const std::span<std::byte> out(bytes.get(), size);
  TS_RETURN_IF_ERROR(Cast(t.info.dtype, t.data, to, out, threads).WithContext(what));
  Tensor result;
  result.info = t.info;
  result.info.dtype = to;
  result.info.data_length = size;
  result.info.data_checksum = 0;
  result.data = out;
  result.owner = std::move(bytes);
  return result;
}

}  // namespace tensorsafe
