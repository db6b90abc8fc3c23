// One test per reader check of docs/FORMAT.md §8 (R1..R41): each corrupts a
// valid file in exactly one way, re-seals the checksums that would otherwise
// fire first, and asserts the error code and message.
#include <gtest/gtest.h>

#include "support/tsafe_files.h"
#include "support/tsafe_image.h"

namespace tensorsafe::testing {
namespace {

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override { base_ = MakeBaseFile(dir_); }

  // Opens + verifies the image; expects `code` and a message containing `what`.
  void Expect(TsafeImage& img, StatusCode code, const std::string& what, ReaderOptions opt = {}) {
    Status s = OpenAndVerify(dir_, img.bytes(), opt);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << "message: " << s.message();
    EXPECT_NE(s.message().find("case.tsafe"), std::string::npos) << "no file name: " << s.message();
  }
  TsafeImage Img() { return TsafeImage(base_); }

  TempDir dir_;
  std::string base_;
};

TEST_F(Corruption, BaseFileIsValid) {
  Status s = OpenAndVerify(dir_, base_);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(Corruption, R1_TooSmall) {
  TsafeImage img(base_.substr(0, 175));
  // The constructor would read past the end; build by hand instead.
  Status s = OpenAndVerify(dir_, base_.substr(0, 175));
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("file is 175 bytes, smaller than the 176-byte minimum"), std::string::npos) << s.message();
}

TEST_F(Corruption, R2_Magic) {
  auto img = Img();
  img.Set8(0, 0x88);
  Expect(img, StatusCode::kCorruption, "bad magic");
}

TEST_F(Corruption, R3_IdentityChecksum) {
  auto img = Img();
  img.Set32(16, 128);  // alignment, checksum not updated
  Expect(img, StatusCode::kCorruption, "header identity checksum mismatch");
}

TEST_F(Corruption, R4_Version) {
  auto img = Img();
  img.Set16(8, 2);
  img.Reseal();
  Expect(img, StatusCode::kUnsupported, "format version 2.1 is not supported (this reader reads 1.x)");
}

TEST_F(Corruption, R4_MinorVersionIsAccepted) {
  auto img = Img();
  img.Set16(10, 7);
  img.Reseal();
  EXPECT_TRUE(OpenAndVerify(dir_, img.bytes()).ok());
}

TEST_F(Corruption, R5_HeaderSize) {
  auto img = Img();
  img.Set32(12, 256);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "header size 256 is not 128");
}

TEST_F(Corruption, R6_Alignment) {
  for (std::uint32_t a : {0u, 48u, 1u << 31}) {
    auto img = Img();
    img.Set32(16, a);
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "alignment " + std::to_string(a) + " is not a power of two");
  }
}

TEST_F(Corruption, R7_ReservedIdentity) {
  auto img = Img();
  img.Set32(20, 1);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "reserved header bytes 20..23 are not zero");
}

TEST_F(Corruption, R8_EqualSequences) {
  auto img = Img();
  img.bytes().replace(80, 48, img.bytes().substr(32, 48));
  Expect(img, StatusCode::kCorruption, "both header slots have sequence 1");
}

TEST_F(Corruption, R9_NoValidSlot) {
  auto img = Img();
  img.Set8(32 + 16, 0x99);  // index_offset byte of slot 0; slot checksum now fails
  Expect(img, StatusCode::kCorruption, "no valid header slot");
}

TEST_F(Corruption, R9_TornNewerSlotFallsBackToOlder) {
  auto img = Img();
  // Slot 1 claims sequence 2 but its checksum fails: a torn update. Slot 0 stays live.
  img.bytes().replace(80, 48, img.bytes().substr(32, 48));
  img.Set64(80, 2);
  EXPECT_TRUE(OpenAndVerify(dir_, img.bytes()).ok());
}

TEST_F(Corruption, R10_StreamedTrailerMagic) {
  auto img = Img();
  img.ClearSlots();
  EXPECT_TRUE(OpenAndVerify(dir_, img.bytes()).ok());  // a valid streamed file
  img.Set8(img.size() - 1, 0);
  Expect(img, StatusCode::kCorruption, "trailer magic missing");
}

