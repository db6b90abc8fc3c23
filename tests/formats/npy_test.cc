// The .npy codec: golden bytes made by NumPy (tests/golden/npy/make_golden.py)
// in both directions, the named invalid inputs of docs/formats/npy.md,
// truncation at every prefix, and random round trips.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "formats/codec_test_util.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/npy.h"

namespace tensorsafe {
namespace {

namespace fs = std::filesystem;
const std::string kGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/npy/";

using testing::Bytes;

Result<TensorSet> DecodeNpy(const std::string& s, const std::string& name = "t.npy", const npy::ReadOptions& opt = {}) {
  auto owner = std::make_shared<std::string>(s);
  return npy::Decode(Bytes(*owner), owner, name, opt);
}

using testing::DataOf;

// Builds a .npy image around a header text, padded as NumPy pads.
std::string Npy(const std::string& dict, const std::string& data, int major = 1) {
  std::string text = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + text.size() + 1) % 64 != 0) text.push_back(' ');
  text.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + text + data;
}

std::string F32Data(int n) {
  std::string d;
  for (int i = 0; i < n; ++i) {
    float f = static_cast<float>(i);
    d.append(reinterpret_cast<const char*>(&f), 4);
  }
  return d;
}

const char* kWriterGoldens[] = {"f32_2x3.npy",   "f64_scalar.npy", "i32_0x3.npy",      "bool_5.npy",    "u8_4.npy",
                                "i8_4.npy",      "u16_3.npy",      "i16_3.npy",        "u32_3.npy",     "i64_3.npy",
                                "u64_2x1.npy",   "f16_4.npy",      "c64_2.npy",        "c128_2.npy",    "bf16_2x2.npy",
                                "f8_e5m2_3.npy", "f32_rank36.npy", "i64_big_dims.npy", "f32_2x3x4.npy", "i32_2x3.npy",
                                "f64_3x2.npy"};

TEST(NpyGolden, ReadThenWriteIsByteExact) {
  for (const char* name : kWriterGoldens) {
    SCOPED_TRACE(name);
    const std::string file = testing::ReadFileBytes(kGolden + name);
    ASSERT_FALSE(file.empty());
    auto set = npy::ReadFile(kGolden + name);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set->tensors.size(), 1u);
    auto again = npy::Encode(set->tensors[0]);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, file);
  }
}

TEST(NpyGolden, DecodedValues) {
  auto set = npy::ReadFile(kGolden + "f32_2x3.npy");
  ASSERT_TRUE(set.ok());
  const Tensor& t = set->tensors[0];
  EXPECT_EQ(t.info.name, "f32_2x3");
  EXPECT_EQ(t.info.dtype, DType::kF32);
  EXPECT_EQ(t.info.shape, (Shape{2, 3}));
  EXPECT_EQ(t.info.data_offset, 128u);
  const float* f = reinterpret_cast<const float*>(t.data.data());
  EXPECT_EQ(f[5], 1.25f);

  auto bf = npy::ReadFile(kGolden + "bf16_2x2.npy");
  ASSERT_TRUE(bf.ok());
  EXPECT_EQ(bf->tensors[0].info.dtype, DType::kBF16);
  EXPECT_EQ(DataOf(bf->tensors[0]), std::string("\x80\x3f\x00\xc0\x00\x3f\x40\x40", 8));

  auto e5 = npy::ReadFile(kGolden + "f8_e5m2_3.npy");
  ASSERT_TRUE(e5.ok());
  EXPECT_EQ(e5->tensors[0].info.dtype, DType::kF8E5M2);
  EXPECT_EQ(DataOf(e5->tensors[0]), "\x3c\xc0\x38");

  auto big = npy::ReadFile(kGolden + "i64_big_dims.npy");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->tensors[0].info.shape, (Shape{12345678901, 0, 7}));
}

