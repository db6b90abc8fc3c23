// Dataset writer + reader round trips against an in-memory model, shard
// boundary rules, zstd shards, schema errors and atomicity (DATASET.md).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "dataset/internal.h"
#include "support/dataset_model.h"
#include "support/temp_dir.h"
#include "tensorsafe/dataset/dataset.h"
#include "tensorsafe/dataset/writer.h"

namespace tensorsafe::dataset {
namespace {

namespace fs = std::filesystem;
using testing::ModelSample;
using testing::TempDir;

std::vector<std::string> ListFiles(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Writes `samples` and returns the index (asserting success).
DatasetIndex WriteAll(const std::string& dir, const Schema& schema, const std::vector<ModelSample>& samples,
                      DatasetWriterOptions opt) {
  opt.sync = false;
  auto w = DatasetWriter::Create(dir, opt);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  for (std::size_t i = 0; i < samples.size(); ++i) {
    auto named = testing::ToNamed(schema, samples[i]);
    Status s = (*w)->Add(named);
    EXPECT_TRUE(s.ok()) << "sample " << i << ": " << s.ToString();
  }
  auto idx = (*w)->Finish();
  EXPECT_TRUE(idx.ok()) << idx.status().ToString();
  return idx.ok() ? *idx : DatasetIndex{};
}

void CheckAll(const std::string& dir, const Schema& schema, const std::vector<ModelSample>& samples,
              std::mt19937_64& rng, DatasetOptions dopt = {}) {
  auto ds = Dataset::Open(dir, dopt);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->num_samples(), samples.size());
  std::string why;
  ASSERT_TRUE(SameSchema((*ds)->schema(), schema, &why)) << why;
  Sample s;
  for (std::size_t i = 0; i < samples.size(); ++i) {  // random access
    ASSERT_TRUE((*ds)->Read(i, s).ok()) << i;
    ASSERT_EQ(testing::Diff(schema, samples[i], s), "") << "sample " << i;
    ASSERT_EQ(s.index, i);
  }
  std::vector<std::uint64_t> order(samples.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  if (!order.empty()) order.push_back(order.front());  // repeats are allowed
  auto it = (*ds)->Iterate(order);
  std::size_t n = 0;
  while (it.Next(s)) {
    ASSERT_EQ(s.index, order[n]);
    ASSERT_EQ(testing::Diff(schema, samples[order[n]], s), "") << "position " << n;
    ++n;
  }
  ASSERT_TRUE(it.status().ok()) << it.status().ToString();
  ASSERT_EQ(n, order.size());
  auto r = (*ds)->IterateRange(0, samples.size());
  n = 0;
  while (r.Next(s)) {
    ASSERT_EQ(testing::Diff(schema, samples[n], s), "") << n;
    ++n;
  }
  ASSERT_TRUE(r.status().ok());
  ASSERT_EQ(n, samples.size());
  EXPECT_TRUE((*ds)->Verify().ok()) << (*ds)->Verify().ToString();
  EXPECT_EQ((*ds)->Read(samples.size(), s).code(), StatusCode::kOutOfRange);
}

TEST(DatasetRoundTrip, RandomSchemasAgainstModel) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round));
    TempDir tmp;
    Schema schema = testing::RandomSchema(rng);
    const std::size_t n = rng() % 120;
    const bool declare = n == 0 || rng() % 2;
    if (!declare) {
      // A schema fixed by the first sample has that sample's shapes: make
      // every dim fixed so all samples agree.
      for (FieldSpec& f : schema.fields) {
        const auto& info = GetDTypeInfo(f.dtype);
        for (std::size_t d = 0; d < f.shape.size(); ++d) {
          if (f.shape[d] != kAnyDim) continue;
          f.shape[d] = d + 1 == f.shape.size() && info.block_elems > 1 ? info.block_elems : 2;
        }
      }
    }
    std::vector<ModelSample> samples;
    for (std::size_t i = 0; i < n; ++i) samples.push_back(testing::RandomSample(rng, schema));
    DatasetWriterOptions opt;
    if (declare) opt.schema = schema;
    opt.max_shard_bytes = rng() % 3 == 0 ? 0 : 1 + rng() % 2048;
    opt.max_shard_samples = rng() % 2 ? 0 : 1 + rng() % 20;
    if (opt.max_shard_bytes == 0 && opt.max_shard_samples == 0) opt.max_shard_samples = 50;
    opt.zstd_level = rng() % 4 == 0 ? 3 : 0;
    const std::string dir = tmp.File("ds");
    DatasetIndex idx = WriteAll(dir, schema, samples, opt);
    // ToNamed passes fields in reverse order: a schema fixed by the first
    // sample has them reversed.
    Schema effective = schema;
    if (!declare) {
      std::reverse(effective.fields.begin(), effective.fields.end());
      for (auto& smp : samples) std::reverse(smp.begin(), smp.end());
    }
    ASSERT_EQ(idx.samples, n);
    std::uint64_t total = 0;
    for (const ShardInfo& sh : idx.shards) {
      EXPECT_GT(sh.samples, 0u) << "empty shard " << sh.name;
      if (opt.max_shard_samples) EXPECT_LE(sh.samples, opt.max_shard_samples);
      EXPECT_EQ(sh.zstd.has_value(), opt.zstd_level != 0);
      total += sh.samples;
    }
    EXPECT_EQ(total, n);
    CheckAll(dir, effective, samples, rng);
    if (opt.zstd_level) {
      // A separate cache directory: content-addressed decompressed shards.
      TempDir cache;
      DatasetOptions d;
      d.cache_dir = cache.File("c");
      d.max_open_shards = 1;
      CheckAll(dir, effective, samples, rng, d);
    }
  }
}