TEST_F(Corruption, R10_StreamedTrailerChecksum) {
  auto img = Img();
  img.ClearSlots();
  img.Set8(img.trailer() + 8, 0x90);
  Expect(img, StatusCode::kCorruption, "trailer checksum mismatch");
}

TEST_F(Corruption, R11_UnknownFeature) {
  auto img = Img();
  img.Set64(32 + 8, 2);  // bit 0 is COO (1.1); bit 1 is unknown
  img.Set64(img.trailer(), 2);
  img.Reseal();
  Expect(img, StatusCode::kUnsupported, "requires feature bits 2");
}

TEST_F(Corruption, R12_IndexOffset) {
  for (std::uint64_t off : {std::uint64_t{64}, TsafeImage(base_).index_offset() + 4}) {
    auto img = Img();
    img.Set64(32 + 16, off);
    img.Reseal();
    Expect(img, StatusCode::kCorruption,
           "index offset " + std::to_string(off) + " is inside the header or not a multiple of 8");
  }
}

TEST_F(Corruption, R13_IndexLength) {
  auto img = Img();
  img.Set64(32 + 24, 120);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "index length 120 is smaller than the 128-byte root");
}

TEST_F(Corruption, R14_IndexLimit) {
  auto img = Img();
  ReaderOptions opt;
  opt.limits.max_index_bytes = 128;
  Expect(img, StatusCode::kLimitExceeded, "exceeds the limit of 128", opt);
}

TEST_F(Corruption, R15_IndexPastEnd) {
  auto img = Img();
  img.Set64(32 + 24, 1u << 20);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "+ trailer 48 exceeds file size");
}

TEST_F(Corruption, R15_StreamedIndexNotBeforeTrailer) {
  auto img = Img();
  img.ClearSlots();
  img.bytes().insert(img.trailer(), 8, '\0');  // 8 stray bytes between index and trailer
  Expect(img, StatusCode::kCorruption, "not right before the trailer");
}

TEST_F(Corruption, R16_RootChecksum) {
  auto img = Img();
  img.Set64(img.root() + 88, 999);  // data_bytes; root checksum not updated
  Expect(img, StatusCode::kCorruption, "index root checksum mismatch");
}

TEST_F(Corruption, R17_RootMagicAndReserved) {
  {
    auto img = Img();
    img.Set8(img.root(), 'X');
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "index root magic is wrong");
  }
  {
    auto img = Img();
    img.Set8(img.root() + 127, 1);
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "reserved index root bytes 96..127 are not zero");
  }
}

TEST_F(Corruption, R18_RootLayout) {
  struct Case {
    std::uint64_t field;
    std::uint64_t value;
    const char* what;
  } cases[] = {
      {8, 1'000'000, "index claims 1000000 tensors"}, {48, 16, "hash table capacity 16 is not 8 for 4 tensors"},
      {16, 136, "entries offset 136 is not 128"},     {24, 12, "entries length 12 is impossible"},
      {40, 8, "hash table offset 8 is not"},          {64, 8, "metadata offset 8 is not"},
      {72, 300, "does not match its sections"},
  };
  for (const Case& c : cases) {
    auto img = Img();
    img.Set64(img.root() + c.field, c.value);
    img.Reseal(true, false, false);
    SCOPED_TRACE(c.what);
    Expect(img, StatusCode::kCorruption, c.what);
  }
}

TEST_F(Corruption, R19_CountAndMetadataLimits) {
  auto img = Img();
  ReaderOptions opt;
  opt.limits.max_tensor_count = 3;
  Expect(img, StatusCode::kLimitExceeded, "file has 4 tensors, more than the limit of 3", opt);
  opt = {};
  opt.limits.max_metadata_bytes = 5;
  Expect(img, StatusCode::kLimitExceeded, "file metadata of 17 bytes exceeds the limit of 5", opt);
}

TEST_F(Corruption, R20_TrailerDisagreesWithSlot) {
  {
    auto img = Img();
    img.Set8(img.size() - 2, 0);  // trailer magic
    Expect(img, StatusCode::kCorruption, "trailer after the live index: trailer magic missing");
  }
  {
    auto img = Img();
    img.Set64(img.trailer(), 0);
    img.Set64(img.trailer() + 16, 0);  // index_length 0 in the trailer, resealed
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "trailer after the live index disagrees with the header slot");
  }
}

