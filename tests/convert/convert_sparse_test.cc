// Sparse COO across conversion (CONVERT.md §4): BTF COO records <-> native
// COO tensors (FORMAT.md §6.2) byte for byte both ways, refusals for every
// other target, and the densify consent.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/codec_test_util.h"
#include "tensorsafe/convert.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

std::vector<std::int64_t> Ints(std::span<const std::byte> b) {
  std::vector<std::int64_t> v(b.size() / 8);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// A .btf fixture (shared fixtures B3, B4) converted to .tsafe is one native
// COO tensor "0" with EXPECTED.txt's indices and values, and converts back
// to the fixture's exact bytes.
TEST(ConvertSparse, BtfFixturesBecomeNativeCooAndComeBackExactly) {
  struct Case {
    const char* file;
    DType dtype;
    Shape shape;
    std::vector<std::int64_t> indices;
    std::string values;
  };
  const Case cases[] = {
      {"vec_B3_coo_i64_2x4.btf",
       DType::kI64,
       {2, 4},
       {0, 1, 0, 2, 0, 3, 1, 1, 1, 2, 1, 3},
       Raw<std::int64_t>({1, 2, 3, 5, 6, 7})},
      {"vec_B4_coo_f32_2x3_padded.btf", DType::kF32, {2, 3}, {0, 0, 0, 2, 1, 1}, Raw<float>({1, 2, 3})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    TempDir dir;
    const std::string fixture = SharedFixture(std::string("btf/") + c.file);
    WriteFileBytes(dir.File("in.btf"), fixture);
    auto st = Convert(dir.File("in.btf"), dir.File("out.tsafe"));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    auto r = Reader::Open(dir.File("out.tsafe"));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE((*r)->Verify().ok());
    auto t = (*r)->Get("0");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->info.layout, Layout::kCoo);
    EXPECT_EQ(t->info.dtype, c.dtype);
    EXPECT_EQ(t->info.shape, c.shape);
    EXPECT_EQ(t->info.nnz, c.values.size() / ElementSize(c.dtype));
    EXPECT_TRUE(t->info.coalesced);  // the fixtures' rows are sorted and unique
    EXPECT_TRUE(t->info.metadata_json.empty() || t->info.metadata_json == "{}") << t->info.metadata_json;
    auto parts = SplitCoo(t->info, t->data);
    ASSERT_TRUE(parts.ok());
    EXPECT_EQ(Ints(parts->indices), c.indices);
    EXPECT_EQ(Str(parts->values), c.values);
    auto back = Convert(dir.File("out.tsafe"), dir.File("back.btf"));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(ReadFileBytes(dir.File("back.btf")), fixture);
  }
}

TEST(ConvertSparse, BtfReaderKeepsThePairMappingOnRequest) {
  const std::string bytes = SharedFixture("btf/vec_B4_coo_f32_2x3_padded.btf");
  btf::ReadOptions opt;
  opt.coo_as_pairs = true;
  auto pairs = btf::Decode(Bytes(bytes), nullptr, "t.btf", opt);
  ASSERT_TRUE(pairs.ok());
  ASSERT_EQ(pairs->tensors.size(), 2u);
  EXPECT_EQ(pairs->tensors[0].info.name, "0.indices");
  auto native = btf::Decode(Bytes(bytes), nullptr, "t.btf");
  ASSERT_TRUE(native.ok());
  ASSERT_EQ(native->tensors.size(), 1u);
  EXPECT_EQ(native->tensors[0].info.layout, Layout::kCoo);
  // The region skips the values' NNZ field: values start 8 bytes past the indices.
  EXPECT_EQ(native->tensors[0].info.coo_values_offset, 3u * 2 * 8 + 8);
  // Both mappings encode to the same record.
  EXPECT_EQ(btf::Encode(*pairs).value(), bytes);
  EXPECT_EQ(btf::Encode(*native).value(), bytes);
}

// A random COO tensor: nnz rows within `shape`; sorted and unique (so the
// BTF reader derives coalesced = true) or shuffled with a repeat.
struct RandomCoo {
  Shape shape;
  std::vector<std::int64_t> indices;
  std::string values;
  bool coalesced = false;
};

RandomCoo MakeRandomCoo(std::mt19937_64& rng, DType dtype, std::size_t rank, bool sorted) {
  RandomCoo c;
  for (std::size_t d = 0; d < rank; ++d) c.shape.push_back(1 + rng() % 5);
  std::uint64_t total = 1;
  for (auto d : c.shape) total *= d;
  const std::uint64_t nnz = rng() % (std::min<std::uint64_t>(total, 12) + 1);
  std::set<std::vector<std::int64_t>> rows_set;
  std::vector<std::vector<std::int64_t>> rows;
  while (rows.size() < nnz) {
    std::vector<std::int64_t> row;
    for (auto d : c.shape) row.push_back(static_cast<std::int64_t>(rng() % d));
    if (sorted && !rows_set.insert(row).second) continue;
    rows.push_back(row);
  }
  if (sorted) {
    rows.assign(rows_set.begin(), rows_set.end());
  } else if (!rows.empty()) {
    rows.push_back(rows.front());  // a repeat: never coalesced
    std::shuffle(rows.begin(), rows.end(), rng);
  }
  // No rows are trivially in order: BTF's reader marks them coalesced.
  c.coalesced = sorted || rows.empty();
  for (const auto& r : rows) c.indices.insert(c.indices.end(), r.begin(), r.end());
  c.values = RandomBytes(rng, rows.size() * ElementSize(dtype));
  return c;
}

TEST(ConvertSparse, RandomCooRoundTripsThroughBtfExactly) {
  std::mt19937_64 rng(TestSeed());
  const DType dtypes[] = {DType::kI8,  DType::kI16, DType::kI32, DType::kI64, DType::kF32,
                          DType::kF64, DType::kU8,  DType::kU16, DType::kU32, DType::kU64};
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    TempDir dir;
    const std::string a = dir.File("a.tsafe");
    {
      auto w = Writer::Create(a);
      ASSERT_TRUE(w.ok());
      for (int i = 0; i < 6; ++i) {
        const DType dt = dtypes[rng() % std::size(dtypes)];
        const std::string name = std::to_string(i);
        if (i % 3 == 2) {  // a dense record between the sparse ones
          const std::string bytes = RandomBytes(rng, 6 * ElementSize(dt));
          ASSERT_TRUE((*w)->Add(name, TensorView::Contiguous(dt, {2, 3}, Bytes(bytes))).ok());
          continue;
        }
        RandomCoo c = MakeRandomCoo(rng, dt, 1 + rng() % 4, rng() % 2 == 0);
        ASSERT_TRUE((*w)->AddCoo(name, dt, c.shape, c.indices, Bytes(c.values), c.coalesced).ok());
      }
      ASSERT_TRUE((*w)->Finish().ok());
    }
    // tsafe -> btf -> tsafe and btf -> tsafe -> btf: identical files.
    ASSERT_TRUE(Convert(a, dir.File("b.btf")).ok());
    ASSERT_TRUE(Convert(dir.File("b.btf"), dir.File("c.tsafe")).ok());
    ASSERT_TRUE(Convert(dir.File("c.tsafe"), dir.File("d.btf")).ok());
    EXPECT_EQ(ReadFileBytes(dir.File("c.tsafe")), ReadFileBytes(a));
    EXPECT_EQ(ReadFileBytes(dir.File("d.btf")), ReadFileBytes(dir.File("b.btf")));
  }
}