// Every dtype, as a fixed field and as a variable one, in zstd and raw shards.
TEST(DatasetRoundTrip, EveryDTypeFixedAndVariable) {
  std::mt19937_64 rng(7);
  Schema schema;
  for (int code = 1; code <= kNumDTypes; ++code) {
    const DType dt = static_cast<DType>(code);
    const std::int64_t block = GetDTypeInfo(dt).block_elems;
    schema.fields.push_back({"fixed/" + std::string(DTypeName(dt)), FieldKind::kTensor, dt, {3, 2 * block}});
    schema.fields.push_back({"var." + std::string(DTypeName(dt)), FieldKind::kTensor, dt, {kAnyDim, block}});
  }
  std::vector<ModelSample> samples;
  for (int i = 0; i < 37; ++i) samples.push_back(testing::RandomSample(rng, schema));
  for (int zstd : {0, 5}) {
    TempDir tmp;
    DatasetWriterOptions opt;
    opt.schema = schema;
    opt.max_shard_bytes = 4096;
    opt.zstd_level = zstd;
    DatasetIndex idx = WriteAll(tmp.File("d"), schema, samples, opt);
    EXPECT_GT(idx.shards.size(), 1u);
    CheckAll(tmp.File("d"), schema, samples, rng);
  }
}

Schema IntSchema() {
  Schema s;
  s.fields.push_back({"i", FieldKind::kInt, DType::kU8, {}});
  return s;
}

Schema BytesSchema() {
  Schema s;
  s.fields.push_back({"b", FieldKind::kBytes, DType::kU8, {}});
  return s;
}

std::vector<std::uint64_t> ShardCounts(const DatasetIndex& idx) {
  std::vector<std::uint64_t> c;
  for (const auto& s : idx.shards) c.push_back(s.samples);
  return c;
}

TEST(DatasetWriterLimits, ByteLimitHitExactly) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema = IntSchema();
  opt.max_shard_bytes = 32;  // 4 int samples of 8 bytes
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 10; ++i) {
    NamedValue v{"i", FieldValue::Int(i)};
    ASSERT_TRUE((*w)->Add({&v, 1}).ok());
  }
  auto idx = (*w)->Finish();
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(ShardCounts(*idx), (std::vector<std::uint64_t>{4, 4, 2}));
  EXPECT_EQ(idx->shards[0].name, "shard-00000.tsafe");
  EXPECT_EQ(idx->shards[2].name, "shard-00002.tsafe");
}