TEST(NpyGolden, OneByteVoidNeedsVoidAs) {
  auto r = npy::ReadFile(kGolden + "f8_e4m3fn_3.npy");
  ASSERT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("set ReadOptions::void_as"), std::string::npos) << r.status().message();
  npy::ReadOptions opt;
  opt.void_as = DType::kF8E4M3FN;
  auto ok = npy::ReadFile(kGolden + "f8_e4m3fn_3.npy", opt);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->tensors[0].info.dtype, DType::kF8E4M3FN);
  EXPECT_EQ(DataOf(ok->tensors[0]), "\x38\xc0\x30");
  auto again = npy::Encode(ok->tensors[0]);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, testing::ReadFileBytes(kGolden + "f8_e4m3fn_3.npy"));
  opt.void_as = DType::kF16;
  EXPECT_EQ(npy::ReadFile(kGolden + "f8_e4m3fn_3.npy", opt).status().code(), StatusCode::kUnsupported);
}

TEST(NpyGolden, BigEndianFortranAndVersionsDecodeToTheirPair) {
  std::ifstream pairs(kGolden + "PAIRS.txt");
  std::string a, b;
  int n = 0;
  while (pairs >> a >> b) {
    SCOPED_TRACE(a);
    auto x = npy::ReadFile(kGolden + a);
    auto y = npy::ReadFile(kGolden + b);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(x->tensors[0].info.dtype, y->tensors[0].info.dtype);
    EXPECT_EQ(x->tensors[0].info.shape, y->tensors[0].info.shape);
    EXPECT_EQ(DataOf(x->tensors[0]), DataOf(y->tensors[0]));
    ++n;
  }
  EXPECT_EQ(n, 6);
}

TEST(Npy, ZeroCopyWhenBytesAreRight) {
  auto owner = std::make_shared<std::string>(testing::ReadFileBytes(kGolden + "f32_2x3.npy"));
  auto set = npy::Decode(Bytes(*owner), owner, "x.npy");
  ASSERT_TRUE(set.ok());
  const Tensor& t = set->tensors[0];
  EXPECT_EQ(reinterpret_cast<const char*>(t.data.data()), owner->data() + 128);
  EXPECT_EQ(t.owner.get(), owner.get());
  EXPECT_EQ(t.info.name, "x");

  auto owner2 = std::make_shared<std::string>(testing::ReadFileBytes(kGolden + "be_i32_2x3.npy"));
  auto swapped = npy::Decode(Bytes(*owner2), owner2, "dir/be.npy");
  ASSERT_TRUE(swapped.ok());
  EXPECT_NE(swapped->tensors[0].owner.get(), owner2.get());  // owns a converted buffer
  EXPECT_EQ(swapped->tensors[0].info.name, "be");
}

TEST(Npy, AcceptedHeaderSpellings) {
  const std::string data = F32Data(6);
  const char* dicts[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(2,3)}",
      "{'shape': (2, 3,), 'descr': '=f4', 'fortran_order': False}",
      "{\n\t'descr' : '<f4' ,\r\n 'fortran_order':False , 'shape':( 2 , 3 ) , }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
  };
  for (const char* d : dicts) {
    SCOPED_TRACE(d);
    auto r = DecodeNpy(Npy(d, data));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tensors[0].info.shape, (Shape{2, 3}));
    EXPECT_EQ(DataOf(r->tensors[0]), data);
  }
  // A 20000-byte 2.0 header: within our 64 KiB limit though past NumPy's
  // default max_header_size of 10000 (docs/PERMISSIVE.md).
  {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(19900, ' ');
    auto r = DecodeNpy(Npy(dict, data, 2));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GT(r->tensors[0].info.data_offset, 20000u);
    EXPECT_EQ(DataOf(r->tensors[0]), data);
  }
  // No trailing newline (some third-party writers) and a rank-0 shape.
  std::string raw = "\x93NUMPY\x01";
  raw.push_back('\0');
  std::string dict = "{'descr': '<f4', 'fortran_order': True, 'shape': ()}";
  raw.push_back(static_cast<char>(dict.size()));
  raw.push_back('\0');
  auto r = DecodeNpy(raw + dict + F32Data(1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->tensors[0].info.shape.empty());
}

