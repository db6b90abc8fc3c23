// Convert with ConvertOptions::dtype (cast and dequantisation), gguf_kv and
// the GGUF warnings; and what GGUF's own metadata key does on the way back
// to another format (docs/formats/gguf.md §4, §11, §12; docs/CAST.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/codec_test_util.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_quants.h"
#include "tensorsafe/formats/safetensors.h"

namespace tensorsafe::testing {
namespace {

TensorSet Mixed() {
  TensorSet s;
  s.tensors.push_back(MakeTensor("f32", DType::kF32, {3}, Raw<float>({1.0f, 1.00390625f, -65520.0f})));
  s.tensors.push_back(MakeTensor("f64", DType::kF64, {1}, Raw<double>({1.0 + 0x1p-8 + 0x1p-40})));
  s.tensors.push_back(MakeTensor("f16", DType::kF16, {2}, Raw<std::uint16_t>({0x3c00, 0xfc00})));
  s.tensors.push_back(MakeTensor("i32", DType::kI32, {2}, Raw<std::int32_t>({7, -7})));
  return s;
}

TEST(ConvertDType, CastsFloatingTensorsAndKeepsTheRest) {
  TempDir dir;
  TensorSet s = Mixed();
  s.metadata_json = R"({"source":"x"})";
  ASSERT_TRUE(safetensors::WriteFile(dir.File("in.safetensors"), s).ok());
  ConvertOptions o;
  o.dtype = DType::kBF16;
  auto st = Convert(dir.File("in.safetensors"), dir.File("out.safetensors"), o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->warnings.empty());
  auto back = safetensors::ReadFile(dir.File("out.safetensors"));
  ASSERT_TRUE(back.ok());
  std::map<std::string, Tensor> by;
  for (const Tensor& t : back->tensors) by[t.info.name] = t;
  EXPECT_EQ(by["f32"].info.dtype, DType::kBF16);
  // 1.00390625 is a bf16 tie: to even (1.0); -65520 is exact in bf16.
  EXPECT_EQ(Str(by["f32"].data), Raw<std::uint16_t>({0x3f80, 0x3f80, 0xc780}));
  // f64 goes through f32 (1 + 2^-8 + 2^-40 -> 1 + 2^-8, a tie) as torch does: 1.0, not 1.0078125.
  EXPECT_EQ(Str(by["f64"].data), Raw<std::uint16_t>({0x3f80}));
  EXPECT_EQ(Str(by["f16"].data), Raw<std::uint16_t>({0x3f80, 0xff80}));
  EXPECT_EQ(by["i32"].info.dtype, DType::kI32);
  EXPECT_EQ(Str(by["i32"].data), Raw<std::int32_t>({7, -7}));
  EXPECT_EQ(back->metadata_json, R"({"source":"x"})");
  // No scratch file is left in the output's directory.
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 2u);
}

TEST(ConvertDType, DequantisesGgufBlocksToTheirLogicalShape) {
  TempDir dir;
  // A GGUF of Q4_0 and Q8_0 tensors quantised here, plus a plain f32 one.
  TensorSet s;
  std::vector<float> x(2 * 64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) - 8.0f;
  Tensor f = MakeTensor("w", DType::kF32, {2, 64}, std::string(reinterpret_cast<char*>(x.data()), x.size() * 4));
  s.tensors.push_back(*gguf::QuantizeTensor(f, *gguf::FindGgmlType("Q4_0")));
  s.tensors.back().info.name = "q4";
  s.tensors.push_back(*gguf::QuantizeTensor(f, *gguf::FindGgmlType("Q8_0")));
  s.tensors.back().info.name = "q8";
  s.tensors.push_back(f);
  s.metadata_json =
      R"({"general.architecture":"llama","general.file_type":7,"tensorsafe.gguf_types":{"general.architecture":"string","general.file_type":"uint32"}})";
  ASSERT_TRUE(gguf::WriteFile(dir.File("q.gguf"), s).ok());
  ConvertOptions o;
  o.dtype = DType::kF16;
  o.stringify_metadata = true;
  auto st = Convert(dir.File("q.gguf"), dir.File("out.safetensors"), o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto back = safetensors::ReadFile(dir.File("out.safetensors"));
  ASSERT_TRUE(back.ok());
  auto in = gguf::ReadFile(dir.File("q.gguf"));
  ASSERT_TRUE(in.ok());
  for (const Tensor& t : back->tensors) {
    SCOPED_TRACE(t.info.name);
    EXPECT_EQ(t.info.dtype, DType::kF16);
    EXPECT_EQ(t.info.shape, (Shape{2, 64}));
    EXPECT_EQ(t.info.metadata_json, "");
    for (const Tensor& q : in->tensors) {
      if (q.info.name != t.info.name) continue;
      auto d = gguf::DequantizeTensor(q, DType::kF16);
      ASSERT_TRUE(d.ok());
      EXPECT_EQ(Str(t.data), Str(d->data));
    }
  }
  // general.file_type follows the dtype (MOSTLY_F16 = 1), still a uint32.
  auto md = nlohmann::json::parse(back->metadata_json);
  EXPECT_EQ(md["general.file_type"], "1");
  EXPECT_EQ(nlohmann::json::parse(md["tensorsafe.gguf_types"].get<std::string>())["general.file_type"], "uint32");
  // GGUF -> GGUF f32: every tensor F32.
  o = {};
  o.dtype = DType::kF32;
  ASSERT_TRUE(Convert(dir.File("q.gguf"), dir.File("f32.gguf"), o).ok());
  auto g = gguf::ReadFile(dir.File("f32.gguf"));
  ASSERT_TRUE(g.ok());
  for (const Tensor& t : g->tensors) EXPECT_EQ(t.info.dtype, DType::kF32) << t.info.name;
}

TEST(ConvertDType, RefusalsNameTheTensorAndLeaveNothing) {
  TempDir dir;
  ConvertOptions o;
  o.dtype = DType::kF16;
  // quant.gguf holds Q8_1, Q8_K, Q1_0 and Q2_0 blocks, which gguf-py has no dequantiser for.
  EXPECT_STATUS(Convert(GgufGolden("quant.gguf"), dir.File("x.gguf"), o), StatusCode::kUnsupported,
                "no dequantiser for Q8_1 blocks");
  EXPECT_FALSE(std::filesystem::exists(dir.File("x.gguf")));
  o.dtype = DType::kF64;
  EXPECT_STATUS(Convert(GgufGolden("plain.gguf"), dir.File("x.gguf"), o), StatusCode::kInvalidArgument,
                "the dtype to convert to is f32, f16 or bf16");
  TensorSet s;
  s.tensors.push_back(MakeTensor("e", DType::kF8E5M2, {1}, "x"));
  ASSERT_TRUE(safetensors::WriteFile(dir.File("f8.safetensors"), s).ok());
  o.dtype = DType::kF32;
  EXPECT_STATUS(Convert(dir.File("f8.safetensors"), dir.File("x.safetensors"), o), StatusCode::kUnsupported,
                "tensor \"e\": cannot convert f8_e5m2 to f32");
  EXPECT_FALSE(std::filesystem::exists(dir.File("x.safetensors")));
  // Without a dtype, quantised tensors are refused with the way out named.
  EXPECT_STATUS(Convert(GgufGolden("quant.gguf"), dir.File("x.safetensors")), StatusCode::kUnsupported,
                "cannot be stored in safetensors (tsafe, gguf and zio keep it; dtype, --dtype f32|f16|bf16, "
                "dequantises it)");
}

TEST(ConvertDType, GgufKeyValuesAndTheArchitectureWarning) {
  TempDir dir;
  ASSERT_TRUE(safetensors::WriteFile(dir.File("in.safetensors"), Mixed()).ok());
  auto st = Convert(dir.File("in.safetensors"), dir.File("a.gguf"));
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->warnings.size(), 1u);
  EXPECT_EQ(st->warnings[0], dir.File("a.gguf") +
                                 ": no general.architecture key: llama.cpp cannot load the file as "
                                 "a model, and transformers' GGUF loader stops with an IndexError; name one with "
                                 "--gguf-kv general.architecture=str:NAME (the architecture's own keys and tensor "
                                 "names are needed too: docs/formats/gguf.md §12)");
  ConvertOptions o;
  o.gguf_kv = {"general.architecture=str:llama", "general.name=str:tiny", "llama.block_count=u32:1"};
  st = Convert(dir.File("in.safetensors"), dir.File("b.gguf"), o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_TRUE(st->warnings.empty());
  auto g = gguf::ReadFile(dir.File("b.gguf"));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(
      g->metadata_json,
      R"({"general.architecture":"llama","general.name":"tiny","llama.block_count":1,"tensorsafe.gguf_types":{"general.architecture":"string","general.name":"string","llama.block_count":"uint32"}})");
  o.gguf_kv = {"general.name=u8:300"};
  EXPECT_STATUS(Convert(dir.File("in.safetensors"), dir.File("c.gguf"), o), StatusCode::kInvalidArgument,
                "300 is out of range for uint8");
  o.gguf_kv = {"general.name=str:x"};
  EXPECT_STATUS(Convert(dir.File("in.safetensors"), dir.File("c.tsafe"), o), StatusCode::kInvalidArgument,
                "typed key/values (--gguf-kv) apply to gguf outputs only");
  EXPECT_FALSE(std::filesystem::exists(dir.File("c.gguf")));
}

// safetensors -> GGUF -> safetensors gives the original bytes: the GGUF
// types of string metadata are not carried back (docs/formats/gguf.md §4).
TEST(ConvertDType, SafetensorsThroughGgufAndBackIsByteExact) {
  // (An empty __metadata__ object does not survive: GGUF cannot tell it
  // from none; docs/formats/gguf.md §4.)
  for (const char* md : {"", R"({"format":"pt","note":"tiny"})"}) {
    SCOPED_TRACE(md);
    TempDir dir;
    TensorSet s = Mixed();
    s.metadata_json = md;
    ASSERT_TRUE(safetensors::WriteFile(dir.File("in.safetensors"), s).ok());
    ASSERT_TRUE(Convert(dir.File("in.safetensors"), dir.File("mid.gguf")).ok());
    auto st = Convert(dir.File("mid.gguf"), dir.File("back.safetensors"));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(ReadFileBytes(dir.File("back.safetensors")), ReadFileBytes(dir.File("in.safetensors")));
    // And through the native format on the way.
    ASSERT_TRUE(Convert(dir.File("mid.gguf"), dir.File("mid.tsafe")).ok());
    ASSERT_TRUE(Convert(dir.File("mid.tsafe"), dir.File("back2.safetensors")).ok());
    EXPECT_EQ(ReadFileBytes(dir.File("back2.safetensors")), ReadFileBytes(dir.File("in.safetensors")));
    ASSERT_TRUE(Convert(dir.File("mid.tsafe"), dir.File("back.gguf")).ok());
    EXPECT_EQ(ReadFileBytes(dir.File("back.gguf")), ReadFileBytes(dir.File("mid.gguf")));
  }
}

}  // namespace
}  // namespace tensorsafe::testing
