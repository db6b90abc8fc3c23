// Golden bytes both ways for docs/FORMAT.md §11.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"
#include "tsafe/layout.h"
#include "util/hash.h"

namespace tensorsafe::testing {
namespace {

const std::string kGolden = TS_SOURCE_DIR "/tests/golden/tsafe/small.tsafe";

TEST(Golden, WriterReproducesSmallFile) {
  TempDir dir;
  const std::string path = dir.File("small.tsafe");
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  const std::uint16_t v[3] = {1, 2, 3};
  ASSERT_TRUE((*w)->Add("w", TensorView::Contiguous(DType::kU16, {3}, std::as_bytes(std::span(v)))).ok());
  ASSERT_TRUE((*w)->SetMetadata(R"({"k":1})").ok());
  ASSERT_TRUE((*w)->Finish().ok());
  const std::string got = ReadFileBytes(path);
  const std::string want = ReadFileBytes(kGolden);
  ASSERT_EQ(want.size(), 392u);
  EXPECT_EQ(want[10], 1);  // version 1.1
  EXPECT_EQ(got, want);
}

TEST(Golden, ReaderDecodesSmallFile) {
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(kGolden, opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)->size(), 1u);
    auto s = (*r)->summary();
    EXPECT_EQ(s.version_major, 1);
    EXPECT_EQ(s.alignment, 64u);
    EXPECT_EQ(s.sequence, 1u);
    EXPECT_EQ(s.index_offset, 0x88u);
    EXPECT_EQ(s.index_length, 208u);
    EXPECT_EQ(*(*r)->Metadata(), R"({"k":1})");
    auto t = (*r)->Get("w");
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->info.dtype, DType::kU16);
    EXPECT_EQ(t->info.shape, Shape{3});
    EXPECT_EQ(t->info.data_offset, 128u);
    std::uint16_t v[3];
    std::memcpy(v, t->data.data(), 6);
    EXPECT_EQ(v[0], 1);
    EXPECT_EQ(v[1], 2);
    EXPECT_EQ(v[2], 3);
    EXPECT_TRUE((*r)->Verify().ok());
  }
}

// The hash table's bytes are FORMAT.md §6.3's linear probing of the entries
// in file order, recomputed here from the entries the file holds. The writer
// derives the table from its duplicate-name table once both have the same
// capacity (32 names and more), and probes afresh below that: both must give
// these bytes.
TEST(Golden, HashTableIsLinearProbingOfTheEntriesInOrder) {
  TempDir dir;
  for (std::uint64_t n : {1, 2, 31, 32, 33, 100, 4097}) {
    const std::string path = dir.File("t" + std::to_string(n) + ".tsafe");
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint8_t b = static_cast<std::uint8_t>(i);
      ASSERT_TRUE((*w)->Add("layer" + std::to_string(i % 7) + "/w" + std::to_string(i),
                            TensorView::Contiguous(DType::kU8, {1}, {reinterpret_cast<const std::byte*>(&b), 1}))
                      .ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
    auto r = Reader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const FileSummary s = (*r)->summary();
    const std::string file = ReadFileBytes(path);
    const auto* index = reinterpret_cast<const std::byte*>(file.data()) + s.index_offset;
    internal::IndexRoot root;
    ASSERT_TRUE(internal::DecodeRoot({index, internal::kRootSize}, s.index_length, &root).ok());
    ASSERT_EQ(root.hash_capacity, internal::HashCapacity(n));
    std::vector<std::uint64_t> want(root.hash_capacity, 0);
    const std::uint64_t mask = root.hash_capacity - 1;
    std::uint64_t off = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::byte* e = index + internal::kRootSize + off;
      internal::EntryView v;
      ASSERT_TRUE(internal::DecodeEntry({e, internal::PeekEntryLength(e)}, 255, 65535, &v).ok());
      const std::uint64_t h = internal::NameHash(v.name);
      std::uint64_t k = h & mask;
      while (want[k] != 0) k = (k + 1) & mask;
      want[k] = ((h >> internal::kSlotPosBits) << internal::kSlotPosBits) | (off / 8 + 1);
      off += v.length;
    }
    ASSERT_EQ(off, root.entries_length);
    std::vector<std::uint64_t> got(root.hash_capacity);
    std::memcpy(got.data(), index + root.hash_offset, got.size() * 8);
    EXPECT_EQ(got, want) << n << " tensors";
  }
}

}  // namespace
}  // namespace tensorsafe::testing
