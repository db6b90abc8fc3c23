// The safetensors codec: dtype map, golden bytes both ways, header forms,
// options, truncation and bit flips, random round trips, writer errors.
// The named edge-case files and the reference package's files are replayed
// in safetensors_files_test.cc; file I/O and fault injection are in
// safetensors_io_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "formats/safetensors/internal.h"
#include "tensorsafe/formats/safetensors.h"

namespace tensorsafe::safetensors {
namespace {

std::string Le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file from header text (length prefix added) and data bytes.
std::string MakeFile(std::string_view json, std::string_view data = {}) {
  return Le64(json.size()) + std::string(json) + std::string(data);
}

std::span<const std::byte> AsSpan(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

Result<TensorSet> DecodeString(const std::string& s, const ReadOptions& opt = {}) {
  auto owner = std::make_shared<std::string>(s);
  return Decode(AsSpan(*owner), owner, "", opt);
}

template <typename T>
std::string Raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A set whose tensors view strings kept alive by the set itself.
class SetBuilder {
 public:
  SetBuilder& Add(std::string name, DType dtype, Shape shape, std::string data) {
    auto owner = std::make_shared<std::string>(std::move(data));
    Tensor t;
    t.info.name = std::move(name);
    t.info.dtype = dtype;
    t.info.shape = std::move(shape);
    t.data = AsSpan(*owner);
    t.owner = owner;
    set_.tensors.push_back(std::move(t));
    return *this;
  }
  SetBuilder& Metadata(std::string json) {
    set_.metadata_json = std::move(json);
    return *this;
  }
  const TensorSet& set() const { return set_; }
  TensorSet& mutable_set() { return set_; }

 private:
  TensorSet set_;
};

std::string DataOf(const Tensor& t) { return std::string(reinterpret_cast<const char*>(t.data.data()), t.data.size()); }

// --- dtypes -----------------------------------------------------------------

TEST(SafetensorsDType, NamesInTheCratesEnumOrder) {
  const std::vector<std::string_view> expected = {
      "BOOL", "F4",  "F6_E2M3", "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
      "I16",  "U16", "F16",     "BF16",    "I32", "U32", "F32",     "C64",     "F64",     "I64",         "U64"};
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(internal::kNumStDTypes));
  for (int r = 0; r < internal::kNumStDTypes; ++r) {
    EXPECT_EQ(internal::StDTypeAt(r).name, expected[r]) << r;
    EXPECT_EQ(internal::RankOfName(expected[r]), r);
    auto d = DTypeFromName(expected[r]);
    ASSERT_TRUE(d.has_value()) << expected[r];
    EXPECT_EQ(DTypeToName(*d), expected[r]);
    // The bit widths agree with tensorsafe's block geometry.
    const DTypeInfo& info = GetDTypeInfo(*d);
    EXPECT_EQ(internal::StDTypeAt(r).bits * info.block_elems, info.block_bytes * 8) << expected[r];
  }
}

TEST(SafetensorsDType, SpecialCasesAndGaps) {
  EXPECT_EQ(DTypeFromName("F8_E4M3"), DType::kF8E4M3FN);
  EXPECT_EQ(DTypeFromName("F4"), DType::kF4E2M1);
  EXPECT_EQ(DTypeFromName("f32"), std::nullopt);  // case-sensitive like the crate
  EXPECT_EQ(DTypeFromName("F8_E4M3FN"), std::nullopt);
  EXPECT_EQ(DTypeFromName("C128"), std::nullopt);
  EXPECT_EQ(DTypeToName(DType::kC128), std::nullopt);
  EXPECT_EQ(DTypeToName(DType::kI4), std::nullopt);
  EXPECT_EQ(DTypeToName(DType::kU4), std::nullopt);
}

// --- golden bytes, both directions --------------------------------------------

struct Golden {
  const char* name;
  std::string bytes;
  SetBuilder set;
};

std::vector<Golden> Goldens() {
  std::vector<float> f6 = {0, 1, 2, 3, 4, 5};
  std::vector<Golden> g;
  g.push_back({"empty", Le64(8) + "{}      ", SetBuilder()});
  g.push_back({"metadata", Le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ",
               SetBuilder().Metadata(R"({"framework":"pt"})")});
  // 64 bytes of JSON: no padding at all.
  g.push_back({"attn.0", Le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + Raw(f6),
               SetBuilder().Add("attn.0", DType::kF32, {1, 2, 3}, Raw(f6))});
  // 65 bytes of JSON: padded to 72.
  g.push_back({"forced alignment",
               Le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " + Raw(f6),
               SetBuilder().Add("attn0", DType::kF32, {1, 1, 2, 3}, Raw(f6))});
  // F4: the header holds the logical element count; 2 elements in 1 byte.
  g.push_back({"f4", Le64(64) + R"({"weight":{"dtype":"F4","shape":[1,2],"data_offsets":[0,1]}})" + "    " + "\x21",
               SetBuilder().Add("weight", DType::kF4E2M1, {1, 2}, "\x21")});
  g.push_back(
      {"i32 zeros",
       Le64(0x40) + R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})" + "    " + std::string(16, '\0'),
       SetBuilder().Add("test", DType::kI32, {2, 2}, std::string(16, '\0'))});
  return g;
}