// NumPy's np.dtype reads a descr's byte order as optional, and '|' on a
// multi-byte type as native ('='): little-endian on every host we build for.
TEST(Npy, DescrByteOrderIsOptionalAsInNumpy) {
  const std::string d6 = F32Data(6);
  for (const char* descr : {"f4", "|f4", "=f4"}) {
    SCOPED_TRACE(descr);
    auto r = DecodeNpy(Npy(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (6,)}", d6));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tensors[0].info.dtype, DType::kF32);
    EXPECT_EQ(DataOf(r->tensors[0]), d6);
  }
  const struct {
    const char* descr;
    DType dtype;
  } kinds[] = {{"u1", DType::kU8},   {"b1", DType::kBool}, {"i8", DType::kI64},
               {"|c8", DType::kC64}, {"|u2", DType::kU16}, {"V2", DType::kBF16}};
  for (const auto& k : kinds) {
    SCOPED_TRACE(k.descr);
    const std::string data(24, '\1');
    const std::string shape = "(" + std::to_string(24 / ElementSize(k.dtype)) + ",)";
    auto r = DecodeNpy(
        Npy(std::string("{'descr': '") + k.descr + "', 'fortran_order': False, 'shape': " + shape + "}", data));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tensors[0].info.dtype, k.dtype);
    EXPECT_EQ(DataOf(r->tensors[0]), data);
  }
}

struct Bad {
  const char* name;
  std::string bytes;
  StatusCode code;
  const char* message;
};

