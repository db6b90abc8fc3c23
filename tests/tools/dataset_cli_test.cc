// `tensorsafe dataset create|info|verify|cat|merge` run as a process
// (docs/DATASET.md §8): stdout, stderr and exit codes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/cli_runner.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/writer.h"

namespace tensorsafe {
namespace {

namespace fs = std::filesystem;

using Output = testing::CliOutput;

class DatasetCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
  }
  // stderr goes to a file: not a terminal, so no progress bar may appear.
  Output Run(const std::string& args) { return testing::RunCli(TS_CLI_PATH, args); }
  void Npy(const std::string& path, DType dtype, Shape shape, std::span<const std::byte> bytes) {
    TensorSet set;
    Tensor t;
    t.info.name = "x";
    t.info.dtype = dtype;
    t.info.shape = shape;
    t.info.data_length = bytes.size();
    t.data = bytes;
    set.tensors.push_back(t);
    ASSERT_TRUE(npy::WriteFile(path, set).ok());
  }
  // Three samples "a", "b", "c" with a varying-length f32 image, a .tsafe
  // with two tensors, a class as bytes and a json file.
  std::string MakeSource() {
    const std::string src = dir_.File("src");
    fs::create_directories(src + "/sub");
    for (int i = 0; i < 3; ++i) {
      const std::string key = i == 2 ? "sub/c" : std::string(1, static_cast<char>('a' + i));
      std::vector<float> img(2 + i, static_cast<float>(i));
      Npy(src + "/" + key + ".img.npy", DType::kF32, {static_cast<std::uint64_t>(img.size())},
          std::as_bytes(std::span(img)));
      testing::WriteFileBytes(src + "/" + key + ".cls", std::to_string(i));
      testing::WriteFileBytes(src + "/" + key + ".meta.json", "{\"i\": " + std::to_string(i) + "}");
      auto w = Writer::Create(src + "/" + key + ".t.tsafe");
      std::int32_t v[2] = {i, -i};
      EXPECT_TRUE((*w)->Add("p", TensorView::Contiguous(DType::kI32, {2}, std::as_bytes(std::span(v)))).ok());
      EXPECT_TRUE((*w)->Add("q", TensorView::Contiguous(DType::kI32, {1}, std::as_bytes(std::span(v, 1)))).ok());
      EXPECT_TRUE((*w)->Finish().ok());
    }
    return src;
  }
  testing::TempDir dir_;
};

