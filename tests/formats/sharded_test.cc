// Sharded checkpoints (docs/SHARDED.md): the index parser's checks, opening
// every shard as one set, the shard plan, the index bytes, the writer, and
// Convert in every direction. Byte identity with huggingface_hub's writer is
// tested against the hub itself in tests/python/test_sharded.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "formats/codec_test_util.h"
#include "formats/safetensors/sharded_internal.h"
#include "support/status_matchers.h"
#include "support/temp_dir.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/sharded.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

namespace fs = std::filesystem;
using sharded::Checkpoint;
using sharded::Index;
using sharded::ParseIndex;

std::string F32Bytes(std::initializer_list<float> v) { return Raw<float>(v); }

TensorSet Set(std::vector<Tensor> tensors, std::string metadata = "") {
  TensorSet s;
  s.tensors = std::move(tensors);
  s.metadata_json = std::move(metadata);
  return s;
}

// A two-shard checkpoint in `dir`: a, b in shard 1; c in shard 2.
void WriteTwoShards(const TempDir& dir) {
  ASSERT_TRUE(safetensors::WriteFile(dir.File("model-00001-of-00002.safetensors"),
                                     Set({MakeTensor("a", DType::kF32, {2}, F32Bytes({1, 2})),
                                          MakeTensor("b", DType::kF32, {1}, F32Bytes({3}))},
                                         R"({"format":"pt"})"))
                  .ok());
  ASSERT_TRUE(
      safetensors::WriteFile(dir.File("model-00002-of-00002.safetensors"),
                             Set({MakeTensor("c", DType::kI32, {1}, Raw<std::int32_t>({7}))}, R"({"format":"pt"})"))
          .ok());
  WriteFileBytes(dir.File("model.safetensors.index.json"), R"({
  "metadata": {"total_size": 16},
  "weight_map": {"c": "model-00002-of-00002.safetensors", "a": "model-00001-of-00002.safetensors",
                 "b": "model-00001-of-00002.safetensors"}
})");
}

// --- the index ----------------------------------------------------------------

