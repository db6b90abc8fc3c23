#include "tensorsafe/formats/btf.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "formats/codec_test_util.h"
#include "util/endian.h"

namespace tensorsafe {
namespace {

using testing::Bytes;
using testing::MakeTensor;
using testing::Raw;
using testing::Set64;
using testing::SharedFixture;
using testing::Str;

const std::string kDir = std::string(TS_SHARED_DIR) + "/fixtures/btf/";

Result<TensorSet> DecodeBtf(const std::string& s, const btf::ReadOptions& opt = {}) {
  return btf::Decode(Bytes(s), nullptr, "t.btf", opt);
}

// ---- EXPECTED.txt: one line per file, one per record (Python reprs) ----

struct ExpectedRecord {
  std::map<std::string, std::string> fields;  // key -> raw repr
  std::vector<double> indices, values;        // COO only
};
struct ExpectedFile {
  std::uint64_t size = 0, n = 0;
  std::vector<std::uint64_t> offsets;
  std::vector<ExpectedRecord> records;
};

std::vector<double> Numbers(const std::string& s) {
  std::vector<double> v;
  std::string t;
  for (char c : s) t += (c == '(' || c == ')' || c == '[' || c == ']' || c == ',') ? ' ' : c;
  std::istringstream in(t);
  for (double d; in >> d;) v.push_back(d);
  return v;
}

// "{'i': 0, 'dims': (6, 8), 'dtype': 'f32', ...} indices=(..) values=(..)"
ExpectedRecord ParseRecord(const std::string& line) {
  ExpectedRecord r;
  const std::size_t close = line.find('}');
  std::size_t p = line.find('{') + 1;
  while (p < close) {
    const std::size_t k0 = line.find('\'', p), k1 = line.find('\'', k0 + 1);
    const std::string key = line.substr(k0 + 1, k1 - k0 - 1);
    std::size_t v0 = k1 + 3, v1 = v0;  // after "': "
    if (line[v0] == '(')
      v1 = line.find(')', v0) + 1;
    else if (line[v0] == '\'')
      v1 = line.find('\'', v0 + 1) + 1;
    else
      v1 = line.find_first_of(",}", v0);
    r.fields[key] = line.substr(v0, v1 - v0);
    p = line.find_first_not_of(", ", v1);
  }
  if (auto i = line.find("indices="); i != std::string::npos)
    r.indices = Numbers(line.substr(i + 8, line.find(')', i) - i - 7));
  if (auto i = line.find("values="); i != std::string::npos) r.values = Numbers(line.substr(i + 7));
  return r;
}

std::map<std::string, ExpectedFile> ParseExpected() {
  std::istringstream in(SharedFixture("btf/EXPECTED.txt"));
  std::map<std::string, ExpectedFile> files;
  ExpectedFile* cur = nullptr;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line[0] != ' ') {
      const std::string name = line.substr(0, line.find(':'));
      cur = &files[name];
      cur->size = std::stoull(line.substr(line.find("size=") + 5));
      cur->n = std::stoull(line.substr(line.find(" n=") + 3));
      for (double d : Numbers(line.substr(line.find("offsets=") + 8)))
        cur->offsets.push_back(static_cast<std::uint64_t>(d));
    } else {
      cur->records.push_back(ParseRecord(line));
    }
  }
  return files;
}