TEST(SafetensorsGolden, EncodeGivesTheBytes) {
  for (const Golden& g : Goldens()) {
    auto out = Encode(g.set.set());
    ASSERT_TRUE(out.ok()) << g.name << ": " << out.status().ToString();
    EXPECT_EQ(*out, g.bytes) << g.name;
  }
}

TEST(SafetensorsGolden, DecodeGivesTheSet) {
  for (const Golden& g : Goldens()) {
    auto set = DecodeString(g.bytes);
    ASSERT_TRUE(set.ok()) << g.name << ": " << set.status().ToString();
    const TensorSet& want = g.set.set();
    EXPECT_EQ(set->metadata_json, want.metadata_json) << g.name;
    ASSERT_EQ(set->tensors.size(), want.tensors.size()) << g.name;
    for (std::size_t i = 0; i < want.tensors.size(); ++i) {
      EXPECT_EQ(set->tensors[i].info.name, want.tensors[i].info.name);
      EXPECT_EQ(set->tensors[i].info.dtype, want.tensors[i].info.dtype);
      EXPECT_EQ(set->tensors[i].info.shape, want.tensors[i].info.shape);
      EXPECT_EQ(DataOf(set->tensors[i]), DataOf(want.tensors[i]));
    }
  }
}

TEST(SafetensorsGolden, WriterOrderIsDTypeDescendingThenName) {
  SetBuilder b;
  // Given in a scrambled order; one tensor per dtype plus ties on F32.
  const char* names[] = {"BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
                         "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
                         "U32",     "F32",         "C64",         "F64",     "I64", "U64"};
  std::vector<int> idx(22);
  for (int i = 0; i < 22; ++i) idx[i] = (i * 7) % 22;  // 7 is coprime with 22
  for (int i : idx) {
    const internal::StDType& st = internal::StDTypeAt(i);
    b.Add(std::string("t_") + names[i], st.dtype, {4}, std::string(st.bits / 2, 'x'));
  }
  b.Add("a", DType::kF32, {1}, "abcd").Add("B", DType::kF32, {1}, "efgh");
  auto out = Encode(b.set());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  // Data order is the writer's order.
  auto set = DecodeString(*out);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  std::vector<std::string> got;
  for (const Tensor& t : set->tensors) got.push_back(t.info.name);
  std::vector<std::string> want = {"t_U64", "t_I64",         "t_F64",         "t_C64",     "B",         "a",
                                   "t_F32", "t_U32",         "t_I32",         "t_BF16",    "t_F16",     "t_U16",
                                   "t_I16", "t_F8_E5M2FNUZ", "t_F8_E4M3FNUZ", "t_F8_E8M0", "t_F8_E4M3", "t_F8_E5M2",
                                   "t_I8",  "t_U8",          "t_F6_E3M2",     "t_F6_E2M3", "t_F4",      "t_BOOL"};
  EXPECT_EQ(got, want);
  // Insertion order does not matter.
  TensorSet reversed = b.set();
  std::reverse(reversed.tensors.begin(), reversed.tensors.end());
  auto again = Encode(reversed);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *out);
}

