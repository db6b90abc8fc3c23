// Behaviour that the performance work on the writer and reader must keep:
// duplicate names found at any table size, every name found through the hash
// table in both access modes and both open modes, file order, the strided and
// chunked write paths giving the same bytes as the contiguous one, and damage
// to an entry reported by eager open, by lazy Find() and by Verify().
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <xxhash.h>

#include <random>
#include <set>

#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"
#include "util/hash.h"

namespace tensorsafe {
namespace {

std::string Name(int i) { return "layer." + std::to_string(i) + ".w"; }

std::span<const std::byte> Bytes(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

void WriteMany(const std::string& path, int n, std::vector<float>& data) {
  data.resize(static_cast<std::size_t>(n) * 4);
  std::iota(data.begin(), data.end(), 0.0f);
  WriterOptions o;
  o.sync = false;
  auto w = Writer::Create(path, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (int i = 0; i < n; ++i) {
    auto s = (*w)->Add(Name(i), TensorView::Contiguous(DType::kF32, {2, 2}, Bytes(data).subspan(16 * i, 16)));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

TEST(FastPaths, DuplicateNamesAreRejectedAtEveryTableSize) {
  testing::TempDir dir;
  auto w = Writer::Create(dir.File("d.tsafe"));
  ASSERT_TRUE(w.ok());
  std::vector<float> x = {1, 2};
  for (int i = 0; i < 3000; ++i) {
    ASSERT_TRUE((*w)->Add(Name(i), TensorView::Contiguous(DType::kF32, {2}, Bytes(x))).ok());
    // Every earlier name, probed across the set's growth.
    if (i % 97 == 0) {
      for (int j = 0; j <= i; j += 13) {
        auto s = (*w)->Add(Name(j), TensorView::Contiguous(DType::kF32, {2}, Bytes(x)));
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << j;
      }
    }
  }
  EXPECT_EQ((*w)->tensor_count(), 3000u);
  ASSERT_TRUE((*w)->Finish().ok());
}

// The writer keeps the file's hash table up to date lazily (a filter in
// front, entries placed one Add late or when the filter cannot rule a name
// out): whenever that happens, the table must be the one FORMAT.md §6.3
// defines, every entry placed in file order into HashCapacity(n) slots.
// Rebuilt here from the file's entries by a plain reference, past the
// filter's and the table's growth, with duplicates refused at random moments.
TEST(FastPaths, HashTableIsTheCanonicalOneWhenEverTheWriterPlacesEntries) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  testing::TempDir dir;
  const std::string path = dir.File("t.tsafe");
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  const std::uint64_t shape[] = {1};
  const std::byte one[4] = {};
  std::vector<std::string> names;
  for (int i = 0; i < 40000; ++i) {
    std::string name = "n" + std::to_string(rng()) + std::string(rng() % 20, 'x') + std::to_string(i);
    ASSERT_TRUE((*w)->Add(name, DType::kF32, shape, one).ok()) << i;
    names.push_back(std::move(name));
    if (rng() % 50 == 0) {
      const std::string& again = names[rng() % names.size()];
      EXPECT_EQ((*w)->Add(again, DType::kF32, shape, one).message(), "duplicate tensor name \"" + again + "\"");
    }
  }
  ASSERT_TRUE((*w)->Finish().ok());

  const std::string f = testing::ReadFileBytes(path);
  auto u64 = [&](std::size_t at) {
    std::uint64_t v;
    std::memcpy(&v, f.data() + at, 8);
    return v;
  };
  const std::size_t index = u64(f.size() - 48 + 8);
  ASSERT_EQ(u64(index + 8), names.size());
  const std::size_t entries_length = u64(index + 24), capacity = u64(index + 48);
  ASSERT_EQ(capacity, std::uint64_t{1} << 17);  // the smallest power of two >= 2 x 40000
  std::vector<std::uint64_t> want(capacity, 0);
  std::size_t k = 0;
  for (std::size_t off = 0; off < entries_length; ++k) {
    const char* e = f.data() + index + 128 + off;
    std::uint32_t len, name_len;
    std::memcpy(&len, e, 4);
    std::memcpy(&name_len, e + 12, 4);
    const std::string_view name(e + 40 + 8 * static_cast<std::uint8_t>(e[10]), name_len);
    ASSERT_EQ(name, names[k]);
    const std::uint64_t h = internal::NameHash(name);
    std::uint64_t i = h & (capacity - 1);
    while (want[i] != 0) i = (i + 1) & (capacity - 1);
    want[i] = (h >> 40 << 40) | (off / 8 + 1);
    off += len;
  }
  ASSERT_EQ(k, names.size());
  std::vector<std::uint64_t> got(capacity);
  std::memcpy(got.data(), f.data() + index + 128 + entries_length, 8 * capacity);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < capacity; ++i) differ += got[i] != want[i];
  EXPECT_EQ(differ, 0u);
}

// Small tensors reach the buffer through non-temporal 16-byte stores after a
// head copied up to 16-byte alignment (data_writer.cc): with alignment 1
// every destination residue mod 16 occurs, with sources at every residue
// too and sizes on both sides of the 256-byte threshold; every byte must
// read back, across buffer hand-offs to the background thread.
TEST(FastPaths, SmallCopiesAtEveryOffsetReadBack) {
  testing::TempDir dir;
  const std::string path = dir.File("c.tsafe");
  std::vector<std::byte> src(4096 + 64);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + i / 7 + 1);
  WriterOptions o;
  o.alignment = 1;
  auto w = Writer::Create(path, o);
  ASSERT_TRUE(w.ok());
  std::vector<std::pair<std::size_t, std::size_t>> added;  // (source offset, size)
  for (int i = 0; i < 6000; ++i) {
    const std::size_t at = static_cast<std::size_t>(i) % 61, n = 200 + (static_cast<std::size_t>(i) * 37) % 1100;
    const std::uint64_t shape[] = {n};
    ASSERT_TRUE((*w)->Add(Name(i), DType::kU8, shape, std::span(src).subspan(at, n)).ok()) << i;
    added.emplace_back(at, n);
  }
  ASSERT_TRUE((*w)->Finish().ok());
  auto r = Reader::Open(path);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->Verify().ok());
  std::set<std::uint64_t> residues;
  for (int i = 0; i < 6000; ++i) {
    auto t = (*r)->Get(Name(i));
    ASSERT_TRUE(t.ok());
    residues.insert(t->info.data_offset % 16);
    const auto [at, n] = added[static_cast<std::size_t>(i)];
    ASSERT_EQ(t->data.size(), n);
    ASSERT_EQ(std::memcmp(t->data.data(), src.data() + at, n), 0) << i;
  }
  EXPECT_EQ(residues.size(), 16u);
}

// A small Add copies its bytes into the buffer before it checks the name:
// a refused one (duplicate, not UTF-8, too long) must leave no byte behind,
// also when its copy made the buffer go to the file first. Sizes vary so
// that refusals fall on buffer boundaries; 4 KiB alignment pads a lot.
TEST(FastPaths, RefusedSmallAddsLeaveNoBytes) {
  testing::TempDir dir;
  std::vector<std::byte> data(700 * 1024);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 13 + i / 251);
  for (std::uint32_t alignment : {64u, 4096u}) {
    SCOPED_TRACE(alignment);
    WriterOptions o;
    o.alignment = alignment;
    o.limits.max_name_bytes = 40;
    auto write = [&](const std::string& path, bool with_refusals) {
      auto w = Writer::Create(path, o);
      ASSERT_TRUE(w.ok());
      for (int i = 0; i < 1500; ++i) {
        const std::size_t n = 1 + (static_cast<std::size_t>(i) * 7919) % 3000;
        auto view = TensorView::Contiguous(DType::kU8, {n}, std::span(data).subspan(i * 400, n));
        if (with_refusals && i > 0) {
          EXPECT_EQ((*w)->Add(Name(i / 2), view).message(), "duplicate tensor name \"" + Name(i / 2) + "\"");
          EXPECT_EQ((*w)->Add("bad\xff" + std::to_string(i), view).code(), StatusCode::kInvalidArgument);
          EXPECT_EQ((*w)->Add(std::string(41, 'x'), view).code(), StatusCode::kLimitExceeded);
        }
        ASSERT_TRUE((*w)->Add(Name(i), view).ok()) << i;
      }
      EXPECT_EQ((*w)->tensor_count(), 1500u);
      ASSERT_TRUE((*w)->Finish().ok());
    };
    const std::string a = dir.File("a.tsafe"), b = dir.File("b.tsafe");
    write(a, true);
    write(b, false);
    EXPECT_EQ(testing::ReadFileBytes(a), testing::ReadFileBytes(b));
    auto r = Reader::Open(a);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE((*r)->Verify().ok());
  }
}

TEST(FastPaths, EveryNameIsFoundInEveryMode) {
  testing::TempDir dir;
  const std::string path = dir.File("m.tsafe");
  std::vector<float> data;
  const int n = 5000;
  WriteMany(path, n, data);
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    for (std::uint64_t eager : {std::uint64_t{0}, ~std::uint64_t{0}}) {
      ReaderOptions o;
      o.access = access;
      o.eager_index_bytes = eager;
      auto r = Reader::Open(path, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ((*r)->size(), static_cast<std::uint64_t>(n));
      std::vector<float> out(4);
      for (int i = 0; i < n; i += 7) {
        auto info = (*r)->Find(Name(i));
        ASSERT_TRUE(info.ok()) << info.status().ToString();
        EXPECT_EQ(info->name, Name(i));
        EXPECT_EQ(info->shape, (Shape{2, 2}));
        ASSERT_TRUE((*r)->ReadInto(Name(i), std::as_writable_bytes(std::span(out)), true).ok());
        EXPECT_EQ(out[0], static_cast<float>(4 * i));
      }
      EXPECT_EQ((*r)->Find("layer.x.w").status().code(), StatusCode::kNotFound);
      EXPECT_FALSE((*r)->Contains("nope"));
      EXPECT_TRUE((*r)->Contains(Name(n - 1)));
      auto names = (*r)->Names();
      ASSERT_TRUE(names.ok());
      ASSERT_EQ(names->size(), static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) ASSERT_EQ((*names)[i], Name(i));
      EXPECT_TRUE((*r)->Verify().ok());
    }
  }
}

TEST(FastPaths, LargeAndStridedWritesMatchContiguousBytes) {
  testing::TempDir dir;
  // 3 MiB + 12 bytes: several write chunks and a tail.
  std::vector<float> big((3 << 20) / 4 + 3);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) * 0.5f;
  // A 3x4 view of a 4x3 row-major matrix (its transpose).
  std::vector<float> m = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> mt = {0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11};
  std::string a = dir.File("a.tsafe"), b = dir.File("b.tsafe");
  {
    auto w = Writer::Create(a);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add("small", TensorView::Contiguous(DType::kF32, {3}, Bytes(m).first(12))).ok());
    ASSERT_TRUE((*w)->Add("big", TensorView::Contiguous(DType::kF32, {big.size()}, Bytes(big))).ok());
    TensorView t{DType::kF32, {3, 4}, reinterpret_cast<const std::byte*>(m.data()), {4, 12}};
    ASSERT_TRUE((*w)->Add("t", t).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  {
    auto w = Writer::Create(b);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add("small", TensorView::Contiguous(DType::kF32, {3}, Bytes(m).first(12))).ok());
    ASSERT_TRUE((*w)->BeginTensor("big", DType::kF32, {big.size()}).ok());
    auto bytes = Bytes(big);
    for (std::size_t off = 0; off < bytes.size(); off += 100003) {
      ASSERT_TRUE((*w)->Append(bytes.subspan(off, std::min<std::size_t>(100003, bytes.size() - off))).ok());
    }
    ASSERT_TRUE((*w)->EndTensor().ok());
    ASSERT_TRUE((*w)->Add("t", TensorView::Contiguous(DType::kF32, {3, 4}, Bytes(mt))).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  EXPECT_EQ(testing::ReadFileBytes(a), testing::ReadFileBytes(b));
  auto r = Reader::Open(a);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->Verify().ok());
}

// Add(name, dtype, shape, bytes) is Add of a contiguous view: the same file
// for every kind of tensor (rank 0, empty, packed, with metadata, past the
// small-tensor path), and a size that is not the shape's is refused with no
// byte left behind, on both paths.
TEST(FastPaths, SpanAddGivesTheViewAddsBytesAndChecksTheSize) {
  testing::TempDir dir;
  std::vector<std::byte> data(3 << 20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 + i / 509);
  struct Item {
    std::string name;
    DType dtype;
    Shape shape;
    std::string metadata;
  };
  const std::vector<Item> items = {
      {"scalar", DType::kF64, {}, ""},          {"empty", DType::kF32, {0, 3}, ""},
      {"f4", DType::kF4E2M1, {2, 4}, ""},       {"small", DType::kF32, {5, 7}, ""},
      {"meta", DType::kI16, {9}, R"({"k":1})"}, {"big", DType::kU8, {600 * 1024}, ""},
      {"bigger", DType::kF32, {2, 300000}, ""}, {"last", DType::kBF16, {3}, ""},
  };
  for (std::uint32_t alignment : {64u, 4096u}) {
    SCOPED_TRACE(alignment);
    WriterOptions o;
    o.alignment = alignment;
    o.sync = false;
    auto write = [&](const std::string& path, bool spans) {
      auto w = Writer::Create(path, o);
      ASSERT_TRUE(w.ok());
      std::size_t at = 0;
      for (const Item& t : items) {
        const std::size_t n = static_cast<std::size_t>(*DenseByteSize(t.dtype, t.shape));
        const std::span<const std::byte> longer = std::span(data).subspan(at, n + 1);
        const std::span<const std::byte> bytes = longer.first(n);
        at += n + 1;
        if (!spans) {
          ASSERT_TRUE((*w)->Add(t.name, TensorView::Contiguous(t.dtype, t.shape, bytes), t.metadata).ok()) << t.name;
          continue;
        }
        if (n != 0) {
          const std::string want = "tensor \"" + t.name + "\": data holds " + std::to_string(n - 1) + " bytes, but " +
                                   std::string(DTypeName(t.dtype)) + " " + ShapeToString(t.shape) + " takes " +
                                   std::to_string(n);
          const Status s = (*w)->Add(t.name, t.dtype, t.shape, bytes.first(n - 1), t.metadata);
          EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
          EXPECT_EQ(s.message(), want);
        }
        EXPECT_EQ((*w)->Add(t.name, t.dtype, t.shape, longer, t.metadata).code(), StatusCode::kInvalidArgument);
        ASSERT_TRUE((*w)->Add(t.name, t.dtype, t.shape, bytes, t.metadata).ok()) << t.name;
        EXPECT_EQ((*w)->Add(t.name, t.dtype, t.shape, bytes).message(), "duplicate tensor name \"" + t.name + "\"");
      }
      ASSERT_TRUE((*w)->Finish().ok());
    };
    const std::string a = dir.File("view.tsafe"), b = dir.File("span.tsafe");
    write(a, false);
    write(b, true);
    EXPECT_EQ(testing::ReadFileBytes(a), testing::ReadFileBytes(b));
    auto r = Reader::Open(b);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE((*r)->Verify().ok());
  }
}

// AddTensor takes the tensor's bytes at their word: a span shorter than its
// shape is refused, not read past its end.
TEST(FastPaths, AddTensorRefusesDataOfTheWrongSize) {
  testing::TempDir dir;
  auto w = Writer::Create(dir.File("t.tsafe"));
  ASSERT_TRUE(w.ok());
  std::vector<float> x = {1, 2, 3};
  Tensor t;
  t.info.name = "x";
  t.info.dtype = DType::kF32;
  t.info.shape = {4};
  t.data = Bytes(x);
  const Status s = (*w)->AddTensor(t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor \"x\": data holds 12 bytes, but f32 [4] takes 16");
  t.info.shape = {3};
  EXPECT_TRUE((*w)->AddTensor(t).ok());
  EXPECT_TRUE((*w)->Finish().ok());
}

// From 4 MiB a piece is hashed on the background thread while the caller
// writes it. One tensor of 9 MiB + 12 bytes added whole, streamed in small
// chunks (hashed here) and in 5 MiB chunks (both ways) gives the same file.
TEST(FastPaths, ConcurrentlyHashedPiecesGiveTheSameFile) {
  testing::TempDir dir;
  std::vector<float> big((9 << 20) / 4 + 3);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 977) - 3.25f;
  const auto bytes = Bytes(big);
  auto write = [&](const std::string& path, std::size_t chunk) {
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add("a", TensorView::Contiguous(DType::kU8, {5}, bytes.first(5))).ok());
    if (chunk == 0) {
      ASSERT_TRUE((*w)->Add("big", TensorView::Contiguous(DType::kF32, {big.size()}, bytes)).ok());
    } else {
      ASSERT_TRUE((*w)->BeginTensor("big", DType::kF32, {big.size()}).ok());
      for (std::size_t off = 0; off < bytes.size(); off += chunk) {
        ASSERT_TRUE((*w)->Append(bytes.subspan(off, std::min(chunk, bytes.size() - off))).ok());
      }
      ASSERT_TRUE((*w)->EndTensor().ok());
    }
    ASSERT_TRUE((*w)->Add("z", TensorView::Contiguous(DType::kU8, {7}, bytes.first(7))).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  };
  const std::string whole = dir.File("whole.tsafe"), small = dir.File("small.tsafe"), five = dir.File("five.tsafe");
  write(whole, 0);
  write(small, 100003);
  write(five, 5 << 20);
  const std::string want = testing::ReadFileBytes(small);
  EXPECT_EQ(testing::ReadFileBytes(whole), want);
  EXPECT_EQ(testing::ReadFileBytes(five), want);
  auto r = Reader::Open(whole);
  ASSERT_TRUE(r.ok());
  auto info = (*r)->Find("big");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->data_checksum, internal::Hash64(bytes));
  EXPECT_TRUE((*r)->Verify().ok());
}