TEST(ShardedIndex, ParsesAndSortsShards) {
  auto idx = ParseIndex(R"({"metadata": {"total_size": 16, "x": [1, {"y": null}]},
    "weight_map": {"c": "m-2.safetensors", "a": "m-1.safetensors", "b": "m-1.safetensors"}, "other": 1})",
                        "/d/m.safetensors.index.json");
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(idx->path, "/d/m.safetensors.index.json");
  EXPECT_EQ(idx->directory, "/d");
  EXPECT_EQ(idx->format, Format::kSafetensors);
  EXPECT_EQ(idx->metadata_json, R"({"total_size":16,"x":[1,{"y":null}]})");
  EXPECT_EQ(idx->shards, (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  ASSERT_EQ(idx->weight_map.size(), 3u);
  EXPECT_EQ(idx->weight_map[0], (std::pair<std::string_view, std::uint32_t>{"c", 1}));
  EXPECT_EQ(idx->weight_map[1], (std::pair<std::string_view, std::uint32_t>{"a", 0}));
  const Index copy = *idx;  // the names stay valid in copies
  idx = Result<Index>(InvalidArgument("gone"));
  EXPECT_EQ(copy.weight_map[2].first, "b");
}

TEST(ShardedIndex, TsafeShardsAndEmptyMaps) {
  auto idx = ParseIndex(R"({"weight_map": {"w": "model-00001-of-00001.tsafe"}})", "i.tsafe.index.json");
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(idx->format, Format::kTsafe);
  EXPECT_EQ(idx->directory, ".");
  EXPECT_EQ(idx->metadata_json, "");
  idx = ParseIndex(R"({"metadata": null, "weight_map": {}})", "x.tsafe.index.json");
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(idx->format, Format::kTsafe);  // from the index's name when there are no shards
  EXPECT_TRUE(idx->shards.empty());
}

// Every check of SHARDED.md §2, with its code and message.
TEST(ShardedIndex, EachCheckHasItsError) {
  const std::string p = "/x/model.safetensors.index.json";
  struct Case {
    std::string text;
    StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", StatusCode::kCorruption, "index is not valid JSON"},
      {"{\"weight_map\": {}", StatusCode::kCorruption, "index is not valid JSON"},
      {"[1, 2]", StatusCode::kCorruption, "index is an array, not a JSON object"},
      {"{\"metadata\": {}}", StatusCode::kCorruption, "has no \"weight_map\""},
      {"{\"weight_map\": [1]}", StatusCode::kCorruption, "\"weight_map\" is an array, not an object"},
      {"{\"weight_map\": {}, \"weight_map\": {}}", StatusCode::kCorruption, "second \"weight_map\" key"},
      {"{\"metadata\": {}, \"metadata\": {}, \"weight_map\": {}}", StatusCode::kCorruption, "second \"metadata\" key"},
      {"{\"metadata\": \"x\", \"weight_map\": {}}", StatusCode::kCorruption, "\"metadata\" is a string, not an object"},
      {"{\"weight_map\": {\"w\": 3}}", StatusCode::kCorruption, "tensor \"w\" is mapped to a number, not a shard"},
      {"{\"weight_map\": {\"w\": \"a.safetensors\", \"w\": \"b.safetensors\"}}", StatusCode::kCorruption,
       "tensor \"w\" is listed twice in \"weight_map\" (mapped to \"a.safetensors\" and \"b.safetensors\")"},
      {"{\"weight_map\": {\"w\": \"\"}}", StatusCode::kCorruption, "shard \"\", whose name is empty"},
      {"{\"weight_map\": {\"w\": \"/etc/passwd.safetensors\"}}", StatusCode::kCorruption,
       "whose name is an absolute path"},
      {"{\"weight_map\": {\"w\": \"../up.safetensors\"}}", StatusCode::kCorruption, "has a path component \"..\""},
      {"{\"weight_map\": {\"w\": \"a//b.safetensors\"}}", StatusCode::kCorruption, "has a path component \"\""},
      {"{\"weight_map\": {\"w\": \"a\\\\b.safetensors\"}}", StatusCode::kCorruption, "has a backslash"},
      {"{\"weight_map\": {\"w\": \"a\\u0000.safetensors\"}}", StatusCode::kCorruption, "has a NUL byte"},
      {"{\"weight_map\": {\"w\": \"pytorch_model-00001-of-00002.bin\"}}", StatusCode::kUnsupported,
       "is a PyTorch pickle checkpoint"},
      {"{\"weight_map\": {\"w\": \"w.npz\"}}", StatusCode::kUnsupported, "is not a .safetensors or .tsafe file"},
      {"{\"weight_map\": {\"w\": \"a.safetensors\", \"v\": \"b.tsafe\"}}", StatusCode::kUnsupported,
       "must share one format"},
      {"{\"weight_map\": {\"w\": \"a.safetensors\"}, \"x\": \"\xff\"}", StatusCode::kCorruption,
       "index is not valid UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = ParseIndex(c.text, p);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
    EXPECT_EQ(r.status().message().rfind(p + ": ", 0), 0u) << r.status().ToString();
  }
}

TEST(ShardedIndex, Limits) {
  sharded::ReadOptions o;
  o.max_index_bytes = 20;
  EXPECT_STATUS(ParseIndex(R"({"weight_map": {"a": "b.safetensors"}})", "i.index.json", o), StatusCode::kLimitExceeded,
                "exceeds the limit of 20");
  o = {};
  o.max_json_depth = 3;
  EXPECT_STATUS(ParseIndex(R"({"metadata": {"a": [[1]]}, "weight_map": {}})", "i.index.json", o),
                StatusCode::kLimitExceeded, "nested deeper than 3");
  o = {};
  o.max_shards = 2;
  EXPECT_STATUS(ParseIndex(R"({"weight_map": {"a": "1.safetensors", "b": "2.safetensors", "c": "3.safetensors"}})",
                           "i.index.json", o),
                StatusCode::kLimitExceeded, "more than 2 shards");
}

// A file's index (mapped, not read) meets the same limit, and a file
// read both ways gives the index ParseIndex gives for its text.
TEST(ShardedIndex, FileIndexMeetsTheLimitAndMatchesItsText) {
  TempDir dir;
  const std::string text = R"({"metadata": {"total_size": 8}, "weight_map": {"a": "m.safetensors"}})";
  WriteFileBytes(dir.File("model.safetensors.index.json"), text);
  sharded::ReadOptions o;
  o.max_index_bytes = 20;
  EXPECT_STATUS(
      sharded::ReadIndex(dir.path().string(), o), StatusCode::kLimitExceeded,
      "model.safetensors.index.json: index of " + std::to_string(text.size()) + " bytes exceeds the limit of 20");
  auto from_file = sharded::ReadIndex(dir.path().string());
  auto from_text = ParseIndex(text, dir.File("model.safetensors.index.json"));
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  ASSERT_TRUE(from_text.ok()) << from_text.status().ToString();
  EXPECT_EQ(from_file->metadata_json, R"({"total_size":8})");
  EXPECT_EQ(from_file->metadata_json, from_text->metadata_json);
  EXPECT_EQ(from_file->weight_map, from_text->weight_map);
}

// Truncation at every prefix of a valid index: an error, never a crash, and
// only the whole text parses.
TEST(ShardedIndex, EveryTruncationIsRefused) {
  const std::string text =
      R"({"metadata": {"total_size": 8}, "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}})";
  for (std::size_t n = 0; n < text.size(); ++n) {
    auto r = ParseIndex(std::string_view(text).substr(0, n), "i.index.json");
    EXPECT_FALSE(r.ok()) << n;
  }
  EXPECT_TRUE(ParseIndex(text, "i.index.json").ok());
}