TEST_F(Corruption, R21_HashSlotPointsOutsideEntries) {
  auto img = Img();
  // Point every used hash slot past the entries section (keeping tags).
  const std::uint64_t cap = img.Get64(img.root() + 48);
  for (std::uint64_t i = 0; i < cap; ++i) {
    const std::uint64_t s = img.Get64(img.hash() + 8 * i);
    if (s != 0) img.Set64(img.hash() + 8 * i, (s & ~((1ull << 40) - 1)) | 100000);
  }
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "is outside the entries section");
}

TEST_F(Corruption, R22_EntryLength) {
  auto img = Img();
  img.Set32(img.entry(1), 36);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entry 1: entry length 36 is not a multiple of 8 of at least 40");
}

TEST_F(Corruption, R23_EntryCheck) {
  auto img = Img();
  img.Set8(img.entry(2) + 8, 6);  // dtype u8 -> i8; entry_check stale, sections resealed
  img.Reseal(true, false, true);
  Expect(img, StatusCode::kCorruption, "entry 2: entry checksum mismatch");
}

TEST_F(Corruption, R24_EntryFlags) {
  auto img = Img();
  img.Set8(img.entry(0) + 11, 4);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entry 0: entry flags 4 are not zero");
}

TEST_F(Corruption, R25_RankAndNameLimits) {
  auto img = Img();
  ReaderOptions opt;
  opt.limits.max_rank = 1;
  Expect(img, StatusCode::kLimitExceeded, "entry 0: rank 2 exceeds the limit of 1", opt);
  opt = {};
  opt.limits.max_name_bytes = 0;
  Expect(img, StatusCode::kLimitExceeded, "entry 0: name of 1 bytes exceeds the limit of 0", opt);
}

TEST_F(Corruption, R26_EntryStructure) {
  {
    auto img = Img();
    img.Set32(img.entry(1) + 12, 200);  // name_length
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "entry 1: entry of 56 bytes cannot hold rank 1 and a name of 200 bytes");
  }
  {
    auto img = Img();
    img.Set32(img.entry_name(1) + 1, 40);  // metadata_length
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "entry 1: entry of 56 bytes cannot hold metadata of 40 bytes");
  }
  {
    auto img = Img();
    img.Set8(img.entry(1) + 55, 1);  // last padding byte
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "entry 1: entry padding is not zero");
  }
  {
    auto img = Img();
    // Rank 0: the dims' bytes now read as name and a zero metadata length,
    // so the content ends at byte 45 of a 56-byte entry.
    img.Set8(img.entry(1) + 10, 0);
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "entry 1: entry length 56 is not its content (45 bytes) padded to 8");
  }
}

TEST_F(Corruption, R27_DtypeAndLayout) {
  struct Case {
    std::uint64_t at;
    std::uint8_t v;
    const char* what;
  } cases[] = {{8, 99, "entry 1: unknown dtype code 99"},
               {8, 0, "entry 1: unknown dtype code 0"},
               {9, 7, "entry 1: unknown layout code 7"}};
  for (const Case& c : cases) {
    auto img = Img();
    img.Set8(img.entry(1) + c.at, c.v);
    img.Reseal();
    SCOPED_TRACE(c.what);
    Expect(img, StatusCode::kUnsupported, c.what);
  }
}

TEST_F(Corruption, R28_NameUtf8) {
  auto img = Img();
  img.Set8(img.entry_name(1), 0xff);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entry 1 \"\\xff\": name is not valid UTF-8");
}

