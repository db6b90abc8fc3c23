// Block-quantized GGUF tensors through the native format (CONVERT.md §5):
// GGUF -> tsafe -> GGUF is byte-exact, the writer checks the blocks it is
// handed, and formats that cannot carry the ggml type refuse.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "formats/codec_test_util.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/reader.h"

namespace tensorsafe::testing {
namespace {

TEST(ConvertGgufQuant, EveryBlockTypeSurvivesTheNativeFormat) {
  TempDir dir;
  const std::string src = GgufGolden("quant.gguf");
  ASSERT_TRUE(Convert(src, dir.File("q.tsafe")).ok());
  auto r = Reader::Open(dir.File("q.tsafe"));
  ASSERT_TRUE(r.ok());
  auto q4 = (*r)->Find("q.q4_0");
  ASSERT_TRUE(q4.ok());
  EXPECT_EQ(q4->dtype, DType::kU8);
  EXPECT_EQ(q4->shape, Shape{2 * 2 * 18});  // 2 rows of 64 elements, 2 blocks of 18 bytes each
  EXPECT_EQ(nlohmann::json::parse(q4->metadata_json)["gguf.type"], "Q4_0");
  auto st = Convert(dir.File("q.tsafe"), dir.File("back.gguf"));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(ReadFileBytes(dir.File("back.gguf")), ReadFileBytes(src));
  // And gguf -> gguf directly.
  ASSERT_TRUE(Convert(src, dir.File("same.gguf")).ok());
  EXPECT_EQ(ReadFileBytes(dir.File("same.gguf")), ReadFileBytes(src));
}

TEST(ConvertGgufQuant, OtherFormatsRefuseEvenWithConsents) {
  TempDir dir;
  ASSERT_TRUE(Convert(GgufGolden("quant.gguf"), dir.File("q.tsafe")).ok());
  ConvertOptions opt;
  opt.drop_metadata = opt.drop_tensor_metadata = opt.drop_names = true;
  for (const char* ext : {"safetensors", "npz", "ten", "btf"}) {
    SCOPED_TRACE(ext);
    const std::string out = dir.File(std::string("x.") + ext);
    EXPECT_STATUS(Convert(dir.File("q.tsafe"), out, opt), StatusCode::kUnsupported,
                  std::string("tensor 0 \"q.q4_0\": a GGUF block-quantized Q4_0 tensor cannot be stored in ") +
                      (std::string(ext) == "ten" ? "tenbin" : ext));
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  // zio keeps per-tensor metadata, so the type travels and comes back.
  ASSERT_TRUE(Convert(dir.File("q.tsafe"), dir.File("q.zio")).ok());
  ASSERT_TRUE(Convert(dir.File("q.zio"), dir.File("back.gguf")).ok());
  EXPECT_EQ(ReadFileBytes(dir.File("back.gguf")), ReadFileBytes(GgufGolden("quant.gguf")));
}

Tensor Quant(const std::string& md, std::size_t bytes, DType dt = DType::kU8) {
  return MakeTensor("q", dt, {bytes / (dt == DType::kU8 ? 1 : ElementSize(dt))}, std::string(bytes, '\x5a'), md);
}

TEST(ConvertGgufQuant, WriterChecksTheBlocksItIsHanded) {
  struct Case {
    const char* what;
    Tensor t;
    StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"ok Q4_0 2x64", Quant(R"({"gguf.type":"Q4_0","gguf.shape":[2,64]})", 72), StatusCode::kOk, ""},
      {"unknown type", Quant(R"({"gguf.type":"Q9_9","gguf.shape":[32]})", 18), StatusCode::kUnsupported,
       "tensor 0 \"q\": \"gguf.type\" \"Q9_9\" is not a ggml type"},
      {"no shape", Quant(R"({"gguf.type":"Q4_0"})", 18), StatusCode::kInvalidArgument,
       "a Q4_0 tensor needs \"gguf.shape\": an array of at most 4 dims"},
      {"five dims", Quant(R"({"gguf.type":"Q4_0","gguf.shape":[1,1,1,1,32]})", 18), StatusCode::kInvalidArgument,
       "an array of at most 4 dims"},
      {"partial block", Quant(R"({"gguf.type":"Q4_0","gguf.shape":[33]})", 18), StatusCode::kInvalidArgument,
       "row of 33 elements is not a multiple of the Q4_0 block of 32"},
      {"byte count", Quant(R"({"gguf.type":"Q4_0","gguf.shape":[2,32]})", 18), StatusCode::kInvalidArgument,
       "Q4_0 shape [2, 32] needs 36 bytes, the data has 18"},
      {"block bytes disagree", Quant(R"({"gguf.type":"Q4_0","gguf.shape":[32],"block_bytes":20})", 18),
       StatusCode::kInvalidArgument, "\"block_bytes\" 20 is not Q4_0's 18"},
      {"not u8", Quant(R"({"gguf.type":"Q4_0","gguf.shape":[32]})", 16, DType::kF32), StatusCode::kInvalidArgument,
       "Q4_0 blocks must be carried as u8 [bytes], not f32 [4]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TensorSet set;
    set.tensors.push_back(c.t);
    auto bytes = gguf::Encode(set);
    if (c.code == StatusCode::kOk) {
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      auto back = gguf::Decode(Bytes(*bytes), nullptr, "b.gguf");
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->tensors[0].info.metadata_json,
                R"({"gguf.type":"Q4_0","gguf.shape":[2,64],"block_elems":32,"block_bytes":18})");
      EXPECT_EQ(Str(back->tensors[0].data), std::string(72, '\x5a'));
      continue;
    }
    EXPECT_STATUS(bytes, c.code, c.message);
  }
}

}  // namespace
}  // namespace tensorsafe::testing