std::string Tuple(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

double ElementAsDouble(const Tensor& t, std::size_t i) {
  const std::byte* p = t.data.data();
  switch (t.info.dtype) {
    case DType::kI8: return static_cast<std::int8_t>(internal::Load8(p + i));
    case DType::kU8: return internal::Load8(p + i);
    case DType::kI32: return static_cast<std::int32_t>(internal::Load32(p + 4 * i));
    case DType::kI64: return static_cast<double>(static_cast<std::int64_t>(internal::Load64(p + 8 * i)));
    case DType::kF32: return internal::LoadLE<float>(p + 4 * i);
    case DType::kF64: return internal::LoadLE<double>(p + 8 * i);
    default: ADD_FAILURE() << "dtype not used by fixtures"; return 0;
  }
}

TEST(BtfFixtures, EveryFileDecodesToExactlyWhatExpectedSays) {
  const auto expected = ParseExpected();
  const char* kNames[] = {"i8", "i16", "i32", "i64", "f32", "f64", "ui8", "ui16", "ui32", "ui64"};
  int files = 0, records = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".btf") continue;
    SCOPED_TRACE(name);
    ASSERT_TRUE(expected.count(name)) << "no EXPECTED.txt entry";
    const ExpectedFile& want = expected.at(name);
    const std::string bytes = testing::ReadFileBytes(entry.path().string());
    ASSERT_EQ(bytes.size(), want.size);
    auto recs = btf::DecodeRecords(Bytes(bytes), nullptr, name);
    ASSERT_TRUE(recs.ok()) << recs.status().ToString();
    ASSERT_EQ(recs->size(), want.n);
    ASSERT_EQ(want.records.size(), want.n);
    ++files;
    for (std::size_t i = 0; i < recs->size(); ++i, ++records) {
      SCOPED_TRACE("record " + std::to_string(i));
      const btf::Record& r = (*recs)[i];
      const auto& f = want.records[i].fields;
      EXPECT_EQ(std::to_string(r.offset), f.at("off"));
      EXPECT_EQ(r.offset, want.offsets[i]);
      EXPECT_EQ(r.offset % 8 == 0 ? "True" : "False", f.at("aligned"));
      EXPECT_EQ(std::string("'") + kNames[r.dtype_code] + "'", f.at("dtype"));
      EXPECT_EQ(std::to_string(r.layout_code), f.at("layout"));
      char hex[16];
      std::string reserved = "'";
      for (auto b : r.reserved) {
        std::snprintf(hex, sizeof hex, "%02x", b);
        reserved += hex;
      }
      EXPECT_EQ(reserved + "'", f.at("reserved"));
      EXPECT_EQ(std::to_string(r.end), f.at("end"));
      const std::uint64_t next = i + 1 < recs->size() ? (*recs)[i + 1].offset : bytes.size();
      EXPECT_EQ(std::to_string(next - r.end), f.at("pad_after"));
      if (!r.coo) {
        EXPECT_EQ(std::to_string(r.dense.info.shape.size()), f.at("rank"));
        EXPECT_EQ(Tuple(r.dense.info.shape), f.at("dims"));
        EXPECT_EQ("(" + std::to_string(r.dense.info.data_offset) + ", " + std::to_string(r.dense.data.size()) + ")",
                  f.at("data"));
        EXPECT_EQ(r.dense.data.data(), Bytes(bytes).data() + r.dense.info.data_offset);  // zero-copy
        continue;
      }
      const btf::CooTensor& c = r.coo_tensor;
      EXPECT_EQ(std::to_string(c.dense_shape.size()), f.at("rank"));
      EXPECT_EQ(Tuple(c.dense_shape), f.at("dims"));
      EXPECT_EQ(Tuple(c.indices.info.shape), f.at("idx_dims"));
      EXPECT_EQ(Tuple(c.values.info.shape), f.at("val_dims"));
      std::vector<double> idx, val;
      for (std::size_t k = 0; k < c.indices.data.size() / 8; ++k) idx.push_back(ElementAsDouble(c.indices, k));
      for (std::size_t k = 0; k < c.values.info.shape[0]; ++k) val.push_back(ElementAsDouble(c.values, k));
      EXPECT_EQ(idx, want.records[i].indices);
      EXPECT_EQ(val, want.records[i].values);
    }
  }
  EXPECT_EQ(files, 16);
  EXPECT_EQ(files, static_cast<int>(expected.size()));
  EXPECT_EQ(records, 69);  // the sum of n over EXPECTED.txt
}