TEST(DatasetWriterLimits, SampleLargerThanLimitGetsItsOwnShard) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema = BytesSchema();
  opt.max_shard_bytes = 100;
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  std::string big(500, 'x'), small(10, 'y');
  for (const std::string* s : {&small, &big, &small, &small, &big}) {
    NamedValue v{"b", FieldValue::Bytes(std::as_bytes(std::span(s->data(), s->size())))};
    ASSERT_TRUE((*w)->Add({&v, 1}).ok());
  }
  auto idx = (*w)->Finish();
  ASSERT_TRUE(idx.ok());
  // Never an empty shard before a big sample (MosaicML writes one there).
  EXPECT_EQ(ShardCounts(*idx), (std::vector<std::uint64_t>{1, 1, 2, 1}));
}

TEST(DatasetWriterLimits, SampleCountLimitAndPrefix) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema = IntSchema();
  opt.max_shard_samples = 3;
  opt.shard_prefix = "sub/host7";
  opt.first_shard = 12;
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 7; ++i) {
    NamedValue v{"i", FieldValue::Int(i * 10)};
    ASSERT_TRUE((*w)->Add({&v, 1}).ok());
  }
  auto idx = (*w)->Finish();
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(ShardCounts(*idx), (std::vector<std::uint64_t>{3, 3, 1}));
  EXPECT_EQ(idx->shards[0].name, "sub/host7-00012.tsafe");
  auto ds = Dataset::Open(tmp.File("d"));
  ASSERT_TRUE(ds.ok());
  Sample s;
  ASSERT_TRUE((*ds)->Read(6, s).ok());
  EXPECT_EQ(*AsInt(s.fields[0]), 60);
  EXPECT_EQ(AsFloat(s.fields[0]).status().code(), StatusCode::kInvalidArgument);
  auto loc = (*ds)->Locate(4);
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->shard, 1u);
  EXPECT_EQ(loc->local, 1u);
}

TEST(DatasetWriter, EmptyDatasetWithDeclaredSchema) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema = IntSchema();
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  auto idx = (*w)->Finish();
  ASSERT_TRUE(idx.ok());
  EXPECT_TRUE(idx->shards.empty());
  auto ds = Dataset::Open(tmp.File("d"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ((*ds)->num_samples(), 0u);
  Sample s;
  EXPECT_FALSE((*ds)->IterateRange(0, 10).Next(s));
}

TEST(DatasetWriter, NoSamplesNoSchemaFails) {
  TempDir tmp;
  auto w = DatasetWriter::Create(tmp.File("d"));
  ASSERT_TRUE(w.ok());
  auto idx = (*w)->Finish();
  EXPECT_EQ(idx.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(tmp.File("d/index.json")));
}

TEST(DatasetWriter, SampleErrorsNameSampleAndField) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  float xs[6] = {1, 2, 3, 4, 5, 6};
  auto xb = std::as_bytes(std::span(xs));
  std::vector<NamedValue> first = {{"x", FieldValue::Tensor(DType::kF32, {2, 3}, xb)}, {"y", FieldValue::Int(1)}};
  ASSERT_TRUE((*w)->Add(first).ok());
  EXPECT_EQ((*w)->schema().fields.size(), 2u);
  EXPECT_EQ((*w)->schema().fields[0].shape, (std::vector<std::int64_t>{2, 3}));
  struct Case {
    std::vector<NamedValue> sample;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back(
      {{{"x", FieldValue::Tensor(DType::kF32, {3, 2}, xb)}, {"y", FieldValue::Int(1)}},
       "sample 1: field \"x\": dimension 0 is 3, the schema says 2 (declare it as any-size to allow it to vary)"});
  cases.push_back({{{"x", FieldValue::Tensor(DType::kI32, {2, 3}, xb)}, {"y", FieldValue::Int(1)}},
                   "sample 1: field \"x\": dtype i32, the schema says f32"});
  cases.push_back({{{"x", FieldValue::Tensor(DType::kF32, {2, 3}, xb.first(20))}, {"y", FieldValue::Int(1)}},
                   "sample 1: field \"x\": 20 bytes for a f32 [2, 3] tensor of 24 bytes"});
  cases.push_back({{{"x", FieldValue::Tensor(DType::kF32, {2, 3}, xb)}}, "sample 1: field \"y\": missing"});
  cases.push_back({{{"x", FieldValue::Tensor(DType::kF32, {2, 3}, xb)}, {"y", FieldValue::Float(1)}},
                   "sample 1: field \"y\": value is float, the schema says int"});
  cases.push_back(
      {{{"x", FieldValue::Tensor(DType::kF32, {2, 3}, xb)}, {"y", FieldValue::Int(1)}, {"z", FieldValue::Int(1)}},
       "sample 1: field \"z\" is not in the schema"});
  cases.push_back(
      {{{"x", FieldValue::Tensor(DType::kF32, {2, 3}, xb)}, {"y", FieldValue::Int(1)}, {"y", FieldValue::Int(2)}},
       "sample 1: field \"y\": given twice"});
  for (const Case& c : cases) {
    Status s = (*w)->Add(c.sample);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), c.message);
  }
  // The writer stays usable after a rejected sample.
  ASSERT_TRUE((*w)->Add(first).ok());
  auto idx = (*w)->Finish();
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(idx->samples, 2u);
}

