// GGUF reader checks (docs/formats/gguf.md §Reader checks), one named file per
// check with its code and message; truncation at every prefix; bit flips;
// and the writer's refusals of bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "formats/gguf_builder.h"
#include "formats/gguf_test_util.h"
#include "tensorsafe/formats/gguf.h"

namespace tensorsafe {
namespace {

using testing::GgufBuilder;
using testing::GoldenDir;
using testing::ReadFileBytes;

Result<TensorSet> DecodeGguf(const std::string& bytes, const gguf::ReadOptions& opt = {}) {
  return gguf::Decode(std::as_bytes(std::span(bytes)), nullptr, "bad.gguf", opt);
}

struct Case {
  std::string name;
  std::string bytes;
  StatusCode code;
  std::string message;  // a substring of the message
  std::function<void(gguf::ReadOptions&)> tweak = nullptr;
};

// One f32 tensor "w" of 16 elements, alignment 32: the base of tensor cases.
GgufBuilder OneTensor(std::uint64_t offset, std::vector<std::uint64_t> ne = {16}, std::uint32_t type = 0) {
  GgufBuilder b;
  b.Header(1, 0).Info("w", ne, type, offset).PadTo(32);
  return b;
}

std::vector<Case> Cases() {
  using B = GgufBuilder;
  const std::string s64(64, 'n');
  std::vector<Case> v = {
      {"empty_file", "", StatusCode::kCorruption, "bad.gguf: file of 0 bytes is too short"},
      {"bad_magic", B().Bytes("GGUX").U32(3).U64(0).U64(0).str(), StatusCode::kCorruption,
       "bad magic \"GGUX\", expected \"GGUF\""},
      {"truncated_version", std::string("GGUF\3\0", 6), StatusCode::kCorruption,
       "version at offset 4 needs 4 bytes, 2 remain"},
      {"truncated_counts", B().Bytes("GGUF").U32(3).U64(0).str(), StatusCode::kCorruption,
       "tensor and key/value counts at offset 8 needs 16 bytes, 8 remain"},
      {"version_1", B().Header(0, 0, 1).str(), StatusCode::kUnsupported, "GGUF version 1 is not supported"},
      {"version_0", B().Header(0, 0, 0).str(), StatusCode::kUnsupported, "GGUF version 0 is not supported"},
      {"version_4", B().Header(0, 0, 4).str(), StatusCode::kUnsupported, "GGUF version 4 is not supported"},
      {"big_endian", B().Header(0, 0, 0x03000000).str(), StatusCode::kUnsupported,
       "version field 50331648 looks byte-swapped: big-endian GGUF is not supported"},
      {"counts_cannot_fit", B().Header(1000, 2).Zeros(40).str(), StatusCode::kCorruption,
       "2 key/value pairs and 1000 tensor infos cannot fit in the 40 bytes after the header"},
      {"tensor_count_limit", B().Header(std::uint64_t{1} << 21, 0).str(), StatusCode::kLimitExceeded,
       "tensor count 2097152 exceeds the limit of 1048576"},
      {"kv_count_limit", B().Header(0, 2).str(), StatusCode::kLimitExceeded, "key/value count 2 exceeds the limit of 1",
       [](auto& o) { o.max_kv_count = 1; }},
      {"empty_key", B().Header(0, 1).Key("", 4).U32(1).Zeros(4).str(), StatusCode::kCorruption,
       "bad.gguf: key 0 is empty"},
      {"key_not_utf8", B().Header(0, 1).Key("a\xff", 4).U32(1).str(), StatusCode::kCorruption,
       "key 0 \"a\\xff\" is not valid UTF-8"},
      {"key_past_end", B().Header(0, 1).U64(1000).Bytes("abcdefgh").str(), StatusCode::kCorruption,
       "key 0: length 1000 at offset 24 exceeds the 8 bytes remaining"},
      {"duplicate_key", B().Header(0, 2).Key("a", 4).U32(1).Key("a", 4).U32(2).str(), StatusCode::kCorruption,
       "key 1 \"a\" duplicates key 0"},
      {"reserved_key", B().Header(0, 1).Key("tensorsafe.gguf_types", 8).Str("x").str(), StatusCode::kUnsupported,
       "key 0 \"tensorsafe.gguf_types\" is reserved by tensorsafe"},
      {"unknown_value_type", B().Header(0, 1).Key("a", 13).U32(0).Zeros(2).str(), StatusCode::kCorruption,
       "key 0 \"a\": unknown value type 13"},
      {"unknown_array_type", B().Header(0, 1).Key("a", 9).U32(13).U64(0).str(), StatusCode::kCorruption,
       "key 0 \"a\": unknown array element type 13"},
      {"truncated_scalar", B().Header(0, 1).Key("a", 10).U32(1).str(), StatusCode::kCorruption,
       "key 0 \"a\" uint64 at offset 37 needs 8 bytes, 4 remain"},
      {"string_past_end", B().Header(0, 1).Key("a", 8).U64(std::uint64_t{1} << 40).Bytes("xx").str(),
       StatusCode::kCorruption, "key 0 \"a\" string: length 1099511627776 at offset 37 exceeds the 2 bytes remaining"},
      {"string_limit", B().Header(0, 1).Key("a", 8).Str("abcd").str(), StatusCode::kLimitExceeded,
       "key 0 \"a\" string: length 4 exceeds the limit of 3 bytes", [](auto& o) { o.max_string_bytes = 3; }},
      {"bool_2", B().Header(0, 1).Key("a", 7).U8(2).Zeros(4).str(), StatusCode::kCorruption,
       "key 0 \"a\": bool value 2 at offset 37 is neither 0 nor 1"},
      {"bool_2_in_array", B().Header(0, 1).Key("a", 9).U32(7).U64(2).U8(1).U8(7).str(), StatusCode::kCorruption,
       "key 0 \"a\": bool value 7 at offset 50 is neither 0 nor 1"},
      {"array_cannot_fit", B().Header(0, 1).Key("a", 9).U32(4).U64(1000).U32(1).str(), StatusCode::kCorruption,
       "key 0 \"a\": array of 1000 uint32 at offset 37 cannot fit in the 4 bytes"},
      {"array_count_overflow", B().Header(0, 1).Key("a", 9).U32(8).U64(std::uint64_t{1} << 62).U64(0).str(),
       StatusCode::kCorruption, "array of 4611686018427387904 string at offset 37 cannot fit"},
      {"array_elems_limit", B().Header(0, 1).Key("a", 9).U32(0).U64(3).Bytes("abc").str(), StatusCode::kLimitExceeded,
       "array of 3 elements exceeds the limit of 2", [](auto& o) { o.max_array_elems = 2; }},
      {"array_depth_limit", B().Header(0, 1).Key("a", 9).U32(9).U64(1).U32(4).U64(0).str(), StatusCode::kLimitExceeded,
       "arrays nested deeper than the limit of 1", [](auto& o) { o.max_array_depth = 1; }},
      {"metadata_limit", B().Header(0, 1).Key("a", 8).Str(std::string(32, 'x')).str(), StatusCode::kLimitExceeded,
       "the metadata JSON grows past the limit of 16 bytes", [](auto& o) { o.max_metadata_bytes = 16; }},
      {"alignment_not_u32", B().Header(0, 1).Key("general.alignment", 10).U64(32).str(), StatusCode::kCorruption,
       "key 0 \"general.alignment\" has type uint64; it must be uint32"},
      {"alignment_zero", B().Header(0, 1).Key("general.alignment", 4).U32(0).Zeros(4).str(), StatusCode::kCorruption,
       "\"general.alignment\": alignment 0 is not a power of two"},
      {"alignment_48", B().Header(0, 1).Key("general.alignment", 4).U32(48).Zeros(4).str(), StatusCode::kCorruption,
       "alignment 48 is not a power of two"},
      {"tensor_infos_cannot_fit", B().Header(1, 1).Key("a", 8).Str(std::string(40, 'x')).Zeros(10).str(),
       StatusCode::kCorruption, "1 tensor infos cannot fit in the 10 bytes after the key/value pairs"},
      {"tensor_name_past_end", B().Header(1, 0).U64(500).Zeros(20).str(), StatusCode::kCorruption,
       "tensor 0 name: length 500 at offset 24 exceeds the 20 bytes remaining"},
      {"tensor_name_64_bytes", B().Header(1, 0).Info(s64, {1}, 0, 0).PadTo(32).Zeros(32).str(),
       StatusCode::kLimitExceeded, "name of 64 bytes exceeds the limit of 63"},
      {"tensor_name_not_utf8", B().Header(1, 0).Info("\xc3", {1}, 0, 0).PadTo(32).Zeros(32).str(),
       StatusCode::kCorruption, "tensor 0 \"\\xc3\": name is not valid UTF-8"},
      // ggml reads "a" twice (C-string names) and refuses them as duplicates.
      {"tensor_name_nul",
       B().Header(2, 0)
           .Info(std::string("a\0x", 3), {1}, 0, 0)
           .Info(std::string("a\0y", 3), {1}, 0, 32)
           .PadTo(32)
           .Zeros(64)
           .str(),
       StatusCode::kCorruption, "tensor 0 \"a\\x00x\": name has a NUL byte at position 1; ggml would read it as \"a\""},
      {"duplicate_tensor", B().Header(2, 0).Info("w", {1}, 0, 0).Info("w", {1}, 0, 32).PadTo(32).Zeros(64).str(),
       StatusCode::kCorruption, "tensor 1 \"w\" duplicates tensor 0"},
      {"five_dims", OneTensor(0, {1, 1, 1, 1, 1}).Zeros(32).str(), StatusCode::kUnsupported,
       "tensor 0 \"w\": 5 dimensions; ggml supports at most 4"},
      {"truncated_dims", B().Header(1, 0).Str("w").U32(2).U64(1).Zeros(8).str(), StatusCode::kCorruption,
       "tensor 0 \"w\" dims, type and offset at offset 37 needs 28 bytes, 16 remain"},
      {"negative_dim", OneTensor(0, {std::uint64_t{1} << 63}).str(), StatusCode::kCorruption,
       "tensor 0 \"w\": dimension 0 is 9223372036854775808, more than INT64_MAX"},
      {"removed_ggml_type", OneTensor(0, {16}, 4).Zeros(64).str(), StatusCode::kUnsupported,
       "tensor 0 \"w\": unknown ggml type 4"},
      {"unknown_ggml_type", OneTensor(0, {16}, 43).Zeros(64).str(), StatusCode::kUnsupported, "unknown ggml type 43"},
      {"row_not_whole_blocks", OneTensor(0, {16, 2}, 2).Zeros(64).str(), StatusCode::kCorruption,
       "tensor 0 \"w\": row of 16 elements is not a multiple of the Q4_0 block of 32"},
      {"shape_overflow", OneTensor(0, {1ull << 32, 1ull << 32, 1ull << 32}).str(), StatusCode::kCorruption,
       "shape ne=[4294967296, 4294967296, 4294967296] of F32 overflows"},
      // ggml skips its overflow checks for a tensor with a zero dim; we do
      // not (gguf.md §7): the other dims must still multiply within 64 bits.
      {"shape_overflow_beside_zero_dim", OneTensor(0, {0, 1ull << 62, 1ull << 62}).str(), StatusCode::kCorruption,
       "shape ne=[0, 4611686018427387904, 4611686018427387904] of F32 overflows"},
      {"elements_above_int64", OneTensor(0, {1ull << 62, 3}, 24).str(), StatusCode::kCorruption,
       "shape ne=[4611686018427387904, 3] of I8 overflows"},
      {"offset_unaligned", OneTensor(4).Zeros(96).str(), StatusCode::kCorruption,
       "tensor 0 \"w\": offset 4 is not a multiple of the alignment 32"},
      {"first_offset_gap", OneTensor(32).Zeros(96).str(), StatusCode::kCorruption,
       "tensor 0 \"w\": offset 32 should be 0 (the first tensor starts the data section)"},
      {"overlap", B().Header(2, 0).Info("a", {16}, 0, 0).Info("b", {16}, 0, 32).PadTo(32).Zeros(128).str(),
       StatusCode::kCorruption,
       "tensor 1 \"b\": offset 32 should be 64 (the end of tensor 0 padded to 32): tensors must be "
       "stored in order, without gaps or overlap"},
      {"gap", B().Header(2, 0).Info("a", {16}, 0, 0).Info("b", {16}, 0, 96).PadTo(32).Zeros(192).str(),
       StatusCode::kCorruption, "tensor 1 \"b\": offset 96 should be 64"},
      {"out_of_order", B().Header(2, 0).Info("a", {16}, 0, 64).Info("b", {16}, 0, 0).PadTo(32).Zeros(128).str(),
       StatusCode::kCorruption, "tensor 0 \"a\": offset 64 should be 0"},
      {"data_past_end", OneTensor(0).Zeros(63).str(), StatusCode::kCorruption,
       "tensor 0 \"w\": data at offset 64 + 0 + 64 bytes runs past the end of the 127-byte file"},
      {"data_section_past_end", B().Header(1, 0).Info("w", {0}, 0, 0).str(), StatusCode::kCorruption,
       "data section at offset 64 (tensor infos end at 57, aligned to 32) lies past the end of the "
       "57-byte file"},
  };
  return v;
}

TEST(GgufInvalid, EachCheckHasItsCodeAndMessage) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    gguf::ReadOptions opt;
    if (c.tweak) c.tweak(opt);
    auto r = DecodeGguf(c.bytes, opt);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("bad.gguf: ", 0), 0u) << r.status().message();
  }
}