TEST(BtfFixtures, ReencodingReproducesEveryFileAndRealignsTheOldOne) {
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    if (entry.path().extension() != ".btf") continue;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto set = btf::ReadFile(entry.path().string());
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    auto again = btf::Encode(*set);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    // The pre-2020 file has an unaligned record; TFRT regenerated it as
    // test_tensor.btf, which is what its writer (and ours) produces.
    const std::string want = name == "old_test_tensor.btf" ? "test_tensor.btf" : name;
    EXPECT_EQ(*again, testing::ReadFileBytes(kDir + want));
  }
}

TEST(BtfFixtures, TestTensorIsThreeInt32TensorsTheLastEmpty) {
  auto set = btf::ReadFile(kDir + "test_tensor.btf");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->tensors.size(), 3u);
  EXPECT_EQ(set->tensors[0].info.name, "0");
  EXPECT_EQ(set->tensors[0].info.dtype, DType::kI32);
  EXPECT_EQ(Str(set->tensors[0].data), (Raw<std::int32_t>({1, 2, 3, 4})));
  EXPECT_EQ(Str(set->tensors[1].data), (Raw<std::int32_t>({0, 1, 2, 3, 4})));
  EXPECT_EQ(set->tensors[2].info.shape, Shape{0});
}

// ---- Golden bytes, both directions ----

TensorSet CooSet(const std::string& base, Shape dense, std::string idx, Shape ishape, DType vt, std::string vals,
                 Shape vshape) {
  const std::string md =
      std::string(R"({"layout":"coo","shape":)") +
      (dense.size() == 2 ? "[" + std::to_string(dense[0]) + "," + std::to_string(dense[1]) + "]" : "[]") + "}";
  TensorSet set;
  set.tensors.push_back(MakeTensor(base + ".indices", DType::kI64, ishape, std::move(idx), md));
  set.tensors.push_back(MakeTensor(base + ".values", vt, vshape, std::move(vals), md));
  return set;
}

TEST(BtfGolden, WritesTheFourVectorsByteForByte) {
  TensorSet b1;
  b1.tensors.push_back(MakeTensor("a", DType::kF32, {2, 3}, Raw<float>({1, 2, 3, 4, 5, 6})));
  TensorSet b2;
  b2.tensors.push_back(MakeTensor("a", DType::kI32, {5}, Raw<std::int32_t>({0, 1, 2, 3, 4})));
  b2.tensors.push_back(MakeTensor("b", DType::kU8, {3}, "\x01\x02\x03"));
  TensorSet b3 = CooSet("c", {2, 4}, Raw<std::int64_t>({0, 1, 0, 2, 0, 3, 1, 1, 1, 2, 1, 3}), {6, 2}, DType::kI64,
                        Raw<std::int64_t>({1, 2, 3, 5, 6, 7}), {6});
  TensorSet b4 =
      CooSet("d", {2, 3}, Raw<std::int64_t>({0, 0, 0, 2, 1, 1}), {3, 2}, DType::kF32, Raw<float>({1, 2, 3}), {3});
  const std::pair<TensorSet*, const char*> cases[] = {{&b1, "btf/vec_B1_rmd_f32_2x3.btf"},
                                                      {&b2, "btf/vec_B2_rmd_i32_u8_padding.btf"},
                                                      {&b3, "btf/vec_B3_coo_i64_2x4.btf"},
                                                      {&b4, "btf/vec_B4_coo_f32_2x3_padded.btf"}};
  for (const auto& [set, file] : cases) {
    SCOPED_TRACE(file);
    auto bytes = btf::Encode(*set);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    EXPECT_EQ(*bytes, SharedFixture(file));
  }
}

TEST(BtfGolden, CooDecodesToOneNativeCooTensor) {
  const std::string bytes = SharedFixture("btf/vec_B4_coo_f32_2x3_padded.btf");
  auto set = DecodeBtf(bytes);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->tensors.size(), 1u);
  const Tensor& t = set->tensors[0];
  EXPECT_EQ(t.info.name, "0");
  EXPECT_EQ(t.info.layout, Layout::kCoo);
  EXPECT_EQ(t.info.dtype, DType::kF32);
  EXPECT_EQ(t.info.shape, (Shape{2, 3}));
  EXPECT_EQ(t.info.nnz, 3u);
  EXPECT_TRUE(t.info.coalesced);
  EXPECT_EQ(t.info.data_offset, 16u + 16 + 16 + 16);  // header, dims, index dims
  auto parts = SplitCoo(t.info, t.data);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  EXPECT_EQ(Str(parts->indices), (Raw<std::int64_t>({0, 0, 0, 2, 1, 1})));
  EXPECT_EQ(Str(parts->values), (Raw<float>({1, 2, 3})));
}

