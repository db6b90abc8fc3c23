// Each reader check of DATASET.md §5 exercised by a mutated shard or index,
// with its code and message; merge rules incl. path escapes (issue #8).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "support/temp_dir.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/shard.h"
#include "tensorsafe/dataset/writer.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::dataset {
namespace {

namespace fs = std::filesystem;
using testing::ReadFileBytes;
using testing::TempDir;
using testing::WriteFileBytes;

struct RawTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::string bytes;
};

template <typename T>
std::string Bytes(std::initializer_list<T> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(T));
}

// The valid base shard: "v" f32 [*] (samples [1, 2] and [3]) and "i" int (7, 8).
struct RawShard {
  std::string meta = R"({"format":"tensorsafe-dataset-shard","version":1,"samples":2,"schema":)"
                     R"([{"name":"v","kind":"tensor","dtype":"f32","shape":[null]},{"name":"i","kind":"int"}]})";
  std::vector<RawTensor> tensors = {
      {"col/0/data", DType::kU8, {12}, Bytes<float>({1, 2, 3})},
      {"col/0/offsets", DType::kU64, {3}, Bytes<std::uint64_t>({0, 8, 12})},
      {"col/0/shapes", DType::kI64, {2, 1}, Bytes<std::int64_t>({2, 1})},
      {"col/1/values", DType::kI64, {2}, Bytes<std::int64_t>({7, 8})},
  };
  RawTensor* Find(const std::string& name) {
    for (auto& t : tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  void Write(const std::string& path) const {
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    for (const auto& t : tensors) {
      ASSERT_TRUE((*w)->Add(t.name, TensorView::Contiguous(t.dtype, t.shape,
                                                           std::as_bytes(std::span(t.bytes.data(), t.bytes.size()))))
                      .ok());
    }
    ASSERT_TRUE((*w)->SetMetadata(meta).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
};

Status OpenRaw(const TempDir& tmp, const RawShard& r, std::string* path_out = nullptr) {
  const std::string path = tmp.File("s.tsafe");
  r.Write(path);
  if (path_out) *path_out = path;
  return TsafeShard::Open(path).status();
}

TEST(ShardChecks, BaseShardReads) {
  TempDir tmp;
  std::string path;
  ASSERT_TRUE(OpenRaw(tmp, RawShard{}, &path).ok());
  auto s = TsafeShard::Open(path);
  ASSERT_TRUE(s.ok());
  std::vector<FieldView> f;
  ASSERT_TRUE((*s)->Read(1, f).ok());
  EXPECT_EQ(f[0].shape, std::vector<std::int64_t>{1});
  EXPECT_EQ(f[0].bytes.size(), 4u);
  EXPECT_EQ(*AsInt(f[1]), 8);
  Status oor = (*s)->Read(2, f);
  EXPECT_EQ(oor.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(oor.message(), path + ": sample 2 is out of range (2 samples)");
  EXPECT_TRUE((*s)->VerifyData().ok());
}

struct ShardCase {
  const char* what;
  void (*mutate)(RawShard&);
  StatusCode code;
  const char* message;  // after "<path>: "
};

const ShardCase kShardCases[] = {
    {"S2 format", [](RawShard& r) { r.meta = R"({"format":"other","version":1})"; }, StatusCode::kCorruption,
     "not a dataset shard: metadata \"format\" is not \"tensorsafe-dataset-shard\""},
    {"S3 version", [](RawShard& r) { r.meta.replace(r.meta.find("\"version\":1"), 11, "\"version\":2"); },
     StatusCode::kUnsupported, "shard version 2 is newer than the supported 1"},
    {"S2 samples", [](RawShard& r) { r.meta.replace(r.meta.find("\"samples\":2"), 11, "\"samples\":0"); },
     StatusCode::kCorruption, "metadata \"samples\" is missing or not a positive integer"},
    {"S4 schema", [](RawShard& r) { r.meta.replace(r.meta.find("\"int\""), 5, "\"integer\""); },
     StatusCode::kCorruption,
     "schema field 1: unknown field kind \"integer\" (expected tensor, bytes, str, int, float or json)"},
    {"S5 missing tensor", [](RawShard& r) { r.Find("col/0/offsets")->name = "col/0/offs"; }, StatusCode::kCorruption,
     "field 0 \"v\": tensor \"col/0/offsets\" is missing"},
    {"S6 values dtype",
     [](RawShard& r) {
       auto* t = r.Find("col/1/values");
       t->dtype = DType::kI32;
       t->shape = {4};
     },
     StatusCode::kCorruption, "field 1 \"i\": tensor \"col/1/values\" is i32 [4], expected i64 [2]"},
    {"S6 offsets shape",
     [](RawShard& r) {
       r.Find("col/0/offsets")->shape = {1, 3};
     },
     StatusCode::kCorruption, "field 0 \"v\": tensor \"col/0/offsets\" is u64 [1, 3], expected u64 [3]"},
    {"S8 first offset",
     [](RawShard& r) {
       r.Find("col/0/offsets")->bytes = Bytes<std::uint64_t>({4, 8, 12});
     },
     StatusCode::kCorruption, "field 0 \"v\": offsets[0] is 4, expected 0"},
    {"S8 decreasing",
     [](RawShard& r) {
       r.Find("col/0/offsets")->bytes = Bytes<std::uint64_t>({0, 12, 8});
     },
     StatusCode::kCorruption, "field 0 \"v\": sample 1: offsets[2] = 8 is below offsets[1] = 12"},
    {"S8 past the end",
     [](RawShard& r) {
       r.Find("col/0/offsets")->bytes = Bytes<std::uint64_t>({0, 8, 16});
     },
     StatusCode::kCorruption, "field 0 \"v\": sample 1: offset 16 is past the end of the data (12 bytes)"},
    {"S8 short of the end",
     [](RawShard& r) {
       auto* d = r.Find("col/0/data");
       d->bytes += std::string(4, '\0');
       d->shape = {16};
     },
     StatusCode::kCorruption, "field 0 \"v\": offsets[2] = 12, expected the data length 16"},
    {"S9 alignment",
     [](RawShard& r) {
       r.Find("col/0/offsets")->bytes = Bytes<std::uint64_t>({0, 6, 12});
       r.Find("col/0/shapes")->bytes = Bytes<std::int64_t>({1, 1});
     },
     StatusCode::kCorruption, "field 0 \"v\": sample 1: offset 6 is not a multiple of the element size 4"},
    {"S10 negative dim",
     [](RawShard& r) {
       r.Find("col/0/shapes")->bytes = Bytes<std::int64_t>({-1, 1});
     },
     StatusCode::kCorruption, "field 0 \"v\": sample 0: dimension 0 is -1"},
    {"S10 size",
     [](RawShard& r) {
       r.Find("col/0/shapes")->bytes = Bytes<std::int64_t>({3, 1});
     },
     StatusCode::kCorruption, "field 0 \"v\": sample 0: shape [3] needs 12 bytes but its slot holds 8"},
    {"S10 fixed dim",
     [](RawShard& r) {
       r.meta.replace(r.meta.find("[null]"), 6, "[null,2]");
       r.Find("col/0/shapes")->shape = {2, 2};
       r.Find("col/0/shapes")->bytes = Bytes<std::int64_t>({1, 3, 1, 2});
     },
     StatusCode::kCorruption, "field 0 \"v\": sample 0: dimension 1 is 3, the schema says 2"},
};

TEST(ShardChecks, EachCheckHasItsError) {
  for (const ShardCase& c : kShardCases) {
    SCOPED_TRACE(c.what);
    TempDir tmp;
    RawShard r;
    c.mutate(r);
    std::string path;
    Status s = OpenRaw(tmp, r, &path);
    EXPECT_EQ(s.code(), c.code) << s.ToString();
    EXPECT_EQ(s.message(), path + ": " + c.message);
  }
}

TEST(ShardChecks, ExpectedSchemaAndDataChecksums) {
  TempDir tmp;
  std::string path;
  ASSERT_TRUE(OpenRaw(tmp, RawShard{}, &path).ok());
  Schema other;
  other.fields.push_back({"v", FieldKind::kTensor, DType::kF64, {kAnyDim}});
  other.fields.push_back({"i", FieldKind::kInt, DType::kU8, {}});
  Status s = TsafeShard::Open(path, {}, &other).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_EQ(s.message(),
            path + ": schema differs from the index: field 0: \"v\" tensor f64 [*] vs \"v\" tensor f32 [*]");
  // A flipped data byte passes the open checks but not VerifyData.
  std::string bytes = ReadFileBytes(path);
  auto reader = Reader::Open(path);
  ASSERT_TRUE(reader.ok());
  auto info = (*reader)->Find("col/1/values");
  ASSERT_TRUE(info.ok());
  bytes[info->data_offset] ^= 1;
  reader->reset();
  WriteFileBytes(path, bytes);
  auto shard = TsafeShard::Open(path);
  ASSERT_TRUE(shard.ok()) << shard.status().ToString();
  Status v = (*shard)->VerifyData();
  EXPECT_EQ(v.code(), StatusCode::kCorruption);
  EXPECT_NE(v.message().find("col/1/values"), std::string::npos) << v.message();
}

TEST(ShardChecks, VerifyChecksTextFields) {
  TempDir tmp;
  RawShard r;
  r.meta = R"({"format":"tensorsafe-dataset-shard","version":1,"samples":1,"schema":[{"name":"s","kind":"str"}]})";
  r.tensors = {{"col/0/data", DType::kU8, {2}, "\xff\xfe"},
               {"col/0/offsets", DType::kU64, {2}, Bytes<std::uint64_t>({0, 2})}};
  std::string path;
  ASSERT_TRUE(OpenRaw(tmp, r, &path).ok());
  auto s = TsafeShard::Open(path);
  Status v = (*s)->VerifyData();
  EXPECT_EQ(v.code(), StatusCode::kCorruption);
  EXPECT_EQ(v.message(), path + ": field 0 \"s\": sample 0: str value is not valid UTF-8");
}

// --- index.json --------------------------------------------------------

std::string GoodIndex() {
  return R"({"format":"tensorsafe-dataset","version":1,"samples":3,)"
         R"("schema":[{"name":"i","kind":"int"}],)"
         R"("shards":[{"name":"a.tsafe","samples":1,"bytes":10,"xxh3":"0123456789abcdef"},)"
         R"({"name":"d/b.tsafe","samples":2,"bytes":10,"xxh3":"0123456789abcdef"}]})";
}

struct IndexCase {
  const char* what;
  std::string from, to;
  StatusCode code;
  const char* message;  // after "idx: "
};

TEST(IndexChecks, EachRuleHasItsError) {
  ASSERT_TRUE(ParseIndex(GoodIndex(), "idx").ok()) << ParseIndex(GoodIndex(), "idx").status().ToString();
  const IndexCase cases[] = {
      {"I1 json", "{\"format\"", "[\"format\"", StatusCode::kCorruption, "not valid JSON"},
      {"I2 format", "tensorsafe-dataset", "mds", StatusCode::kCorruption, "\"format\" is not \"tensorsafe-dataset\""},
      {"I3 version", "\"version\":1", "\"version\":2", StatusCode::kUnsupported,
       "index version 2 is newer than the supported 1"},
      {"I3 version 0", "\"version\":1", "\"version\":0", StatusCode::kCorruption, "index version 0 is not valid"},
      {"I4 schema", "\"kind\":\"int\"", "\"kind\":\"int\",\"x\":1},{\"name\":\"i\",\"kind\":\"int\"",
       StatusCode::kCorruption, "field 1 \"i\": duplicate name"},
      {"I5 samples", "\"samples\":3", "\"samples\":-3", StatusCode::kCorruption,
       "\"samples\" is not a non-negative integer"},
      {"I6 dotdot", "d/b.tsafe", "d/../../b.tsafe", StatusCode::kCorruption,
       "shard 1: shard name \"d/../../b.tsafe\" has a \"..\" component (escapes are refused)"},
      {"I6 absolute", "d/b.tsafe", "/etc/passwd", StatusCode::kCorruption,
       "shard 1: shard name \"/etc/passwd\" is absolute (names are relative to the dataset root)"},
      {"I6 empty component", "d/b.tsafe", "d//b.tsafe", StatusCode::kCorruption,
       "shard 1: shard name \"d//b.tsafe\" has an empty path component"},
      {"I6 backslash", "d/b.tsafe", "d\\\\b.tsafe", StatusCode::kCorruption,
       "shard 1: shard name \"d\\\\b.tsafe\" contains a backslash"},
      {"I5 empty shard", "\"samples\":1,", "\"samples\":0,", StatusCode::kCorruption,
       "shard 0 \"a.tsafe\": 0 samples (shards are never empty)"},
      {"I5 hex", "\"xxh3\":\"0123456789abcdef\"}]", "\"xxh3\":\"0123456789ABCDEF\"}]", StatusCode::kCorruption,
       "shard 1: \"xxh3\" is not 16 lower-case hex digits: \"0123456789ABCDEF\""},
      {"I8 duplicate", "d/b.tsafe", "a.tsafe", StatusCode::kCorruption, "shard 1: name \"a.tsafe\" is listed twice"},
      {"I9 total", "\"samples\":3", "\"samples\":4", StatusCode::kCorruption, "\"samples\" is 4 but the shards hold 3"},
      {"I10 metadata", "\"shards\":", "\"metadata\":[1],\"shards\":", StatusCode::kCorruption,
       "\"metadata\" is not an object"},
  };
  for (const IndexCase& c : cases) {
    SCOPED_TRACE(c.what);
    std::string text = GoodIndex();
    const auto at = text.find(c.from);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, c.from.size(), c.to);
    auto r = ParseIndex(text, "idx");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code);
    EXPECT_EQ(r.status().message(), std::string("idx: ") + c.message);
  }
  IndexLimits small;
  small.max_index_bytes = 10;
  EXPECT_EQ(ParseIndex(GoodIndex(), "idx", small).status().code(), StatusCode::kLimitExceeded);
}

TEST(IndexChecks, EncodeParseRoundTrip) {
  auto idx = ParseIndex(GoodIndex(), "idx");
  ASSERT_TRUE(idx.ok());
  idx->shards[0].zstd = StoredFile{"a.tsafe.zst", 5, "00000000000000ff"};
  idx->metadata_json = R"({"k":[1,2]})";
  const std::string text = EncodeIndex(*idx);
  auto again = ParseIndex(text, "idx");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << text;
  EXPECT_EQ(EncodeIndex(*again), text);
  EXPECT_EQ(again->shards[0].zstd->name, "a.tsafe.zst");
  EXPECT_EQ(again->metadata_json, R"({"k":[1,2]})");
}

// --- a written dataset, then damaged -------------------------------------

std::string WriteSmall(const TempDir& tmp, const std::string& name, int n, int per_shard, int zstd = 0,
                       const std::string& field = "i") {
  const std::string dir = tmp.File(name);
  DatasetWriterOptions opt;
  opt.max_shard_samples = per_shard;
  opt.zstd_level = zstd;
  opt.sync = false;
  auto w = DatasetWriter::Create(dir, opt);
  EXPECT_TRUE(w.ok());
  for (int i = 0; i < n; ++i) {
    const std::string text(i, 'x');  // outlives Add(): values are views
    std::vector<NamedValue> v = {{field, FieldValue::Int(i)}, {"s", FieldValue::Str(text)}};
    EXPECT_TRUE((*w)->Add(v).ok());
  }
  EXPECT_TRUE((*w)->Finish().ok());
  return dir;
}

TEST(DatasetChecks, ShardHashMismatchFoundByVerify) {
  TempDir tmp;
  const std::string dir = WriteSmall(tmp, "d", 6, 2);
  // Replace shard 1 by a valid shard of other samples: opens fine, hash differs.
  const std::string other = WriteSmall(tmp, "o", 6, 2, 0);
  std::string bytes = ReadFileBytes(other + "/shard-00002.tsafe");
  WriteFileBytes(dir + "/shard-00001.tsafe", bytes);
  auto ds = Dataset::Open(dir);
  ASSERT_TRUE(ds.ok());
  std::vector<Status> problems;
  Status v = (*ds)->Verify(&problems);
  EXPECT_EQ(v.code(), StatusCode::kCorruption);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(v.message().find("shard 1 \"shard-00001.tsafe\": shard-00001.tsafe has"), std::string::npos) << v.message();
  DatasetOptions o;
  o.verify_on_open = true;
  auto ds2 = Dataset::Open(dir, o);
  Sample s;
  EXPECT_TRUE((*ds2)->Read(0, s).ok());
  Status r = (*ds2)->Read(2, s);
  EXPECT_EQ(r.code(), StatusCode::kCorruption);
  EXPECT_NE(r.message().find("the index says"), std::string::npos) << r.message();
}

TEST(DatasetChecks, ShardSampleCountDiffersFromIndex) {
  TempDir tmp;
  const std::string dir = WriteSmall(tmp, "d", 6, 2);
  const std::string other = WriteSmall(tmp, "o", 3, 3);
  WriteFileBytes(dir + "/shard-00001.tsafe", ReadFileBytes(other + "/shard-00000.tsafe"));
  auto ds = Dataset::Open(dir);
  Sample s;
  Status r = (*ds)->Read(2, s);
  EXPECT_EQ(r.code(), StatusCode::kCorruption);
  EXPECT_EQ(r.message(), dir + ": shard 1 \"shard-00001.tsafe\" holds 3 samples, the index says 2");
}

TEST(DatasetChecks, MissingShardIsIOError) {
  TempDir tmp;
  const std::string dir = WriteSmall(tmp, "d", 4, 2);
  fs::remove(dir + "/shard-00001.tsafe");
  auto ds = Dataset::Open(dir);
  Sample s;
  Status r = (*ds)->Read(3, s);
  EXPECT_EQ(r.code(), StatusCode::kIOError);
  EXPECT_NE(r.message().find("shard-00001.tsafe"), std::string::npos);
  EXPECT_EQ(Dataset::Open(tmp.File("nothing")).status().code(), StatusCode::kIOError);
}

TEST(DatasetChecks, SymlinkOutsideTheDatasetIsRefused) {
  TempDir tmp;
  const std::string dir = WriteSmall(tmp, "d", 4, 2);
  const std::string outside = WriteSmall(tmp, "outside", 4, 2);
  fs::remove(dir + "/shard-00001.tsafe");
  fs::create_symlink(outside + "/shard-00001.tsafe", dir + "/shard-00001.tsafe");
  auto ds = Dataset::Open(dir);
  Sample s;
  Status r = (*ds)->Read(3, s);
  EXPECT_EQ(r.code(), StatusCode::kCorruption);
  EXPECT_NE(r.message().find("outside the dataset directory"), std::string::npos) << r.message();
  // A symlink that stays inside is fine.
  fs::remove(dir + "/shard-00001.tsafe");
  fs::create_directories(dir + "/real");
  fs::copy_file(outside + "/shard-00001.tsafe", dir + "/real/s1.tsafe");
  fs::create_symlink("real/s1.tsafe", dir + "/shard-00001.tsafe");
  auto ds2 = Dataset::Open(dir);
  EXPECT_TRUE((*ds2)->Read(3, s).ok());
}

TEST(DatasetChecks, DamagedZstdShardLeavesNothingCached) {
  TempDir tmp;
  const std::string dir = WriteSmall(tmp, "d", 4, 2, /*zstd=*/3);
  ASSERT_TRUE(fs::exists(dir + "/shard-00000.tsafe.zst"));
  ASSERT_FALSE(fs::exists(dir + "/shard-00000.tsafe"));
  std::string z = ReadFileBytes(dir + "/shard-00001.tsafe.zst");
  z[z.size() / 2] ^= 0x40;
  WriteFileBytes(dir + "/shard-00001.tsafe.zst", z);
  auto ds = Dataset::Open(dir);
  Sample s;
  ASSERT_TRUE((*ds)->Read(0, s).ok());
  EXPECT_TRUE(fs::exists(dir + "/shard-00000.tsafe"));  // decompressed on first use
  Status r = (*ds)->Read(2, s);
  EXPECT_EQ(r.code(), StatusCode::kCorruption);
  EXPECT_NE(r.message().find("shard-00001.tsafe.zst"), std::string::npos) << r.message();
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find("shard-00001.tsafe.tmp"), std::string::npos);
    EXPECT_NE(e.path().filename().string(), "shard-00001.tsafe");
  }
}

// --- merge -----------------------------------------------------------------

TEST(Merge, PartsBecomeOneDatasetWithoutCopies) {
  TempDir tmp;
  const std::string out = tmp.File("out");
  fs::create_directories(out);
  WriteSmall(tmp, "out/p0", 5, 2);
  WriteSmall(tmp, "out/p1", 3, 2, /*zstd=*/1);
  auto m = Merge(out, {"p0", out + "/p1"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->samples, 8u);
  ASSERT_EQ(m->shards.size(), 5u);
  EXPECT_EQ(m->shards[0].name, "p0/shard-00000.tsafe");
  EXPECT_EQ(m->shards[4].zstd->name, "p1/shard-00001.tsafe.zst");
  auto ds = Dataset::Open(out);
  ASSERT_TRUE(ds.ok());
  Sample s;
  std::vector<std::int64_t> got;
  auto it = (*ds)->IterateRange(0, 8);
  while (it.Next(s)) got.push_back(*AsInt(s.fields[0]));
  EXPECT_EQ(got, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 0, 1, 2}));
  EXPECT_TRUE((*ds)->Verify().ok()) << (*ds)->Verify().ToString();
  // Again: the index exists now.
  EXPECT_EQ(Merge(out, {"p0"}).status().code(), StatusCode::kFailedPrecondition);
  MergeOptions o;
  o.overwrite = true;
  o.metadata_json = R"({"merged":true})";
  auto m2 = Merge(out, {"p1"}, o);
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(m2->samples, 3u);
}