std::vector<Bad> BadFiles() {
  const std::string d6 = F32Data(6);
  auto hdr = [](const std::string& body) { return "{" + body + "}"; };
  const std::string good = Npy(hdr("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "), d6);
  std::string bad_magic = good;
  bad_magic[1] = 'M';
  std::string v4 = good;
  v4[6] = 4;
  std::string v11 = good;
  v11[7] = 1;
  std::string long_len = good;
  long_len[8] = '\xff';
  long_len[9] = '\x7f';
  std::string nul = good;
  nul[good.find('}') + 2] = '\0';
  std::string v3_bad_utf8 = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } \xff", d6, 3);
  std::string huge_v2 = "\x93NUMPY\x02";
  huge_v2 += std::string("\0\0\0\x10\0", 5);  // header length 1 MiB
  std::string rank65 = "(";
  for (int i = 0; i < 65; ++i) rank65 += "1,";
  rank65 += ")";
  auto with = [&](const std::string& shape_or_descr_body) { return Npy(hdr(shape_or_descr_body), d6); };
  return {
      {"short_file", "\x93NUM", StatusCode::kCorruption, "smaller than the 10-byte"},
      {"bad_magic", bad_magic, StatusCode::kCorruption, "bad magic"},
      {"version_4", v4, StatusCode::kUnsupported, "format version 4.0"},
      {"version_1_1", v11, StatusCode::kUnsupported, "format version 1.1"},
      {"header_past_end", long_len, StatusCode::kCorruption, "runs past the end of the file"},
      {"header_over_limit", huge_v2, StatusCode::kLimitExceeded, "exceeds the limit of 65536"},
      {"nul_in_header", nul, StatusCode::kCorruption, "NUL byte"},
      {"v3_not_utf8", v3_bad_utf8, StatusCode::kCorruption, "not valid UTF-8"},
      {"not_a_dict", Npy("['<f4']", d6), StatusCode::kCorruption, "expected '{'"},
      {"missing_shape", with("'descr': '<f4', 'fortran_order': False"), StatusCode::kCorruption, "'shape' is missing"},
      {"unknown_key", with("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1"), StatusCode::kCorruption,
       "unexpected key \"x\""},
      {"unknown_key_not_utf8", with("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x\xc1': 1"),
       StatusCode::kCorruption, "unexpected key \"x\\xc1\""},
      {"duplicate_key", with("'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)"),
       StatusCode::kCorruption, "'descr' appears twice"},
      {"missing_comma", with("'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)"), StatusCode::kCorruption,
       "expected ',' or '}'"},
      {"unquoted_key", with("descr: '<f4', 'fortran_order': False, 'shape': (2, 3)"), StatusCode::kCorruption,
       "expected a quoted string"},
      {"unterminated_string", with("'descr': '<f4"), StatusCode::kCorruption, "unterminated string"},
      {"escape_in_string", with("'descr': '<f\\x34', 'fortran_order': False, 'shape': (6,)"), StatusCode::kCorruption,
       "escape sequences"},
      {"shape_list", with("'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]"), StatusCode::kCorruption,
       "shape must be a tuple"},
      {"shape_not_tuple", with("'descr': '<f4', 'fortran_order': False, 'shape': (6)"), StatusCode::kCorruption,
       "needs a trailing comma"},
      {"negative_dim", with("'descr': '<f4', 'fortran_order': False, 'shape': (-6,)"), StatusCode::kCorruption,
       "expected a non-negative integer"},
      {"dim_overflow", with("'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)"),
       StatusCode::kCorruption, "does not fit in 64 bits"},
      {"leading_zero", with("'descr': '<f4', 'fortran_order': False, 'shape': (06,)"), StatusCode::kCorruption,
       "leading zero"},
      // Python literal syntax beyond what NumPy writes: ast.literal_eval (so
      // np.load) takes all of these; we refuse them (docs/formats/npy.md).
      {"hex_dim", with("'descr': '<f4', 'fortran_order': False, 'shape': (0x6,)"), StatusCode::kCorruption,
       "expected ',' or ')' in the shape"},
      {"plus_dim", with("'descr': '<f4', 'fortran_order': False, 'shape': (+6,)"), StatusCode::kCorruption,
       "expected a non-negative integer"},
      {"parenthesized_dim", with("'descr': '<f4', 'fortran_order': False, 'shape': ((6),)"), StatusCode::kCorruption,
       "expected a non-negative integer"},
      {"string_prefix", with("'descr': u'<f4', 'fortran_order': False, 'shape': (6,)"), StatusCode::kCorruption,
       "expected a quoted string"},
      {"comment", with("'descr': '<f4', # c\n'fortran_order': False, 'shape': (6,)"), StatusCode::kCorruption,
       "expected a quoted string"},
      {"fortran_not_bool", with("'descr': '<f4', 'fortran_order': 0, 'shape': (6,)"), StatusCode::kCorruption,
       "expected True or False"},
      {"junk_after_dict", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x", d6), StatusCode::kCorruption,
       "expected only spaces"},
      {"object_dtype", with("'descr': '|O', 'fortran_order': False, 'shape': (6,)"), StatusCode::kUnsupported,
       "never runs"},
      {"structured_dtype", with("'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)"),
       StatusCode::kUnsupported, "structured (record) dtypes"},
      {"unicode_dtype", with("'descr': '<U3', 'fortran_order': False, 'shape': (2,)"), StatusCode::kUnsupported,
       "strings, bytes and datetimes"},
      {"descr_name", with("'descr': 'float32', 'fortran_order': False, 'shape': (6,)"), StatusCode::kCorruption,
       "descr \"float32\" is not a type string of the form '<f4'"},
      {"descr_char_code", with("'descr': '<f', 'fortran_order': False, 'shape': (6,)"), StatusCode::kCorruption,
       "not a type string of the form '<f4'"},
      {"object_no_order", with("'descr': 'O', 'fortran_order': False, 'shape': (6,)"), StatusCode::kUnsupported,
       "never runs"},
      {"unknown_kind", with("'descr': '<x4', 'fortran_order': False, 'shape': (6,)"), StatusCode::kCorruption,
       "unknown type kind 'x'"},
      {"odd_float_size", with("'descr': '<f3', 'fortran_order': False, 'shape': (8,)"), StatusCode::kUnsupported,
       "no tensorsafe dtype has this kind and size"},
      {"long_double", with("'descr': '<f16', 'fortran_order': False, 'shape': (1,)"), StatusCode::kUnsupported,
       "no tensorsafe dtype has this kind and size"},
      {"void1", with("'descr': '|V1', 'fortran_order': False, 'shape': (24,)"), StatusCode::kUnsupported,
       "ReadOptions::void_as"},
      {"void3", with("'descr': '|V3', 'fortran_order': False, 'shape': (8,)"), StatusCode::kUnsupported, "3-byte void"},
      {"rank_over_limit", with("'descr': '<f4', 'fortran_order': False, 'shape': " + rank65),
       StatusCode::kLimitExceeded, "rank limit"},
      {"size_overflow", with("'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 8)"),
       StatusCode::kCorruption, "exceeds 2^63 - 1 bytes"},
      // NumPy refuses these empty arrays too ("Maximum allowed dimension
      // exceeded", "array is too big"): sizes are npy_intp, 63 bits.
      {"dim_over_int64", with("'descr': '|u1', 'fortran_order': False, 'shape': (9223372036854775808, 0)"),
       StatusCode::kCorruption,
       "shape [9223372036854775808, 0] x 1-byte items (zero dimensions aside) exceeds 2^63 - 1 bytes, NumPy's array "
       "size limit"},
      {"empty_over_size_limit", with("'descr': '<f4', 'fortran_order': False, 'shape': (0, 2305843009213693952)"),
       StatusCode::kCorruption, "exceeds 2^63 - 1 bytes"},
      {"truncated_data", Npy(hdr("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), "), d6.substr(0, 23)),
       StatusCode::kCorruption, "truncated: shape [2, 3] of <f4 needs 24 data bytes, only 23 remain"},
      {"trailing_bytes", good + "x", StatusCode::kCorruption, "1 trailing bytes after the 24 data bytes"},
  };
}

