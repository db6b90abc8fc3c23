// GGUF block codecs: dequantisation of ggml tensor types to f32, f16 or
// bf16, and quantisation of floats to the block types, bit-identical to
// gguf-py 0.19.0's gguf.quants.dequantize / quantize (docs/formats/gguf.md
// §10).
//
// - Dequantise: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
//   Q4_K, Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//   IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4 (every type gguf-py
//   dequantises). f32 output equals gguf-py's bit for bit, NaN payloads
//   included; f16 and bf16 outputs are that f32 result rounded as
//   include/tensorsafe/cast.h rounds (torch's Tensor.to()).
// - Quantise: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0,
//   MXFP4 (every type gguf-py quantises), from f32 values. Non-finite inputs
//   give gguf-py's x86-64 bytes (numpy casts NaN to integers as the
//   platform's C cast does).
// - Not available (kUnsupported): Q8_1, Q8_K, Q1_0, Q2_0 and the integer
//   and f64 types, which gguf-py does not dequantise either.
//
// Blocks are independent, so large inputs are split across threads
// (QuantOptions::threads).
//
// Thread safety: the functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "tensorsafe/dtype.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe::gguf {

struct QuantOptions {
  // Threads to split the blocks over: 0 = one per core, at most 8; 1 = the
  // calling thread only. Inputs under about 1 MiB always use one.
  unsigned threads = 0;
};

// True when Dequantize / Quantize handle `type`.
bool CanDequantize(const GgmlType& type);
bool CanQuantize(const GgmlType& type);

// Decodes the whole blocks in `blocks` into `out`, elements of `dtype`
// (f32, f16 or bf16), in order. Errors: kUnsupported for a type or dtype
// not listed above; kInvalidArgument when `blocks` is not a whole number of
// blocks ("145 bytes are not a whole number of 144-byte Q4_K blocks") or
// `out` does not hold exactly their elements. `out` must not overlap
// `blocks`.
Status Dequantize(const GgmlType& type, std::span<const std::byte> blocks, DType dtype, std::span<std::byte> out,
                  const QuantOptions& options = {});

// Encodes `values` (a whole number of blocks of elements) into `out`, which
// must hold exactly their blocks. Errors: kUnsupported for a type gguf-py
// cannot quantise; kInvalidArgument for sizes.
Status Quantize(const GgmlType& type, std::span<const float> values, std::span<std::byte> out,
                const QuantOptions& options = {});

// A tensor's GGUF block type and logical shape, when its info marks it as
// Decode marks ggml blocks (u8 [nbytes] with {"gguf.type", "gguf.shape"});
// nullopt for any other tensor. Malformed markers give nullopt too: the
// writer and DequantizeTensor report them.
struct QuantizedTensor {
  GgmlType type;
  Shape shape;  // logical, outermost first
};
std::optional<QuantizedTensor> FindQuantized(const TensorInfo& info);

// The info of DequantizeTensor(t, dtype)'s result, after its checks: t's
// name, `dtype`, the logical shape, t's per-tensor metadata without the
// block marker, and the byte count. Errors name the tensor: kUnsupported
// for a block type without a dequantiser, a dtype other than f64, f32, f16,
// bf16 or blocks, or a target other than f32, f16, bf16; kInvalidArgument
// for a marker whose shape and byte count disagree ("Q4_K shape [2, 256]
// needs 288 bytes, the data has 280").
Result<TensorInfo> DequantizedInfo(const Tensor& t, DType dtype);

// Writes t's values as `dtype` into `out`, which must hold exactly
// DequantizedInfo(t, dtype)->data_length bytes: ggml blocks are dequantised,
// f64/f32/f16/bf16 data cast (cast.h). Errors: as DequantizedInfo, and
// kInvalidArgument for the size of `out`.
Status DequantizeInto(const Tensor& t, DType dtype, std::span<std::byte> out, const QuantOptions& options = {});

// `t` with its values as `dtype` (f32, f16 or bf16), as a tensor owning its
// bytes (DequantizedInfo, DequantizeInto). A tensor already of `dtype` is
// returned as it is.
Result<Tensor> DequantizeTensor(const Tensor& t, DType dtype, const QuantOptions& options = {});

// Every floating tensor of `set` as `dtype`: ggml blocks dequantised, f64,
// f32, f16 and bf16 cast; integer and bool tensors unchanged; other
// floating dtypes (f8, f6, f4, complex) kUnsupported, naming the tensor.
// The metadata is kept, except that a "general.file_type" key (GGUF's
// llama_ftype) becomes ALL_F32 (0), MOSTLY_F16 (1) or MOSTLY_BF16 (32).
// New tensors own their bytes (in memory).
Result<TensorSet> DequantizeSet(const TensorSet& set, DType dtype, const QuantOptions& options = {});

// `t` (f32, or f64/f16/bf16, first cast to f32 as numpy's astype does)
// quantised to `type`, as a tensor the GGUF writer stores as that type:
// plain types become that dtype, block types u8 [nbytes] marked with
// "gguf.type" and "gguf.shape". Errors name the tensor: kUnsupported (type
// or dtype), kInvalidArgument when the innermost dimension is not a whole
// number of blocks or t has more than 4 dimensions.
Result<Tensor> QuantizeTensor(const Tensor& t, const GgmlType& type, const QuantOptions& options = {});

}  // namespace tensorsafe::gguf
