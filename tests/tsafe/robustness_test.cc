// Truncation at every prefix and every single-bit flip of a small file: the
// reader never crashes, and a flip is either detected or changes nothing that
// the reader returns (docs/FORMAT.md: flips outside checksummed bytes land in
// the spare header slot or in alignment padding).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/temp_dir.h"
#include "support/tsafe_files.h"
#include "support/tsafe_image.h"
#include "tsafe/layout.h"
#include "util/hash.h"

namespace tensorsafe::testing {
namespace {

// Everything the reader exposes, as one string, or the error.
std::string Fingerprint(const std::string& path, ReaderOptions opt) {
  auto r = Reader::Open(path, opt);
  if (!r.ok()) return "error: " + r.status().ToString();
  Status v = (*r)->Verify();
  if (!v.ok()) return "error: " + v.ToString();
  std::string fp = *(*r)->Metadata();
  Status s = (*r)->ForEach([&](const TensorInfo& t) {
    fp += "|" + t.name + ":" + std::string(DTypeName(t.dtype)) + ShapeToString(t.shape) + "@" +
          std::to_string(t.data_offset) + "+" + std::to_string(t.data_length) + t.metadata_json;
    auto g = (*r)->Get(t.name);
    if (g.ok()) fp.append(reinterpret_cast<const char*>(g->data.data()), g->data.size());
    return true;
  });
  if (!s.ok()) return "error: " + s.ToString();
  return fp;
}

TEST(Robustness, EveryPrefixIsRejected) {
  TempDir dir;
  const std::string base = MakeBaseFile(dir);
  const std::string path = dir.File("cut.tsafe");
  for (std::size_t n = 0; n < base.size(); ++n) {
    WriteFileBytes(path, base.substr(0, n));
    for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
      ReaderOptions opt;
      opt.access = access;
      auto r = Reader::Open(path, opt);
      ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes opened";
      EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << n << ": " << r.status().ToString();
    }
  }
}

TEST(Robustness, EveryPrefixOfAStreamedFileIsRejected) {
  TempDir dir;
  TsafeImage img(MakeBaseFile(dir));
  img.ClearSlots();
  const std::string path = dir.File("cut.tsafe");
  for (std::size_t n = 0; n < img.size(); ++n) {
    WriteFileBytes(path, img.bytes().substr(0, n));
    auto r = Reader::Open(path);
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes opened";
  }
}

TEST(Robustness, EveryBitFlipIsDetectedOrHarmless) {
  TempDir dir;
  const std::string base = MakeBaseFile(dir);
  const std::string path = dir.File("flip.tsafe");
  WriteFileBytes(path, base);
  ReaderOptions eager;
  ReaderOptions lazy;
  lazy.eager_index_bytes = 0;
  lazy.access = ReaderOptions::Access::kPread;
  const std::string want = Fingerprint(path, eager);
  ASSERT_EQ(want.rfind("error", 0), std::string::npos) << want;
  TsafeImage img(base);
  std::size_t detected = 0, harmless = 0;
  for (std::size_t byte = 0; byte < base.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string b = base;
      b[byte] = static_cast<char>(b[byte] ^ (1 << bit));
      WriteFileBytes(path, b);
      for (const ReaderOptions& opt : {eager, lazy}) {
        const std::string got = Fingerprint(path, opt);
        if (got.rfind("error", 0) == 0) {
          ++detected;
          continue;
        }
        ++harmless;
        // An undetected flip must not change what the reader returns, and may
        // only hit the spare slot or padding between tensors.
        ASSERT_EQ(got, want) << "byte " << byte << " bit " << bit << " changed content undetected";
        const bool spare_slot = byte >= 80 && byte < 128;
        const bool padding = byte < img.index_offset() && byte >= 128;
        EXPECT_TRUE(spare_slot || padding) << "byte " << byte << " bit " << bit;
      }
    }
  }
  // The flips of the checksummed structures (all but the spare slot and data
  // padding) are every one detected.
  std::size_t padding_bytes = 0;
  for (std::size_t byte = 128; byte < img.index_offset(); ++byte) padding_bytes += base[byte] == 0;
  EXPECT_LE(harmless, 2 * 8 * (48 + padding_bytes));
  EXPECT_GT(detected, 2 * 8 * (base.size() - 48 - padding_bytes) - 1);
}