TEST_F(Corruption, R29_TensorMetadata) {
  {
    auto img = Img();
    const std::uint64_t m = img.entry_name(0) + 1 + 4;  // {"unit":"m"}
    img.Set8(m, 'x');
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "entry 0 \"a\": metadata: invalid JSON: [json.exception.parse_error.101]");
    img.Set8(m, '[');
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "entry 0 \"a\": metadata: JSON metadata must be an object");
  }
  {
    // Tensor metadata nested 3 deep; the file metadata (depth 3 too) would
    // trip first in the same file, so this file has none.
    const std::string path = dir_.File("deep.tsafe");
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    const std::uint8_t v = 1;
    ASSERT_TRUE(
        (*w)->Add("x", TensorView{DType::kU8, {}, reinterpret_cast<const std::byte*>(&v), {}}, R"({"a":{"b":[1]}})")
            .ok());
    ASSERT_TRUE((*w)->Finish().ok());
    TsafeImage img(ReadFileBytes(path));
    ReaderOptions opt;
    opt.limits.max_json_depth = 2;
    Expect(img, StatusCode::kLimitExceeded, "entry 0 \"x\": metadata: JSON nested deeper than 2", opt);
    opt.limits.max_json_depth = 3;
    EXPECT_TRUE(OpenAndVerify(dir_, img.bytes(), opt).ok());
  }
}

TEST_F(Corruption, R30_DataLength) {
  auto img = Img();
  img.Set64(img.entry(1) + 24, 20);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entry 1 \"b\": data length 20 does not match shape [6] of i32 (24 bytes)");
}

TEST_F(Corruption, R30_ShapeOverflow) {
  auto img = Img();
  img.Set64(img.entry(0) + 40, 1ull << 62);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entry 0 \"a\": byte size of shape [4611686018427387904, 3] overflows 64 bits");
}

TEST_F(Corruption, R31_DataAlignment) {
  auto img = Img();
  const std::uint64_t off = img.Get64(img.entry(1) + 16);
  img.Set64(img.entry(1) + 16, off + 8);
  img.Reseal();
  Expect(img, StatusCode::kCorruption,
         "entry 1 \"b\": data offset " + std::to_string(off + 8) + " is not a multiple of the alignment 64");
}

TEST_F(Corruption, R32_DataRange) {
  for (std::uint64_t off : {0ull, 1ull << 20}) {
    auto img = Img();
    img.Set64(img.entry(1) + 16, off);
    img.Reseal();
    Expect(img, StatusCode::kCorruption,
           "entry 1 \"b\": data offset " + std::to_string(off) + " + length 24 is outside the data region [128, ");
  }
}

TEST_F(Corruption, R33_EntriesChecksum) {
  auto img = Img();
  img.Set8(img.entry(1) + 8, 9);  // i32 -> i64 changes the meaning...
  img.Reseal(true, true, false);  // ...entry check fixed, section checksum stale
  Expect(img, StatusCode::kCorruption, "index entries checksum mismatch");
}

TEST_F(Corruption, R34_HashChecksum) {
  auto img = Img();
  img.Set8(img.hash() + 3, 0x55);
  img.Reseal(true, true, false);
  Expect(img, StatusCode::kCorruption, "index hash table checksum mismatch");
}

TEST_F(Corruption, R35_Metadata) {
  {
    auto img = Img();
    img.Set8(img.metadata() + 1, 'K');
    img.Reseal(true, true, false);
    Expect(img, StatusCode::kCorruption, "file metadata checksum mismatch");
  }
  {
    auto img = Img();
    img.Set8(img.metadata() + 16, ' ');  // drop the final '}'
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "file metadata: invalid JSON: [json.exception.parse_error.101]");
    img.Set8(img.metadata() + 16, '}');
    img.Set8(img.metadata(), '[');
    img.Reseal();
    Expect(img, StatusCode::kCorruption, "file metadata: JSON metadata must be an object");
  }
  {
    auto img = Img();
    ReaderOptions opt;
    opt.limits.max_json_depth = 2;
    Expect(img, StatusCode::kLimitExceeded, "file metadata: JSON nested deeper than 2", opt);
  }
}

TEST_F(Corruption, R35_IndexPaddingNotZero) {
  auto img = Img();
  img.Set8(img.trailer() - 1, 1);  // 17 bytes of metadata, then 7 padding bytes
  Expect(img, StatusCode::kCorruption, "index padding after the file metadata is not zero");
}

TEST_F(Corruption, R36_EntriesDoNotFillSection) {
  auto img = Img();
  img.Set64(img.root() + 8, 3);  // 4 entries, count says 3 (same hash capacity 8)
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entries section is 240 bytes but its 3 entries take 184");
}

