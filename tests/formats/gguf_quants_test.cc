// The GGUF block codecs' API (gguf_quants.h): size checks and their
// messages, unsupported types, tensor- and set-level forms, threads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/codec_test_util.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_quants.h"

namespace tensorsafe::testing {
namespace {

gguf::GgmlType Type(const char* name) { return *gguf::FindGgmlType(name); }

std::string Marker(const char* type, const std::string& shape) {
  return std::string(R"({"gguf.type":")") + type + R"(","gguf.shape":)" + shape + "}";
}

TEST(GgufQuants, WhatCanBeDoneWithEachType) {
  std::vector<std::string> dq, q;
  for (std::uint32_t code = 0; code < 64; ++code) {
    auto t = gguf::LookupGgmlType(code);
    if (!t) continue;
    if (gguf::CanDequantize(*t)) dq.push_back(std::string(t->name));
    if (gguf::CanQuantize(*t)) q.push_back(std::string(t->name));
  }
  EXPECT_EQ(dq, (std::vector<std::string>{"F32",     "F16",   "Q4_0",   "Q4_1",  "Q5_0",  "Q5_1",    "Q8_0",
                                          "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "IQ2_XXS", "IQ2_XS",
                                          "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",  "IQ1_M",
                                          "BF16",    "TQ1_0", "TQ2_0",  "MXFP4", "NVFP4"}));
  EXPECT_EQ(q, (std::vector<std::string>{"F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16", "TQ1_0", "TQ2_0",
                                         "MXFP4"}));
}

TEST(GgufQuants, DequantizeChecksSizes) {
  const std::string blocks(2 * 144, '\0');
  std::vector<std::byte> out(512 * 4);
  EXPECT_TRUE(gguf::Dequantize(Type("Q4_K"), Bytes(blocks), DType::kF32, out).ok());
  EXPECT_STATUS(gguf::Dequantize(Type("Q4_K"), Bytes(blocks).first(145), DType::kF32, out),
                StatusCode::kInvalidArgument, "145 bytes are not a whole number of 144-byte Q4_K blocks");
  std::vector<std::byte> small(511 * 4);
  EXPECT_STATUS(gguf::Dequantize(Type("Q4_K"), Bytes(blocks), DType::kF32, small), StatusCode::kInvalidArgument,
                "2 Q4_K blocks hold 512 elements, 2048 bytes of f32; the output has 2044");
  std::vector<std::byte> half(512 * 2);
  EXPECT_TRUE(gguf::Dequantize(Type("Q4_K"), Bytes(blocks), DType::kBF16, half).ok());
  EXPECT_STATUS(gguf::Dequantize(Type("Q4_K"), Bytes(blocks), DType::kF64, out), StatusCode::kUnsupported,
                "cannot dequantise to f64: the targets are f32, f16 and bf16");
  EXPECT_STATUS(gguf::Dequantize(Type("Q8_K"), Bytes(std::string(292, '\0')), DType::kF32, out),
                StatusCode::kUnsupported, "no dequantiser for Q8_K blocks (gguf-py 0.19, the reference, has none");
  EXPECT_STATUS(gguf::Dequantize(Type("I32"), Bytes(std::string(4, '\0')), DType::kF32, out), StatusCode::kUnsupported,
                "no dequantiser for I32");
}

TEST(GgufQuants, QuantizeChecksSizes) {
  std::vector<float> x(64, 1.0f);
  std::vector<std::byte> out(36);
  EXPECT_TRUE(gguf::Quantize(Type("Q4_0"), x, out).ok());
  EXPECT_STATUS(gguf::Quantize(Type("Q4_0"), std::span(x).first(40), out), StatusCode::kInvalidArgument,
                "40 values are not a whole number of 32-element Q4_0 blocks");
  EXPECT_STATUS(gguf::Quantize(Type("Q4_0"), x, std::span(out).first(35)), StatusCode::kInvalidArgument,
                "2 Q4_0 blocks take 36 bytes; the output has 35");
  EXPECT_STATUS(gguf::Quantize(Type("Q4_K"), x, out), StatusCode::kUnsupported,
                "no quantiser for Q4_K (gguf-py 0.19, the reference, quantises only F32, F16, BF16, Q4_0");
}

// An unaligned f32 output takes the staged path: same values.
TEST(GgufQuants, UnalignedOutputAndThreadCountsGiveTheSameBytes) {
  std::mt19937_64 rng(TestSeed());
  const std::string blocks = RandomBytes(rng, 3000 * 144);
  std::vector<std::byte> one(3000 * 256 * 4), four(one.size()), unaligned(one.size() + 1);
  ASSERT_TRUE(gguf::Dequantize(Type("Q4_K"), Bytes(blocks), DType::kF32, one, {.threads = 1}).ok());
  ASSERT_TRUE(gguf::Dequantize(Type("Q4_K"), Bytes(blocks), DType::kF32, four, {.threads = 4}).ok());
  ASSERT_TRUE(
      gguf::Dequantize(Type("Q4_K"), Bytes(blocks), DType::kF32, std::span(unaligned).subspan(1), {.threads = 2}).ok());
  EXPECT_TRUE(one == four);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), unaligned.begin() + 1));
}