TEST(ConvertSparse, EmptyCooRoundTrips) {
  TempDir dir;
  const std::string a = dir.File("a.tsafe");
  auto w = Writer::Create(a);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->AddCoo("0", DType::kF64, {3, 0, 2}, {}, {}, true).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  ASSERT_TRUE(Convert(a, dir.File("b.btf")).ok());
  ASSERT_TRUE(Convert(dir.File("b.btf"), dir.File("c.tsafe")).ok());
  EXPECT_EQ(ReadFileBytes(dir.File("c.tsafe")), ReadFileBytes(a));
}

// A sorted, unique COO tensor marked not coalesced comes back marked: BTF
// has no flag, so the reader derives it (docs/formats/btf.md §3).
TEST(ConvertSparse, CoalescedFlagIsDerivedFromTheIndices) {
  TempDir dir;
  auto w = Writer::Create(dir.File("a.tsafe"));
  ASSERT_TRUE(w.ok());
  const std::int64_t idx[] = {0, 2};
  const float v[] = {1, 2};
  ASSERT_TRUE((*w)->AddCoo("0", DType::kF32, {3}, idx, std::as_bytes(std::span(v)), false).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  ASSERT_TRUE(Convert(dir.File("a.tsafe"), dir.File("b.btf")).ok());
  ASSERT_TRUE(Convert(dir.File("b.btf"), dir.File("c.tsafe")).ok());
  auto r = Reader::Open(dir.File("c.tsafe"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->Find("0")->coalesced);
}

std::string WriteCoo(const TempDir& dir, DType dt, const std::vector<std::int64_t>& idx, const std::string& vals,
                     Shape shape, bool coalesced) {
  const std::string path = dir.File("s.tsafe");
  auto w = Writer::Create(path);
  EXPECT_TRUE(w.ok());
  EXPECT_TRUE((*w)->AddCoo("s", dt, shape, idx, Bytes(vals), coalesced).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  return path;
}

TEST(ConvertSparse, OtherTargetsRefuseNamingTheTensor) {
  TempDir dir;
  const std::string in = WriteCoo(dir, DType::kF32, {0, 1, 1, 0}, Raw<float>({1, 2}), {2, 2}, true);
  for (const char* ext : {"safetensors", "npy", "npz", "gguf", "ten", "zio"}) {
    SCOPED_TRACE(ext);
    const std::string out = dir.File(std::string("x.") + ext);
    EXPECT_STATUS(Convert(in, out), StatusCode::kUnsupported,
                  "tensor 0 \"s\": a sparse COO tensor cannot be stored in ");
    EXPECT_STATUS(Convert(in, out), StatusCode::kUnsupported, "--densify");
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

TEST(ConvertSparse, DensifyWritesTheDenseEquivalent) {
  TempDir dir;
  // (0,1) twice: summed, as torch's to_dense() does.
  const std::string in = WriteCoo(dir, DType::kF32, {0, 1, 1, 0, 0, 1}, Raw<float>({1.5f, 2, 4}), {2, 3}, false);
  ConvertOptions opt;
  opt.densify = true;
  auto st = Convert(in, dir.File("d.safetensors"), opt);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto set = safetensors::ReadFile(dir.File("d.safetensors"));
  ASSERT_TRUE(set.ok());
  ASSERT_EQ(set->tensors.size(), 1u);
  EXPECT_EQ(set->tensors[0].info.name, "s");
  EXPECT_EQ(set->tensors[0].info.shape, (Shape{2, 3}));
  EXPECT_EQ(Str(set->tensors[0].data), Raw<float>({0, 5.5f, 0, 2, 0, 0}));
  // Integers wrap like machine sums.
  const std::string ints = WriteCoo(dir, DType::kU8, {1, 1}, Raw<std::uint8_t>({200, 100}), {2}, false);
  ASSERT_TRUE(Convert(ints, dir.File("u.npy"), opt).ok());
  auto u = ReadTensorSet(dir.File("u.npy"));
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(Str(u->tensors[0].data), Raw<std::uint8_t>({0, 44}));
}

TEST(ConvertSparse, DensifyRefusesWhatItCannotDoExactly) {
  TempDir dir;
  ConvertOptions opt;
  opt.densify = true;
  // f16 values at a repeated coordinate would need f16 arithmetic.
  const std::string f16 = WriteCoo(dir, DType::kF16, {0, 0}, Raw<std::uint16_t>({0x3c00, 0x3c00}), {2}, false);
  EXPECT_STATUS(Convert(f16, dir.File("h.npy"), opt), StatusCode::kUnsupported,
                "tensor 0 \"s\": COO element 1 repeats a coordinate, and values of dtype f16 are not summed");
  // Too big densified.
  const std::string big = WriteCoo(dir, DType::kF64, {0, 0}, Raw<double>({1}), {1u << 20, 1u << 10}, true);
  opt.max_densify_bytes = std::uint64_t{1} << 30;
  EXPECT_STATUS(Convert(big, dir.File("b.npy"), opt), StatusCode::kLimitExceeded,
                "tensor 0 \"s\": densified it would take 8589934592 bytes, above the limit of 1073741824");
  // An overflowing dense size.
  const std::string huge = WriteCoo(dir, DType::kF64, {}, {}, {std::uint64_t{1} << 40, std::uint64_t{1} << 40}, true);
  EXPECT_EQ(Convert(huge, dir.File("o.npy"), opt).status().code(), StatusCode::kOutOfRange);
}

// The CLI: stdout and exit code of `tensorsafe ARGS` (stderr to a file).
std::pair<std::string, int> Cli(const TempDir& dir, const std::string& args) {
  const std::string cmd = std::string(TS_CLI_PATH) + " " + args + " 2>" + dir.File("err.txt");
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {"", -1};
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  return {out + ReadFileBytes(dir.File("err.txt")), WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(ConvertSparse, CliConvertsBtfCooAndShowsIt) {
  if (std::string(TS_CLI_PATH).empty()) GTEST_SKIP() << "CLI not built";
  TempDir dir;
  WriteFileBytes(dir.File("x.btf"), SharedFixture("btf/vec_B3_coo_i64_2x4.btf"));
  auto [out, rc] = Cli(dir, "convert -q " + dir.File("x.btf") + " " + dir.File("y.tsafe"));
  ASSERT_EQ(rc, 0) << out;
  auto [info, irc] = Cli(dir, "info --json " + dir.File("y.tsafe"));
  ASSERT_EQ(irc, 0) << info;
  auto j = nlohmann::json::parse(info, nullptr, false);
  ASSERT_TRUE(j.is_object()) << info;
  const auto& t = j["tensors"][0];
  EXPECT_EQ(t["layout"], "coo") << info;
  EXPECT_EQ(t["nnz"], 6) << info;
  EXPECT_EQ(t["coalesced"], true) << info;
  EXPECT_EQ(t["shape"], nlohmann::json::array({2, 4})) << info;
  auto [cat, crc] = Cli(dir, "cat " + dir.File("y.tsafe") + " 0");
  ASSERT_EQ(crc, 0) << cat;
  EXPECT_NE(cat.find("shape: [2, 4]\nlayout: coo, nnz 6, coalesced\nindices:\n"), std::string::npos) << cat;
  EXPECT_NE(cat.find("values:\n[1, 2, 3, 5, 6, 7]"), std::string::npos) << cat;
  // The BTF file itself shows the same through ReadTensorSet.
  auto [bcat, brc] = Cli(dir, "cat " + dir.File("x.btf") + " 0");
  ASSERT_EQ(brc, 0) << bcat;
  EXPECT_NE(bcat.find("layout: coo, nnz 6, coalesced"), std::string::npos) << bcat;
  // Refused without consent (exit code of kUnsupported), then densified.
  auto [bad, bad_rc] = Cli(dir, "convert -q " + dir.File("y.tsafe") + " " + dir.File("z.npy"));
  EXPECT_NE(bad_rc, 0);
  EXPECT_NE(bad.find("tensor 0 \"0\": a sparse COO tensor cannot be stored in npy"), std::string::npos) << bad;
  auto [ok, ok_rc] = Cli(dir, "convert -q --densify " + dir.File("y.tsafe") + " " + dir.File("z.npy"));
  ASSERT_EQ(ok_rc, 0) << ok;
  auto z = ReadTensorSet(dir.File("z.npy"));
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(Str(z->tensors[0].data), Raw<std::int64_t>({0, 1, 2, 3, 0, 5, 6, 7}));
}

}  // namespace
}  // namespace tensorsafe::testing