// --- opening ----------------------------------------------------------------

TEST(ShardedOpen, AllShardsAsOneSet) {
  TempDir dir;
  WriteTwoShards(dir);
  for (const std::string& path : {dir.File("model.safetensors.index.json"), dir.path().string()}) {
    auto ck = sharded::Open(path);
    ASSERT_TRUE(ck.ok()) << ck.status().ToString();
    EXPECT_EQ(ck->index.path, dir.File("model.safetensors.index.json"));
    ASSERT_EQ(ck->set.tensors.size(), 3u);
    EXPECT_EQ(ck->set.tensors[0].info.name, "a");
    EXPECT_EQ(ck->set.tensors[2].info.name, "c");
    EXPECT_EQ(ck->shard_of, (std::vector<std::uint32_t>{0, 0, 1}));
    EXPECT_EQ(Str(ck->set.tensors[1].data), F32Bytes({3}));
    EXPECT_EQ(Str(ck->set.tensors[2].data), Raw<std::int32_t>({7}));
    EXPECT_EQ(ck->set.metadata_json, R"({"format":"pt"})");  // total_size is derived: not carried
    EXPECT_TRUE(ck->metadata_conflicts.empty());
    ASSERT_EQ(ck->shards.size(), 2u);
    EXPECT_EQ(ck->shards[1].tensor_count, 1u);
    EXPECT_EQ(ck->shards[1].file_size, fs::file_size(dir.File("model-00002-of-00002.safetensors")));
  }
  auto set = ReadTensorSet(dir.path().string());  // convert.h reads it too
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->tensors.size(), 3u);
}

TEST(ShardedOpen, MetadataRules) {
  TempDir dir;
  ASSERT_TRUE(safetensors::WriteFile(dir.File("s1.safetensors"),
                                     Set({MakeTensor("a", DType::kU8, {1}, "x")}, R"({"format":"pt","k":"1","s":"x"})"))
                  .ok());
  ASSERT_TRUE(safetensors::WriteFile(dir.File("s2.safetensors"),
                                     Set({MakeTensor("b", DType::kU8, {1}, "y")}, R"({"format":"pt","k":"2","s":"x"})"))
                  .ok());
  WriteFileBytes(dir.File("m.safetensors.index.json"),
                 R"({"metadata": {"total_size": 2, "total_parameters": 2, "note": "hi", "s": "y"},
                     "weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  auto ck = sharded::Open(dir.path().string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  // Keys the shards agree on, then the index's (not its derived ones); an
  // index key that differs from the shards' wins and is reported.
  EXPECT_EQ(ck->set.metadata_json, R"({"format":"pt","s":"y","note":"hi"})");
  EXPECT_EQ(ck->metadata_conflicts, (std::vector<std::string>{"k", "s"}));
}

TEST(ShardedOpen, EachShardCheckHasItsError) {
  const std::string index = "model.safetensors.index.json";
  {
    TempDir dir;
    WriteTwoShards(dir);
    fs::remove(dir.File("model-00002-of-00002.safetensors"));
    EXPECT_STATUS(sharded::Open(dir.path().string()), StatusCode::kNotFound,
                  index + ": shard \"model-00002-of-00002.safetensors\" (1 tensor mapped to it) does not exist in");
  }
  {
    TempDir dir;
    WriteTwoShards(dir);
    WriteFileBytes(dir.File(index), R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})");
    EXPECT_STATUS(sharded::Open(dir.path().string()), StatusCode::kCorruption,
                  "shard \"model-00001-of-00002.safetensors\" holds tensor \"b\", which the index does not list");
  }
  {
    TempDir dir;
    WriteTwoShards(dir);
    WriteFileBytes(dir.File(index), R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
      "b": "model-00002-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
    EXPECT_STATUS(sharded::Open(dir.path().string()), StatusCode::kCorruption,
                  "holds tensor \"b\", which the index maps to shard \"model-00002-of-00002.safetensors\"");
  }
  {
    TempDir dir;
    WriteTwoShards(dir);
    WriteFileBytes(dir.File(index), R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
      "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors",
      "d": "model-00002-of-00002.safetensors"}})");
    EXPECT_STATUS(sharded::Open(dir.path().string()), StatusCode::kCorruption,
                  "tensor \"d\" is mapped to shard \"model-00002-of-00002.safetensors\", which does not hold it "
                  "(the shard holds 1 tensor, the index maps 2 to it)");
  }
  {
    TempDir dir;
    WriteTwoShards(dir);
    std::string bytes = ReadFileBytes(dir.File("model-00002-of-00002.safetensors"));
    bytes.pop_back();  // cut the data
    WriteFileBytes(dir.File("model-00002-of-00002.safetensors"), bytes);
    auto r = sharded::Open(dir.path().string());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find(dir.File("model-00002-of-00002.safetensors") + ": "), std::string::npos)
        << r.status().ToString();
  }
  {
    TempDir dir;
    WriteTwoShards(dir);
    // A tsafe file under a .safetensors name.
    auto w = Writer::Create(dir.File("model-00002-of-00002.safetensors"));
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add("c", TensorView::Contiguous(DType::kI32, {1}, Bytes(Raw<std::int32_t>({7})))).ok());
    ASSERT_TRUE((*w)->Finish().ok());
    EXPECT_STATUS(sharded::Open(dir.path().string()), StatusCode::kCorruption,
                  "shard \"model-00002-of-00002.safetensors\" is a tsafe file, not safetensors");
  }
}