TEST_F(Corruption, R37_DuplicateName) {
  auto img = Img();
  img.Set8(img.entry_name(1), 'a');  // "b" -> "a"
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entry 1 \"a\" duplicates the name of the entry at index offset 128");
}

TEST_F(Corruption, R37_MissingFromHashTable) {
  auto img = Img();
  const std::uint64_t cap = img.Get64(img.root() + 48);
  for (std::uint64_t i = 0; i < cap; ++i) {
    const std::uint64_t s = img.Get64(img.hash() + 8 * i);
    if ((s & 0xffffffffff) == 1) img.Set64(img.hash() + 8 * i, 0);  // entry 0's slot
  }
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "entry 0 \"a\" is missing from the hash table");
}

TEST_F(Corruption, R38_DataBytes) {
  auto img = Img();
  img.Set64(img.root() + 88, 50);
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "index root says 50 data bytes, entries sum to 49");
}

TEST_F(Corruption, R39_ExtraHashSlot) {
  auto img = Img();
  const std::uint64_t cap = img.Get64(img.root() + 48);
  for (std::uint64_t i = 0; i < cap; ++i) {
    if (img.Get64(img.hash() + 8 * i) == 0) {
      img.Set64(img.hash() + 8 * i, (0xabcdefull << 40) | 1);  // a stray pointer to entry 0
      break;
    }
  }
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "hash table has 5 used slots for 4 tensors");
}

TEST_F(Corruption, R40_Overlap) {
  auto img = Img();
  img.Set64(img.entry(1) + 16, img.Get64(img.entry(0) + 16));  // b's data at a's offset
  img.Reseal();
  Expect(img, StatusCode::kCorruption, "data of entry 0 [128, 152) overlaps data of entry 1 at 128");
}

TEST_F(Corruption, R41_DataChecksum) {
  auto img = Img();
  const std::uint64_t off = img.Get64(img.entry(1) + 16);
  img.Set8(off, img.bytes()[off] ^ 1);
  Expect(img, StatusCode::kCorruption, "entry 1 \"b\": data checksum mismatch");
  // The damaged tensor is named; the others still read.
  const std::string path = dir_.File("case.tsafe");
  auto r = Reader::Open(path);
  ASSERT_TRUE(r.ok());
  std::vector<std::string> damaged;
  EXPECT_FALSE((*r)->Verify(&damaged).ok());
  EXPECT_EQ(damaged, std::vector<std::string>{"b"});
  std::vector<std::byte> out(24);
  EXPECT_TRUE((*r)->ReadInto("a", out, /*verify=*/true).ok());
  EXPECT_EQ((*r)->ReadInto("b", out, /*verify=*/true).code(), StatusCode::kCorruption);
}

TEST_F(Corruption, LazyOpenDefersWholeIndexChecks) {
  auto img = Img();
  img.Set8(img.hash() + 3, 0x55);  // R34 damage
  img.Reseal(true, true, false);
  ReaderOptions lazy;
  lazy.eager_index_bytes = 0;
  const std::string path = dir_.File("lazy.tsafe");
  WriteFileBytes(path, img.bytes());
  auto r = Reader::Open(path, lazy);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Status v = (*r)->Verify();
  EXPECT_EQ(v.code(), StatusCode::kCorruption);
  EXPECT_NE(v.message().find("index hash table checksum mismatch"), std::string::npos);
  // Eager open of the same file fails at once.
  EXPECT_FALSE(Reader::Open(path).ok());
}

TEST_F(Corruption, LazyLookupStillChecksEntries) {
  auto img = Img();
  img.Set64(img.entry(1) + 24, 20);  // R30 on "b"
  img.Reseal();
  ReaderOptions lazy;
  lazy.eager_index_bytes = 0;
  const std::string path = dir_.File("lazy.tsafe");
  WriteFileBytes(path, img.bytes());
  auto r = Reader::Open(path, lazy);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->Get("a").ok());
  auto b = (*r)->Get("b");
  EXPECT_EQ(b.status().code(), StatusCode::kCorruption);
  EXPECT_NE(b.status().message().find("data length 20 does not match"), std::string::npos);
}

}  // namespace
}  // namespace tensorsafe::testing
