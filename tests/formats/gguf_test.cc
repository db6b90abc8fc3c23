// GGUF: golden files made by the real gguf package (tests/golden/gguf/
// make_golden.py), decoded exactly and re-encoded byte for byte; the writer
// against the package; zero-copy reads; the writer's file seam.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/gguf/internal.h"
#include "formats/gguf_test_util.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/gguf.h"

namespace tensorsafe {
namespace {

using testing::GoldenDir;
using testing::Json;
using testing::Manifest;
using testing::ReadFileBytes;
using testing::SameMetadata;

// Plain files the package wrote and our writer must reproduce.
const char* const kPlainGoldens[] = {"plain.gguf", "align64.gguf", "empty.gguf", "no_kv.gguf"};

TEST(GgufGolden, DecodesEveryGoldenExactly) {
  const Json m = Manifest();
  ASSERT_EQ(m["files"].size(), 6u);
  for (const Json& e : m["files"]) {
    const std::string name = e["file"];
    SCOPED_TRACE(name);
    auto set = gguf::ReadFile(GoldenDir() + name);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    EXPECT_TRUE(SameMetadata(e["metadata"], set->metadata_json));
    ASSERT_EQ(set->tensors.size(), e["tensors"].size());
    for (std::size_t i = 0; i < set->tensors.size(); ++i) {
      const Tensor& t = set->tensors[i];
      const Json& x = e["tensors"][i];
      SCOPED_TRACE(t.info.name);
      EXPECT_EQ(t.info.name, x["name"].get<std::string>());
      EXPECT_EQ(DTypeName(t.info.dtype), x["dtype"].get<std::string>());
      EXPECT_EQ(t.info.shape, x["shape"].get<Shape>());
      EXPECT_TRUE(SameMetadata(x["metadata"], t.info.metadata_json)) << t.info.metadata_json;
      const std::string want = testing::Unhex(x["hex"]);
      ASSERT_EQ(t.data.size(), want.size());
      EXPECT_EQ(std::memcmp(t.data.data(), want.data(), want.size()), 0);
      EXPECT_EQ(t.info.data_length, want.size());
    }
  }
}

TEST(GgufGolden, QuantizedBlocksMatchTheTypeTable) {
  auto set = gguf::ReadFile(GoldenDir() + "quant.gguf");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  int quantized = 0;
  for (const Tensor& t : set->tensors) {
    if (t.info.metadata_json.empty()) continue;
    ++quantized;
    const Json md = Json::parse(t.info.metadata_json);
    auto type = gguf::FindGgmlType(md["gguf.type"].get<std::string>());
    ASSERT_TRUE(type) << t.info.metadata_json;
    EXPECT_EQ(md["block_elems"], type->block_elems);
    EXPECT_EQ(md["block_bytes"], type->block_bytes);
    const auto shape = md["gguf.shape"].get<Shape>();
    EXPECT_EQ(shape.back() % type->block_elems, 0u);
    EXPECT_EQ(t.data.size(), shape.front() * (shape.back() / type->block_elems) * type->block_bytes);
  }
  EXPECT_EQ(quantized, 27);  // every block type of the reference table
}

TEST(GgufGolden, AlignmentIsHonoured) {
  auto set = gguf::ReadFile(GoldenDir() + "align64.gguf");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  for (const Tensor& t : set->tensors) EXPECT_EQ(t.info.data_offset % 64, 0u) << t.info.name;
  EXPECT_EQ(set->tensors[1].info.data_offset - set->tensors[0].info.data_offset, 64u);
}

// A TensorSet built from the manifest alone (not by our decoder).
struct OwnedSet {
  TensorSet set;
  std::vector<std::shared_ptr<std::string>> buffers;
};

OwnedSet SetFromManifest(const Json& e) {
  OwnedSet o;
  o.set.metadata_json = e["metadata"].is_string() ? "" : e["metadata"].dump();
  for (const Json& x : e["tensors"]) {
    auto buf = std::make_shared<std::string>(testing::Unhex(x["hex"]));
    Tensor t;
    t.info.name = x["name"];
    t.info.dtype = *ParseDType(x["dtype"].get<std::string>());
    t.info.shape = x["shape"].get<Shape>();
    t.data = std::as_bytes(std::span(*buf));
    t.owner = buf;
    o.set.tensors.push_back(std::move(t));
    o.buffers.push_back(std::move(buf));
  }
  return o;
}

TEST(GgufWriter, ByteIdenticalToThePackage) {
  const Json m = Manifest();
  testing::TempDir dir;
  int checked = 0;
  for (const Json& e : m["files"]) {
    const std::string name = e["file"];
    if (std::find(std::begin(kPlainGoldens), std::end(kPlainGoldens), name) == std::end(kPlainGoldens)) {
      continue;
    }
    SCOPED_TRACE(name);
    const std::string golden = ReadFileBytes(GoldenDir() + name);
    OwnedSet o = SetFromManifest(e);
    auto bytes = gguf::Encode(o.set);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(*bytes, golden);
    const std::string path = dir.File(name);
    Status s = gguf::WriteFile(path, o.set);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(ReadFileBytes(path), golden);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

TEST(GgufWriter, DecodeThenEncodeReproducesTheGoldens) {
  for (const char* name : kPlainGoldens) {
    SCOPED_TRACE(name);
    const std::string golden = ReadFileBytes(GoldenDir() + name);
    auto set = gguf::ReadFile(GoldenDir() + name);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    auto bytes = gguf::Encode(*set);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(*bytes, golden);
  }
  // v2 has the layout of v3: the writer's v3 output is plain.gguf itself.
  auto v2 = gguf::ReadFile(GoldenDir() + "v2.gguf");
  ASSERT_TRUE(v2.ok()) << v2.status().ToString();
  auto bytes = gguf::Encode(*v2);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, ReadFileBytes(GoldenDir() + "plain.gguf"));
}

// Every block type of quant.gguf (ggml's Q8_1 geometry and Q2_0 included)
// is written back as its type, dims and block bytes: the file comes back.
TEST(GgufWriter, WritesQuantizedTensorsBackByteForByte) {
  auto set = gguf::ReadFile(GoldenDir() + "quant.gguf");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  auto bytes = gguf::Encode(*set);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, ReadFileBytes(GoldenDir() + "quant.gguf"));
}

TEST(GgufReader, ZeroCopyViewsShareTheMapping) {
  const std::string path = GoldenDir() + "plain.gguf";
  const std::string file = ReadFileBytes(path);
  TensorSet kept;
  {
    auto set = gguf::ReadFile(path);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    kept = *set;
  }
  for (const Tensor& t : kept.tensors) {
    ASSERT_NE(t.owner, nullptr);
    EXPECT_EQ(t.owner, kept.tensors[0].owner);  // one mapping for all
    // data_offset is absolute and the view holds exactly those file bytes.
    ASSERT_LE(t.info.data_offset + t.data.size(), file.size());
    EXPECT_EQ(std::memcmp(t.data.data(), file.data() + t.info.data_offset, t.data.size()), 0);
  }
  // Decode over caller memory: views point into it.
  auto owner = std::make_shared<std::string>(file);
  auto set = gguf::Decode(std::as_bytes(std::span(*owner)), owner, "mem");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const auto* base = reinterpret_cast<const std::byte*>(owner->data());
  EXPECT_EQ(set->tensors[1].data.data(), base + set->tensors[1].info.data_offset);
  EXPECT_EQ(owner.use_count(), 1 + static_cast<long>(set->tensors.size()));
}

TEST(GgufReader, MissingFileIsAnIOError) {
  auto set = gguf::ReadFile("/nonexistent/dir/x.gguf");
  EXPECT_EQ(set.status().code(), StatusCode::kIOError);
  EXPECT_NE(set.status().error_number(), 0);
}

// An Env whose temp files fail after `fail_after` appended bytes, or whose
// Rename fails.
class GgufFaultyEnv : public Env {
 public:
  std::uint64_t fail_after = UINT64_MAX;
  bool fail_sync = false;
  bool fail_rename = false;

