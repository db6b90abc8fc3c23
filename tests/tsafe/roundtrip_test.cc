// Random round trips against an in-memory model (seed printed), and the
// writer's API contract: strided views, streaming, file descriptors, errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "support/temp_dir.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"

namespace tensorsafe::testing {
namespace {

struct RoundTripTensor {
  DType dtype;
  Shape shape;
  std::string bytes;
  std::string metadata;
};

std::string RandomName(std::mt19937_64& rng, int i) {
  static const char* kPieces[] = {"layer", ".", "weight", "/", "bias", "é", "日本", " ", "_", "0"};
  std::string s;
  const int n = static_cast<int>(rng() % 5);
  for (int k = 0; k < n; ++k) s += kPieces[rng() % 10];
  return s + "#" + std::to_string(i);  // unique
}

TEST(RoundTrip, RandomFilesMatchModel) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("RoundTrip.RandomFilesMatchModel seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  for (int file = 0; file < 40; ++file) {
    WriterOptions wopt;
    wopt.alignment = 1u << (rng() % 13);  // 1 .. 4096
    std::map<std::string, RoundTripTensor> model;
    std::vector<std::string> order;
    const std::string path = dir.File("f" + std::to_string(file) + ".tsafe");
    auto w = Writer::Create(path, wopt);
    ASSERT_TRUE(w.ok());
    const int count = static_cast<int>(rng() % 20);
    for (int i = 0; i < count; ++i) {
      RoundTripTensor t;
      t.dtype = static_cast<DType>(1 + rng() % kNumDTypes);
      const std::size_t rank = rng() % 4;
      const auto& info = GetDTypeInfo(t.dtype);
      for (std::size_t d = 0; d < rank; ++d) t.shape.push_back(rng() % 5);
      // Packed types need whole blocks: make the last dim a multiple.
      if (info.block_elems > 1) {
        if (rank == 0)
          t.shape.push_back(info.block_elems);
        else
          t.shape.back() *= info.block_elems;
      }
      const std::uint64_t n = *DenseByteSize(t.dtype, t.shape);
      for (std::uint64_t k = 0; k < n; ++k) t.bytes.push_back(static_cast<char>(rng()));
      if (rng() % 3 == 0) t.metadata = R"({"i":)" + std::to_string(i) + R"(,"tags":["x",{"y":null}]})";
      const std::string name = RandomName(rng, i);
      if (rng() % 4 == 0) {  // streamed in random chunks
        ASSERT_TRUE((*w)->BeginTensor(name, t.dtype, t.shape, t.metadata).ok());
        std::size_t off = 0;
        while (off < t.bytes.size()) {
          const std::size_t k = std::min<std::size_t>(1 + rng() % 7, t.bytes.size() - off);
          ASSERT_TRUE((*w)->Append(std::as_bytes(std::span(t.bytes.data() + off, k))).ok());
          off += k;
        }
        ASSERT_TRUE((*w)->EndTensor().ok());
      } else {
        ASSERT_TRUE(
            (*w)->Add(name, TensorView::Contiguous(t.dtype, t.shape, std::as_bytes(std::span(t.bytes))), t.metadata)
                .ok());
      }
      model[name] = t;
      order.push_back(name);
    }
    std::string meta;
    if (rng() % 2) {
      meta = R"({"file":)" + std::to_string(file) + R"(,"nested":{"a":[1,2,{"b":"c"}]}})";
      ASSERT_TRUE((*w)->SetMetadata(meta).ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());

    for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
      for (std::uint64_t eager : {std::uint64_t{0}, ~std::uint64_t{0}}) {
        ReaderOptions ropt;
        ropt.access = access;
        ropt.eager_index_bytes = eager;
        auto r = Reader::Open(path, ropt);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        ASSERT_TRUE((*r)->Verify().ok());
        EXPECT_EQ((*r)->size(), model.size());
        EXPECT_EQ(*(*r)->Metadata(), meta.empty() ? "{}" : meta);
        auto names = (*r)->Names();
        ASSERT_TRUE(names.ok());
        EXPECT_EQ(*names, order);
        for (const auto& [name, t] : model) {
          auto g = (*r)->Get(name);
          ASSERT_TRUE(g.ok()) << g.status().ToString();
          EXPECT_EQ(g->info.dtype, t.dtype);
          EXPECT_EQ(g->info.shape, t.shape);
          EXPECT_EQ(g->info.metadata_json, t.metadata);
          EXPECT_EQ(g->info.data_offset % wopt.alignment, 0u);
          EXPECT_EQ(std::string(reinterpret_cast<const char*>(g->data.data()), g->data.size()), t.bytes);
          std::string copy(t.bytes.size(), '\0');
          ASSERT_TRUE((*r)->ReadInto(name, std::as_writable_bytes(std::span(copy)), true).ok());
          EXPECT_EQ(copy, t.bytes);
        }
        EXPECT_EQ((*r)->Find("absent").status().code(), StatusCode::kNotFound);
      }
    }
  }
}

TEST(RoundTrip, SameInputSameBytes) {
  TempDir dir;
  std::string files[2];
  for (int k = 0; k < 2; ++k) {
    const std::string path = dir.File("d" + std::to_string(k) + ".tsafe");
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    std::vector<double> v(100, 1.5);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(
          (*w)->Add("t" + std::to_string(i), TensorView::Contiguous(DType::kF64, {10, 10}, std::as_bytes(std::span(v))))
              .ok());
    }
    ASSERT_TRUE((*w)->Finish().ok());
    files[k] = ReadFileBytes(path);
  }
  EXPECT_EQ(files[0], files[1]);
}