// Open reads each header by positional reads, 64 KiB first: a longer
// header takes a second read, and a shard too short for its 8-byte length
// or for the length it gives is named.
TEST(ShardedOpen, HeadersOfAnyLengthAreRead) {
  TempDir dir;
  std::vector<Tensor> tensors;
  std::string map;
  for (int i = 0; i < 1500; ++i) {  // about 100 KB of header
    const std::string name = "model.layers." + std::to_string(i) + ".self_attn.q_proj.weight";
    tensors.push_back(MakeTensor(name, DType::kI32, {1}, Raw<std::int32_t>({i})));
    map += std::string(map.empty() ? "" : ", ") + "\"" + name + "\": \"model-00001-of-00002.safetensors\"";
  }
  ASSERT_TRUE(safetensors::WriteFile(dir.File("model-00001-of-00002.safetensors"), Set(tensors, "")).ok());
  ASSERT_GT(std::filesystem::file_size(dir.File("model-00001-of-00002.safetensors")), 64u << 10);
  WriteFileBytes(dir.File("model-00002-of-00002.safetensors"), std::string("\x10\0\0\0\0\0\0\0{}", 10));
  WriteFileBytes(dir.File("model.safetensors.index.json"), "{\"weight_map\": {" + map + "}}");
  auto ck = sharded::Open(dir.path().string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  ASSERT_EQ(ck->set.tensors.size(), 1500u);
  for (const Tensor& t : ck->set.tensors) {
    const int i = std::stoi(t.info.name.substr(13));
    ASSERT_EQ(t.data.size(), 4u);
    EXPECT_EQ(std::memcmp(t.data.data(), &i, 4), 0) << t.info.name;
  }
  // A second shard, given a tensor by the index, says its header is 16
  // bytes in a file of 10; then it is 5 bytes long.
  map += ", \"x\": \"model-00002-of-00002.safetensors\"";
  WriteFileBytes(dir.File("model.safetensors.index.json"), "{\"weight_map\": {" + map + "}}");
  EXPECT_STATUS(sharded::Open(dir.path().string()), StatusCode::kCorruption,
                dir.File("model-00002-of-00002.safetensors") +
                    ": header length 16 runs past the end of the file: 8 + 16 > file size 10");
  WriteFileBytes(dir.File("model-00002-of-00002.safetensors"), std::string("\x10\0\0\0\0", 5));
  EXPECT_STATUS(
      sharded::Open(dir.path().string()), StatusCode::kCorruption,
      dir.File("model-00002-of-00002.safetensors") + ": file is 5 bytes, too short for the 8-byte header length");
}

TEST(ShardedOpen, ResolvesDirectories) {
  TempDir dir;
  EXPECT_STATUS(sharded::ResolveCheckpoint(dir.path().string()), StatusCode::kNotFound,
                "no checkpoint in the directory");
  WriteFileBytes(dir.File("pytorch_model.bin"), "x");
  EXPECT_STATUS(sharded::ResolveCheckpoint(dir.path().string()), StatusCode::kUnsupported,
                "holds only PyTorch pickle checkpoints (pytorch_model.bin)");
  WriteFileBytes(dir.File("adapter.safetensors"), "x");
  EXPECT_EQ(*sharded::ResolveCheckpoint(dir.path().string()), dir.File("adapter.safetensors"));
  WriteFileBytes(dir.File("other.safetensors"), "x");
  EXPECT_STATUS(sharded::ResolveCheckpoint(dir.path().string()), StatusCode::kInvalidArgument,
                "holds several tensor files (adapter.safetensors, other.safetensors)");
  WriteFileBytes(dir.File("model.safetensors"), "x");
  EXPECT_EQ(*sharded::ResolveCheckpoint(dir.path().string()), dir.File("model.safetensors"));
  WriteFileBytes(dir.File("b.safetensors.index.json"), "{}");
  EXPECT_EQ(*sharded::ResolveCheckpoint(dir.path().string()), dir.File("b.safetensors.index.json"));
  WriteFileBytes(dir.File("model.safetensors.index.json"), "{}");
  EXPECT_EQ(*sharded::ResolveCheckpoint(dir.path().string()), dir.File("model.safetensors.index.json"));
  EXPECT_TRUE(sharded::IsShardedPath(dir.path().string()));
  EXPECT_TRUE(sharded::IsShardedPath("nowhere/x.safetensors.INDEX.json"));
  EXPECT_FALSE(sharded::IsShardedPath(dir.File("model.safetensors")));
}

// A URL cannot be listed or stat'ed without a request: one that may be a
// checkpoint's folder counts as sharded, and ResolveCheckpoint asks.
TEST(ShardedResolve, UrlsThatMayBeFolders) {
  EXPECT_TRUE(sharded::IsShardedPath("s3://bucket/models/llama-3.1-8b"));
  EXPECT_TRUE(sharded::IsShardedPath("https://host/models/gpt2/"));
  EXPECT_TRUE(sharded::IsShardedPath("s3://bucket/ck/model.safetensors.index.json"));
  for (const char* file : {"s3://bucket/m.safetensors", "s3://b/M.TSAFE", "http://h/x.gguf", "https://h/w.bin",
                           "https://h/m.npz?X-Amz-Signature=ab/cd", "s3://b/config.json", "s3://b/x.ten"}) {
    EXPECT_FALSE(sharded::IsShardedPath(file)) << file;
  }
  // A local path is a folder only if it is one.
  EXPECT_FALSE(sharded::IsShardedPath("no/such/folder"));
}

TEST(ShardedOpen, TsafeShardsAndVerify) {
  TempDir dir;
  sharded::WriteOptions o;
  o.format = Format::kTsafe;
  o.max_shard_size = 8;
  TensorSet set =
      Set({MakeTensor("a", DType::kF32, {2}, F32Bytes({1, 2})), MakeTensor("b", DType::kF32, {2}, F32Bytes({3, 4}))});
  auto st = sharded::WriteSharded(dir.path().string(), set, o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->files, (std::vector<std::string>{"model-00001-of-00002.tsafe", "model-00002-of-00002.tsafe"}));
  auto ck = sharded::Open(dir.File("model.tsafe.index.json"));
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->index.format, Format::kTsafe);
  EXPECT_TRUE(sharded::Verify(*ck).ok());
  // Damage one data byte of shard 2: Open (lazy) succeeds, Verify names it.
  auto reader = Reader::Open(dir.File("model-00002-of-00002.tsafe"));
  ASSERT_TRUE(reader.ok());
  const std::uint64_t off = (*reader)->Find("b")->data_offset;
  reader->reset();
  std::string bytes = ReadFileBytes(dir.File("model-00002-of-00002.tsafe"));
  bytes[off] ^= 1;
  WriteFileBytes(dir.File("model-00002-of-00002.tsafe"), bytes);
  ck = sharded::Open(dir.File("model.tsafe.index.json"));
  ASSERT_TRUE(ck.ok());
  EXPECT_STATUS(sharded::Verify(*ck), StatusCode::kCorruption,
                "model-00002-of-00002.tsafe: tensor \"b\": data checksum");
}