TEST(BtfGolden, CooDecodesToTwoTensorsWithMetadataOnRequest) {
  const std::string bytes = SharedFixture("btf/vec_B4_coo_f32_2x3_padded.btf");
  btf::ReadOptions pairs;
  pairs.coo_as_pairs = true;
  auto set = DecodeBtf(bytes, pairs);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->tensors.size(), 2u);
  EXPECT_EQ(set->tensors[0].info.name, "0.indices");
  EXPECT_EQ(set->tensors[0].info.dtype, DType::kI64);
  EXPECT_EQ(set->tensors[0].info.shape, (Shape{3, 2}));
  EXPECT_EQ(set->tensors[1].info.name, "0.values");
  EXPECT_EQ(Str(set->tensors[1].data), (Raw<float>({1, 2, 3})));
  for (const auto& t : set->tensors) EXPECT_EQ(t.info.metadata_json, R"({"layout":"coo","shape":[2,3]})");
}

TEST(BtfGolden, DocumentedCooLayoutTwoIsReadUnlessDisabled) {
  std::string bytes = SharedFixture("btf/vec_B3_coo_i64_2x4.btf");
  bytes[25] = 2;
  auto recs = btf::DecodeRecords(Bytes(bytes), nullptr, "t.btf");
  ASSERT_TRUE(recs.ok()) << recs.status().ToString();
  EXPECT_TRUE((*recs)[0].coo);
  EXPECT_EQ((*recs)[0].layout_code, 2);
  btf::ReadOptions code_only;
  code_only.accept_documented_coo_layout = false;
  EXPECT_STATUS(DecodeBtf(bytes, code_only), StatusCode::kUnsupported,
                "record 0 at offset 16: layout code 2 is unknown (0 = dense, 1 = COO)");
  auto again = btf::Encode(*DecodeBtf(bytes));  // written back as TFRT's code reads it
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, SharedFixture("btf/vec_B3_coo_i64_2x4.btf"));
}