TEST(Writer, StridedViewIsGathered) {
  TempDir dir;
  const std::string path = dir.File("s.tsafe");
  // A 4x6 i32 matrix; write its transpose (6x4) and every other column.
  std::vector<std::int32_t> m(24);
  for (int i = 0; i < 24; ++i) m[i] = i;
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  TensorView t{DType::kI32, {6, 4}, reinterpret_cast<const std::byte*>(m.data()), {4, 24}};
  ASSERT_TRUE((*w)->Add("transpose", t).ok());
  TensorView every_other{DType::kI32, {4, 3}, reinterpret_cast<const std::byte*>(m.data()), {24, 8}};
  ASSERT_TRUE((*w)->Add("cols", every_other).ok());
  TensorView reversed{DType::kI32, {24}, reinterpret_cast<const std::byte*>(m.data() + 23), {-4}};
  ASSERT_TRUE((*w)->Add("reversed", reversed).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto r = Reader::Open(path);
  ASSERT_TRUE(r.ok());
  auto tr = (*r)->Get("transpose");
  const auto* p = reinterpret_cast<const std::int32_t*>(tr->data.data());
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(p[i * 4 + j], m[j * 6 + i]);
  auto c = (*r)->Get("cols");
  p = reinterpret_cast<const std::int32_t*>(c->data.data());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(p[i * 3 + j], m[i * 6 + 2 * j]);
  auto rv = (*r)->Get("reversed");
  p = reinterpret_cast<const std::int32_t*>(rv->data.data());
  for (int i = 0; i < 24; ++i) EXPECT_EQ(p[i], 23 - i);
}

TEST(Writer, RejectsBadInputAndKeepsGoing) {
  TempDir dir;
  const std::string path = dir.File("e.tsafe");
  auto w = Writer::Create(path);
  ASSERT_TRUE(w.ok());
  const std::uint8_t b[4] = {1, 2, 3, 4};
  auto view = TensorView::Contiguous(DType::kU8, {4}, std::as_bytes(std::span(b)));
  ASSERT_TRUE((*w)->Add("x", view).ok());
  Status dup = (*w)->Add("x", view);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dup.message(), "duplicate tensor name \"x\"");
  Status utf = (*w)->Add("\xff", view);
  EXPECT_EQ(utf.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(utf.message(), "tensor name \"\\xff\" is not valid UTF-8");
  // The ASCII test reads 8 bytes at a time: a bad byte in any lane of a word
  // or in the tail is caught, and valid multi-byte names pass.
  for (std::size_t at : {0, 5, 7, 8, 15, 16, 18}) {
    std::string bad(19, 'a');
    bad[at] = '\xc3';  // a lead byte without its continuation
    Status s = (*w)->Add(bad, view);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << at;
    EXPECT_NE(s.message().find("is not valid UTF-8"), std::string::npos) << at;
  }
  EXPECT_TRUE((*w)->Add("encoder.layer.\xc3\xa9t\xc3\xa9.weight", view).ok());
  Status f4 = (*w)->Add("f4", TensorView::Contiguous(DType::kF4E2M1, {3}, std::as_bytes(std::span(b))));
  EXPECT_EQ(f4.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f4.message(), "tensor \"f4\": 3 elements of f4_e2m1 do not fill whole blocks of 2");
  Status meta = (*w)->Add("m", view, "[1]");
  EXPECT_EQ(meta.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(meta.message(), "tensor \"m\" metadata: JSON metadata must be an object");
  EXPECT_EQ((*w)->SetMetadata("{").code(), StatusCode::kInvalidArgument);
  Shape deep(65, 1);
  EXPECT_EQ((*w)->BeginTensor("r", DType::kU8, deep).code(), StatusCode::kLimitExceeded);
  // Streaming contract.
  EXPECT_EQ((*w)->Append(std::as_bytes(std::span(b))).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*w)->BeginTensor("s", DType::kU8, {4}).ok());
  EXPECT_EQ((*w)->Add("y", view).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*w)->Finish().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*w)->Append(std::as_bytes(std::span(b)).first(2)).ok());
  Status short_end = (*w)->EndTensor();
  EXPECT_EQ(short_end.message(), "tensor \"s\": 2 of 4 bytes were never appended");
  EXPECT_EQ((*w)->Append(std::as_bytes(std::span(b))).message(), "tensor \"s\": 4 more bytes but only 2 remain of 4");
  ASSERT_TRUE((*w)->Append(std::as_bytes(std::span(b)).first(2)).ok());
  ASSERT_TRUE((*w)->EndTensor().ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto r = Reader::Open(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*(*r)->Names(), (std::vector<std::string>{"x", "encoder.layer.\xc3\xa9t\xc3\xa9.weight", "s"}));
  EXPECT_FALSE(Writer::Create(dir.File("bad.tsafe"), WriterOptions{48}).ok());
}

TEST(Writer, AbandonLeavesNothingAndKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir.File("keep.tsafe");
  WriteFileBytes(path, "old contents");
  {
    auto w = Writer::Create(path);
    ASSERT_TRUE(w.ok());
    const std::uint8_t b[1] = {1};
    ASSERT_TRUE((*w)->Add("x", TensorView::Contiguous(DType::kU8, {1}, std::as_bytes(std::span(b)))).ok());
    // destroyed without Finish: abandoned
  }
  EXPECT_EQ(ReadFileBytes(path), "old contents");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(Writer, PipeProducesAStreamedFile) {
  TempDir dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string path = dir.File("piped.tsafe");
  // Small enough to fit the pipe buffer, so one thread can write then read.
  auto w = Writer::ToFd(fds[1]);
  ASSERT_TRUE(w.ok());
  const float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE((*w)->Add("v", TensorView::Contiguous(DType::kF32, {4}, std::as_bytes(std::span(v)))).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  WriteFileBytes(path, got);
  auto r = Reader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->summary().via_trailer);
  EXPECT_EQ((*r)->summary().sequence, 0u);
  EXPECT_TRUE((*r)->Verify().ok());
  // A regular file descriptor at offset 0 gets its slot filled as well.
  const std::string path2 = dir.File("fd.tsafe");
  int fd = ::open(path2.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
  auto w2 = Writer::ToFd(fd);
  ASSERT_TRUE(w2.ok());
  ASSERT_TRUE((*w2)->Add("v", TensorView::Contiguous(DType::kF32, {4}, std::as_bytes(std::span(v)))).ok());
  ASSERT_TRUE((*w2)->Finish().ok());
  ::close(fd);
  auto r2 = Reader::Open(path2);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2)->summary().sequence, 1u);
  // Same content either way: the streamed file differs only in slot 0.
  std::string a = ReadFileBytes(path2);
  std::string b = got;
  EXPECT_EQ(a.substr(80), b.substr(80));
}

