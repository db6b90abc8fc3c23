// The GGUF block codecs' public entry points (gguf_quants.h): size checks,
// the split of blocks across threads, the f16/bf16 rounding of dequantised
// values, and the tensor- and set-level forms.
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/codec_util.h"
#include "formats/gguf/quants_internal.h"
#include "tensorsafe/cast.h"
#include "tensorsafe/formats/gguf_quants.h"
#include "util/aligned_alloc.h"
#include "util/checked_math.h"
#include "util/parallel_for.h"
#include "util/text.h"

namespace tensorsafe::gguf {
namespace internal {

DequantKernel FindDequantKernel(std::uint32_t code) {
  if (DequantKernel k = BasicDequantKernel(code)) return k;
  if (DequantKernel k = KDequantKernel(code)) return k;
  return IqDequantKernel(code);
}

QuantKernel FindQuantKernel(std::uint32_t code) { return QuantKernelFor(code); }

TensorClass Classify(const TensorInfo& info) {
  if (info.metadata_json.find("gguf.type") != std::string::npos) {
    auto md = nlohmann::json::parse(info.metadata_json, nullptr, /*allow_exceptions=*/false);
    if (md.is_object() && md.contains("gguf.type")) return TensorClass::kBlocks;
  }
  if (CanCast(info.dtype, DType::kF32)) return TensorClass::kFloat;
  return GetDTypeInfo(info.dtype).is_float ? TensorClass::kOtherFloat : TensorClass::kKeep;
}

}  // namespace internal

namespace {

using tensorsafe::internal::CheckedMul;
using tensorsafe::internal::QuoteName;

using tensorsafe::internal::Str;
std::string Name(const GgmlType& t) { return std::string(t.name); }

bool IsTarget(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

Status NoDequantizer(const GgmlType& type) {
  return Unsupported("no dequantiser for " + Name(type) +
                     " blocks (gguf-py 0.19, the reference, has none either; supported: F32, F16, BF16, "
                     "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, "
                     "IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4)");
}

Status BadTarget(DType d) {
  return Unsupported("cannot dequantise to " + std::string(DTypeName(d)) + ": the targets are f32, f16 and bf16");
}

// Output pieces are at least this many bytes, so threads are worth starting.
constexpr std::size_t kMinPieceBytes = std::size_t{1} << 20;
// f16/bf16 outputs are decoded to f32 this many elements at a time.
constexpr std::size_t kStageElems = 4096;

template <typename Fn>
void RoundInto(const float* v, std::size_t n, std::byte* out, Fn round) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t h = round(v[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

}  // namespace

bool CanDequantize(const GgmlType& type) { return internal::FindDequantKernel(type.code) != nullptr; }
bool CanQuantize(const GgmlType& type) { return internal::FindQuantKernel(type.code) != nullptr; }

Status Dequantize(const GgmlType& type, std::span<const std::byte> blocks, DType dtype, std::span<std::byte> out,
                  const QuantOptions& options) {
  const internal::DequantKernel k = internal::FindDequantKernel(type.code);
  if (k == nullptr) return NoDequantizer(type);
  if (!IsTarget(dtype)) return BadTarget(dtype);
  if (blocks.size() % type.block_bytes != 0) {
    return InvalidArgument(Str(blocks.size()) + " bytes are not a whole number of " + Str(type.block_bytes) + "-byte " +
                           Name(type) + " blocks");
  }
  const std::size_t n = blocks.size() / type.block_bytes;
  const std::size_t be = type.block_elems;
  const std::size_t esize = ElementSize(dtype);
  const auto want = CheckedMul(n * be, esize);  // n * be <= bytes * 32: no overflow
  if (!want || *want != out.size()) {
    return InvalidArgument(Str(n) + " " + Name(type) + " blocks hold " + Str(n * be) + " elements, " +
                           (want ? Str(*want) : std::string("more than 2^64")) + " bytes of " +
                           std::string(DTypeName(dtype)) + "; the output has " + Str(out.size()));
  }
  const auto* in = reinterpret_cast<const std::uint8_t*>(blocks.data());
  const bool direct = dtype == DType::kF32 && reinterpret_cast<std::uintptr_t>(out.data()) % alignof(float) == 0;
  const std::size_t stage_blocks = std::max<std::size_t>(1, kStageElems / be);
  auto body = [&](std::size_t b, std::size_t e) {
    if (direct) {
      k(in + b * type.block_bytes, e - b, reinterpret_cast<float*>(out.data()) + b * be);
      return;
    }
    // Decoded a few blocks at a time into an aligned f32 stage, then rounded
    // (or copied, for an unaligned f32 output).
    auto stage = std::make_unique<float[]>(stage_blocks * be);
    for (std::size_t s = b; s < e; s += stage_blocks) {
      const std::size_t m = std::min(stage_blocks, e - s);
      k(in + s * type.block_bytes, m, stage.get());
      std::byte* dst = out.data() + s * be * esize;
      if (dtype == DType::kF32) {
        std::memcpy(dst, stage.get(), m * be * 4);
      } else if (dtype == DType::kF16) {
        RoundInto(stage.get(), m * be, dst, [](float f) { return tensorsafe::internal::FloatToHalf(f); });
      } else {
        RoundInto(stage.get(), m * be, dst, tensorsafe::internal::FloatToBF16);
      }
    }
  };
  tensorsafe::internal::ParallelFor(n, std::max<std::size_t>(1, kMinPieceBytes / (be * esize)), options.threads, body);
  return Status::OK();
}

Status Quantize(const GgmlType& type, std::span<const float> values, std::span<std::byte> out,
                const QuantOptions& options) {
  const internal::QuantKernel k = internal::FindQuantKernel(type.code);
  if (k == nullptr) {
    return Unsupported("no quantiser for " + Name(type) +
                       " (gguf-py 0.19, the reference, quantises only F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
                       "Q8_0, TQ1_0, TQ2_0 and MXFP4)");
  }
  if (values.size() % type.block_elems != 0) {
    return InvalidArgument(Str(values.size()) + " values are not a whole number of " + Str(type.block_elems) +
                           "-element " + Name(type) + " blocks");
  }
  const std::size_t n = values.size() / type.block_elems;
  const auto want = CheckedMul(n, type.block_bytes);
  if (!want || *want != out.size()) {
    return InvalidArgument(Str(n) + " " + Name(type) + " blocks take " + (want ? Str(*want) : std::string("2^64")) +
                           " bytes; the output has " + Str(out.size()));
  }
  auto* dst = reinterpret_cast<std::uint8_t*>(out.data());
  tensorsafe::internal::ParallelFor(n, std::max<std::size_t>(1, (std::size_t{256} << 10) / (4 * type.block_elems)),
                                    options.threads, [&](std::size_t b, std::size_t e) {
                                      k(values.data() + b * type.block_elems, e - b, dst + b * type.block_bytes);
                                    });
  return Status::OK();
}

std::optional<QuantizedTensor> FindQuantized(const TensorInfo& info) {
  if (info.dtype != DType::kU8 || info.layout != Layout::kDense) return std::nullopt;
  if (info.metadata_json.find("gguf.type") == std::string::npos) return std::nullopt;
  auto md = nlohmann::json::parse(info.metadata_json, nullptr, /*allow_exceptions=*/false);
  if (!md.is_object() || !md.contains("gguf.type") || !md["gguf.type"].is_string()) return std::nullopt;
  auto type = FindGgmlType(md["gguf.type"].get<std::string>());
  if (!type || !md.contains("gguf.shape") || !md["gguf.shape"].is_array()) return std::nullopt;
  QuantizedTensor q{*type, {}};
  for (const auto& d : md["gguf.shape"]) {
    if (!d.is_number_unsigned()) return std::nullopt;
    q.shape.push_back(d.get<std::uint64_t>());
  }
  return q;
}

Result<TensorInfo> DequantizedInfo(const Tensor& t, DType dtype) {
  const std::string what = "tensor " + QuoteName(t.info.name);
  if (!IsTarget(dtype)) return BadTarget(dtype).WithContext(what);
  TensorInfo info = t.info;
  info.dtype = dtype;
  info.data_checksum = 0;
  info.data_offset = 0;
  const internal::TensorClass c = internal::Classify(t.info);
  if (c == internal::TensorClass::kBlocks) {
    auto md = nlohmann::ordered_json::parse(t.info.metadata_json);  // Classify parsed it
    const auto& name = md["gguf.type"];
    auto type = name.is_string() ? FindGgmlType(name.get<std::string>()) : std::nullopt;
    if (!type) return Unsupported(what + ": \"gguf.type\" " + name.dump() + " is not a ggml type");
    auto q = FindQuantized(t.info);
    if (!q || q->shape.size() > kMaxDims) {
      return InvalidArgument(what + ": " + Name(*type) +
                             " blocks must be u8 [bytes] with \"gguf.shape\", an array of at most 4 dims");
    }
    if (!CanDequantize(*type)) return NoDequantizer(*type).WithContext(what);
    const std::uint64_t row = q->shape.empty() ? 1 : q->shape.back();
    if (row % type->block_elems != 0) {
      return InvalidArgument(what + ": row of " + Str(row) + " elements is not a multiple of the " + Name(*type) +
                             " block of " + Str(type->block_elems));
    }
    std::optional<std::uint64_t> elems = 1;
    for (std::uint64_t d : q->shape) elems = elems ? CheckedMul(*elems, d) : std::nullopt;
    const auto bytes = elems ? CheckedMul(*elems / type->block_elems, type->block_bytes) : std::nullopt;
    if (!bytes || *bytes != t.data.size()) {
      return InvalidArgument(what + ": " + Name(*type) + " shape " + ShapeToString(q->shape) + " needs " +
                             (bytes ? Str(*bytes) : std::string("more than 2^64")) + " bytes, the data has " +
                             Str(t.data.size()));
    }
    const auto out_bytes = CheckedMul(*elems, ElementSize(dtype));
    if (!out_bytes) return OutOfRange(what + ": " + Str(*elems) + " elements overflow 64 bits of output");
    for (const char* key : {"gguf.type", "gguf.shape", "block_elems", "block_bytes"}) md.erase(key);
    info.metadata_json = md.empty() ? std::string() : md.dump();
    info.shape = q->shape;
    info.data_length = *out_bytes;
    return info;
  }
  if (c != internal::TensorClass::kFloat || t.info.layout != Layout::kDense) {
    return Unsupported(what + ": cannot convert " + std::string(t.info.layout == Layout::kDense ? "" : "sparse ") +
                       std::string(DTypeName(t.info.dtype)) + " to " + std::string(DTypeName(dtype)) +
                       " (converted: ggml blocks and f64, f32, f16, bf16 tensors)");
  }
  const auto n = DenseByteSize(t.info.dtype, t.info.shape);
  if (!n.ok()) return n.status().WithContext(what);
  if (*n != t.data.size()) {
    return InvalidArgument(what + ": shape " + ShapeToString(t.info.shape) + " of " +
                           std::string(DTypeName(t.info.dtype)) + " needs " + Str(*n) + " bytes, the data has " +
                           Str(t.data.size()));
  }
  info.data_length = *n / ElementSize(t.info.dtype) * ElementSize(dtype);
  return info;
}

Status DequantizeInto(const Tensor& t, DType dtype, std::span<std::byte> out, const QuantOptions& options) {
  TS_ASSIGN_OR_RETURN(TensorInfo info, DequantizedInfo(t, dtype));
  const std::string what = "tensor " + QuoteName(t.info.name);
  if (out.size() != info.data_length) {
    return InvalidArgument(what + ": the output has " + Str(out.size()) + " bytes, " + Str(info.data_length) +
                           " are needed");
  }
  if (auto q = FindQuantized(t.info)) return Dequantize(q->type, t.data, dtype, out, options).WithContext(what);
  return Cast(t.info.dtype, t.data, dtype, out, options.threads).WithContext(what);
}

Result<Tensor> DequantizeTensor(const Tensor& t, DType dtype, const QuantOptions& options) {
  if (t.info.dtype == dtype && internal::Classify(t.info) == internal::TensorClass::kFloat) return t;
  TS_ASSIGN_OR_RETURN(TensorInfo info, DequantizedInfo(t, dtype));
  if (info.data_length > std::size_t(-1)) return OutOfRange("tensor too large for memory");
  // Huge pages from 4 MiB: first touching a fresh 4 KiB page per fault
  // would cost more than decoding into it (util/aligned_alloc.h).
  std::shared_ptr<std::byte> bytes = tensorsafe::internal::AllocAligned(info.data_length);
  const std::span<std::byte> out(bytes.get(), info.data_length);
  TS_RETURN_IF_ERROR(DequantizeInto(t, dtype, out, options));
  Tensor result;
  result.info = std::move(info);
  result.data = out;
  result.owner = std::move(bytes);
  return result;
}

namespace internal {

Result<std::string> WithFileType(const std::string& metadata_json, DType dtype) {
  if (metadata_json.find("general.file_type") == std::string::npos) return metadata_json;
  auto md = nlohmann::ordered_json::parse(metadata_json, nullptr, /*allow_exceptions=*/false);
  if (!md.is_object() || !md.contains("general.file_type")) return metadata_json;
  // llama.cpp's llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32.
  md["general.file_type"] = dtype == DType::kF32 ? 0 : dtype == DType::kF16 ? 1 : 32;
  return md.dump();
}

}  // namespace internal

Result<TensorSet> DequantizeSet(const TensorSet& set, DType dtype, const QuantOptions& options) {
  if (!IsTarget(dtype)) return BadTarget(dtype);
  TensorSet out;
  TS_ASSIGN_OR_RETURN(out.metadata_json, internal::WithFileType(set.metadata_json, dtype));
  out.tensors.reserve(set.tensors.size());
  for (const Tensor& t : set.tensors) {
    if (internal::Classify(t.info) == internal::TensorClass::kKeep) {
      out.tensors.push_back(t);
      continue;
    }
    TS_ASSIGN_OR_RETURN(Tensor c, DequantizeTensor(t, dtype, options));
    out.tensors.push_back(std::move(c));
  }
  return out;
}

Result<Tensor> QuantizeTensor(const Tensor& t, const GgmlType& type, const QuantOptions& options) {
  const std::string what = "tensor " + QuoteName(t.info.name);
  if (!CanQuantize(type)) {
    return Unsupported(what + ": no quantiser for " + Name(type) +
                       " (gguf-py 0.19 quantises only F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, "
                       "TQ2_0 and MXFP4)");
  }
  // The values as f32, as gguf-py's astype(np.float32) gives them.
  Tensor f32 = t;
  if (t.info.dtype != DType::kF32) {
    if (!CanCast(t.info.dtype, DType::kF32)) {
      return Unsupported(what + ": cannot quantise " + std::string(DTypeName(t.info.dtype)) +
                         " values (quantised: f64, f32, f16, bf16)");
    }
    TS_ASSIGN_OR_RETURN(f32, CastTensor(t, DType::kF32, options.threads));
  }
  TS_RETURN_IF_ERROR(tensorsafe::internal::CheckDenseSize(DType::kF32, f32.info.shape, f32.data.size(), what));
  if (t.info.layout != Layout::kDense) return Unsupported(what + ": only dense tensors can be quantised");
  const std::uint64_t row = t.info.shape.empty() ? 1 : t.info.shape.back();
  if (row % type.block_elems != 0) {
    return InvalidArgument(what + ": row of " + Str(row) + " elements is not a multiple of the " + Name(type) +
                           " block of " + Str(type.block_elems));
  }
  if (type.block_elems > 1 && t.info.shape.size() > kMaxDims) {
    return InvalidArgument(what + ": rank " + Str(t.info.shape.size()) + "; GGUF tensors have at most 4 dims");
  }
  const std::size_t n = f32.data.size() / 4;
  const std::size_t bytes = n / type.block_elems * type.block_bytes;
  std::shared_ptr<std::byte> buf = tensorsafe::internal::AllocAligned(bytes);
  // The values are read as floats: an unaligned view is copied first.
  std::unique_ptr<float[]> aligned;
  const float* values = reinterpret_cast<const float*>(f32.data.data());
  if (reinterpret_cast<std::uintptr_t>(values) % alignof(float) != 0) {
    aligned = std::make_unique<float[]>(n);
    std::memcpy(aligned.get(), f32.data.data(), n * 4);
    values = aligned.get();
  }
  TS_RETURN_IF_ERROR(Quantize(type, std::span<const float>(values, n), std::span<std::byte>(buf.get(), bytes), options)
                         .WithContext(what));
  Tensor out;
  out.info.name = t.info.name;
  out.info.data_length = bytes;
  out.data = std::span<const std::byte>(buf.get(), bytes);
  out.owner = std::move(buf);
  if (type.dtype) {
    out.info.dtype = *type.dtype;
    out.info.shape = t.info.shape;
    return out;
  }
  out.info.dtype = DType::kU8;
  out.info.shape = {bytes};
  nlohmann::ordered_json md = {{"gguf.type", std::string(type.name)},
                               {"gguf.shape", t.info.shape},
                               {"block_elems", type.block_elems},
                               {"block_bytes", type.block_bytes}};
  out.info.metadata_json = md.dump();
  return out;
}

}  // namespace tensorsafe::gguf