TEST(BtfGolden, WriteFileThenReadFileAndFailureLeavesNothing) {
  testing::TempDir dir;
  const std::string b2 = SharedFixture("btf/vec_B2_rmd_i32_u8_padding.btf");  // the tensors view it
  auto set = DecodeBtf(b2);
  ASSERT_TRUE(set.ok());
  ASSERT_TRUE(btf::WriteFile(dir.File("a.btf"), *set).ok());
  EXPECT_EQ(testing::ReadFileBytes(dir.File("a.btf")), b2);
  std::filesystem::remove(dir.File("a.btf"));
  set->tensors[1].info.dtype = DType::kBool;
  EXPECT_STATUS(btf::WriteFile(dir.File("b.btf"), *set), StatusCode::kUnsupported,
                "b.btf: record 1 \"1\": dtype bool has no BTF code");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// ---- Named invalid inputs ----

struct Defect {
  const char* name;
  const char* file;
  std::function<void(std::string&)> mutate;
  StatusCode code;
  const char* message;
  btf::ReadOptions options = {};
};

TEST(BtfInvalid, NamedDefects) {
  const char* kB1 = "btf/vec_B1_rmd_f32_2x3.btf";
  const char* kB2 = "btf/vec_B2_rmd_i32_u8_padding.btf";
  const char* kB4 = "btf/vec_B4_coo_f32_2x3_padded.btf";
  btf::ReadOptions aligned;
  aligned.require_aligned_offsets = true;
  btf::ReadOptions rank1;
  rank1.limits.max_rank = 1;
  const std::vector<Defect> defects = {
      {"shorter than the count", kB2, [](std::string& s) { s.resize(3); }, StatusCode::kCorruption,
       "t.btf: file is 3 bytes, shorter than the 8-byte tensor count"},
      {"offset table past the end", kB2, [](std::string& s) { Set64(s, 0, 100); }, StatusCode::kCorruption,
       "offset table of 100 records runs past the end of the file (104 bytes)"},
      {"count above the limit", kB2, [](std::string& s) { Set64(s, 0, 1LL << 61); }, StatusCode::kLimitExceeded,
       "tensor count 2305843009213693952 exceeds the limit of 104857600"},
      {"record inside the offset table", kB2, [](std::string& s) { Set64(s, 8, 8); }, StatusCode::kCorruption,
       "record 0 at offset 8: overlaps the offset table, which ends at 24"},
      {"record offset past the end", kB2, [](std::string& s) { Set64(s, 16, 1000); }, StatusCode::kCorruption,
       "record 1 at offset 1000: starts past the end of the file (104 bytes)"},
      {"truncated record header", kB2, [](std::string& s) { Set64(s, 16, 100); }, StatusCode::kCorruption,
       "record 1 at offset 100: 16-byte header of 16 bytes at offset 100 exceeds the 4 bytes that remain"},
      {"unaligned offset (strict)", kB2, [](std::string& s) { Set64(s, 16, 68); }, StatusCode::kCorruption,
       "record 1 at offset 68: offset is not a multiple of 8", aligned},
      {"rank too large", kB2, [](std::string& s) { Set64(s, 24, 65); }, StatusCode::kLimitExceeded,
       "record 0 at offset 24: rank 65 exceeds the limit of 64"},
      {"rank above a lowered limit", kB1, [](std::string&) {}, StatusCode::kLimitExceeded,
       "rank 2 exceeds the limit of 1", rank1},
      {"unknown dtype", kB2, [](std::string& s) { s[32] = 10; }, StatusCode::kUnsupported,
       "record 0 at offset 24: dtype code 10 is not one of BTF's 0..9"},
      {"unknown layout", kB2, [](std::string& s) { s[81] = 7; }, StatusCode::kUnsupported,
       "record 1 at offset 72: layout code 7 is unknown"},
      {"dims past the end", kB2, [](std::string& s) { Set64(s, 72, 5); }, StatusCode::kCorruption,
       "record 1 at offset 72: dims of 40 bytes at offset 88 exceeds the 16 bytes that remain"},
      {"negative dimension", kB2, [](std::string& s) { Set64(s, 40, -5); }, StatusCode::kCorruption,
       "record 0 at offset 24: dims: dimension 0 is negative (-5)"},
      {"data past the end", kB2, [](std::string& s) { Set64(s, 88, 100); }, StatusCode::kCorruption,
       "record 1 at offset 72: data of 100 bytes at offset 96 exceeds the 8 bytes that remain"},
      {"shape product overflows", kB1,
       [](std::string& s) {
         Set64(s, 32, 1LL << 62);
         Set64(s, 40, 1LL << 62);
       },
       StatusCode::kCorruption, "record 0 at offset 16: data: element count of shape"},
      {"COO indices of the wrong rank", kB4, [](std::string& s) { Set64(s, 56, 3); }, StatusCode::kCorruption,
       "record 0 at offset 16: COO indices are [3, 3] but the rank is 2"},
      {"COO indices past the end", kB4, [](std::string& s) { Set64(s, 48, 1000); }, StatusCode::kCorruption,
       "COO indices of 16000 bytes at offset 64 exceeds the 72 bytes that remain"},
      {"COO values count differs", kB4, [](std::string& s) { Set64(s, 112, 2); }, StatusCode::kCorruption,
       "COO values hold 2 elements but the indices 3"},
      {"COO values past the end", kB4, [](std::string& s) { s.resize(125); }, StatusCode::kCorruption,
       "COO values of 12 bytes at offset 120 exceeds the 5 bytes that remain"},
      {"COO index out of bounds", kB4, [](std::string& s) { Set64(s, 104, 3); }, StatusCode::kCorruption,
       "nonzero 2 has index 3 in dimension 1, outside [0, 3)"},
      {"COO negative index (TFRT lets it through)", kB4, [](std::string& s) { Set64(s, 64, -1); },
       StatusCode::kCorruption, "nonzero 0 has index -1 in dimension 0, outside [0, 2)"},
  };
  for (const Defect& d : defects) {
    SCOPED_TRACE(d.name);
    std::string bytes = SharedFixture(d.file);
    d.mutate(bytes);
    EXPECT_STATUS(DecodeBtf(bytes, d.options), d.code, d.message);
  }
}

TEST(BtfInvalid, ReservedBytesAndUnalignedOffsetsAreAcceptedByDefault) {
  std::string bytes = SharedFixture("btf/vec_B1_rmd_f32_2x3.btf");
  bytes[26] = '\x5a';  // pre-2022 writers left these uninitialised
  EXPECT_TRUE(DecodeBtf(bytes).ok());
  EXPECT_TRUE(btf::ReadFile(kDir + "old_test_tensor.btf").ok());
  btf::ReadOptions aligned;
  aligned.require_aligned_offsets = true;
  EXPECT_STATUS(btf::ReadFile(kDir + "old_test_tensor.btf", aligned), StatusCode::kCorruption,
                "old_test_tensor.btf: record 2 at offset 124: offset is not a multiple of 8");
}

TEST(BtfInvalid, EveryTruncationBeforeTheLastRecordEndsIsAnError) {
  // The spec lets the last record's padding be omitted, so only prefixes
  // that cut into a record's payload must fail.
  for (const char* file :
       {"btf/vec_B2_rmd_i32_u8_padding.btf", "btf/vec_B4_coo_f32_2x3_padded.btf", "btf/test_tensor.btf"}) {
    SCOPED_TRACE(file);
    const std::string bytes = SharedFixture(file);
    auto recs = btf::DecodeRecords(Bytes(bytes), nullptr, "t");
    ASSERT_TRUE(recs.ok());
    const std::uint64_t last_end = recs->back().end;
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      auto r = DecodeBtf(bytes.substr(0, n));
      if (n < last_end) {
        EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "prefix " << n;
      } else {
        EXPECT_TRUE(r.ok()) << "prefix " << n << ": " << r.status().ToString();
      }
    }
  }
}