TEST(NpyInvalid, EachCheckHasItsCodeAndMessage) {
  for (const Bad& b : BadFiles()) {
    SCOPED_TRACE(b.name);
    auto r = DecodeNpy(b.bytes, std::string(b.name) + ".npy");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), b.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(b.message), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind(std::string(b.name) + ".npy: ", 0), 0u) << r.status().message();
  }
}

TEST(NpyInvalid, TruncationAtEveryPrefix) {
  const std::string file = testing::ReadFileBytes(kGolden + "f32_2x3.npy");
  for (std::size_t n = 0; n < file.size(); ++n) {
    auto r = DecodeNpy(file.substr(0, n));
    ASSERT_FALSE(r.ok()) << "prefix " << n;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << "prefix " << n << ": " << r.status().ToString();
  }
  EXPECT_TRUE(DecodeNpy(file).ok());
}

TEST(NpyInvalid, BitFlipsNeverCrash) {
  const std::string file = testing::ReadFileBytes(kGolden + "f32_2x3.npy");
  int rejected = 0;
  for (std::size_t i = 0; i < 128; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string m = file;
      m[i] = static_cast<char>(m[i] ^ (1 << bit));
      rejected += !DecodeNpy(m).ok();
    }
  }
  // Flips in the padding spaces can stay valid (' ' -> '\t' etc.); most break it.
  EXPECT_GT(rejected, 500);
}