  Result<std::unique_ptr<WritableFile>> NewTempFile(const std::string& final_path, std::string* tmp) override {
    TS_ASSIGN_OR_RETURN(auto f, Env::NewTempFile(final_path, tmp));
    return std::unique_ptr<WritableFile>(std::make_unique<File>(std::move(f), this));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (fail_rename) return IOError("injected rename failure", EIO);
    return Env::Rename(from, to);
  }

 private:
  class File : public WritableFile {
   public:
    File(std::unique_ptr<WritableFile> f, GgufFaultyEnv* env) : f_(std::move(f)), env_(env) {}
    Status Append(std::span<const std::byte> b) override {
      if (f_->position() + b.size() > env_->fail_after) return IOError("injected write failure", ENOSPC);
      return f_->Append(b);
    }
    bool seekable() const override { return f_->seekable(); }
    Status WriteAt(std::uint64_t o, std::span<const std::byte> b) override { return f_->WriteAt(o, b); }
    Status Sync() override { return env_->fail_sync ? IOError("injected fsync failure", EIO) : f_->Sync(); }
    Status Close() override { return f_->Close(); }
    std::uint64_t position() const override { return f_->position(); }
    const std::string& name() const override { return f_->name(); }

   private:
    std::unique_ptr<WritableFile> f_;
    GgufFaultyEnv* env_;
  };
};

TEST(GgufWriter, FailuresLeaveNothingBehind) {
  auto set = gguf::ReadFile(GoldenDir() + "plain.gguf");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  const std::uint64_t size = ReadFileBytes(GoldenDir() + "plain.gguf").size();
  struct Case {
    const char* what;
    std::uint64_t fail_after;
    bool fail_sync, fail_rename;
    const char* msg;
  } cases[] = {
      {"write in the head", 10, false, false, "injected write failure"},
      {"write in the data", size - 40, false, false, "injected write failure"},
      {"fsync", UINT64_MAX, true, false, "injected fsync failure"},
      {"rename", UINT64_MAX, false, true, "injected rename failure"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    testing::TempDir dir;
    GgufFaultyEnv env;
    env.fail_after = c.fail_after;
    env.fail_sync = c.fail_sync;
    env.fail_rename = c.fail_rename;
    Status s = gguf::WriteFile(dir.File("out.gguf"), *set, {.env = &env});
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_NE(s.message().find(c.msg), std::string::npos) << s.ToString();
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  }
  // A refused input never creates a file either.
  testing::TempDir dir;
  TensorSet bad = *set;
  bad.metadata_json = "{\"general.alignment\": 3}";
  EXPECT_EQ(gguf::WriteFile(dir.File("out.gguf"), bad).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace tensorsafe