TEST(FastPaths, DamagedEntryIsReportedByEagerOpenLazyFindAndVerify) {
  testing::TempDir dir;
  const std::string path = dir.File("c.tsafe");
  std::vector<float> data;
  WriteMany(path, 50, data);
  std::string bytes = testing::ReadFileBytes(path);
  // Damage the name of entry 10 inside the index.
  const std::string victim = Name(10);
  const auto at = bytes.rfind(victim);
  ASSERT_NE(at, std::string::npos);
  bytes[at] = 'L';
  const std::string bad = dir.File("bad.tsafe");
  testing::WriteFileBytes(bad, bytes);
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions o;
    o.access = access;
    EXPECT_EQ(Reader::Open(bad, o).status().code(), StatusCode::kCorruption);
    o.eager_index_bytes = 0;
    auto r = Reader::Open(bad, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE((*r)->Find(Name(11)).ok());
    auto f = (*r)->Find(victim);
    EXPECT_EQ(f.status().code(), StatusCode::kCorruption) << f.status().ToString();
    EXPECT_NE(f.status().message().find("checksum"), std::string::npos) << f.status().ToString();
    EXPECT_EQ((*r)->Verify().code(), StatusCode::kCorruption);
    EXPECT_EQ((*r)->Names().status().code(), StatusCode::kCorruption);
  }
}

