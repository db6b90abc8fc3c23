// The `.metadata` of torch.distributed.checkpoint's default back-end through
// the restricted unpickler (pytorch.h, DcpMetadataJson): torch 2.13.0's
// files (tests/golden/pytorch/dcp/, made by make_dcp_golden.py) read as torch
// reads them, each refusal with its code and message, and damage (every
// prefix, every flipped byte) an error, never a crash.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "formats/pytorch/pickle.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/pytorch.h"

namespace tensorsafe {
namespace {

using namespace std::string_literals;

const std::string kDcpDir = std::string(TS_SOURCE_DIR) + "/tests/golden/pytorch/dcp/";
const char* const kFiles[] = {"single.metadata", "sharded.metadata"};

Result<std::string> Parse(const std::string& bytes, const std::string& name = "x/.metadata") {
  return pytorch::DcpMetadataJson({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, name);
}

// `bytes` with the first `from` replaced by `to` (same length: the pickle's
// string lengths stay right).
std::string Replace(std::string bytes, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  const auto at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

TEST(DcpMetadata, GoldenFilesReadAsTorchReadsThem) {
  const auto expected = nlohmann::json::parse(testing::ReadFileBytes(kDcpDir + "expected.json"));
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    auto r = Parse(testing::ReadFileBytes(kDcpDir + name));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(nlohmann::json::parse(*r), expected[name]);
  }
  // The pickle's order is kept: items and storage as DCP wrote them.
  auto r = Parse(testing::ReadFileBytes(kDcpDir + "sharded.metadata"));
  ASSERT_TRUE(r.ok());
  const auto doc = nlohmann::ordered_json::parse(*r);
  EXPECT_EQ(doc["items"][0]["fqn"], "model.rows");
  EXPECT_EQ(doc["items"][3]["fqn"], "values.step");
  EXPECT_EQ(doc["storage"][1]["offset"], nlohmann::ordered_json::array({7, 0}));
}

struct BadDcp {
  const char* what;
  std::string bytes;
  StatusCode code;
  const char* message;
};

TEST(DcpMetadata, RefusedWithCodeAndMessage) {
  const std::string single = testing::ReadFileBytes(kDcpDir + "single.metadata");
  const std::string sharded = testing::ReadFileBytes(kDcpDir + "sharded.metadata");
  const std::string kModule = "\x8c%torch.distributed.checkpoint.metadata";
  const BadDcp cases[] = {
      {"os.system",
       "\x80\x02"
       "cposix\nsystem\n(X\x02\x00\x00\x00idtR."s,
       StatusCode::kUnsupported, "GLOBAL (0x63): global posix.system is not allowed"},
      {"a class DCP does not pickle", Replace(single, "Metadata\x94", "Metadatb\x94"), StatusCode::kUnsupported,
       "global torch.distributed.checkpoint.metadata.Metadatb is not allowed"},
      {"a persistent id",
       "\x80\x02X\x01\x00\x00\x00"
       "aQ."s,
       StatusCode::kUnsupported, "BINPERSID (0x51): DCP's metadata holds no persistent ids"},
      {"not a Metadata", "\x80\x02}."s, StatusCode::kCorruption, "x/.metadata: the top level is a dict, not Metadata"},
      {"two BUILDs",
       "\x80\x04" + kModule +
           "\x8c\x14"
           "BytesStorageMetadata\x93)\x81}b}b."s,
       StatusCode::kCorruption, "a second BUILD of one torch.distributed.checkpoint.metadata.BytesStorageMetadata"},
      {"an absolute relative_path", Replace(single, "__0_0.distcp", "/_0_0.distcp"), StatusCode::kCorruption,
       "relative_path \"/_0_0.distcp\" is not a path inside the checkpoint"},
      {"a field renamed",
       Replace(sharded,
               "\x8c\x06"
               "chunks",
               "\x8c\x06"
               "chunkz"),
       StatusCode::kCorruption, "a TensorStorageMetadata has no field chunks"},
      {"bytes after STOP", single + "x", StatusCode::kCorruption, "1 bytes follow the pickle's STOP"},
  };
  for (const BadDcp& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_STATUS(Parse(c.bytes), c.code, c.message);
  }
}

TEST(DcpMetadata, CheckpointsStillRefuseDcpClasses) {
  // The allowance is for DCP's metadata only: the checkpoint unpickler
  // refuses the same bytes at their first DCP class.
  const std::string bytes = testing::ReadFileBytes(kDcpDir + "single.metadata");
  const pytorch::Limits limits;
  pytorch::internal::Unpickler u({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "x.pkl", limits,
                                 pytorch::internal::PidForm::kZip);
  std::size_t end = 0;
  EXPECT_STATUS(u.Load(0, &end), StatusCode::kUnsupported,
                "global torch.distributed.checkpoint.metadata.Metadata is not allowed");
}

TEST(DcpMetadata, EveryPrefixAndEveryFlippedByteIsAnErrorNotACrash) {
  for (const char* name : kFiles) {
    SCOPED_TRACE(name);
    const std::string file = testing::ReadFileBytes(kDcpDir + name);
    for (std::size_t n = 0; n < file.size(); ++n) {
      auto r = Parse(file.substr(0, n));
      ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes";
      ASSERT_TRUE(r.status().code() == StatusCode::kCorruption || r.status().code() == StatusCode::kUnsupported)
          << r.status().ToString();
    }
    for (std::size_t i = 0; i < file.size(); ++i) {
      for (unsigned char bit : {0x01, 0x80}) {
        std::string damaged = file;
        damaged[i] = static_cast<char>(damaged[i] ^ bit);
        auto r = Parse(damaged);
        if (r.ok()) continue;  // a changed digit or letter can still be a valid document
        const StatusCode c = r.status().code();
        ASSERT_TRUE(c == StatusCode::kCorruption || c == StatusCode::kUnsupported || c == StatusCode::kLimitExceeded)
            << "byte " << i << ": " << r.status().ToString();
      }
    }
  }
}

}  // namespace
}  // namespace tensorsafe
