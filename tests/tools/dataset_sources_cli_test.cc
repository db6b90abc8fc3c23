// `tensorsafe dataset info|cat|verify|create` over every location kind of
// DATASET.md "Locations": MDS and WebDataset goldens, a native dataset over
// http, and conversion of each into a native dataset read back equal.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "formats/sample_json.h"
#include "support/cli_runner.h"
#include "support/nginx_server.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/dataset.h"

namespace tensorsafe {
namespace {

namespace fs = std::filesystem;
const std::string kGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/";

using Output = testing::CliOutput;

class DatasetSourcesCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
  }
  // stderr goes to a file: not a terminal, so no progress bar may appear.
  Output Run(const std::string& args) { return testing::RunCli(TS_CLI_PATH, args); }
  static std::size_t Lines(const std::string& s) {
    return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
  }
  // The native dataset at `out` holds the samples of `src` (any location).
  void ExpectSameSamples(const std::string& src, const std::string& out) {
    dataset::DatasetOptions o;
    o.cache_dir = dir_.File("cache");
    auto a = dataset::OpenAny(src, o);
    auto b = dataset::Dataset::Open(out);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ((*a)->num_samples(), (*b)->num_samples());
    dataset::Sample x, y;
    for (std::uint64_t i = 0; i < (*a)->num_samples(); ++i) {
      ASSERT_TRUE((*a)->Read(i, x).ok());
      ASSERT_TRUE((*b)->Read(i, y).ok());
      EXPECT_EQ(testing::SampleJson(x.fields), testing::SampleJson(y.fields)) << "sample " << i;
    }
  }
  testing::TempDir dir_;
};

TEST_F(DatasetSourcesCliTest, InfoCatVerifyOnMds) {
  Output o = Run("dataset info " + kGolden + "mds/plain");
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("format: MosaicML MDS"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\"any\": tensor f64 [*, *]"), std::string::npos) << o.out;
  o = Run("dataset cat " + kGolden + "mds/zstd --cache-dir " + dir_.File("c"));
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(Lines(o.out), testing::ReadJsonLines(kGolden + "mds/zstd/expected.jsonl").size());
  o = Run("dataset verify -q " + kGolden + "mds/zstd --cache-dir " + dir_.File("c"));
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("ok: "), std::string::npos);
}

TEST_F(DatasetSourcesCliTest, InfoCatVerifyOnWebDataset) {
  const std::string pattern = "'" + kGolden + "wds/ds-{000000..000002}.tar'";
  Output o = Run("dataset info " + pattern);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("format: WebDataset tar"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("samples: 7"), std::string::npos) << o.out;
  o = Run("dataset cat " + pattern);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(Lines(o.out), 7u);
  EXPECT_NE(o.out.find("sample00006"), std::string::npos);
  o = Run("dataset verify " + pattern);
  EXPECT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.err, "");  // no progress bar off a terminal
}

TEST_F(DatasetSourcesCliTest, CreateConvertsMdsAndWebDataset) {
  Output o = Run("dataset create " + dir_.File("n1") + " --from " + kGolden + "mds/zstd --cache-dir " + dir_.File("c"));
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.err, "");  // no progress bar off a terminal
  ExpectSameSamples(kGolden + "mds/zstd", dir_.File("n1"));

  fs::create_directories(dir_.File("w"));
  for (const char* n : {"ds-000000.tar", "ds-000001.tar", "ds-000002.tar"}) {
    fs::copy_file(kGolden + "wds/" + n, fs::path(dir_.File("w")) / n);
  }
  o = Run("dataset create " + dir_.File("n2") + " --from " + dir_.File("w") + " --max-shard-samples 2");
  ASSERT_EQ(o.rc, 0) << o.err;
  ExpectSameSamples(dir_.File("w"), dir_.File("n2"));
  // A .tar given as SRC is a dataset too.
  o = Run("dataset create " + dir_.File("n3") + " " + kGolden + "wds/ds-000001.tar");
  ASSERT_EQ(o.rc, 0) << o.err;
  ExpectSameSamples(kGolden + "wds/ds-000001.tar", dir_.File("n3"));
}

TEST_F(DatasetSourcesCliTest, RemoteDatasetInfoCatAndCreate) {
  fs::create_directories(dir_.File("www"));
  Output o = Run("dataset create " + dir_.File("www/ds") + " " + kGolden + "mds/plain --max-shard-samples 3");
  ASSERT_EQ(o.rc, 0) << o.err;
  testing::NginxServer server(dir_.File("www"));
  const std::string url = server.Url("data/ds");
  const std::string cache = " --cache-dir " + dir_.File("rc");
  o = Run("dataset info " + url + cache);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_NE(o.out.find("(remote)"), std::string::npos) << o.out;
  Output local = Run("dataset cat " + dir_.File("www/ds"));
  o = Run("dataset cat " + url + cache);
  ASSERT_EQ(o.rc, 0) << o.err;
  EXPECT_EQ(o.out, local.out);
  o = Run("dataset verify " + url + cache);
  EXPECT_EQ(o.rc, 0) << o.err;
  o = Run("dataset create " + dir_.File("copy") + " " + url + cache);
  ASSERT_EQ(o.rc, 0) << o.err;
  ExpectSameSamples(dir_.File("www/ds"), dir_.File("copy"));
}

TEST_F(DatasetSourcesCliTest, UnknownLocationFails) {
  Output o = Run("dataset info " + dir_.File("nothing"));
  EXPECT_NE(o.rc, 0);
  EXPECT_NE(o.err.find("no such dataset"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace tensorsafe