TEST(Merge, SchemaMismatchIsRefused) {
  TempDir tmp;
  const std::string out = tmp.File("out");
  fs::create_directories(out);
  WriteSmall(tmp, "out/p0", 2, 2);
  WriteSmall(tmp, "out/p1", 2, 2, 0, "j");
  auto m = Merge(out, {"p0", "p1"});
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.status().message(),
            "merge: the schema of part p1 differs from that of part p0: field 0: \"i\" int vs \"j\" int");
  EXPECT_FALSE(fs::exists(out + "/index.json"));
}

TEST(Merge, PathEscapesAreRefused) {
  TempDir tmp;
  const std::string out = tmp.File("out");
  fs::create_directories(out);
  WriteSmall(tmp, "out/p0", 2, 2);
  WriteSmall(tmp, "elsewhere", 2, 2);
  const std::string real_out = fs::canonical(out).string();
  struct Case {
    std::vector<std::string> parts;
    StatusCode code;
    std::string contains;
  };
  fs::create_directory_symlink(tmp.File("elsewhere"), out + "/link");
  std::vector<Case> cases = {
      {{"../elsewhere"}, StatusCode::kInvalidArgument, "which is not a subdirectory of " + real_out},
      {{tmp.File("elsewhere")}, StatusCode::kInvalidArgument, "which is not a subdirectory of " + real_out},
      {{"link"}, StatusCode::kInvalidArgument, "which is not a subdirectory of " + real_out},
      {{"."}, StatusCode::kInvalidArgument, "which is not a subdirectory of"},
      {{"p0", "p0/"}, StatusCode::kInvalidArgument, "merge: part p0 is listed twice"},
      {{}, StatusCode::kInvalidArgument, "merge: no parts given"},
  };
  for (const Case& c : cases) {
    auto m = Merge(out, c.parts);
    EXPECT_EQ(m.status().code(), c.code) << m.status().ToString();
    EXPECT_NE(m.status().message().find(c.contains), std::string::npos) << m.status().message();
  }
  // A part whose shard is a symlink leading out of the dataset.
  fs::remove(out + "/p0/shard-00000.tsafe");
  fs::create_symlink(tmp.File("elsewhere/shard-00000.tsafe"), out + "/p0/shard-00000.tsafe");
  auto m = Merge(out, {"p0"});
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("outside the dataset directory"), std::string::npos) << m.status().message();
  // A part index naming a shard with "..": refused when the part is parsed.
  std::string idx = ReadFileBytes(out + "/p0/index.json");
  idx.replace(idx.find("shard-00000.tsafe"), 17, "../p0/shard-00000.tsafe");
  WriteFileBytes(out + "/p0/index.json", idx);
  m = Merge(out, {"p0"});
  EXPECT_EQ(m.status().code(), StatusCode::kCorruption);
  EXPECT_NE(m.status().message().find("has a \"..\" component"), std::string::npos) << m.status().message();
  EXPECT_FALSE(fs::exists(out + "/index.json"));
}

}  // namespace
}  // namespace tensorsafe::dataset