TEST(BtfInvalid, EncodeErrors) {
  for (DType dt : {DType::kBF16, DType::kBool, DType::kF16, DType::kF8E4M3FN, DType::kC64}) {
    TensorSet set;
    set.tensors.push_back(MakeTensor("w", dt, {1}, std::string(ElementSize(dt), '\0')));
    EXPECT_STATUS(btf::Encode(set), StatusCode::kUnsupported,
                  "record 0 \"w\": dtype " + std::string(DTypeName(dt)) + " has no BTF code");
  }
  TensorSet bad =
      CooSet("c", {2, 3}, Raw<std::int64_t>({0, 0, 0, 2, 1, 3}), {3, 2}, DType::kF32, Raw<float>({1, 2, 3}), {3});
  EXPECT_STATUS(btf::Encode(bad), StatusCode::kInvalidArgument,
                "record 0 (COO): nonzero 2 has index 3 in dimension 1, outside [0, 3)");
  TensorSet lone = bad;
  lone.tensors.pop_back();
  EXPECT_STATUS(btf::Encode(lone), StatusCode::kInvalidArgument, "COO tensor \"c\" lacks its values");
  TensorSet misnamed = bad;
  misnamed.tensors[0].info.name = "c.idx";
  EXPECT_STATUS(btf::Encode(misnamed), StatusCode::kInvalidArgument,
                "tensor 0 \"c.idx\": a COO part must be named <base>.indices or <base>.values");
  TensorSet i32 = bad;
  i32.tensors[0].info.dtype = DType::kI32;
  EXPECT_STATUS(btf::Encode(i32), StatusCode::kInvalidArgument, "COO indices must be i64 [nnz, 2], not i32 [3, 2]");
  TensorSet bf = bad;
  bf.tensors[1].info.dtype = DType::kBF16;
  EXPECT_STATUS(btf::Encode(bf), StatusCode::kUnsupported, "record 0 (COO) values: dtype bf16 has no BTF code");
  TensorSet shape_md = bad;
  shape_md.tensors[1].info.metadata_json = R"({"layout":"coo","shape":"2x3"})";
  EXPECT_STATUS(btf::Encode(shape_md), StatusCode::kInvalidArgument, "COO metadata needs \"shape\"");
  TensorSet size;
  size.tensors.push_back(MakeTensor("s", DType::kF32, {2, 3}, Raw<float>({1})));
  EXPECT_STATUS(btf::Encode(size), StatusCode::kInvalidArgument,
                "record 0 \"s\": 4 data bytes, but shape [2, 3] of f32 needs 24");
}