// The cases above fail for the reason named, not another: the same bytes
// with the defect repaired decode.
TEST(GgufInvalid, RepairedBasesDecode) {
  GgufBuilder ok1 = OneTensor(0);
  ok1.Zeros(64);
  EXPECT_TRUE(DecodeGguf(ok1.str()).ok());
  GgufBuilder two;
  two.Header(2, 0).Info("a", {16}, 0, 0).Info("b", {16}, 0, 64).PadTo(32).Zeros(128);
  EXPECT_TRUE(DecodeGguf(two.str()).ok());
  GgufBuilder q = OneTensor(0, {32, 2}, 2);  // Q4_0: 2 rows of 1 block
  q.Zeros(36);
  auto r = DecodeGguf(q.str());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors[0].info.shape, Shape{36});
  GgufBuilder names;
  names.Header(1, 0).Info(std::string(63, 'n'), {1}, 0, 0).PadTo(32).Zeros(32);
  EXPECT_TRUE(DecodeGguf(names.str()).ok());
  gguf::ReadOptions longer;
  longer.max_tensor_name_bytes = 64;
  GgufBuilder n64;
  n64.Header(1, 0).Info(std::string(64, 'n'), {1}, 0, 0).PadTo(32).Zeros(32);
  EXPECT_TRUE(DecodeGguf(n64.str(), longer).ok());
  GgufBuilder align;
  align.Header(1, 1).Key("general.alignment", 4).U32(8).Info("w", {1}, 0, 0).PadTo(8).Zeros(8);
  r = DecodeGguf(align.str());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors[0].info.data_offset % 8, 0u);
  // As ggml's test-gguf accepts: alignment 1 (odd offsets), and tensors
  // with a zero dim, which take no bytes and share their offset.
  GgufBuilder one;
  one.Header(2, 1).Key("general.alignment", 4).U32(1).Info("a", {3}, 24, 0).Info("b", {1}, 0, 3).Zeros(7);
  r = DecodeGguf(one.str());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors[1].info.data_offset, r->tensors[0].info.data_offset + 3);
  GgufBuilder zero;
  zero.Header(3, 0).Info("q", {32, 0}, 2, 0).Info("f", {0, 7}, 0, 0).Info("g", {2}, 0, 0).PadTo(32).Zeros(32);
  r = DecodeGguf(zero.str());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tensors[0].info.shape, Shape{0});
  EXPECT_EQ(r->tensors[1].info.shape, (Shape{7, 0}));
  EXPECT_EQ(r->tensors[2].info.data_length, 8u);
  // No tensors: the data section may be absent (ggml's reader does not
  // look for it then).
  GgufBuilder bare;
  bare.Header(0, 1).Key("a", 4).U32(1);
  EXPECT_TRUE(DecodeGguf(bare.str()).ok());
}