// A refused strided view of a packed dtype must leave the writer usable.
TEST(FastPaths, RefusedStridedPackedAddLeavesWriterOpen) {
  testing::TempDir dir;
  auto w = Writer::Create(dir.File("p.tsafe"));
  ASSERT_TRUE(w.ok());
  std::vector<std::byte> b(8);
  TensorView packed{DType::kU4, {2, 4}, b.data(), {4, 1}};
  EXPECT_EQ((*w)->Add("p", packed).code(), StatusCode::kInvalidArgument);
  std::vector<float> x = {1, 2};
  Status s = (*w)->Add("x", TensorView::Contiguous(DType::kF32, {2}, Bytes(x)));
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE((*w)->Finish().ok());
}

// Hash64 and StreamingHash may run libxxhash's dispatched (AVX2/AVX-512)
// kernels: digests must equal the portable XXH3-64 for every length class and
// for any chunking of the input.
TEST(FastPaths, DispatchedHashEqualsPortableXxh3) {
  std::vector<std::byte> buf(3 << 20);
  std::mt19937_64 rng(7);
  for (auto& b : buf) b = static_cast<std::byte>(rng());
  for (std::size_t n : {0ul, 1ul, 16ul, 17ul, 128ul, 129ul, 240ul, 241ul, 1023ul, 1024ul, 1025ul, 4096ul, 100000ul,
                        (1ul << 20) + 5, buf.size()}) {
    const std::uint64_t want = XXH3_64bits(buf.data(), n);
    EXPECT_EQ(internal::Hash64(std::span<const std::byte>(buf.data(), n)), want) << n;
    internal::StreamingHash h;
    std::size_t off = 0;
    while (off < n) {
      const std::size_t k = std::min<std::size_t>(n - off, 1 + rng() % 300000);
      h.Update({buf.data() + off, k});
      off += k;
    }
    EXPECT_EQ(h.Digest(), want) << n;
  }
}

}  // namespace
}  // namespace tensorsafe