// ---- Random round trips, every BTF dtype, dense and COO ----

TEST(BtfRandom, RoundTripsEveryDtypeDenseAndCoo) {
  std::mt19937_64 rng(testing::TestSeed());
  const DType dtypes[] = {DType::kI8,  DType::kI16, DType::kI32, DType::kI64, DType::kF32,
                          DType::kF64, DType::kU8,  DType::kU16, DType::kU32, DType::kU64};
  for (DType dt : dtypes) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    for (int iter = 0; iter < 20; ++iter) {
      std::vector<btf::Item> items;
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        Shape shape = testing::RandomShape(rng, 4, 5);
        if (rng() % 2) {
          items.emplace_back(MakeTensor("t", dt, shape, testing::RandomBytes(rng, *DenseByteSize(dt, shape))));
          continue;
        }
        const std::uint64_t total = *ElementCount(shape);
        const std::uint64_t nnz = total ? rng() % (total + 1) : 0;
        std::vector<std::int64_t> idx;
        for (std::uint64_t k = 0; k < nnz * shape.size(); ++k)
          idx.push_back(static_cast<std::int64_t>(rng() % shape[k % shape.size()]));
        std::string idx_bytes(reinterpret_cast<const char*>(idx.data()), idx.size() * 8);
        items.emplace_back(
            btf::CooTensor{shape, MakeTensor("i", DType::kI64, {nnz, shape.size()}, idx_bytes),
                           MakeTensor("v", dt, {nnz}, testing::RandomBytes(rng, nnz * ElementSize(dt)))});
      }
      auto enc = btf::EncodeItems(items);
      ASSERT_TRUE(enc.ok()) << enc.status().ToString();
      EXPECT_EQ(enc->size() % 8, 0u);
      auto recs = btf::DecodeRecords(Bytes(*enc), nullptr, "r");
      ASSERT_TRUE(recs.ok()) << recs.status().ToString();
      ASSERT_EQ(recs->size(), items.size());
      for (int i = 0; i < n; ++i) {
        const btf::Record& r = (*recs)[i];
        if (const auto* t = std::get_if<Tensor>(&items[i])) {
          ASSERT_FALSE(r.coo);
          EXPECT_EQ(r.dense.info.dtype, dt);
          EXPECT_EQ(r.dense.info.shape, t->info.shape);
          EXPECT_EQ(Str(r.dense.data), Str(t->data));
        } else {
          const auto& c = std::get<btf::CooTensor>(items[i]);
          ASSERT_TRUE(r.coo);
          EXPECT_EQ(r.coo_tensor.dense_shape, c.dense_shape);
          EXPECT_EQ(Str(r.coo_tensor.indices.data), Str(c.indices.data));
          EXPECT_EQ(r.coo_tensor.values.info.dtype, dt);
          EXPECT_EQ(Str(r.coo_tensor.values.data), Str(c.values.data));
        }
      }
      auto set = DecodeBtf(*enc);  // and through the TensorSet mapping
      ASSERT_TRUE(set.ok());
      auto again = btf::Encode(*set);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      EXPECT_EQ(*again, *enc);
    }
  }
}

}  // namespace
}  // namespace tensorsafe