// --- planning, sizes and the index text ----------------------------------------

std::vector<sharded::Storage> Sizes(std::initializer_list<std::uint64_t> sizes) {
  std::vector<sharded::Storage> out;
  for (std::uint64_t s : sizes) out.push_back({0, false, s});
  return out;
}

TEST(ShardedPlan, SplitsAsTheHub) {
  // The hub's docstring example: [6,6,2,6,2,2] GB at 10 GB.
  auto plan = sharded::PlanShards(Sizes({6, 6, 2, 6, 2, 2}), 10);
  EXPECT_EQ(plan.shards, (std::vector<std::vector<std::size_t>>{{0}, {1, 2}, {3, 4, 5}}));
  EXPECT_EQ(plan.total_size, 24u);
  // A tensor over the limit gets its own shard at once, before the open one.
  plan = sharded::PlanShards(Sizes({1, 20, 1, 0}), 5);
  EXPECT_EQ(plan.shards, (std::vector<std::vector<std::size_t>>{{1}, {0, 2, 3}}));
  EXPECT_TRUE(sharded::PlanShards({}, 5).shards.empty());
  // Shared storage: later tensors join the first's shard, at its end, and
  // count nothing.
  std::vector<sharded::Storage> st = {{7, true, 4}, {8, true, 4}, {7, true, 4}, {9, true, 4}};
  plan = sharded::PlanShards(st, 4);
  EXPECT_EQ(plan.shards, (std::vector<std::vector<std::size_t>>{{0, 2}, {1}, {3}}));
  EXPECT_EQ(plan.total_size, 12u);
}

