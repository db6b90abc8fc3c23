// The .npz codec and its ZIP layer: NumPy's archives read and reproduced byte
// for byte, zip64, limits and damaged archives.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "formats/codec_test_util.h"
#include "formats/npy/zip.h"
#include "support/temp_dir.h"
#include "tensorsafe/formats/npz.h"

namespace tensorsafe {
namespace {

const std::string kNpzGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/npy/";

using testing::Bytes;
using testing::DataOf;

Result<TensorSet> DecodeNpz(const std::string& s, const npz::ReadOptions& opt = {}) {
  auto owner = std::make_shared<std::string>(s);
  return npz::Decode(Bytes(*owner), owner, "t.npz", opt);
}

TEST(NpzGolden, ReadsNumpyArchives) {
  for (const char* name : {"stored.npz", "deflated.npz"}) {
    SCOPED_TRACE(name);
    auto set = npz::ReadFile(kNpzGolden + name);
    ASSERT_TRUE(set.ok()) << set.status().ToString();
    ASSERT_EQ(set->tensors.size(), 3u);
    EXPECT_EQ(set->tensors[0].info.name, "w");
    EXPECT_EQ(set->tensors[1].info.name, "b");
    EXPECT_EQ(set->tensors[2].info.name, "\xc3\xa9t\xc3\xa9");
    EXPECT_EQ(set->tensors[0].info.shape, (Shape{2, 3}));
    EXPECT_EQ(set->tensors[1].info.dtype, DType::kI64);
    EXPECT_EQ(DataOf(set->tensors[1]), std::string("\1\0\0\0\0\0\0\0\2\0\0\0\0\0\0\0", 16));
    EXPECT_EQ(set->tensors[2].info.dtype, DType::kBool);
    EXPECT_TRUE(set->tensors[2].info.shape.empty());
  }
}

TEST(NpzGolden, WriterMatchesNumpyBytes) {
  for (bool compress : {false, true}) {
    const std::string name = compress ? "deflated.npz" : "stored.npz";
    SCOPED_TRACE(name);
    auto set = npz::ReadFile(kNpzGolden + name);
    ASSERT_TRUE(set.ok());
    npz::WriteOptions opt;
    opt.compress = compress;
    auto enc = npz::Encode(*set, opt);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    EXPECT_EQ(*enc, testing::ReadFileBytes(kNpzGolden + name));
  }
}

// np.savez(**{"": a}) stores the member ".npy" and np.load reads it as "".
TEST(NpzGolden, EmptyNameIsTheMemberDotNpy) {
  auto set = npz::ReadFile(kNpzGolden + "empty_name.npz");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->tensors.size(), 1u);
  EXPECT_EQ(set->tensors[0].info.name, "");
  EXPECT_EQ(set->tensors[0].info.dtype, DType::kI32);
  EXPECT_EQ(DataOf(set->tensors[0]), std::string("\1\0\0\0\2\0\0\0\3\0\0\0", 12));
  auto enc = npz::Encode(*set);
  ASSERT_TRUE(enc.ok()) << enc.status().ToString();
  EXPECT_EQ(*enc, testing::ReadFileBytes(kNpzGolden + "empty_name.npz"));
}

TEST(Npz, StoredMembersAreZeroCopy) {
  auto owner = std::make_shared<std::string>(testing::ReadFileBytes(kNpzGolden + "stored.npz"));
  auto set = npz::Decode(Bytes(*owner), owner, "s.npz");
  ASSERT_TRUE(set.ok());
  const Tensor& w = set->tensors[0];
  EXPECT_EQ(w.owner.get(), owner.get());
  EXPECT_EQ(reinterpret_cast<const char*>(w.data.data()), owner->data() + w.info.data_offset);
}

TensorSet TwoTensors(std::string& storage) {
  storage = std::string(24, '\x11') + std::string(4, '\x22');
  TensorSet set;
  Tensor a;
  a.info.name = "a";
  a.info.dtype = DType::kF32;
  a.info.shape = {2, 3};
  a.data = Bytes(storage).subspan(0, 24);
  Tensor b = a;
  b.info.name = "b";
  b.info.dtype = DType::kU8;
  b.info.shape = {4};
  b.data = Bytes(storage).subspan(24, 4);
  set.tensors = {a, b};
  return set;
}

TEST(NpzInvalid, DamagedArchives) {
  std::string storage;
  const TensorSet set = TwoTensors(storage);
  const std::string stored = *npz::Encode(set);
  npz::WriteOptions copt;
  copt.compress = true;
  const std::string deflated = *npz::Encode(set, copt);

  struct Case {
    const char* name;
    std::string bytes;
    StatusCode code;
    const char* message;
  };
  std::string crc = stored;
  crc[crc.find("NUMPY") + 100] ^= 1;  // a header space inside member a
  std::string bad_deflate = deflated;
  bad_deflate[55] = '\xff';  // first byte of the deflate stream of "a.npy"
  std::string local_name = stored;
  local_name[30] = 'z';  // the name in the first local header
  std::string eocd_count = stored;
  eocd_count[eocd_count.size() - 14] = 9;  // entries on this disk and in total: 2 -> 9
  eocd_count[eocd_count.size() - 12] = 9;
  std::string counts_disagree = stored;
  counts_disagree[counts_disagree.size() - 14] = 1;  // entries on this disk 2 -> 1, in total still 2
  std::string bad_utf8 = stored;                     // "b.npy" -> "\xff.npy", flagged UTF-8 (bit 11)
  for (std::size_t p = 0; (p = bad_utf8.find("b.npy", p)) != std::string::npos; ++p) bad_utf8[p] = '\xff';
  bad_utf8[stored.rfind("PK\x01\x02") + 9] = 0x08;
  std::string not_npy = stored;
  for (std::size_t p = 0; (p = not_npy.find("b.npy", p)) != std::string::npos; ++p) not_npy[p + 2] = 'x';
  std::string dup = stored;
  for (std::size_t p = 0; (p = dup.find("b.npy", p)) != std::string::npos; ++p) dup[p] = 'a';
  std::string cmethod = stored;
  cmethod[stored.rfind("PK\x01\x02") + 10] = 12;  // bzip2
  std::string encrypted = stored;
  encrypted[stored.find("PK\x01\x02") + 8] = 1;
  const Case cases[] = {
      {"empty", "", StatusCode::kCorruption, "smaller than a 22-byte zip end record"},
      {"no_end_record", std::string(100, 'x'), StatusCode::kCorruption, "not a zip file"},
      {"truncated_tail", stored.substr(0, stored.size() - 1), StatusCode::kCorruption, "not a zip file"},
      {"crc_mismatch", crc, StatusCode::kCorruption, "member \"a.npy\": CRC-32 mismatch"},
      {"bad_deflate", bad_deflate, StatusCode::kCorruption, "member \"a.npy\": invalid deflate data"},
      {"local_name_differs", local_name, StatusCode::kCorruption, "local header name differs"},
      {"count_too_big", eocd_count, StatusCode::kCorruption, "cannot fit in a central directory"},
      {"counts_disagree", counts_disagree, StatusCode::kCorruption,
       "end record counts 1 entries on this disk but 2 in all, in a single-disk archive"},
      {"flagged_utf8_invalid", bad_utf8, StatusCode::kCorruption,
       "central entry 1 \"\\xff.npy\": name flagged as UTF-8 (bit 11) is not valid UTF-8"},
      {"not_npy_member", not_npy, StatusCode::kUnsupported, "not a .npy member"},
      {"duplicate_member", dup, StatusCode::kCorruption, "duplicate member name"},
      {"bzip2_method", cmethod, StatusCode::kUnsupported, "compression method 12"},
      {"encrypted", encrypted, StatusCode::kUnsupported, "encrypted"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = DecodeNpz(c.bytes);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
}

TEST(NpzInvalid, TruncationAtEveryPrefix) {
  std::string storage;
  for (bool compress : {false, true}) {
    npz::WriteOptions opt;
    opt.compress = compress;
    const std::string file = *npz::Encode(TwoTensors(storage), opt);
    for (std::size_t n = 0; n < file.size(); ++n) {
      auto r = DecodeNpz(file.substr(0, n));
      ASSERT_FALSE(r.ok()) << n;
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << n << ": " << r.status().ToString();
    }
    EXPECT_TRUE(DecodeNpz(file).ok());
  }
}

TEST(Npz, InflatedBytesAreBounded) {
  std::string big(1 << 20, '\0');
  Tensor t;
  t.info.name = "zeros";
  t.info.dtype = DType::kU8;
  t.info.shape = {big.size()};
  t.data = Bytes(big);
  TensorSet set;
  set.tensors.push_back(t);
  npz::WriteOptions wopt;
  wopt.compress = true;
  const std::string file = *npz::Encode(set, wopt);
  EXPECT_LT(file.size(), 5000u);  // a small bomb
  npz::ReadOptions opt;
  opt.max_inflated_bytes = 1 << 19;
  auto r = DecodeNpz(file, opt);
  EXPECT_EQ(r.status().code(), StatusCode::kLimitExceeded);
  EXPECT_NE(r.status().message().find("exceeds the limit of 524288 inflated bytes"), std::string::npos);
  opt.max_inflated_bytes = 2 << 20;
  auto ok = DecodeNpz(file, opt);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(DataOf(ok->tensors[0]), big);
  opt.max_members = 0;
  EXPECT_EQ(DecodeNpz(file, opt).status().code(), StatusCode::kLimitExceeded);
}

// A directory that declares more inflated bytes than deflate can produce
// from the member's compressed bytes (at most 1032 per byte) is refused
// before the declared size is allocated (fuzz/regressions/npz_fuzz/
// deflate_size_4gib.npz: 180 bytes claiming 4 GiB).
TEST(NpzRead, DeclaredSizeBeyondTheDeflateRatioIsCorruption) {
  const std::string file =
      testing::ReadFileBytes(std::string(TS_SOURCE_DIR) + "/fuzz/regressions/npz_fuzz/deflate_size_4gib.npz");
  ASSERT_EQ(file.size(), 180u);
  auto r = DecodeNpz(file);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
  EXPECT_NE(r.status().message().find("declares 4294967294 inflated bytes, more than deflate can produce from "),
            std::string::npos)
      << r.status().ToString();
  // The bound is deflate's real maximum: a maximally compressible member reads.
  const std::string zeros(1 << 20, '\0');
  Tensor t;
  t.info.name = "z";
  t.info.dtype = DType::kU8;
  t.info.shape = {zeros.size()};
  t.data = Bytes(zeros);
  TensorSet set;
  set.tensors.push_back(t);
  npz::WriteOptions wopt;
  wopt.compress = true;
  wopt.level = 9;
  auto ok = DecodeNpz(*npz::Encode(set, wopt));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(DataOf(ok->tensors[0]), zeros);
}

TEST(NpzWrite, RejectsDuplicatesAndLeavesNothingOnError) {
  testing::TempDir dir;
  std::string storage;
  TensorSet set = TwoTensors(storage);
  set.tensors[1].info.name = "a";
  Status s = npz::WriteFile(dir.File("x.npz"), set);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("duplicate tensor name \"a\""), std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  // zipfile cuts member names at a NUL: "b\0x" would load as "b".
  set.tensors[1].info.name = std::string("b\0x", 3);
  s = npz::WriteFile(dir.File("x.npz"), set);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("holds a NUL byte at 1; .npz readers (zipfile, np.load) cut member names there"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  set.tensors[1].info.name = "b";
  ASSERT_TRUE(npz::WriteFile(dir.File("x.npz"), set).ok());
  auto back = npz::ReadFile(dir.File("x.npz"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tensors[1].info.name, "b");
}

// A WritableFile over a string, for the zip layer alone.
class StringFile final : public WritableFile {
 public:
  Status Append(std::span<const std::byte> b) override {
    s.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::OK();
  }
  bool seekable() const override { return true; }
  Status WriteAt(std::uint64_t off, std::span<const std::byte> b) override {
    s.replace(off, b.size(), reinterpret_cast<const char*>(b.data()), b.size());
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }
  std::uint64_t position() const override { return s.size(); }
  const std::string& name() const override { return name_; }
  std::string s, name_ = "mem";
};

TEST(Zip, Zip64RecordsRoundTrip) {
  StringFile f;
  internal::zip::Writer w(f);
  w.set_force_zip64(true);
  const std::string payload = "hello zip64";
  const std::span<const std::byte> pieces[1] = {Bytes(payload)};
  ASSERT_TRUE(w.Add("a", pieces, internal::zip::kStored).ok());
  ASSERT_TRUE(w.Add("b", pieces, internal::zip::kDeflated).ok());
  ASSERT_TRUE(w.Finish().ok());
  EXPECT_NE(f.s.find("PK\x06\x06"), std::string::npos);
  EXPECT_NE(f.s.find("PK\x06\x07"), std::string::npos);
  auto dir = internal::zip::ReadDirectory(Bytes(f.s), "z", 10);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_EQ(dir->size(), 2u);
  for (const auto& e : *dir) {
    std::shared_ptr<std::byte> buf;
    auto data = internal::zip::Extract(Bytes(f.s), e, true, &buf, "z");
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(data->data()), data->size()), payload);
  }
}

// APPNOTE 4.4.4: a name without the UTF-8 flag (bit 11) is CP437, as Python's
// zipfile (so np.load) reads it: byte 0x82 is "é", and UTF-8 bytes without
// the flag are CP437 text too.
TEST(Zip, NamesWithoutTheUtf8FlagAreCp437) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\x82", "\xc3\xa9"}, {"\xc3\xa9", "\xe2\x94\x9c\xe2\x8c\x90"}, {"a\xff", "a\xc2\xa0"}, {"plain", "plain"}};
  for (const auto& [raw, want] : cases) {
    SCOPED_TRACE(want);
    StringFile f;
    internal::zip::Writer w(f);
    ASSERT_TRUE(w.Add(raw, {}, internal::zip::kStored).ok());
    ASSERT_TRUE(w.Finish().ok());
    // The writer flags non-ASCII names; clear the flag in both headers.
    f.s[7] = static_cast<char>(f.s[7] & ~0x08);
    f.s[f.s.rfind("PK\x01\x02") + 9] = static_cast<char>(f.s[f.s.rfind("PK\x01\x02") + 9] & ~0x08);
    auto dir = internal::zip::ReadDirectory(Bytes(f.s), "z", 10);
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    ASSERT_EQ(dir->size(), 1u);
    EXPECT_EQ((*dir)[0].name, want);
    // Flagged, the same bytes are UTF-8 (or refused when they are not).
    f.s[7] = static_cast<char>(f.s[7] | 0x08);
    f.s[f.s.rfind("PK\x01\x02") + 9] = static_cast<char>(f.s[f.s.rfind("PK\x01\x02") + 9] | 0x08);
    auto flagged = internal::zip::ReadDirectory(Bytes(f.s), "z", 10);
    if (raw == "\x82" || raw == "a\xff") {
      EXPECT_EQ(flagged.status().code(), StatusCode::kCorruption) << flagged.status().ToString();
    } else {
      ASSERT_TRUE(flagged.ok()) << flagged.status().ToString();
      EXPECT_EQ((*flagged)[0].name, raw);
    }
  }
}

TEST(Zip, MoreThan65535Entries) {
  StringFile f;
  internal::zip::Writer w(f);
  const std::size_t n = 65536 + 10;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(w.Add(std::to_string(i), {}, internal::zip::kStored).ok());
  }
  ASSERT_TRUE(w.Finish().ok());
  // The 16-bit count in the end record saturates; the zip64 record has it.
  EXPECT_EQ(static_cast<unsigned char>(f.s[f.s.size() - 12]), 0xff);
  auto dir = internal::zip::ReadDirectory(Bytes(f.s), "z", n);
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_EQ(dir->size(), n);
  EXPECT_EQ((*dir)[n - 1].name, std::to_string(n - 1));
  EXPECT_EQ(internal::zip::ReadDirectory(Bytes(f.s), "z", n - 1).status().code(), StatusCode::kLimitExceeded);
}

TEST(Zip, OverlappingMembersAreRejected) {
  StringFile f;
  internal::zip::Writer w(f);
  const std::string payload(100, 'x');
  const std::span<const std::byte> pieces[1] = {Bytes(payload)};
  ASSERT_TRUE(w.Add("a", pieces, internal::zip::kStored).ok());
  ASSERT_TRUE(w.Add("b", pieces, internal::zip::kStored).ok());
  ASSERT_TRUE(w.Finish().ok());
  // Grow a's sizes (local zip64 extra and central) so its data runs into b.
  std::string s = f.s;
  const std::size_t cd = s.find("PK\x01\x02");
  s[cd + 20] = static_cast<char>(120);  // compressed size 100 -> 120
  s[cd + 24] = static_cast<char>(120);
  auto r = internal::zip::ReadDirectory(Bytes(s), "z", 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("overlap"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tensorsafe