// Every proper prefix fails as corruption until the last tensor's data is
// complete; from there on (only the final padding missing) it decodes.
TEST(GgufInvalid, TruncationAtEveryPrefix) {
  for (const char* name : {"plain.gguf", "quant.gguf", "align64.gguf", "empty.gguf", "no_kv.gguf"}) {
    SCOPED_TRACE(name);
    const std::string file = ReadFileBytes(GoldenDir() + name);
    auto full = DecodeGguf(file);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    std::uint64_t min_ok = 68;  // empty.gguf: header + its one key/value pair
    if (!full->tensors.empty()) {
      min_ok = 0;
      for (const Tensor& t : full->tensors) {
        min_ok = std::max(min_ok, t.info.data_offset + t.info.data_length);
      }
    }
    for (std::size_t n = 0; n < file.size(); ++n) {
      auto r = DecodeGguf(file.substr(0, n));
      if (n < min_ok) {
        ASSERT_FALSE(r.ok()) << "prefix " << n;
        ASSERT_EQ(r.status().code(), StatusCode::kCorruption) << "prefix " << n << ": " << r.status().ToString();
      } else {
        ASSERT_TRUE(r.ok()) << "prefix " << n << ": " << r.status().ToString();
        ASSERT_EQ(r->tensors.size(), full->tensors.size());
        ASSERT_EQ(r->metadata_json, full->metadata_json);
      }
    }
  }
}