TEST(ShardedPlan, ParseSizeAsTheHub) {
  EXPECT_EQ(*sharded::ParseSize("5GB"), 5'000'000'000u);
  EXPECT_EQ(*sharded::ParseSize(" 200kb "), 200'000u);
  EXPECT_EQ(*sharded::ParseSize("1.5MB"), 1'500'000u);
  EXPECT_EQ(*sharded::ParseSize("2 TB"), 2'000'000'000'000u);
  EXPECT_EQ(*sharded::ParseSize("123"), 123u);
  EXPECT_STATUS(sharded::ParseSize("5XB"), StatusCode::kInvalidArgument, "unit \"XB\" not supported");
  EXPECT_STATUS(sharded::ParseSize("xGB"), StatusCode::kInvalidArgument, "not a non-negative number");
  EXPECT_STATUS(sharded::ParseSize(""), StatusCode::kInvalidArgument, "empty");
  EXPECT_STATUS(sharded::ParseSize("99999999999999999999"), StatusCode::kInvalidArgument, "too large");
}

// Golden bytes from Python: json.dumps(index, indent=2) (ensure_ascii).
TEST(ShardedIndexText, PythonJsonDumpBytes) {
  const std::vector<std::pair<std::string, std::string>> map = {
      {"a.weight", "model-00001-of-00002.safetensors"}, {"na\xc3\xafve\\t", "model-00002-of-00002.safetensors"}};
  auto text = sharded::IndexText(
      1234, "{\"b.weight\":\"a.weight\",\"\xc3\xa9\\\"x\":\"\xe2\x80\xa8\\u007f/\xf0\x9f\x98\x80\\n\"}", map);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text,
            "{\n  \"metadata\": {\n    \"total_size\": 1234,\n    \"b.weight\": \"a.weight\",\n    "
            "\"\\u00e9\\\"x\": \"\\u2028\\u007f/\\ud83d\\ude00\\n\"\n  },\n  \"weight_map\": {\n    "
            "\"a.weight\": \"model-00001-of-00002.safetensors\",\n    "
            "\"na\\u00efve\\\\t\": \"model-00002-of-00002.safetensors\"\n  }\n}");
  text = sharded::IndexText(0, R"({"f":1.5e-05,"g":1e16,"h":123456789012345680.0,"i":1.0,"j":-0.0,"k":[],"l":{},
                                   "m":[1,"x",null,true]})",
                            {});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "{\n  \"metadata\": {\n    \"total_size\": 0,\n    \"f\": 1.5e-05,\n    \"g\": 1e+16,\n    \"h\": "
            "1.2345678901234568e+17,\n    \"i\": 1.0,\n    \"j\": -0.0,\n    \"k\": [],\n    \"l\": {},\n    \"m\": "
            "[\n      1,\n      \"x\",\n      null,\n      true\n    ]\n  },\n  \"weight_map\": {}\n}");
  // The user's "total_size" replaces the value in place, as a dict update does.
  text = sharded::IndexText(5, R"({"total_size":"x"})", {});
  EXPECT_EQ(*text, "{\n  \"metadata\": {\n    \"total_size\": \"x\"\n  },\n  \"weight_map\": {}\n}");
  EXPECT_STATUS(sharded::IndexText(0, "[1]", {}), StatusCode::kInvalidArgument, "not a JSON object");
  const std::vector<std::pair<std::string, std::string>> bad = {{"\xff", "s.safetensors"}};
  EXPECT_STATUS(sharded::IndexText(0, "", bad), StatusCode::kInvalidArgument, "not UTF-8");
}