TEST(Reader, TensorsOutliveTheReader) {
  TempDir dir;
  const std::string path = dir.File("life.tsafe");
  auto w = Writer::Create(path);
  const std::int64_t v[3] = {7, 8, 9};
  ASSERT_TRUE((*w)->Add("v", TensorView::Contiguous(DType::kI64, {3}, std::as_bytes(std::span(v)))).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  Tensor t;
  {
    auto r = Reader::Open(path);
    ASSERT_TRUE(r.ok());
    t = *(*r)->Get("v");
  }
  std::filesystem::remove(path);  // the mapping keeps the bytes
  EXPECT_EQ(reinterpret_cast<const std::int64_t*>(t.data.data())[2], 9);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data.data()) % 64, 0u);
}

TEST(Reader, SliceReadsTheHyperslab) {
  TempDir dir;
  const std::string path = dir.File("slab.tsafe");
  const std::uint64_t D0 = 4, D1 = 5, D2 = 6;
  std::vector<std::int16_t> v(D0 * D1 * D2);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int16_t>(i);
  {
    auto w = Writer::Create(path);
    ASSERT_TRUE((*w)->Add("v", TensorView::Contiguous(DType::kI16, {D0, D1, D2}, std::as_bytes(std::span(v)))).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  std::mt19937 rng(1234);
  for (auto access : {ReaderOptions::Access::kMmap, ReaderOptions::Access::kPread}) {
    ReaderOptions opt;
    opt.access = access;
    auto r = Reader::Open(path, opt);
    ASSERT_TRUE(r.ok());
    for (int trial = 0; trial < 300; ++trial) {
      SliceDim s[3];
      const std::uint64_t dims[3] = {D0, D1, D2};
      for (int d = 0; d < 3; ++d) {
        std::uint64_t a = rng() % (dims[d] + 1), b = rng() % (dims[d] + 1);
        if (a > b) std::swap(a, b);
        s[d] = {a, b, 1 + rng() % 3};
        if (trial % 5 == 0) s[d] = {0, dims[d], 1};  // whole dims merge into runs
      }
      std::vector<std::int16_t> want;
      for (std::uint64_t i = s[0].start; i < s[0].stop; i += s[0].step)
        for (std::uint64_t j = s[1].start; j < s[1].stop; j += s[1].step)
          for (std::uint64_t k = s[2].start; k < s[2].stop; k += s[2].step) want.push_back(v[(i * D1 + j) * D2 + k]);
      std::vector<std::int16_t> got(want.size(), -1);
      Status st = (*r)->ReadSlice("v", s, std::as_writable_bytes(std::span(got)));
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(got, want) << "trial " << trial;
    }
    // A step past the end selects just the start (no wrap-around).
    SliceDim huge[3] = {{1, 4, ~std::uint64_t{0}}, {2, 3, 1}, {0, 6, ~std::uint64_t{0} - 1}};
    std::vector<std::int16_t> one(1, -1);
    ASSERT_TRUE((*r)->ReadSlice("v", huge, std::as_writable_bytes(std::span(one))).ok());
    EXPECT_EQ(one[0], v[(1 * D1 + 2) * D2 + 0]);
    SliceDim bad[3] = {{0, 5, 1}, {0, 1, 1}, {0, 1, 1}};
    std::vector<std::int16_t> out(5);
    Status st = (*r)->ReadSlice("v", bad, std::as_writable_bytes(std::span(out)));
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
    EXPECT_EQ(st.message(), "tensor \"v\" dimension 0 of size 4: slice [0:5:1] is out of range");
  }
}

}  // namespace
}  // namespace tensorsafe::testing
