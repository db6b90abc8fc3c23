// The PyTorch reader's limits (docs/SECURITY.md "Limits", pytorch rows):
// each exceeded by a small checkpoint, refused with kLimitExceeded naming
// the limit, with no single allocation larger than the input justifies.
// Hostile claims (a 4 GiB string, 2^40-element expansions, a billion
// laughs) in a few hundred bytes allocate nothing large.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/npy/zip.h"
#include "io/string_file.h"
#include "limits/alloc_probe.h"
#include "tensorsafe/env.h"
#include "tensorsafe/formats/pytorch.h"

namespace tensorsafe::testing {
namespace {

constexpr std::size_t kSmallPickle = std::size_t{1} << 20;

std::string Le32(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string G(const std::string& m, const std::string& n) { return "c" + m + "\n" + n + "\n"; }
std::string U(const std::string& s) { return "X" + Le32(static_cast<std::uint32_t>(s.size())) + s; }
std::string I(std::int32_t v) { return "J" + Le32(static_cast<std::uint32_t>(v)); }

using internal::StringFile;

// data.pkl, version, and storage "0" of `storage` bytes.
std::string Archive(const std::string& pkl, const std::string& storage = std::string(4, '\0')) {
  StringFile f;
  internal::zip::Writer w(f);
  for (const auto& [name, data] : std::vector<std::pair<std::string, std::string>>{
           {"a/data.pkl", pkl}, {"a/version", "3\n"}, {"a/data/0", storage}}) {
    const std::span<const std::byte> piece[1] = {std::as_bytes(std::span(data))};
    EXPECT_TRUE(w.Add(name, piece, internal::zip::kStored).ok());
  }
  EXPECT_TRUE(w.Finish().ok());
  return f.str();
}

std::string Tensor(std::int32_t numel, const std::vector<std::int32_t>& size, const std::vector<std::int32_t>& stride) {
  std::string sz = "(", st = "(";
  for (auto v : size) sz += I(v);
  for (auto v : stride) st += I(v);
  return G("torch._utils", "_rebuild_tensor_v2") + "((" + U("storage") + G("torch", "FloatStorage") + U("0") +
         U("cpu") + I(numel) + "tQ" + I(0) + sz + "t" + st + "t\x89}tR";
}

void ExpectRefused(const std::string& file, const pytorch::ReadOptions& opt, StatusCode code, std::string_view text) {
  std::size_t peak = 0;
  Status s;
  {
    AllocProbe probe;
    s = pytorch::Decode(std::as_bytes(std::span(file)), nullptr, "t.pt", opt).status();
    peak = probe.peak();
  }
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.ToString();
  EXPECT_LE(peak, kSmallPickle) << "largest single allocation: " << peak << " bytes";
}

TEST(CodecLimits, PytorchPickleBytes) {
  pytorch::ReadOptions o;
  o.limits.max_pickle_bytes = 16;
  ExpectRefused(Archive("\x80\x02](" + std::string(64, 'N') + "e."), o, StatusCode::kLimitExceeded,
                "(Limits::max_pickle_bytes)");
}

TEST(CodecLimits, PytorchValuesAndVisits) {
  pytorch::ReadOptions o;
  o.limits.max_values = 100;
  ExpectRefused(Archive("\x80\x02](" + std::string(200, 'N') + "e."), o, StatusCode::kLimitExceeded,
                "(Limits::max_values)");
  // A billion laughs: 60 levels of a list holding the previous one twice
  // would be visited 2^60 times; the walk stops at twice the values made.
  std::string laughs = "\x80\x02](" + U("lol") + "e";
  for (int i = 0; i < 60; ++i)
    laughs += std::string(
        "q\x00"
        "0(h\x00h\x00l",
        9);
  ExpectRefused(Archive(laughs + "."), {}, StatusCode::kLimitExceeded, "twice the values the pickle made");
}

TEST(CodecLimits, PytorchMemoEntries) {
  pytorch::ReadOptions o;
  o.limits.max_memo_entries = 8;
  std::string p = "\x80\x02]";
  for (int i = 0; i < 9; ++i) p += std::string("q") + static_cast<char>(i);
  ExpectRefused(Archive(p + "."), o, StatusCode::kLimitExceeded, "(Limits::max_memo_entries)");
}

TEST(CodecLimits, PytorchDepthOfMarksAndOfContainers) {
  ExpectRefused(Archive("\x80\x02" + std::string(3000, '(')), {}, StatusCode::kLimitExceeded, "(Limits::max_depth)");
  pytorch::ReadOptions o;
  o.limits.max_depth = 8;
  // [[[[...[t]...]]]] 20 deep, built without MARKs: the walk stops.
  std::string p = "\x80\x02](" + Tensor(1, {1}, {1}) + "e";
  for (int i = 0; i < 20; ++i)
    p += "q" + std::string(1, static_cast<char>(i)) + "0]h" + std::string(1, static_cast<char>(i)) + "a";
  ExpectRefused(Archive(p + "."), o, StatusCode::kLimitExceeded, "(Limits::max_depth");
}

TEST(CodecLimits, PytorchContainerItems) {
  pytorch::ReadOptions o;
  o.limits.max_container_items = 10;
  ExpectRefused(Archive("\x80\x02](" + std::string(11, 'N') + "e."), o, StatusCode::kLimitExceeded,
                "(Limits::max_container_items)");
}

TEST(CodecLimits, PytorchRank) {
  pytorch::ReadOptions o;
  o.limits.max_rank = 3;
  ExpectRefused(Archive("\x80\x02}(" + U("w") + Tensor(1, {1, 1, 1, 1}, {1, 1, 1, 1}) + "u."), o,
                StatusCode::kLimitExceeded, "(Limits::max_rank)");
}

TEST(CodecLimits, PytorchMaterializedBytes) {
  // One f32 element expanded (stride 0) to 2^14 x 2^14: 1 GiB claimed by a
  // 300-byte file, refused before anything is allocated.
  ExpectRefused(Archive("\x80\x02}(" + U("w") + Tensor(1, {1 << 14, 1 << 14}, {0, 0}) + "u."), {},
                StatusCode::kLimitExceeded, "(Limits::max_materialized_ratio)");
  pytorch::ReadOptions o;
  o.limits.max_materialized_bytes = 100;
  ExpectRefused(Archive("\x80\x02}(" + U("w") + Tensor(1, {8, 8}, {0, 0}) + "u."), o, StatusCode::kLimitExceeded,
                "(Limits::max_materialized_bytes)");
}

TEST(CodecLimits, PytorchMetadataBytes) {
  pytorch::ReadOptions o;
  o.limits.max_metadata_bytes = 20;
  ExpectRefused(Archive("\x80\x02}(" + U("a") + U(std::string(40, 'x')) + "u."), o, StatusCode::kLimitExceeded,
                "(Limits::max_metadata_bytes)");
}

TEST(CodecLimits, PytorchMembers) {
  pytorch::ReadOptions o;
  o.limits.max_members = 2;
  ExpectRefused(Archive("\x80\x02}."), o, StatusCode::kLimitExceeded, "more than the limit of 2");
}

TEST(CodecLimits, PytorchHugeClaimsAllocateNothing) {
  // A 4 GiB string, a 2 GiB LONG4, a 2^40-element storage of 4 bytes.
  ExpectRefused(Archive("\x80\x02X\xff\xff\xff\xff."), {}, StatusCode::kCorruption, "operand bytes");
  ExpectRefused(Archive("\x80\x02\x8b\xff\xff\xff\x7f."), {}, StatusCode::kCorruption, "operand bytes");
  ExpectRefused(Archive("\x80\x02}(" + U("w") + Tensor(1 << 30, {1}, {1}) + "u."), {}, StatusCode::kCorruption,
                "4 bytes, but the pickle declares 1073741824 elements");
}

}  // namespace
}  // namespace tensorsafe::testing