TEST(SafetensorsGolden, EscapesNamesAndMetadataLikeSerde) {
  SetBuilder b;
  b.Add(std::string("q\"b\\s/\b\f\n\r\t\x01\x1f\x7f\xc3\xbc", 16), DType::kU8, {0}, "");
  b.Metadata(R"({"k\u0000":"v\u00fc\ud83d\ude00"})");
  auto out = Encode(b.set());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::string json = out->substr(8, out->size() - 8);
  EXPECT_EQ(json.substr(0, json.find_last_not_of(' ') + 1),
            "{\"__metadata__\":{\"k\\u0000\":\"v\xc3\xbc\xf0\x9f\x98\x80\"},"
            "\"q\\\"b\\\\s/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\xc3\xbc\":"
            "{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}");
}

// --- reading: layout, metadata, options -------------------------------------

TEST(SafetensorsDecode, ZeroCopyViewsShareTheOwner) {
  const std::string file = MakeFile(
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]},"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})",
      "abcde");
  auto owner = std::make_shared<std::string>(file);
  const std::size_t data_start = file.size() - 5;
  Result<TensorSet> set = Decode(AsSpan(*owner), owner, "mem");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->tensors.size(), 2u);
  // Data order, with absolute offsets and positions.
  EXPECT_EQ(set->tensors[0].info.name, "a");
  EXPECT_EQ(set->tensors[0].info.data_offset, data_start);
  EXPECT_EQ(set->tensors[0].info.data_length, 3u);
  EXPECT_EQ(set->tensors[1].info.data_offset, data_start + 3);
  EXPECT_EQ(set->tensors[1].data.data(), reinterpret_cast<const std::byte*>(owner->data()) + data_start + 3);
  EXPECT_EQ(DataOf(set->tensors[1]), "de");
  EXPECT_EQ(owner.use_count(), 3);
  std::weak_ptr<std::string> weak = owner;
  owner.reset();
  EXPECT_FALSE(weak.expired());  // the tensors keep the bytes alive
  EXPECT_EQ(DataOf(set->tensors[0]), "abc");
}

TEST(SafetensorsDecode, MetadataForms) {
  struct Case {
    std::string json;
    std::string metadata;
  } cases[] = {
      {"{}", ""},
      {R"({"__metadata__":null})", ""},
      {R"({"__metadata__":{}})", "{}"},
      {R"({ "__metadata__" : { "b" : "1" , "a" : "2" } })", R"({"b":"1","a":"2"})"},
      {R"({"\u005f_metadata__":{"k":"v"}})", R"({"k":"v"})"},
      {R"({"__metadata__":{"\u0041":"\/\u00fc\n\u007f"}})", "{\"A\":\"/\xc3\xbc\\n\x7f\"}"},
  };
  for (const Case& c : cases) {
    auto set = DecodeString(MakeFile(c.json));
    ASSERT_TRUE(set.ok()) << c.json << ": " << set.status().ToString();
    EXPECT_EQ(set->metadata_json, c.metadata) << c.json;
  }
}

TEST(SafetensorsDecode, ErrorsNameTheSource) {
  auto owner = std::make_shared<std::string>("1234");
  auto set = Decode(AsSpan(*owner), owner, "model.safetensors");
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(set.status().message(), "model.safetensors: file is 4 bytes, too short for the 8-byte header length");
}

TEST(SafetensorsDecode, HeaderLimitIsAnOption) {
  const std::string file = MakeFile(R"({"__metadata__":{"k":"v"}})");  // N = 26
  ReadOptions opt;
  opt.max_header_bytes = 26;
  EXPECT_TRUE(DecodeString(file, opt).ok());
  opt.max_header_bytes = 25;
  auto r = DecodeString(file, opt);
  EXPECT_EQ(r.status().code(), StatusCode::kLimitExceeded);
  EXPECT_EQ(r.status().message(), "header length 26 exceeds the limit of 25 bytes");
}