TEST_F(DatasetCliTest, CreateInfoCatVerify) {
  const std::string src = MakeSource();
  const std::string out = dir_.File("ds");
  Output c = Run("dataset create " + out + " " + src + " --max-shard-samples 2");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(c.out.find("wrote " + out + ": 3 samples in 2 shards"), 0u) << c.out;
  EXPECT_EQ(c.err, "");  // no progress bar: stderr is not a terminal
  Output i = Run("dataset info " + out + " --shards");
  ASSERT_EQ(i.rc, 0) << i.err;
  EXPECT_NE(i.out.find("samples: 3\nshards: 2\n"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("  \"cls\": bytes\n  \"img.npy\": tensor f32 [*]\n  \"meta.json\": json\n"
                       "  \"t/p\": tensor i32 [2]\n  \"t/q\": tensor i32 [1]\n"),
            std::string::npos)
      << i.out;
  EXPECT_NE(i.out.find("shard-00001.tsafe"), std::string::npos);
  Output cat = Run("dataset cat " + out + " 2");
  ASSERT_EQ(cat.rc, 0) << cat.err;
  auto j = nlohmann::json::parse(cat.out);
  EXPECT_EQ(j["__index__"], 2);
  EXPECT_EQ(j["cls"]["hex"], "32");
  EXPECT_EQ(j["meta.json"]["i"], 2);
  EXPECT_EQ(j["img.npy"]["shape"], nlohmann::json::array({4}));
  EXPECT_EQ(j["img.npy"]["values"], nlohmann::json::parse("[2.0, 2.0, 2.0, 2.0]"));
  EXPECT_EQ(j["t/p"]["values"], nlohmann::json::parse("[2, -2]"));
  Output all = Run("dataset cat " + out + " --start 1 --limit 5");
  EXPECT_EQ(std::count(all.out.begin(), all.out.end(), '\n'), 2);
  Output v = Run("dataset verify " + out);
  EXPECT_EQ(v.rc, 0) << v.err;
  EXPECT_EQ(v.out, "ok: 3 samples in 2 shards verified\n");
  // Damage a shard: verify exits 1 naming it.
  const std::string shard = out + "/shard-00001.tsafe";
  std::string bytes = testing::ReadFileBytes(shard);
  bytes[200] ^= 1;
  testing::WriteFileBytes(shard, bytes);
  Output bad = Run("dataset verify " + out);
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("tensorsafe dataset verify: corruption:"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("shard-00001.tsafe"), std::string::npos) << bad.err;
  Output oor = Run("dataset cat " + out + " 3");
  EXPECT_EQ(oor.rc, 8);
  EXPECT_NE(oor.err.find("sample 3 is out of range (3 samples)"), std::string::npos) << oor.err;
}

TEST_F(DatasetCliTest, CreateFromDatasetWithZstdThenMerge) {
  const std::string src = MakeSource();
  const std::string out = dir_.File("all");
  ASSERT_EQ(Run("dataset create " + out + "/p0 " + src + " -q").rc, 0);
  Output c = Run("dataset create " + out + "/p1 " + out + "/p0 --zstd 3 --prefix z");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(fs::exists(out + "/p1/z-00000.tsafe.zst"));
  Output m = Run("dataset merge " + out + " p0 p1");
  ASSERT_EQ(m.rc, 0) << m.err;
  EXPECT_EQ(m.out, "merged 2 parts into " + out + ": 6 samples in 2 shards\n");
  auto ds = dataset::Dataset::Open(out);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ((*ds)->num_samples(), 6u);
  Output cat = Run("dataset cat " + out + " 5");
  ASSERT_EQ(cat.rc, 0) << cat.err;
  EXPECT_EQ(nlohmann::json::parse(cat.out)["meta.json"]["i"], 2);
  Output v = Run("dataset verify " + out);
  EXPECT_EQ(v.rc, 0) << v.err;
  // Escapes and mismatches: exit codes of docs/ERRORS.md.
  Output esc = Run("dataset merge " + out + " ../src --overwrite");
  EXPECT_EQ(esc.rc, 7) << esc.err;
  EXPECT_NE(esc.err.find("is not a subdirectory of"), std::string::npos) << esc.err;
  Output again = Run("dataset merge " + out + " p0");
  EXPECT_EQ(again.rc, 8) << again.err;
}

TEST_F(DatasetCliTest, CreateRefusesInconsistentSamples) {
  const std::string src = MakeSource();
  fs::remove(src + "/b.cls");
  Output c = Run("dataset create " + dir_.File("ds") + " " + src);
  EXPECT_EQ(c.rc, 7);
  EXPECT_NE(
      c.err.find("sample b has the fields img.npy meta.json t/p t/q but the first sample has cls img.npy meta.json "
                 "t/p t/q"),
      std::string::npos)
      << c.err;
  EXPECT_FALSE(fs::exists(dir_.File("ds/index.json")));
  Output none = Run("dataset info " + dir_.File("nothing"));
  EXPECT_EQ(none.rc, 4) << none.err;
}

// `cat` prints tensors as nested JSON arrays: every element kind, values JSON
// has no number for, and the summary of a big tensor.
TEST_F(DatasetCliTest, CatPrintsTensorsAsJsonArrays) {
  const std::string src = dir_.File("src");
  fs::create_directories(src);
  {
    auto w = Writer::Create(src + "/k.tsafe");
    const float f[4] = {1.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
    const float c[4] = {1, -2, 0.5f, 3};
    const std::uint8_t b[3] = {1, 0, 1};
    const std::uint8_t i4[2] = {0x8f, 0x07};       // -1, -8, 7, 0
    const std::uint16_t bf[2] = {0x3fc0, 0xc000};  // 1.5, -2
    std::vector<std::int16_t> big(2 * 1001);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::int16_t>(i);
    EXPECT_TRUE((*w)->Add("f", TensorView::Contiguous(DType::kF32, {2, 2}, std::as_bytes(std::span(f)))).ok());
    EXPECT_TRUE((*w)->Add("c", TensorView::Contiguous(DType::kC64, {2}, std::as_bytes(std::span(c)))).ok());
    EXPECT_TRUE((*w)->Add("b", TensorView::Contiguous(DType::kBool, {3}, std::as_bytes(std::span(b)))).ok());
    EXPECT_TRUE((*w)->Add("i4", TensorView::Contiguous(DType::kI4, {4}, std::as_bytes(std::span(i4)))).ok());
    EXPECT_TRUE((*w)->Add("bf", TensorView::Contiguous(DType::kBF16, {2}, std::as_bytes(std::span(bf)))).ok());
    EXPECT_TRUE((*w)->Add("s", TensorView::Contiguous(DType::kI16, {}, std::as_bytes(std::span(big).first(1)))).ok());
    EXPECT_TRUE((*w)->Add("e", TensorView::Contiguous(DType::kI16, {3, 0}, {})).ok());
    EXPECT_TRUE((*w)->Add("big", TensorView::Contiguous(DType::kI16, {2, 1001}, std::as_bytes(std::span(big)))).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  const std::string out = dir_.File("ds");
  Output c = Run("dataset create " + out + " " + src);
  ASSERT_EQ(c.rc, 0) << c.err;
  Output cat = Run("dataset cat " + out + " 0");
  ASSERT_EQ(cat.rc, 0) << cat.err;
  auto j = nlohmann::json::parse(cat.out);
  EXPECT_EQ(j["f"]["values"], nlohmann::json::parse(R"([[1.5, "nan"], ["inf", "-inf"]])"));
  EXPECT_EQ(j["c"]["values"], nlohmann::json::parse("[[1.0, -2.0], [0.5, 3.0]]"));
  EXPECT_EQ(j["b"]["values"], nlohmann::json::parse("[true, false, true]"));
  EXPECT_EQ(j["i4"]["values"], nlohmann::json::parse("[-1, -8, 7, 0]"));
  EXPECT_EQ(j["bf"]["values"], nlohmann::json::parse("[1.5, -2.0]"));
  EXPECT_EQ(j["s"]["values"], 0);
  EXPECT_EQ(j["e"]["values"], nlohmann::json::parse("[[], [], []]"));
  EXPECT_FALSE(j["big"].contains("values"));
  EXPECT_EQ(j["big"]["preview"],
            "[[   0,    1,    2, ...,  998,  999, 1000],\n [1001, 1002, 1003, ..., 1999, 2000, 2001]]");
  Output all = Run("dataset cat " + out + " 0 --all");
  auto ja = nlohmann::json::parse(all.out);
  ASSERT_EQ(ja["big"]["values"].size(), 2u);
  EXPECT_EQ(ja["big"]["values"][1][1000], 2001);
}

}  // namespace
}  // namespace tensorsafe