// NumPy cannot make (or load) an array whose non-zero dimensions times the
// item size pass 2^63 - 1 bytes, even an empty one; the reader refuses them.
TEST(NpyWrite, ShapesNumpyCannotHoldAreRefused) {
  const std::uint64_t big[] = {0, std::uint64_t{1} << 61};
  auto h = npy::EncodeHeader(DType::kF32, big);
  ASSERT_EQ(h.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(h.status().message().find("shape [0, 2305843009213693952] of f32 exceeds 2^63 - 1 bytes"),
            std::string::npos)
      << h.status().message();
  // The largest that fits: 2^61 - 1 items of 4 bytes.
  const std::uint64_t fits[] = {0, (std::uint64_t{1} << 61) - 1};
  EXPECT_TRUE(npy::EncodeHeader(DType::kF32, fits).ok());
}

TEST(NpyWrite, PackedDtypesAreRefused) {
  for (DType dt : {DType::kI4, DType::kU4, DType::kF4E2M1, DType::kF6E2M3, DType::kF6E3M2}) {
    auto h = npy::EncodeHeader(dt, Shape{4});
    ASSERT_EQ(h.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(h.status().message().find("packed below one byte"), std::string::npos);
  }
}

TEST(NpyWrite, WriteFileIsAtomicAndNeedsOneTensor) {
  testing::TempDir dir;
  const std::string path = dir.File("a.npy");
  std::string data = F32Data(6);
  Tensor t;
  t.info.name = "a";
  t.info.dtype = DType::kF32;
  t.info.shape = {2, 3};
  t.data = Bytes(data);
  TensorSet set;
  EXPECT_EQ(npy::WriteFile(path, set).code(), StatusCode::kInvalidArgument);
  set.tensors.push_back(t);
  ASSERT_TRUE(npy::WriteFile(path, set).ok());
  EXPECT_EQ(testing::ReadFileBytes(path), *npy::Encode(t));
  auto back = npy::ReadFile(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(DataOf(back->tensors[0]), data);
  // A failing write (packed dtype) leaves nothing behind.
  set.tensors[0].info.dtype = DType::kI4;
  set.tensors[0].info.shape = {48};
  Status s = npy::WriteFile(dir.File("b.npy"), set);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path())) files += (e.path().filename() != "a.npy");
  EXPECT_EQ(files, 0);
  // Wrong data size.
  set.tensors[0].info.dtype = DType::kF32;
  set.tensors[0].info.shape = {7};
  EXPECT_EQ(npy::WriteFile(dir.File("c.npy"), set).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir.File("c.npy")));
}

TEST(NpyRoundTrip, RandomTensors) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("NpyRoundTrip seed %u\n", seed);
  std::mt19937 rng(seed);
  const DType types[] = {DType::kBool, DType::kU8,  DType::kU16,  DType::kU32,   DType::kU64,  DType::kI8,
                         DType::kI16,  DType::kI32, DType::kI64,  DType::kF16,   DType::kBF16, DType::kF32,
                         DType::kF64,  DType::kC64, DType::kC128, DType::kF8E5M2};
  for (int iter = 0; iter < 300; ++iter) {
    Tensor t;
    t.info.name = "r";
    t.info.dtype = types[rng() % std::size(types)];
    const int rank = static_cast<int>(rng() % 5);
    for (int i = 0; i < rank; ++i) t.info.shape.push_back(rng() % 5);
    std::string data(*DenseByteSize(t.info.dtype, t.info.shape), '\0');
    for (char& c : data) c = static_cast<char>(rng());
    t.data = Bytes(data);
    auto enc = npy::Encode(t);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(enc->size() % 64, data.size() % 64);  // data starts at a multiple of 64
    auto dec = DecodeNpy(*enc, "r.npy");
    ASSERT_TRUE(dec.ok()) << dec.status().ToString();
    EXPECT_EQ(dec->tensors[0].info.dtype, t.info.dtype);
    EXPECT_EQ(dec->tensors[0].info.shape, t.info.shape);
    EXPECT_EQ(DataOf(dec->tensors[0]), data);
  }
}

}  // namespace
}  // namespace tensorsafe