TEST(SafetensorsDecode, DepthLimitIsAnOption) {
  const std::string file = MakeFile(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":[[{}]]}})");  // depth 5
  ReadOptions opt;
  opt.max_json_depth = 5;
  EXPECT_TRUE(DecodeString(file, opt).ok());
  opt.max_json_depth = 4;
  auto r = DecodeString(file, opt);
  EXPECT_EQ(r.status().code(), StatusCode::kLimitExceeded);
  EXPECT_EQ(r.status().message(), "header JSON is nested deeper than 4 levels");
  // Far deeper than any limit: refused, without deep recursion.
  std::string deep = R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":)" + std::string(100000, '[') +
                     std::string(100000, ']') + "}}";
  EXPECT_EQ(DecodeString(MakeFile(deep)).status().code(), StatusCode::kLimitExceeded);
}

TEST(SafetensorsDecode, ParseHeaderReadsOnlyThePrefix) {
  const std::string file =
      MakeFile(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\x55'));
  const std::size_t header_end = file.size() - 16;
  // The data is not needed, only the file size.
  auto h = ParseHeader(AsSpan(file).first(header_end), file.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->header_length, header_end - 8);
  EXPECT_EQ(h->data_start, header_end);
  EXPECT_EQ(h->data_length, 16u);
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].dtype, DType::kF64);
  EXPECT_EQ(h->tensors[0].data_checksum, 0u);
  auto short_prefix = ParseHeader(AsSpan(file).first(header_end - 1), file.size());
  EXPECT_EQ(short_prefix.status().code(), StatusCode::kInvalidArgument);
  // The file size still decides truncation.
  auto truncated = ParseHeader(AsSpan(file).first(header_end), file.size() - 1);
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorruption);
}

TEST(SafetensorsDecode, UnknownDTypeYieldsToCorruption) {
  // An unknown dtype is kUnsupported only in an otherwise valid header.
  const std::string e = R"("dtype":"F99","shape":[0],"data_offsets":[0,0])";
  EXPECT_EQ(DecodeString(MakeFile("{\"a\":{" + e + "}}")).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(DecodeString(MakeFile("{\"a\":{" + e + "},\"b\":1}")).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeString(MakeFile("{\"a\":{" + e + "},\"a\":{" + e + "}}")).status().code(), StatusCode::kCorruption);
}

TEST(SafetensorsDecode, CheckOrderFollowsDataOrder) {
  // "b" comes first in data order and has the size error; "a", later in data
  // order but first in the header, has a gap. The crate reports "b".
  const std::string file = MakeFile(
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[9,10]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,5]}})",
      std::string(10, '\0'));
  auto r = DecodeString(file);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("tensor \"b\": data_offsets [0, 5] hold 5 bytes"), std::string::npos)
      << r.status().message();
}

// --- damaged files ---------------------------------------------------------------

std::string SmallFile() {
  SetBuilder b;
  b.Metadata(R"({"a":"b"})")
      .Add("x", DType::kF32, {2}, std::string(8, '\1'))
      .Add("y", DType::kU8, {3}, "abc")
      .Add("z", DType::kF4E2M1, {2}, "\x12");
  auto out = Encode(b.set());
  EXPECT_TRUE(out.ok());
  return *out;
}

TEST(SafetensorsDamage, TruncationAtEveryPrefix) {
  const std::string file = SmallFile();
  ASSERT_TRUE(DecodeString(file).ok());
  const std::uint64_t n = file.size() - 8 - 12;  // header length: 12 data bytes follow
  for (std::size_t len = 0; len < file.size(); ++len) {
    auto r = DecodeString(file.substr(0, len));
    ASSERT_FALSE(r.ok()) << "prefix " << len;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << len;
    const std::string m = r.status().message();
    if (len < 8) {
      EXPECT_NE(m.find("too short for the 8-byte header length"), std::string::npos) << m;
    } else if (len < 8 + n) {
      EXPECT_NE(m.find("runs past the end of the file"), std::string::npos) << m;
    } else {
      EXPECT_NE(m.find("truncated"), std::string::npos) << m;
    }
  }
}