TEST(DatasetWriter, TextValuesChecked) {
  TempDir tmp;
  auto w = DatasetWriter::Create(tmp.File("d"));
  ASSERT_TRUE(w.ok());
  std::vector<NamedValue> ok = {{"s", FieldValue::Str("ok")}, {"j", FieldValue::Json("{\"a\": 1}")}};
  ASSERT_TRUE((*w)->Add(ok).ok());
  std::vector<NamedValue> bad_utf8 = {{"s", FieldValue::Str("\xff\xfe")}, {"j", FieldValue::Json("1")}};
  Status s = (*w)->Add(bad_utf8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "sample 1: field \"s\": str value is not valid UTF-8");
  std::vector<NamedValue> bad_json = {{"s", FieldValue::Str("x")}, {"j", FieldValue::Json("{nope")}};
  s = (*w)->Add(bad_json);
  EXPECT_EQ(s.message(), "sample 1: field \"j\": json value is not valid JSON text");
}

TEST(DatasetWriter, RefusesExistingDatasetAndBadOptions) {
  TempDir tmp;
  testing::WriteFileBytes(tmp.File("index.json"), "{}");
  EXPECT_EQ(DatasetWriter::Create(tmp.path().string()).status().code(), StatusCode::kFailedPrecondition);
  DatasetWriterOptions opt;
  opt.shard_prefix = "../up";
  EXPECT_EQ(DatasetWriter::Create(tmp.File("x"), opt).status().code(), StatusCode::kInvalidArgument);
  opt = {};
  opt.zstd_level = 23;
  EXPECT_EQ(DatasetWriter::Create(tmp.File("x"), opt).status().code(), StatusCode::kInvalidArgument);
}

// Nothing is visible after an abandoned writer or one that failed.
TEST(DatasetWriterAtomicity, AbandonRemovesShards) {
  TempDir tmp;
  const std::string dir = tmp.File("d");
  {
    DatasetWriterOptions opt;
    opt.schema = IntSchema();
    opt.max_shard_samples = 2;
    opt.sync = false;
    auto w = DatasetWriter::Create(dir, opt);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 7; ++i) {
      NamedValue v{"i", FieldValue::Int(i)};
      ASSERT_TRUE((*w)->Add({&v, 1}).ok());
    }
    EXPECT_EQ((*w)->shards_written(), 3u);
    EXPECT_EQ(ListFiles(dir).size(), 3u);
  }  // destroyed unfinished
  EXPECT_EQ(ListFiles(dir), std::vector<std::string>{});
}

