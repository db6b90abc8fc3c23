// The CLI on GGUF files (docs/formats/gguf.md §11): `ls` with ggml types and
// logical shapes, `info` summarising long arrays, `meta` reading, setting
// and deleting typed key/values, `convert --dtype` and `--gguf-kv`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/codec_test_util.h"
#include "support/cli_runner.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/gguf_quants.h"
#include "tensorsafe/formats/safetensors.h"

namespace tensorsafe::testing {
namespace {

class GgufCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
    path_ = dir_.File("m.gguf");
    nlohmann::ordered_json md, types;
    md["general.architecture"] = "llama";
    types["general.architecture"] = "string";
    nlohmann::json tokens = nlohmann::json::array();
    for (int i = 0; i < 50; ++i) tokens.push_back("tok" + std::to_string(i));
    md["tokenizer.ggml.tokens"] = tokens;
    types["tokenizer.ggml.tokens"] = "array<string>";
    md["tokenizer.chat_template"] = std::string(300, 'x');
    types["tokenizer.chat_template"] = "string";
    md["llama.block_count"] = 2;
    types["llama.block_count"] = "uint32";
    md["tensorsafe.gguf_types"] = types;
    TensorSet s;
    s.metadata_json = md.dump();
    std::vector<float> x(2 * 256);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) - 6.0f;
    Tensor f = MakeTensor("blk.0.w", DType::kF32, {2, 256}, std::string(reinterpret_cast<char*>(x.data()), 2048));
    s.tensors.push_back(*gguf::QuantizeTensor(f, *gguf::FindGgmlType("Q8_0")));
    s.tensors.push_back(MakeTensor("norm", DType::kF32, {4}, Raw<float>({1, 2, 3, 4})));
    ASSERT_TRUE(gguf::WriteFile(path_, s).ok());
  }

  CliOutput Run(const std::string& args) { return RunCli(TS_CLI_PATH, args); }

  TempDir dir_;
  std::string path_;
};

TEST_F(GgufCli, LsShowsGgmlTypesAndLogicalShapes) {
  CliOutput o = Run("ls " + path_);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out,
            "NAME     DTYPE  SHAPE           NBYTES\n"
            "blk.0.w  Q8_0   [2, 256]           544\n"
            "norm     f32    [4]                 16\n");
}

TEST_F(GgufCli, InfoSummarisesLongArraysUnlessFull) {
  CliOutput o = Run("info " + path_);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("metadata:     4 key/values:\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  general.architecture     string         \"llama\"\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  tokenizer.ggml.tokens    array<string>  [50 items] \"tok0\", \"tok1\", \"tok2\", \"tok3\", "
                       "\"tok4\", \"tok5\", \"tok6\", \"tok7\", ...\n"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("\"" + std::string(160, 'x') + "\"... (300 bytes)\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  llama.block_count        uint32         2\n"), std::string::npos) << o.out;
  CliOutput full = Run("info --full " + path_);
  ASSERT_EQ(full.rc, 0);
  EXPECT_NE(full.out.find("\"tok49\"]"), std::string::npos);
  EXPECT_NE(full.out.find(std::string(300, 'x')), std::string::npos);

  CliOutput j = Run("info --json " + path_);
  ASSERT_EQ(j.rc, 0) << j.err;
  auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["metadata"]["tokenizer.ggml.tokens"]["summary"], "array<string>");
  EXPECT_EQ(doc["metadata"]["tokenizer.ggml.tokens"]["length"], 50);
  EXPECT_EQ(doc["metadata"]["tokenizer.ggml.tokens"]["first"].size(), 8u);
  EXPECT_EQ(doc["tensors"][0]["gguf_type"], "Q8_0");
  EXPECT_EQ(doc["tensors"][0]["gguf_shape"], nlohmann::json::array({2, 256}));
  auto fj = nlohmann::json::parse(Run("info --json --full " + path_).out);
  EXPECT_EQ(fj["metadata"]["tokenizer.ggml.tokens"].size(), 50u);
}