TEST(SafetensorsDamage, BitFlipsNeverCrash) {
  const std::string file = SmallFile();
  const std::size_t header_end = file.size() - 12;
  int accepted = 0;
  for (std::size_t i = 0; i < header_end; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = file;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      auto r = DecodeString(f);
      if (!r.ok()) continue;
      ++accepted;
      // Whatever is accepted must be internally consistent.
      std::uint64_t end = 0;
      for (const Tensor& t : r->tensors) end = std::max(end, t.info.data_offset + t.info.data_length);
      EXPECT_LE(end, f.size());
    }
  }
  // Flips inside names, metadata strings and padding keep the file valid.
  EXPECT_GT(accepted, 0);
}

// --- random round trips ---------------------------------------------------------

TEST(SafetensorsRandom, RoundTrips) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("SafetensorsRandom seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  const std::string alphabet = std::string("ab.Z_0\"\\/\n\t\x01\x7f ", 15) + "\xc3\xbc";
  auto random_string = [&](std::size_t max) {
    std::string s;
    for (std::size_t i = uniform(0, max); i > 0; --i) {
      std::size_t k = uniform(0, alphabet.size() - 1);
      if (k >= alphabet.size() - 2)
        s += "\xc3\xbc";
      else
        s += alphabet[k];
    }
    return s;
  };
  for (int iter = 0; iter < 200; ++iter) {
    SetBuilder b;
    std::map<std::string, std::tuple<DType, Shape, std::string>> model;
    const std::size_t count = uniform(0, 12);
    for (std::size_t i = 0; i < count; ++i) {
      std::string name = random_string(6);
      if (model.count(name) || name == "__metadata__") continue;
      const internal::StDType& st = internal::StDTypeAt(static_cast<int>(uniform(0, 21)));
      Shape shape(uniform(st.bits % 8 ? 1 : 0, 4));
      for (auto& d : shape) d = uniform(0, 4);
      if (!shape.empty() && st.bits % 8) shape.back() *= (st.bits == 4 ? 2 : 4);
      std::uint64_t elems = 1;
      for (auto d : shape) elems *= d;
      std::string data(elems * st.bits / 8, '\0');
      for (char& c : data) c = static_cast<char>(uniform(0, 255));
      model[name] = {st.dtype, shape, data};
      b.Add(name, st.dtype, shape, data);
    }
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    if (uniform(0, 1)) {
      for (std::size_t i = uniform(0, 3); i > 0; --i) meta[random_string(4)] = random_string(8);
      b.Metadata(meta.dump());
    }
    auto bytes = Encode(b.set());
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    std::uint64_t n = 0;
    std::memcpy(&n, bytes->data(), 8);
    EXPECT_EQ(n % 8, 0u);
    auto set = DecodeString(*bytes);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set->tensors.size(), model.size());
    int prev_rank = internal::kNumStDTypes;
    std::string prev_name;
    for (const Tensor& t : set->tensors) {
      auto it = model.find(t.info.name);
      ASSERT_NE(it, model.end()) << t.info.name;
      EXPECT_EQ(t.info.dtype, std::get<0>(it->second));
      EXPECT_EQ(t.info.shape, std::get<1>(it->second));
      EXPECT_EQ(DataOf(t), std::get<2>(it->second));
      const int rank = internal::RankOfDType(t.info.dtype);
      EXPECT_TRUE(rank < prev_rank || (rank == prev_rank && prev_name < t.info.name));
      prev_rank = rank;
      prev_name = t.info.name;
    }
    if (b.set().metadata_json.empty()) {
      EXPECT_EQ(set->metadata_json, "");
    } else {
      EXPECT_EQ(nlohmann::ordered_json::parse(set->metadata_json), meta);
    }
    // Decoding then encoding gives the same bytes.
    auto again = Encode(*set);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *bytes);
  }
}

// --- writer errors -----------------------------------------------------------------