// Every bit flip in tensor data, in both read modes: Verify() names exactly
// the damaged tensor, ReadInto(verify) refuses only it, and every other
// tensor still reads with its original bytes.
TEST(Robustness, DataFlipsNameTheDamagedTensorAndSpareTheOthers) {
  TempDir dir;
  const std::string base = MakeBaseFile(dir);
  const std::string path = dir.File("data.tsafe");
  WriteFileBytes(path, base);
  struct T {
    std::string name;
    std::uint64_t off, len;
    std::string bytes;
  };
  std::vector<T> tensors;
  {
    auto r = Reader::Open(path);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(
        (*r)->ForEach([&](const TensorInfo& t) {
              tensors.push_back({t.name, t.data_offset, t.data_length, base.substr(t.data_offset, t.data_length)});
              return true;
            })
            .ok());
  }
  std::size_t flips = 0;
  for (const T& hit : tensors) {
    for (std::uint64_t byte = hit.off; byte < hit.off + hit.len; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string b = base;
        b[byte] = static_cast<char>(b[byte] ^ (1 << bit));
        WriteFileBytes(path, b);
        ++flips;
        for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
          ReaderOptions opt;
          opt.access = access;
          auto r = Reader::Open(path, opt);
          ASSERT_TRUE(r.ok()) << "a data flip broke open: " << r.status().ToString();
          std::vector<std::string> damaged;
          Status v = (*r)->Verify(&damaged);
          ASSERT_EQ(v.code(), StatusCode::kCorruption) << "byte " << byte << " bit " << bit;
          EXPECT_NE(v.message().find("\"" + hit.name + "\": data checksum mismatch"), std::string::npos)
              << v.ToString();
          ASSERT_EQ(damaged, std::vector<std::string>{hit.name});
          for (const T& t : tensors) {
            std::vector<std::byte> out(t.len);
            Status s = (*r)->ReadInto(t.name, out, /*verify=*/true);
            if (t.name == hit.name) {
              EXPECT_EQ(s.code(), StatusCode::kCorruption);
              continue;
            }
            ASSERT_TRUE(s.ok()) << t.name << ": " << s.ToString();
            EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), out.size()), t.bytes);
            auto g = (*r)->Get(t.name);
            ASSERT_TRUE(g.ok());
            EXPECT_EQ(std::string(reinterpret_cast<const char*>(g->data.data()), g->data.size()), t.bytes);
          }
        }
      }
    }
  }
  EXPECT_EQ(flips, 8 * (24 + 24 + 1));  // a: 6 f32, b: 6 i32, c: 1 u8, d: empty
}

// A lazy reader walking an entries section that ends before tensor_count
// entries reports the same error in both read modes (found by tsafe_fuzz:
// the pread window path had its own message).
TEST(Robustness, LazyWalkPastTheEntriesGivesOneErrorInBothModes) {
  TempDir dir;
  const std::string path = dir.File("walk.tsafe");
  WriteFileBytes(path, ReadFileBytes(std::string(TS_SOURCE_DIR) +
                                     "/fuzz/regressions/tsafe_fuzz/lazy_pread_walk_past_entries.tsafe"));
  std::string seen[2];
  int k = 0;
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    opt.eager_index_bytes = 0;
    auto r = Reader::Open(path, opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Status s = (*r)->ForEach([](const TensorInfo&) { return true; });
    EXPECT_EQ(s.code(), StatusCode::kCorruption);
    seen[k++] = s.message();
  }
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_NE(seen[0].find("entry 3: offset 240 is outside the entries section of 272 bytes"), std::string::npos)
      << seen[0];
}

// A zero-length tensor reads into an empty (null) buffer, with and without
// verification, in both modes (UBSan caught memcpy(nullptr, p, 0) in the
// mapped reader's copy).
TEST(Robustness, EmptyTensorReadsIntoAnEmptyBuffer) {
  TempDir dir;
  const std::string path = dir.File("empty.tsafe");
  WriteFileBytes(path, MakeBaseFile(dir));
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(path, opt);
    ASSERT_TRUE(r.ok());
    std::span<std::byte> none;  // data() == nullptr
    EXPECT_TRUE((*r)->ReadInto("d", none, false).ok());
    EXPECT_TRUE((*r)->ReadInto("d", none, true).ok());
    const SliceDim all{0, 0, 1};
    EXPECT_TRUE((*r)->ReadSlice("d", std::span(&all, 1), none).ok());
  }
}

// Names chosen so that all their hash-table homes fall in the first quarter
// of the table: one probe cluster holds every entry, the worst case of
// linear probing. The whole-index check at open once probed per entry,
// quadratic here (docs/SECURITY.md, "Worst-case time"); it must still accept
// the file, and every lookup must still find its tensor.
TEST(Robustness, OneProbeClusterHoldingEveryEntry) {
  TempDir dir;
  const std::string path = dir.File("cluster.tsafe");
  constexpr std::uint64_t kCount = 3000;
  const std::uint64_t mask = internal::HashCapacity(kCount) - 1;
  std::vector<std::string> names;
  for (std::uint64_t i = 0, j = 0; names.size() < kCount; ++j) {
    std::string n = "t" + std::to_string(i) + "." + std::to_string(j);
    if ((internal::NameHash(n) & mask) <= mask / 4) {
      names.push_back(std::move(n));
      ++i;
      j = 0;
    }
  }
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  for (std::uint64_t i = 0; i < kCount; ++i) {
    const std::uint32_t v = static_cast<std::uint32_t>(i);
    ASSERT_TRUE((*w)->Add(names[i], TensorView::Contiguous(DType::kU32, {1}, std::as_bytes(std::span(&v, 1)))).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(path, opt);  // the eager whole-index check
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (std::uint64_t i = 0; i < kCount; i += 7) {
      auto t = (*r)->Get(names[i]);
      ASSERT_TRUE(t.ok()) << names[i] << ": " << t.status().ToString();
      std::uint32_t v;
      std::memcpy(&v, t->data.data(), 4);
      EXPECT_EQ(v, i);
    }
    EXPECT_EQ((*r)->Find("t0.absent").status().code(), StatusCode::kNotFound);
    EXPECT_TRUE((*r)->Verify().ok());
  }
}

}  // namespace
}  // namespace tensorsafe::testing