namespace tensorsafe::dataset {
namespace {

// DATASET.md §2.4 in both directions: the writer's shard for the example
// holds exactly the documented column tensors, and its index is golden.
TEST(GoldenExample, WriterOutputMatchesTheSpec) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema.fields.push_back({"v", FieldKind::kTensor, DType::kF32, {kAnyDim}});
  opt.schema.fields.push_back({"i", FieldKind::kInt, DType::kU8, {}});
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  const float v0[] = {1, 2}, v1[] = {3};
  std::vector<NamedValue> s0 = {{"v", FieldValue::Tensor(DType::kF32, {2}, std::as_bytes(std::span(v0)))},
                                {"i", FieldValue::Int(7)}};
  std::vector<NamedValue> s1 = {{"i", FieldValue::Int(8)},
                                {"v", FieldValue::Tensor(DType::kF32, {1}, std::as_bytes(std::span(v1)))}};
  ASSERT_TRUE((*w)->Add(s0).ok());
  ASSERT_TRUE((*w)->Add(s1).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto reader = Reader::Open(tmp.File("d/shard-00000.tsafe"));
  ASSERT_TRUE(reader.ok());
  RawShard base;
  auto names = (*reader)->Names();
  ASSERT_EQ(names->size(), base.tensors.size());
  for (const RawTensor& t : base.tensors) {
    auto got = (*reader)->Get(t.name);
    ASSERT_TRUE(got.ok()) << t.name;
    EXPECT_EQ(got->info.dtype, t.dtype) << t.name;
    EXPECT_EQ(got->info.shape, t.shape) << t.name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(got->data.data()), got->data.size()), t.bytes) << t.name;
  }
  EXPECT_EQ(
      *(*reader)->Metadata(),
      R"({"format":"tensorsafe-dataset-shard","samples":2,"schema":[{"dtype":"f32","kind":"tensor","name":"v","shape":[null]},{"kind":"int","name":"i"}],"version":1})");
  // The shard's XXH3 pins every byte of the shard file (deterministic writer).
  EXPECT_EQ(ReadFileBytes(tmp.File("d/index.json")),
            "{\"format\": \"tensorsafe-dataset\",\n"
            " \"version\": 1,\n"
            " \"samples\": 2,\n"
            " \"schema\": [{\"dtype\":\"f32\",\"kind\":\"tensor\",\"name\":\"v\",\"shape\":[null]},"
            "{\"kind\":\"int\",\"name\":\"i\"}],\n"
            " \"shards\": [\n"
            "  {\"bytes\":1008,\"name\":\"shard-00000.tsafe\",\"samples\":2,\"xxh3\":\"2a1632d5f29d1003\"}\n"
            " ]}\n");
}

}  // namespace
}  // namespace tensorsafe::dataset