// --- writing ------------------------------------------------------------------

TEST(ShardedWrite, RoundTripsAndCleansUp) {
  TempDir dir;
  std::mt19937_64 rng(TestSeed());
  std::vector<Tensor> tensors;
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t n = 1 + rng() % 64;
    std::string bytes(n * 4, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    tensors.push_back(MakeTensor("t" + std::to_string(i), DType::kF32, {n}, bytes));
  }
  TensorSet set = Set(tensors);
  // An earlier, larger save leaves files this one must remove.
  sharded::WriteOptions o;
  o.max_shard_size = 64;
  ASSERT_TRUE(sharded::WriteSharded(dir.path().string(), set, o).ok());
  const auto before = std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator());
  WriteFileBytes(dir.File("keep-me.txt"), "x");
  WriteFileBytes(dir.File("model-00099-of-00099.safetensors.bak"), "x");  // not the pattern: kept
  o.max_shard_size = 512;
  auto st = sharded::WriteSharded(dir.path().string(), set, o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_GT(before, static_cast<long>(st->files.size()) + 1);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) names.insert(e.path().filename().string());
  std::set<std::string> want(st->files.begin(), st->files.end());
  want.insert({"model.safetensors.index.json", "keep-me.txt", "model-00099-of-00099.safetensors.bak"});
  EXPECT_EQ(names, want);
  auto ck = sharded::Open(dir.path().string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  ASSERT_EQ(ck->set.tensors.size(), tensors.size());
  std::map<std::string, std::string> got;
  for (const Tensor& t : ck->set.tensors) got[t.info.name] = Str(t.data);
  for (const Tensor& t : tensors) EXPECT_EQ(got[t.info.name], Str(t.data)) << t.info.name;
  // One shard: a single file and no index, as the hub writes it.
  o.max_shard_size = sharded::kDefaultMaxShardSize;
  o.single_metadata_json = R"({"format":"pt"})";
  st = sharded::WriteSharded(dir.path().string(), set, o);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->files, (std::vector<std::string>{"model.safetensors"}));
  EXPECT_EQ(st->index_path, "");
  EXPECT_FALSE(fs::exists(dir.File("model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.File("model-00001-of-00002.safetensors")));
  auto single = safetensors::ReadFile(dir.File("model.safetensors"));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->metadata_json, R"({"format":"pt"})");
  // always_index: one shard, still indexed.
  o.always_index = true;
  st = sharded::WriteSharded(dir.path().string(), set, o);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->files, (std::vector<std::string>{"model-00001-of-00001.safetensors"}));
  EXPECT_FALSE(fs::exists(dir.File("model.safetensors")));
}

TEST(ShardedWrite, RefusesBadArguments) {
  TempDir dir;
  TensorSet set = Set({MakeTensor("a", DType::kF32, {1}, F32Bytes({1}))});
  sharded::WriteOptions o;
  o.filename_pattern = "model.safetensors";
  EXPECT_STATUS(sharded::WriteSharded(dir.path().string(), set, o), StatusCode::kInvalidArgument,
                "has no \"{suffix}\"");
  o.filename_pattern = "sub/model{suffix}.safetensors";
  EXPECT_STATUS(sharded::WriteSharded(dir.path().string(), set, o), StatusCode::kInvalidArgument, "no other braces");
  o = {};
  o.format = Format::kNpz;
  EXPECT_STATUS(sharded::WriteSharded(dir.path().string(), set, o), StatusCode::kInvalidArgument,
                "hold safetensors or tsafe shards");
  o = {};
  std::vector<sharded::Storage> st(2);
  EXPECT_STATUS(sharded::WriteSharded(dir.path().string(), set, o, st), StatusCode::kInvalidArgument,
                "2 entries for 1 tensors");
  o.shard_metadata_json = "[1]";
  EXPECT_STATUS(sharded::WriteSharded(dir.path().string(), set, o), StatusCode::kInvalidArgument, "not a JSON object");
  // A shard the format cannot hold: nothing indexed.
  o = {};
  o.max_shard_size = 1;
  TensorSet bad = Set(
      {MakeTensor("a", DType::kF32, {1}, F32Bytes({1})), MakeTensor("c", DType::kC128, {1}, std::string(16, '\0'))});
  EXPECT_STATUS(sharded::WriteSharded(dir.path().string(), bad, o), StatusCode::kUnsupported, "c128");
  EXPECT_FALSE(fs::exists(dir.File("model.safetensors.index.json")));
}