TEST(DatasetWriterAtomicity, FailedShardWriteRemovesEverything) {
  TempDir tmp;
  const std::string dir = tmp.File("d");
  fs::create_directories(dir);
  // Another writer's shard in the way of our second shard: the flush fails.
  testing::WriteFileBytes(dir + "/shard-00001.tsafe", "theirs");
  DatasetWriterOptions opt;
  opt.schema = IntSchema();
  opt.max_shard_samples = 2;
  opt.sync = false;
  auto w = DatasetWriter::Create(dir, opt);
  ASSERT_TRUE(w.ok());
  Status last;
  for (int i = 0; i < 4 && last.ok(); ++i) {
    NamedValue v{"i", FieldValue::Int(i)};
    last = (*w)->Add({&v, 1});
  }
  EXPECT_EQ(last.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(last.message().find("shard-00001.tsafe already exists"), std::string::npos) << last.message();
  NamedValue v{"i", FieldValue::Int(9)};
  EXPECT_EQ((*w)->Add({&v, 1}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->Finish().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ListFiles(dir), std::vector<std::string>{"shard-00001.tsafe"});
}

// Writers racing in one directory with one prefix: each shard name is won
// by exactly one of them, and every file on disk is the one its winner
// recorded (an existence check before the rename let a loser replace it).
TEST(DatasetWriterAtomicity, RacingWritersNeverReplaceEachOthersShards) {
  TempDir tmp;
  for (int round = 0; round < 4; ++round) {  // a race: several chances to show
    const std::string dir = tmp.File("d" + std::to_string(round));
    fs::create_directories(dir);
    constexpr int kWriters = 6;
    std::mutex mu;
    std::map<std::string, std::vector<std::string>> winners;  // shard name -> xxh3 recorded
    std::vector<std::unique_ptr<DatasetWriter>> writers;
    for (int t = 0; t < kWriters; ++t) {
      DatasetWriterOptions opt;
      opt.schema = BytesSchema();
      opt.max_shard_samples = 1;
      opt.sync = false;
      opt.on_shard = [&](const ShardInfo& info) {
        std::lock_guard<std::mutex> lock(mu);
        winners[info.name].push_back(info.xxh3);
      };
      auto w = DatasetWriter::Create(dir, opt);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      writers.push_back(std::move(*w));
    }
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kWriters; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kWriters) std::this_thread::yield();
        // 1 MiB samples keep each shard's write (the old check-then-rename
        // window) long enough for the race to show.
        std::string b(1 << 20, static_cast<char>('a' + t));
        for (int i = 0; i < 12; ++i) {
          NamedValue v{"b", FieldValue::Bytes(std::as_bytes(std::span(b.data(), b.size())))};
          if (!writers[t]->Add({&v, 1}).ok()) break;  // lost a name: this writer is done
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_FALSE(winners.empty());
    for (const auto& [name, sums] : winners) {
      ASSERT_EQ(sums.size(), 1u) << name << " was written by two writers";
      auto d = internal::DigestFile(dir + "/" + name);
      ASSERT_TRUE(d.ok()) << name << ": " << d.status().ToString();
      EXPECT_EQ(HashHex(d->xxh3), sums[0]) << name << " is not the file its writer recorded";
    }
    writers.clear();  // unfinished: each removes only the files it claimed
    EXPECT_EQ(ListFiles(dir), std::vector<std::string>{});
  }
}

TEST(DatasetReader, SampleOutlivesDatasetAndEviction) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema = BytesSchema();
  opt.max_shard_samples = 1;
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 5; ++i) {
    std::string b(100 + i, static_cast<char>('a' + i));
    NamedValue v{"b", FieldValue::Bytes(std::as_bytes(std::span(b.data(), b.size())))};
    ASSERT_TRUE((*w)->Add({&v, 1}).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  Sample kept;
  {
    DatasetOptions o;
    o.max_open_shards = 1;
    auto ds = Dataset::Open(tmp.File("d"), o);
    ASSERT_TRUE(ds.ok());
    ASSERT_TRUE((*ds)->Read(0, kept).ok());
    Sample other;
    for (int i = 1; i < 5; ++i) ASSERT_TRUE((*ds)->Read(i, other).ok());  // evicts shard 0
  }
  ASSERT_EQ(kept.fields[0].bytes.size(), 100u);
  EXPECT_EQ(static_cast<char>(kept.fields[0].bytes[99]), 'a');
}

// One Dataset shared by threads that iterate shuffled orders and read at
// random while a tiny LRU keeps evicting: every sample as in the model.
TEST(DatasetReader, ConcurrentReadersAgreeWithTheModel) {
  const std::uint64_t seed = testing::TestSeed();
  std::mt19937_64 rng(seed);
  Schema schema;
  schema.fields.push_back({"x", FieldKind::kTensor, DType::kF32, {kAnyDim, 2}});
  schema.fields.push_back({"b", FieldKind::kBytes, DType::kU8, {}});
  schema.fields.push_back({"i", FieldKind::kInt, DType::kU8, {}});
  std::vector<ModelSample> samples;
  for (int i = 0; i < 400; ++i) samples.push_back(testing::RandomSample(rng, schema, 300));
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema = schema;
  opt.max_shard_samples = 13;
  WriteAll(tmp.File("d"), schema, samples, opt);
  DatasetOptions dopt;
  dopt.max_open_shards = 2;
  auto ds = Dataset::Open(tmp.File("d"), dopt);
  ASSERT_TRUE(ds.ok());
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 r(seed + t);
      std::vector<std::uint64_t> order(samples.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), r);
      auto it = (*ds)->Iterate(order);
      Sample s;
      for (std::size_t k = 0; it.Next(s); ++k) {
        std::string d = testing::Diff(schema, samples[order[k]], s);
        if (!d.empty() && errors[t].empty()) errors[t] = "iterate " + std::to_string(order[k]) + ": " + d;
        Sample one;
        const std::uint64_t j = r() % samples.size();
        Status st = (*ds)->Read(j, one);
        d = st.ok() ? testing::Diff(schema, samples[j], one) : st.ToString();
        if (!d.empty() && errors[t].empty()) errors[t] = "read " + std::to_string(j) + ": " + d;
      }
      if (!it.status().ok()) errors[t] = it.status().ToString();
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

// The prefetcher hears of the shards an iterator will enter next in its own
// order (a shuffled one here), and Read() of the shards after the one it
// opened, in index order.
TEST(DatasetReader, PrefetchHintsFollowTheReadOrder) {
  TempDir tmp;
  DatasetWriterOptions opt;
  opt.schema = BytesSchema();
  opt.max_shard_samples = 2;  // shard k holds samples 2k, 2k+1
  opt.sync = false;
  auto w = DatasetWriter::Create(tmp.File("d"), opt);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 12; ++i) {
    std::string b(1, static_cast<char>('a' + i));
    NamedValue v{"b", FieldValue::Bytes(std::as_bytes(std::span(b.data(), b.size())))};
    ASSERT_TRUE((*w)->Add({&v, 1}).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  auto index = ReadIndexFile(tmp.File("d"));
  ASSERT_TRUE(index.ok());
  std::mutex mu;
  std::vector<std::vector<std::size_t>> hints;
  ShardPrefetcher record = [&](std::span<const std::size_t> ids) {
    std::lock_guard<std::mutex> lock(mu);
    hints.emplace_back(ids.begin(), ids.end());
  };
  DatasetOptions o;
  o.prefetch_shards = 2;
  auto ds = Dataset::FromShards(tmp.File("d"), index->schema, index->shards,
                                Dataset::NativeOpener(tmp.File("d"), index->schema, o), o, "", record);
  ASSERT_TRUE(ds.ok());
  // Shards entered: 4, 1 (sample 3), 5, 4 again (a slot hit: no hint), 0, 2.
  auto it = (*ds)->Iterate({9, 3, 2, 10, 8, 11, 0, 5});
  Sample s;
  std::string seen;
  while (it.Next(s)) seen += static_cast<char>(s.fields[0].bytes[0]);
  ASSERT_TRUE(it.status().ok()) << it.status().ToString();
  EXPECT_EQ(seen, "jdckilaf");
  using V = std::vector<std::size_t>;
  EXPECT_EQ(hints, (std::vector<V>{{1, 5}, {5, 4}, {4, 0}, {2}}));
  hints.clear();
  // A range: the shards after, up to the range's last.
  auto r = (*ds)->IterateRange(5, 9);
  while (r.Next(s)) {
  }
  EXPECT_EQ(hints, (std::vector<V>{{3, 4}, {4}}));
  hints.clear();
  ASSERT_TRUE((*ds)->Read(6, s).ok());   // shard 3, already open in the LRU: no hint
  ASSERT_TRUE((*ds)->Read(11, s).ok());  // shard 5 was opened by the iterator
  EXPECT_TRUE(hints.empty());
  DatasetOptions fresh_o = o;
  auto fresh = Dataset::FromShards(tmp.File("d"), index->schema, index->shards,
                                   Dataset::NativeOpener(tmp.File("d"), index->schema, o), fresh_o, "", record);
  ASSERT_TRUE((*fresh)->Read(7, s).ok());   // opens shard 3
  ASSERT_TRUE((*fresh)->Read(10, s).ok());  // opens shard 5, the last
  EXPECT_EQ(hints, (std::vector<V>{{4, 5}}));
}

}  // namespace
}  // namespace tensorsafe::dataset