TEST(GgufQuants, FindQuantizedReadsTheDecoderMarker) {
  Tensor t = MakeTensor("w", DType::kU8, {144}, std::string(144, '\0'), Marker("Q4_K", "[1,256]"));
  auto q = gguf::FindQuantized(t.info);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->type.name, "Q4_K");
  EXPECT_EQ(q->shape, (Shape{1, 256}));
  t.info.dtype = DType::kF32;
  EXPECT_FALSE(gguf::FindQuantized(t.info));
  EXPECT_FALSE(gguf::FindQuantized(MakeTensor("w", DType::kU8, {1}, "x", R"({"gguf.type":"Q9"})").info));
  EXPECT_FALSE(gguf::FindQuantized(MakeTensor("w", DType::kU8, {1}, "x", R"({"other":1})").info));
}

TEST(GgufQuants, DequantizeTensorGivesTheLogicalShapeAndKeepsOtherMetadata) {
  std::string blocks(2 * 18, '\0');
  blocks[1] = 0x3c;  // d = 1.0 in block 0
  blocks[2] = 0x21;  // elements 0 and 16: nibbles 1 and 2 -> -7, -6
  Tensor t = MakeTensor("w", DType::kU8, {36}, blocks,
                        R"({"gguf.type":"Q4_0","gguf.shape":[2,32],"block_elems":32,"block_bytes":18,"role":"x"})");
  auto d = gguf::DequantizeTensor(t, DType::kF32);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->info.dtype, DType::kF32);
  EXPECT_EQ(d->info.shape, (Shape{2, 32}));
  EXPECT_EQ(d->info.metadata_json, R"({"role":"x"})");
  const float* f = reinterpret_cast<const float*>(d->data.data());
  EXPECT_EQ(f[0], -7.0f);
  EXPECT_EQ(f[16], -6.0f);
  EXPECT_EQ(f[1], -8.0f);
  EXPECT_EQ(f[32], -0.0f);  // block 1 has d = 0
  // Casting plain tensors.
  Tensor h = MakeTensor("h", DType::kF16, {2}, Raw<std::uint16_t>({0x3c00, 0xc000}));
  auto c = gguf::DequantizeTensor(h, DType::kBF16);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(Str(c->data), Raw<std::uint16_t>({0x3f80, 0xc000}));
}

TEST(GgufQuants, DequantizeTensorErrorsNameTheTensor) {
  EXPECT_STATUS(gguf::DequantizeTensor(
                    MakeTensor("w", DType::kU8, {140}, std::string(140, '\0'), Marker("Q4_K", "[256]")), DType::kF32),
                StatusCode::kInvalidArgument, "tensor \"w\": Q4_K shape [256] needs 144 bytes, the data has 140");
  EXPECT_STATUS(gguf::DequantizeTensor(
                    MakeTensor("w", DType::kU8, {144}, std::string(144, '\0'), Marker("Q4_K", "[100]")), DType::kF32),
                StatusCode::kInvalidArgument,
                "tensor \"w\": row of 100 elements is not a multiple of the Q4_K block of 256");
  EXPECT_STATUS(gguf::DequantizeTensor(
                    MakeTensor("w", DType::kU8, {292}, std::string(292, '\0'), Marker("Q8_K", "[256]")), DType::kF32),
                StatusCode::kUnsupported, "tensor \"w\": no dequantiser for Q8_K blocks");
  EXPECT_STATUS(gguf::DequantizeTensor(
                    MakeTensor("w", DType::kU8, {18}, std::string(18, '\0'), R"({"gguf.type":"Q4_0"})"), DType::kF32),
                StatusCode::kInvalidArgument,
                "tensor \"w\": Q4_0 blocks must be u8 [bytes] with \"gguf.shape\", an array of at most 4 dims");
  EXPECT_STATUS(gguf::DequantizeTensor(MakeTensor("w", DType::kU8, {18}, std::string(18, '\0'),
                                                  R"({"gguf.type":"Q9_9","gguf.shape":[32]})"),
                                       DType::kF32),
                StatusCode::kUnsupported, "tensor \"w\": \"gguf.type\" \"Q9_9\" is not a ggml type");
  EXPECT_STATUS(gguf::DequantizeTensor(MakeTensor("i", DType::kI32, {1}, std::string(4, '\0')), DType::kF16),
                StatusCode::kUnsupported, "tensor \"i\": cannot convert i32 to f16");
  EXPECT_STATUS(gguf::DequantizeTensor(MakeTensor("h", DType::kF16, {3}, std::string(4, '\0')), DType::kF32),
                StatusCode::kInvalidArgument, "tensor \"h\": shape [3] of f16 needs 6 bytes, the data has 4");
}