// --- Convert ------------------------------------------------------------------

TEST(ShardedConvert, EveryDirection) {
  TempDir dir;
  WriteTwoShards(dir);
  const std::string in = dir.path().string();
  // sharded -> single safetensors: the shards' metadata, every tensor.
  auto st = Convert(in, dir.File("one.safetensors"));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->from, Format::kSafetensors);
  EXPECT_EQ(st->tensor_count, 3u);
  auto one = safetensors::ReadFile(dir.File("one.safetensors"));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->metadata_json, R"({"format":"pt"})");
  EXPECT_EQ(one->tensors.size(), 3u);
  // sharded -> sharded tsafe: the same shards, named for the new format.
  TempDir out;
  st = Convert(in, out.File("model.tsafe.index.json"));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->to, Format::kTsafe);
  auto ck = sharded::Open(out.path().string());
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->index.shards, (std::vector<std::string>{"model-00001-of-00002.tsafe", "model-00002-of-00002.tsafe"}));
  EXPECT_EQ(ck->shard_of, (std::vector<std::uint32_t>{0, 0, 1}));
  EXPECT_EQ(ck->index.metadata_json, R"({"total_size":16})");  // kept as it was
  // ... and back: byte-identical shards.
  TempDir back;
  ASSERT_TRUE(Convert(out.File("model.tsafe.index.json"), back.File("model.safetensors.index.json")).ok());
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    EXPECT_EQ(ReadFileBytes(back.File(f)), ReadFileBytes(dir.File(f))) << f;
  }
  // single -> sharded, split by size, into a directory.
  TempDir split;
  ConvertOptions o;
  o.max_shard_size = 8;
  st = Convert(dir.File("one.safetensors"), split.path().string() + "/new/", o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ck = sharded::Open(split.path().string() + "/new");
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->index.shards,
            (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  EXPECT_EQ(ck->set.metadata_json, R"({"format":"pt"})");
  EXPECT_EQ(ck->index.metadata_json, R"({"total_size":16})");
  // Selected tensors, verify of tsafe input, a missing name.
  o = {};
  o.tensors = {"c"};
  o.drop_metadata = true;  // npy has none
  st = Convert(out.path().string(), dir.File("c.npy"), o);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  o.tensors = {"zz"};
  EXPECT_STATUS(Convert(in, dir.File("z.npz"), o), StatusCode::kNotFound, "no tensor named \"zz\"");
  // Refusals: a sharded output of another format; an index name of one.
  EXPECT_STATUS(Convert(in, dir.File("x.npz.index.json")), StatusCode::kInvalidArgument,
                "<name>.safetensors.index.json");
  o = {};
  o.to = Format::kGguf;
  EXPECT_STATUS(Convert(in, out.path().string(), o), StatusCode::kInvalidArgument, "not gguf");
}

TEST(ShardedConvert, DisagreeingMetadataNeedsConsent) {
  TempDir dir;
  ASSERT_TRUE(
      safetensors::WriteFile(dir.File("s1.safetensors"), Set({MakeTensor("a", DType::kU8, {1}, "x")}, R"({"k":"1"})"))
          .ok());
  ASSERT_TRUE(
      safetensors::WriteFile(dir.File("s2.safetensors"), Set({MakeTensor("b", DType::kU8, {1}, "y")}, R"({"k":"2"})"))
          .ok());
  WriteFileBytes(dir.File("m.safetensors.index.json"),
                 R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  EXPECT_STATUS(Convert(dir.path().string(), dir.File("o.safetensors")), StatusCode::kUnsupported,
                "the shards' metadata disagree on \"k\"");
  ConvertOptions o;
  o.drop_metadata = true;
  ASSERT_TRUE(Convert(dir.path().string(), dir.File("o.safetensors"), o).ok());
  EXPECT_EQ(safetensors::ReadFile(dir.File("o.safetensors"))->metadata_json, "");
}

}  // namespace
}  // namespace tensorsafe::testing