void ExpectEncodeError(const TensorSet& set, StatusCode code, std::string_view fragment) {
  auto r = Encode(set);
  ASSERT_FALSE(r.ok()) << fragment;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(SafetensorsEncode, RefusesDTypesTheFormatLacks) {
  for (DType d : {DType::kC128, DType::kI4, DType::kU4}) {
    SetBuilder b;
    b.Add("t", d, {2}, std::string(d == DType::kC128 ? 32 : 1, '\0'));
    ExpectEncodeError(b.set(), StatusCode::kUnsupported, "has no safetensors equivalent");
  }
}

TEST(SafetensorsEncode, RefusesNonStringMetadata) {
  const char* bad[] = {R"({"a":1})", R"({"a":{"b":"c"}})", R"({"a":null})", R"({"a":["x"]})", R"({"a":true})"};
  for (const char* m : bad) {
    ExpectEncodeError(SetBuilder().Metadata(m).set(), StatusCode::kInvalidArgument,
                      "is not a string; safetensors metadata maps strings to strings");
  }
  ExpectEncodeError(SetBuilder().Metadata("[]").set(), StatusCode::kInvalidArgument, "must be a JSON object");
  ExpectEncodeError(SetBuilder().Metadata("{").set(), StatusCode::kInvalidArgument, "not valid JSON");
  ExpectEncodeError(SetBuilder().Metadata("{} {}").set(), StatusCode::kInvalidArgument, "trailing");
  ExpectEncodeError(SetBuilder().Metadata(R"({"k":"a","k":"b"})").set(), StatusCode::kInvalidArgument,
                    "has the key \"k\" twice");
}

TEST(SafetensorsEncode, RefusesBadTensors) {
  ExpectEncodeError(SetBuilder().Add("t", DType::kF32, {2}, "1234").set(), StatusCode::kInvalidArgument,
                    "data holds 4 bytes, but F32 [2] takes 8");
  ExpectEncodeError(SetBuilder().Add("t", DType::kF4E2M1, {3}, "12").set(), StatusCode::kInvalidArgument,
                    "takes 12 bits, not a whole number of bytes");
  ExpectEncodeError(SetBuilder().Add("t", DType::kU8, {1}, "a").Add("t", DType::kI8, {1}, "b").set(),
                    StatusCode::kInvalidArgument, "tensor name \"t\" appears twice");
  ExpectEncodeError(SetBuilder().Add("__metadata__", DType::kU8, {0}, "").set(), StatusCode::kInvalidArgument,
                    "reserved");
  ExpectEncodeError(SetBuilder().Add("\xff", DType::kU8, {0}, "").set(), StatusCode::kInvalidArgument,
                    "not valid UTF-8");
  ExpectEncodeError(SetBuilder().Add("t", DType::kU8, {1ull << 62, 8}, "").set(), StatusCode::kInvalidArgument,
                    "overflows");
  SetBuilder sparse;
  sparse.Add("t", DType::kU8, {0}, "");
  sparse.mutable_set().tensors[0].info.layout = Layout::kCoo;
  ExpectEncodeError(sparse.set(), StatusCode::kUnsupported, "dense tensors only");
  SetBuilder per_tensor;
  per_tensor.Add("t", DType::kU8, {0}, "");
  per_tensor.mutable_set().tensors[0].info.metadata_json = R"({"unit":"m"})";
  ExpectEncodeError(per_tensor.set(), StatusCode::kUnsupported, "no per-tensor metadata");
  per_tensor.mutable_set().tensors[0].info.metadata_json = "{}";
  EXPECT_TRUE(Encode(per_tensor.set()).ok());
}

TEST(SafetensorsEncode, HeaderLimit) {
  SetBuilder b;
  b.Add("t", DType::kU8, {0}, "");  // {"t":{...}} is 51 bytes, padded to 56
  WriteOptions opt;
  opt.max_header_bytes = 56;
  EXPECT_TRUE(Encode(b.set(), opt).ok());
  opt.max_header_bytes = 55;
  auto r = Encode(b.set(), opt);
  EXPECT_EQ(r.status().code(), StatusCode::kLimitExceeded);
  EXPECT_EQ(r.status().message(), "safetensors header would be 56 bytes, over the limit of 55");
}

}  // namespace
}  // namespace tensorsafe::safetensors
