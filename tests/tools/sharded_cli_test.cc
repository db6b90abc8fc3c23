// `tensorsafe info/ls/verify/cat/convert` on sharded checkpoints (an index
// file or its directory; docs/SHARDED.md): output, exit codes, and the
// errors for broken checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/cli_runner.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"

namespace tensorsafe {
namespace {

namespace fs = std::filesystem;
using Output = testing::CliOutput;

Tensor F32(const std::string& name, std::vector<float> v) {
  auto owned = std::make_shared<std::vector<float>>(std::move(v));
  Tensor t;
  t.info.name = name;
  t.info.dtype = DType::kF32;
  t.info.shape = {owned->size()};
  t.data = std::as_bytes(std::span(*owned));
  t.owner = owned;
  return t;
}

class ShardedCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
    TensorSet set;
    set.tensors = {F32("embed", {1, 2, 3, 4}), F32("head.weight", {7, 8, 9, 10}), F32("head.bias", {0.5, -0.25})};
    sharded::WriteOptions o;
    o.max_shard_size = 24;  // [embed], [head.weight, head.bias]
    o.shard_metadata_json = R"({"format":"pt"})";
    auto st = sharded::WriteSharded(dir_.path().string(), set, o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_EQ(st->files.size(), 2u);
    index_ = dir_.File("model.safetensors.index.json");
  }

  Output Run(const std::string& args) { return testing::RunCli(TS_CLI_PATH, args); }

  testing::TempDir dir_;
  std::string index_;
};

TEST_F(ShardedCliTest, InfoLsCatVerify) {
  for (const std::string& path : {index_, dir_.path().string()}) {
    Output info = Run("info '" + path + "'");
    ASSERT_EQ(info.rc, 0) << info.err;
    EXPECT_NE(info.out.find("format:       safetensors, sharded (2 shards)"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("tensors:      3"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("data bytes:   40"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("metadata:     {\"format\":\"pt\"}"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("index meta:   {\"total_size\":40}"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("shard:        model-00002-of-00002.safetensors (2 tensors"), std::string::npos)
        << info.out;
  }
  Output json = Run("info --json '" + index_ + "'");
  ASSERT_EQ(json.rc, 0) << json.err;
  EXPECT_NE(json.out.find("\"sharded\": true"), std::string::npos);
  EXPECT_NE(json.out.find("\"shard\": \"model-00001-of-00002.safetensors\""), std::string::npos) << json.out;

  Output ls = Run("ls '" + dir_.path().string() + "'");
  ASSERT_EQ(ls.rc, 0) << ls.err;
  EXPECT_NE(ls.out.find("head.weight"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("embed"), std::string::npos) << ls.out;

  Output cat = Run("cat '" + dir_.path().string() + "' head.bias");
  ASSERT_EQ(cat.rc, 0) << cat.err;
  EXPECT_NE(cat.out.find("0.5, -0.25"), std::string::npos) << cat.out;

  Output verify = Run("verify '" + index_ + "'");
  ASSERT_EQ(verify.rc, 0) << verify.err;
  EXPECT_EQ(verify.out, "ok: 3 tensors, 40 bytes verified in 2 shards\n");
}

TEST_F(ShardedCliTest, ConvertBothWays) {
  Output out = Run("convert -q '" + index_ + "' '" + dir_.File("one.tsafe") + "'");
  ASSERT_EQ(out.rc, 0) << out.err;
  out = Run("convert '" + dir_.File("one.tsafe") + "' '" + dir_.File("t/model.tsafe.index.json") +
            "' --max-shard-size 20B");
  EXPECT_EQ(out.rc, 2) << out.err;  // "B" is no unit the hub reads
  out = Run("convert '" + dir_.File("one.tsafe") + "' '" + dir_.File("t/model.tsafe.index.json") +
            "' --max-shard-size 24");
  ASSERT_EQ(out.rc, 0) << out.err;
  EXPECT_NE(out.out.find("to " + dir_.File("t/model.tsafe.index.json") + " (tsafe)"), std::string::npos) << out.out;
  Output verify = Run("verify '" + dir_.File("t") + "'");
  ASSERT_EQ(verify.rc, 0) << verify.err;
  EXPECT_NE(verify.out.find("in 2 shards"), std::string::npos) << verify.out;
}

TEST_F(ShardedCliTest, AShardSizeMakesANameWithoutExtensionADirectory) {
  // A name of no tensor format, not yet a directory: sharded once a size is given.
  Output out = Run("convert -q '" + dir_.File("model-00002-of-00002.safetensors") + "' '" + dir_.File("split") +
                   "' --max-shard-size 8");
  ASSERT_EQ(out.rc, 0) << out.err;
  EXPECT_TRUE(fs::exists(dir_.File("split/model.safetensors.index.json")));
  EXPECT_TRUE(fs::exists(dir_.File("split/model-00002-of-00002.safetensors")));
  out = Run("convert -q '" + index_ + "' '" + dir_.File("split-t") + "' --to tsafe --max-shard-size 24");
  ASSERT_EQ(out.rc, 0) << out.err;
  EXPECT_TRUE(fs::exists(dir_.File("split-t/model.tsafe.index.json")));
  // Without a size the name says nothing; with one, a single file's name is refused, not written whole.
  out = Run("convert '" + index_ + "' '" + dir_.File("what") + "'");
  EXPECT_EQ(out.rc, 7) << out.err;  // invalid argument
  EXPECT_NE(out.err.find("cannot tell the output format from the name"), std::string::npos) << out.err;
  for (const std::string& in : {index_, dir_.File("model-00001-of-00002.safetensors")}) {
    out = Run("convert '" + in + "' '" + dir_.File("one.safetensors") + "' --max-shard-size 24");
    EXPECT_EQ(out.rc, 7) << out.err;
    EXPECT_NE(out.err.find("one.safetensors: a shard size (max_shard_size, --max-shard-size) splits the output "
                           "into shards, but this names one file"),
              std::string::npos)
        << out.err;
    EXPECT_FALSE(fs::exists(dir_.File("one.safetensors")));
  }
}

TEST_F(ShardedCliTest, BrokenCheckpointsFailWithTheirCodes) {
  fs::remove(dir_.File("model-00002-of-00002.safetensors"));
  Output out = Run("info '" + dir_.path().string() + "'");
  EXPECT_EQ(out.rc, 3) << out.err;  // not found
  EXPECT_NE(out.err.find("shard \"model-00002-of-00002.safetensors\" (2 tensors mapped to it) does not exist"),
            std::string::npos)
      << out.err;
  testing::WriteFileBytes(index_, "{\"weight_map\": {\"a\": \"../x.safetensors\"}}");
  out = Run("ls '" + index_ + "'");
  EXPECT_EQ(out.rc, 1) << out.err;  // corruption
  EXPECT_NE(out.err.find("has a path component \"..\""), std::string::npos) << out.err;
  // Never "name its format explicitly" for an index or a directory.
  testing::TempDir empty;
  out = Run("info '" + empty.path().string() + "'");
  EXPECT_EQ(out.rc, 3) << out.err;
  EXPECT_NE(out.err.find("no checkpoint in the directory"), std::string::npos) << out.err;
  EXPECT_EQ(out.err.find("explicitly"), std::string::npos) << out.err;
  testing::WriteFileBytes(empty.File("pytorch_model.bin.index.json"), "{}");
  out = Run("verify '" + empty.path().string() + "'");
  EXPECT_EQ(out.rc, 5) << out.err;  // unsupported
  EXPECT_NE(out.err.find("PyTorch pickle"), std::string::npos) << out.err;
}

}  // namespace
}  // namespace tensorsafe