// A file in memory that counts the bytes read from it.
class CountingFile final : public RandomAccessFile {
 public:
  explicit CountingFile(std::string bytes) : bytes_(std::move(bytes)) {}
  Status ReadAt(std::uint64_t off, std::span<std::byte> out) const override {
    if (off > bytes_.size() || out.size() > bytes_.size() - off) return Corruption("read past the end");
    if (!out.empty()) std::memcpy(out.data(), bytes_.data() + off, out.size());
    read_ += out.size();
    return Status::OK();
  }
  std::uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const override { return name_; }
  std::uint64_t read() const { return read_; }

 private:
  std::string bytes_;
  std::string name_ = "bad.gguf";
  mutable std::uint64_t read_ = 0;
};

// ReadHeader gives Decode's verdict, code and message on every case, every
// golden file and every prefix of them, with the tensors' infos and no data.
TEST(GgufInvalid, ReadHeaderGivesDecodesVerdicts) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const Case& c : Cases()) {
    if (!c.tweak) files.emplace_back(c.name, c.bytes);
  }
  for (const char* name : {"plain.gguf", "quant.gguf", "align64.gguf", "empty.gguf", "no_kv.gguf", "v2.gguf"}) {
    const std::string file = ReadFileBytes(GoldenDir() + name);
    for (std::size_t n = 0; n <= file.size(); n += (n < 512 ? 1 : 61)) {
      files.emplace_back(std::string(name) + " cut at " + std::to_string(n), file.substr(0, n));
    }
  }
  for (const auto& [what, bytes] : files) {
    SCOPED_TRACE(what);
    auto full = DecodeGguf(bytes);
    CountingFile f(bytes);
    auto head = gguf::ReadHeader(f);
    ASSERT_EQ(head.ok(), full.ok()) << head.status().ToString() << " / " << full.status().ToString();
    if (!full.ok()) {
      EXPECT_EQ(head.status().code(), full.status().code());
      EXPECT_EQ(head.status().message(), full.status().message());
      continue;
    }
    EXPECT_EQ(head->metadata_json, full->metadata_json);
    ASSERT_EQ(head->tensors.size(), full->tensors.size());
    for (std::size_t i = 0; i < full->tensors.size(); ++i) {
      const TensorInfo &a = head->tensors[i].info, &b = full->tensors[i].info;
      EXPECT_TRUE(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.data_offset == b.data_offset &&
                  a.data_length == b.data_length && a.metadata_json == b.metadata_json)
          << a.name;
      EXPECT_TRUE(head->tensors[i].data.empty());
    }
  }
}