TEST(GgufQuants, DequantizeSetKeepsIntegersAndUpdatesTheFileType) {
  TensorSet set;
  set.metadata_json =
      R"({"general.file_type":15,"x":1,"tensorsafe.gguf_types":{"general.file_type":"uint32","x":"int32"}})";
  set.tensors.push_back(MakeTensor("q", DType::kU8, {18}, std::string(18, '\0'), Marker("Q4_0", "[32]")));
  set.tensors.push_back(MakeTensor("i", DType::kI64, {1}, std::string(8, '\1')));
  set.tensors.push_back(MakeTensor("f", DType::kF64, {1}, Raw<double>({0.1})));
  auto out = gguf::DequantizeSet(set, DType::kF16);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->metadata_json,
            R"({"general.file_type":1,"x":1,"tensorsafe.gguf_types":{"general.file_type":"uint32","x":"int32"}})");
  EXPECT_EQ(out->tensors[0].info.dtype, DType::kF16);
  EXPECT_EQ(out->tensors[1].info.dtype, DType::kI64);
  EXPECT_EQ(out->tensors[1].data.data(), set.tensors[1].data.data());  // as it was
  EXPECT_EQ(Str(out->tensors[2].data), Raw<std::uint16_t>({0x2e66}));  // 0.1 -> f16
  set.tensors.push_back(MakeTensor("e4", DType::kF8E4M3FN, {1}, "\x38"));
  EXPECT_STATUS(gguf::DequantizeSet(set, DType::kF16), StatusCode::kUnsupported,
                "tensor \"e4\": cannot convert f8_e4m3fn to f16");
}

TEST(GgufQuants, QuantizeTensorMarksBlocksForTheWriter) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i) - 30.0f;
  Tensor t = MakeTensor("w", DType::kF32, {2, 32}, std::string(reinterpret_cast<char*>(x.data()), 256));
  auto q = gguf::QuantizeTensor(t, Type("Q8_0"));
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->info.dtype, DType::kU8);
  EXPECT_EQ(q->info.shape, Shape{68});
  EXPECT_EQ(q->info.metadata_json, R"({"gguf.type":"Q8_0","gguf.shape":[2,32],"block_elems":32,"block_bytes":34})");
  // The GGUF writer takes it, the reader gives it back, dequantisation is close.
  TensorSet set;
  set.tensors.push_back(*q);
  auto bytes = gguf::Encode(set);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto back = gguf::Decode(Bytes(*bytes), nullptr, "q.gguf");
  ASSERT_TRUE(back.ok());
  auto d = gguf::DequantizeTensor(back->tensors[0], DType::kF32);
  ASSERT_TRUE(d.ok());
  const float* y = reinterpret_cast<const float*>(d->data.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(y[i], x[i], 0.25) << i;
  // Plain target types become that dtype.
  auto h = gguf::QuantizeTensor(t, Type("F16"));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->info.dtype, DType::kF16);
  EXPECT_EQ(h->info.shape, (Shape{2, 32}));
  EXPECT_STATUS(gguf::QuantizeTensor(MakeTensor("w", DType::kF32, {3, 20}, std::string(240, '\0')), Type("Q8_0")),
                StatusCode::kInvalidArgument,
                "tensor \"w\": row of 20 elements is not a multiple of the Q8_0 block of 32");
  EXPECT_STATUS(gguf::QuantizeTensor(MakeTensor("w", DType::kI32, {32}, std::string(128, '\0')), Type("Q8_0")),
                StatusCode::kUnsupported, "tensor \"w\": cannot quantise i32 values");
  EXPECT_STATUS(gguf::QuantizeTensor(t, Type("Q6_K")), StatusCode::kUnsupported, "tensor \"w\": no quantiser for Q6_K");
}

}  // namespace
}  // namespace tensorsafe::testing