TEST_F(GgufCli, MetaReadsSetsAndDeletesTypedKeys) {
  const std::string before = ReadFileBytes(path_);
  CliOutput o = Run("meta " + path_);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("  llama.block_count        uint32         2\n"), std::string::npos) << o.out;
  o = Run("meta " + path_ + " --set general.name=str:tiny --set llama.block_count=u16:3 --del tokenizer.chat_template");
  ASSERT_EQ(o.rc, 0) << o.err;
  // (tokenizer.chat_template, the longest key, is gone: narrower columns.)
  EXPECT_NE(o.out.find("  llama.block_count      uint16         3\n"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  general.name           string         \"tiny\"\n"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("chat_template"), std::string::npos);
  auto back = gguf::ReadFile(path_);
  ASSERT_TRUE(back.ok());
  auto md = nlohmann::ordered_json::parse(back->metadata_json);
  EXPECT_EQ(md["general.name"], "tiny");
  EXPECT_EQ(md["tensorsafe.gguf_types"]["llama.block_count"], "uint16");
  EXPECT_FALSE(md.contains("tokenizer.chat_template"));
  auto orig = gguf::Decode(Bytes(before), nullptr, "before");
  ASSERT_TRUE(orig.ok());
  ASSERT_EQ(back->tensors.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(Str(back->tensors[i].data), Str(orig->tensors[i].data));
  CliOutput j = Run("meta --json " + path_);
  EXPECT_EQ(nlohmann::json::parse(j.out)["tokenizer.ggml.tokens"]["length"], 50);
}

TEST_F(GgufCli, MetaErrorsLeaveTheFileAlone) {
  const std::string before = ReadFileBytes(path_);
  CliOutput o = Run("meta " + path_ + " --set general.name=foo");
  EXPECT_EQ(o.rc, 7);
  EXPECT_EQ(
      o.err,
      "tensorsafe meta: invalid argument: " + path_ +
          ": \"general.name=foo\": expected KEY=TYPE:VALUE (a type is needed: str, u32, f32, bool, str[], ...)\n");
  o = Run("meta " + path_ + " --del nothing.here");
  EXPECT_EQ(o.rc, 3);
  EXPECT_EQ(o.err, "tensorsafe meta: not found: " + path_ + ": no key \"nothing.here\"\n");
  o = Run("meta " + path_ + " --set general.alignment=u32:48");
  EXPECT_EQ(o.rc, 7);
  EXPECT_NE(o.err.find("general.alignment 48 is not a power of two"), std::string::npos) << o.err;
  o = Run("meta " + path_ + " --tensor norm --set a=str:b");
  EXPECT_EQ(o.rc, 7);
  EXPECT_NE(o.err.find("gguf has no per-tensor key/values (--tensor)"), std::string::npos) << o.err;
  EXPECT_EQ(ReadFileBytes(path_), before);
}

TEST_F(GgufCli, ConvertDequantisesAndAddsKeyValues) {
  CliOutput o = Run("convert -q --dtype f16 --stringify-metadata " + path_ + " " + dir_.File("out.safetensors"));
  ASSERT_EQ(o.rc, 0) << o.err;
  auto st = safetensors::ReadFile(dir_.File("out.safetensors"));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->tensors[0].info.dtype, DType::kF16);
  o = Run("convert -q --dtype f64 " + path_ + " " + dir_.File("x.safetensors"));
  EXPECT_EQ(o.rc, 7);
  EXPECT_EQ(o.err, "tensorsafe convert: invalid argument: --dtype f64: expected f32, f16 or bf16\n");
  o = Run("convert -q " + dir_.File("out.safetensors") + " " + dir_.File("a.gguf"));
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.err, "");  // the stringified general.architecture came along
  TensorSet s;
  s.tensors.push_back(MakeTensor("w", DType::kF32, {1}, Raw<float>({1})));
  ASSERT_TRUE(safetensors::WriteFile(dir_.File("plain.safetensors"), s).ok());
  o = Run("convert " + dir_.File("plain.safetensors") + " " + dir_.File("b.gguf"));
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.err.rfind("warning: " + dir_.File("b.gguf") + ": no general.architecture key", 0), 0u) << o.err;
  o = Run("convert -q " + dir_.File("plain.safetensors") + " " + dir_.File("b.gguf"));
  EXPECT_EQ(o.err, "");  // --quiet: no warnings either
  o = Run("convert -q --gguf-kv general.architecture=str:llama --gguf-kv general.name=str:w " +
          dir_.File("plain.safetensors") + " " + dir_.File("c.gguf"));
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.err, "");
  auto g = gguf::ReadFile(dir_.File("c.gguf"));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(nlohmann::json::parse(g->metadata_json)["general.name"], "w");
}

}  // namespace
}  // namespace tensorsafe::testing