// A header of several MiB (a 200,000-token vocabulary) is read in doubling
// prefixes, never much past its end; cut inside it, the error is Decode's.
TEST(GgufInvalid, ReadHeaderReadsALargeHeaderInDoublingPrefixes) {
  GgufBuilder b;
  b.Header(1, 1).Key("tokenizer.ggml.tokens", 9).U32(8).U64(200'000);
  for (int i = 0; i < 200'000; ++i) b.Str("token_" + std::to_string(i));
  b.Info("w", {1 << 20}, 0, 0).PadTo(32);
  const std::size_t header = b.size();
  b.Zeros(4u << 20);  // 4 MiB of f32 data
  const std::string file = b.str();
  CountingFile f(file);
  auto head = gguf::ReadHeader(f);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  auto full = DecodeGguf(file);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(head->metadata_json, full->metadata_json);
  ASSERT_EQ(head->tensors.size(), 1u);
  EXPECT_EQ(head->tensors[0].info.data_offset, header);
  EXPECT_EQ(head->tensors[0].info.data_length, 4u << 20);
  EXPECT_GT(header, 3u << 20);
  EXPECT_LE(f.read(), 2 * header) << "header " << header;
  EXPECT_LT(f.read(), file.size());

  const std::string cut = file.substr(0, 2u << 20);
  CountingFile g(cut);
  auto short_head = gguf::ReadHeader(g);
  auto short_full = DecodeGguf(cut);
  ASSERT_FALSE(short_head.ok());
  EXPECT_EQ(short_head.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(short_head.status().message(), short_full.status().message());
}

// Single-bit flips anywhere must give an error or a valid set, never a crash
// (run under ASan/UBSan for the full value); a decoded set re-encodes or is
// refused cleanly.
TEST(GgufInvalid, BitFlipsNeverCrash) {
  const std::string file = ReadFileBytes(GoldenDir() + "plain.gguf");
  int ok = 0;
  for (std::size_t i = 0; i < file.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string f = file;
      f[i] = static_cast<char>(f[i] ^ (1 << bit));
      auto r = DecodeGguf(f);
      if (!r.ok()) continue;
      ++ok;
      auto e = gguf::Encode(*r);
      if (e.ok()) {
        auto again = DecodeGguf(*e);
        ASSERT_TRUE(again.ok()) << "flip " << i << "." << bit << ": " << again.status().ToString();
      }
    }
  }
  EXPECT_GT(ok, 0);  // flips in tensor data are harmless
}

TEST(GgufWriterInput, RefusalsHaveCodeAndMessage) {
  auto buf = std::make_shared<std::vector<float>>(4, 1.0f);
  auto make = [&](std::string meta) {
    TensorSet s;
    s.metadata_json = std::move(meta);
    Tensor t;
    t.info.name = "w";
    t.info.dtype = DType::kF32;
    t.info.shape = {4};
    t.data = std::as_bytes(std::span(*buf));
    s.tensors.push_back(t);
    return s;
  };
  struct W {
    std::string name;
    TensorSet set;
    StatusCode code;
    std::string message;
  };
  const auto types = [](const std::string& t) { return ",\"tensorsafe.gguf_types\":{" + t + "}}"; };
  std::vector<W> cases = {
      {"not_json", make("{"), StatusCode::kInvalidArgument, "metadata is not valid JSON"},
      {"not_object", make("[1]"), StatusCode::kInvalidArgument, "metadata JSON must be an object"},
      {"too_deep", make("{\"a\":" + std::string(70, '[') + std::string(70, ']') + "}"), StatusCode::kLimitExceeded,
       "metadata JSON nested deeper than 64"},
      {"types_not_object", make("{\"a\":1,\"tensorsafe.gguf_types\":[]}"), StatusCode::kInvalidArgument,
       "key \"tensorsafe.gguf_types\" (reserved: the GGUF value types of the other keys) must be an object or "
       "its JSON text, not []"},
      {"types_text_not_object", make("{\"a\":1,\"tensorsafe.gguf_types\":\"[1]\"}"), StatusCode::kInvalidArgument,
       "must be an object or its JSON text, not \"[1]\""},
      {"wide_integer", make("{\"a\":1,\"big\":[18446744073709551617]}"), StatusCode::kInvalidArgument,
       "key \"big\": the integer 18446744073709551617 does not fit in 64 bits"},
      {"type_without_value", make("{\"a\":1" + types("\"b\":\"uint8\"")), StatusCode::kInvalidArgument,
       "gives a type for \"b\", which has no value"},
      {"bad_type_name", make("{\"a\":1" + types("\"a\":\"uint7\"")), StatusCode::kInvalidArgument,
       "key \"a\": bad GGUF type \"uint7\""},
      {"out_of_range", make("{\"a\":256" + types("\"a\":\"uint8\"")), StatusCode::kInvalidArgument,
       "key \"a\": 256 is out of range for uint8"},
      {"negative_unsigned", make("{\"a\":-1" + types("\"a\":\"uint64\"")), StatusCode::kInvalidArgument,
       "-1 is out of range for uint64"},
      {"f32_out_of_range", make("{\"a\":1e39" + types("\"a\":\"float32\"")), StatusCode::kInvalidArgument,
       "1e+39 is out of range for float32"},
      {"bad_nan", make("{\"a\":\"nan:0x00000001\"" + types("\"a\":\"float32\"")), StatusCode::kInvalidArgument,
       "bad NaN"},
      {"string_expected", make("{\"a\":1" + types("\"a\":\"string\"")), StatusCode::kInvalidArgument,
       "expected a string or {\"hex\": ...}, got 1"},
      {"odd_hex", make("{\"a\":{\"hex\":\"abc\"}}"), StatusCode::kInvalidArgument, "odd number of hex digits"},
      {"null_value", make("{\"a\":null}"), StatusCode::kInvalidArgument, "key \"a\": value null has no GGUF type"},
      {"empty_array", make("{\"a\":[]}"), StatusCode::kInvalidArgument,
       "key \"a\": cannot infer the element type of an empty array"},
      {"second_key_named", make("{\"first\":\"ok\",\"empty_arr\":[]}"), StatusCode::kInvalidArgument,
       "key \"empty_arr\": cannot infer"},
      {"mixed_array", make("{\"a\":[1,\"x\"]}"), StatusCode::kInvalidArgument, "array mixes numbers and other values"},
      {"list_arity", make("{\"a\":[[1]]" + types("\"a\":[\"array\"]")), StatusCode::kInvalidArgument,
       "lists 0 element types for 1 elements"},
      {"empty_key", make("{\"\":1}"), StatusCode::kInvalidArgument, "metadata key \"\" is empty"},
      {"alignment_type", make("{\"general.alignment\":64}"), StatusCode::kInvalidArgument,
       "general.alignment must have type uint32, not \"int32\""},
      {"alignment_pow2", make("{\"general.alignment\":24" + types("\"general.alignment\":\"uint32\"")),
       StatusCode::kInvalidArgument, "general.alignment 24 is not a power of two"},
  };
  {
    TensorSet s = make("");
    s.tensors[0].info.dtype = DType::kU8;
    s.tensors[0].info.shape = {16};
    cases.push_back({"dtype_u8", s, StatusCode::kUnsupported, "tensor 0 \"w\": dtype u8 has no GGUF type"});
    s = make("");
    s.tensors[0].info.shape = {1, 1, 1, 1, 4};
    cases.push_back({"rank_5", s, StatusCode::kUnsupported, "rank 5; GGUF readers take at most 4"});
    s = make("");
    s.tensors[0].info.name = std::string(64, 'n');
    cases.push_back({"name_64", s, StatusCode::kInvalidArgument, "name of 64 bytes"});
    s = make("");
    s.tensors[0].info.name = std::string("w\0v", 3);
    cases.push_back({"name_nul", s, StatusCode::kInvalidArgument,
                     "tensor 0 \"w\\x00v\": name has a NUL byte at position 1; ggml would read it as \"w\""});
    s = make("");
    s.tensors.push_back(s.tensors[0]);
    cases.push_back({"duplicate_name", s, StatusCode::kInvalidArgument, "tensor 1 \"w\" has the name of tensor 0"});
    s = make("");
    s.tensors[0].info.shape = {5};
    cases.push_back(
        {"size_mismatch", s, StatusCode::kInvalidArgument, "shape [5] of f32 needs 20 bytes, the data has 16"});
  }
  for (const W& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = gguf::Encode(c.set);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tensorsafe
