// The native message codec (docs/STREAM.md §4-7): round trips, the golden
// message, one test per reader check, bit flips and truncation.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "stream/native_codec.h"
#include "stream/stream_test_util.h"
#include "tensorsafe/stream/fd.h"
#include "util/endian.h"
#include "util/hash.h"

namespace tensorsafe {
namespace {

using internal::Load64;
using internal::Store16;
using internal::Store32;
using internal::Store64;
using internal::Store8;
using testing::AllDTypesBatch;
using testing::ExpectBatchEq;

// Decodes `bytes` from a 64-byte aligned copy (as a receiver holds them).
Result<TensorSet> Decode(const std::string& bytes, const StreamReaderOptions& opt = {}) {
  auto buf = internal::AlignedBuffer::Allocate(bytes.size());
  std::memcpy(buf->data(), bytes.data(), bytes.size());
  return DecodeMessage({buf->data(), bytes.size()}, buf, opt);
}

// Recomputes the descriptor and header checksums after a mutation, so the
// deeper checks run.
void Reseal(std::string& m) {
  auto* p = reinterpret_cast<std::byte*>(m.data());
  const std::uint64_t dbytes = Load64(p + 24);
  if (64 + dbytes <= m.size()) Store64(p + 40, internal::Hash64(std::span<const std::byte>(p + 64, dbytes)));
  Store64(p + 56, internal::Hash64(std::span<const std::byte>(p, 56)));
}

TensorSet OneF32() {
  const float v[6] = {1, 2, 3, 4, 5, 6};
  auto buf = std::make_shared<std::vector<float>>(v, v + 6);
  Tensor t;
  t.info.name = "x";
  t.info.dtype = DType::kF32;
  t.info.shape = {2, 3};
  t.data = std::as_bytes(std::span(*buf));
  t.owner = buf;
  TensorSet s;
  s.tensors.push_back(t);
  return s;
}

std::string Hex(const std::string& s) {
  std::string out;
  char b[4];
  for (unsigned char c : s) {
    std::snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

TEST(StreamCodec, RoundTripEveryDTypeIsZeroCopyAndAligned) {
  TensorSet in = AllDTypesBatch();
  auto bytes = EncodeMessage(in, 7);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto buf = internal::AlignedBuffer::Allocate(bytes->size());
  std::memcpy(buf->data(), bytes->data(), bytes->size());
  auto out = DecodeMessage({buf->data(), bytes->size()}, buf);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectBatchEq(in, *out);
  for (const Tensor& t : out->tensors) {
    EXPECT_TRUE(testing::Aligned(t.data.data(), 64)) << t.info.name;
    EXPECT_GE(t.data.data(), buf->data());
    EXPECT_LE(t.data.data() + t.data.size(), buf->data() + bytes->size());
    EXPECT_EQ(t.owner, std::static_pointer_cast<const void>(buf)) << "shares the message buffer";
  }
}

TEST(StreamCodec, GoldenMessage) {
  // One f32 [2, 3] tensor "x" = 1..6, no metadata, sequence 0: STREAM.md §4-5
  // field by field. 64 (header) + 128 (8 + 40 + 16 + 1 = 65, padded) + 64.
  auto m = EncodeMessage(OneF32());
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 256u);
  const std::string want_header_prefix =
      "54534d47"
      "01"
      "00"
      "4000"              // magic, kind 1, reserved, header_size 64
      "0000000000000000"  // sequence 0
      "01000000"
      "00000000"  // 1 tensor, flags 0
      "8000000000000000"
      "4000000000000000";  // descriptor_bytes 128, data_bytes 64
  EXPECT_EQ(Hex(m->substr(0, 40)), want_header_prefix);
  const std::string want_block =
      "00000000"
      "00000000"  // no batch metadata, reserved
      "0000000000000000"
      "1800000000000000"              // data_offset 0, data_length 24
      + Hex(m->substr(64 + 24, 8)) +  // data_checksum (checked below)
      "0c"
      "00"
      "0100"
      "00000000"
      "0200"
      "0000"
      "00000000"  // f32, dense, name 1, no md, rank 2
      "0200000000000000"
      "0300000000000000"  // dims
      "78";               // "x"
  EXPECT_EQ(Hex(m->substr(64, 65)), want_block);
  EXPECT_EQ(m->substr(64 + 65, 63), std::string(63, '\0'));
  const float v[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(std::memcmp(m->data() + 192, v, 24), 0);
  EXPECT_EQ(m->substr(192 + 24), std::string(40, '\0'));
  const auto* p = reinterpret_cast<const std::byte*>(m->data());
  EXPECT_EQ(Load64(p + 64 + 24), internal::Hash64(std::span<const std::byte>(p + 192, 24)));
  EXPECT_EQ(Load64(p + 40), internal::Hash64(std::span<const std::byte>(p + 64, 128)));
  EXPECT_EQ(Load64(p + 48), 0u);
  EXPECT_EQ(Load64(p + 56), internal::Hash64(std::span<const std::byte>(p, 56)));
  // And the other direction.
  auto back = Decode(*m);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectBatchEq(OneF32(), *back);
}

TEST(StreamCodec, EndMessageIsTheEmptyChecksum) {
  const std::string end = internal::EncodeEndMessage(5);
  ASSERT_EQ(end.size(), 64u);
  EXPECT_EQ(Load64(reinterpret_cast<const std::byte*>(end.data()) + 40), 0x2D06800538D394C2ull);  // STREAM.md §4
  EXPECT_EQ(Decode(end).status().code(), StatusCode::kInvalidArgument);
}

TEST(StreamCodec, WriterRefusesBadBatches) {
  TensorSet s = OneF32();
  s.tensors.push_back(s.tensors[0]);
  EXPECT_EQ(EncodeMessage(s).status().code(), StatusCode::kInvalidArgument);  // duplicate
  s = OneF32();
  s.tensors[0].info.shape = {7};
  EXPECT_EQ(EncodeMessage(s).status().code(), StatusCode::kInvalidArgument);  // size
  s = OneF32();
  s.tensors[0].info.name = "";
  EXPECT_EQ(EncodeMessage(s).status().code(), StatusCode::kInvalidArgument);
  s = OneF32();
  s.metadata_json = "[1]";
  EXPECT_FALSE(EncodeMessage(s).ok());
  s = OneF32();
  s.tensors[0].info.metadata_json = "{bad";
  EXPECT_FALSE(EncodeMessage(s).ok());
}

struct Mutation {
  const char* name;
  std::function<void(std::string&)> apply;
  bool reseal;
  StatusCode code;
  const char* message;
};

// STREAM.md §7, one case per check (the message is OneF32 plus metadata).
TEST(StreamCodec, EveryReaderCheck) {
  TensorSet base = OneF32();
  base.tensors.push_back(testing::RandomTensor("y", DType::kU8, {5}, 3));
  auto p8 = [](std::string& m, std::size_t at, std::uint8_t v) { Store8(reinterpret_cast<std::byte*>(&m[at]), v); };
  auto p16 = [](std::string& m, std::size_t at, std::uint16_t v) { Store16(reinterpret_cast<std::byte*>(&m[at]), v); };
  auto p32 = [](std::string& m, std::size_t at, std::uint32_t v) { Store32(reinterpret_cast<std::byte*>(&m[at]), v); };
  auto p64 = [](std::string& m, std::size_t at, std::uint64_t v) { Store64(reinterpret_cast<std::byte*>(&m[at]), v); };
  // Descriptor 0 starts at 64 + 8 = 72; descriptor 1 at 72 + 40 + 16 + 1 = 129.
  const std::size_t d0 = 72, d1 = 129;
  const std::vector<Mutation> cases = {
      {"H1 magic", [&](std::string& m) { m[0] = 'X'; }, true, StatusCode::kCorruption, "magic"},
      {"H2 header checksum", [&](std::string& m) { m[8] ^= 1; }, false, StatusCode::kCorruption, "header checksum"},
      {"H3 kind", [&](std::string& m) { p8(m, 4, 3); }, true, StatusCode::kCorruption, "kind 3"},
      {"H4 reserved", [&](std::string& m) { p8(m, 5, 1); }, true, StatusCode::kUnsupported, "reserved"},
      {"H4 flags", [&](std::string& m) { p32(m, 20, 1); }, true, StatusCode::kUnsupported, "flags"},
      {"H4 reserved 48", [&](std::string& m) { p64(m, 48, 1); }, true, StatusCode::kUnsupported, "reserved"},
      {"H5 header_size", [&](std::string& m) { p16(m, 6, 32); }, true, StatusCode::kCorruption, "header_size"},
      {"H6 unaligned", [&](std::string& m) { p64(m, 32, 65); }, true, StatusCode::kCorruption, "multiple of 64"},
      {"H6 limit", [&](std::string& m) { p64(m, 32, std::uint64_t{1} << 40); }, true, StatusCode::kLimitExceeded,
       "max_message_bytes"},
      {"H6 overflow", [&](std::string& m) { p64(m, 32, ~std::uint64_t{63}); }, true, StatusCode::kLimitExceeded,
       "2^64"},
      {"H7 end with body", [&](std::string& m) { p8(m, 4, 2); }, true, StatusCode::kCorruption, "end-of-stream"},
      {"H9 count", [&](std::string& m) { p32(m, 16, 0xFFFFFFFF); }, true, StatusCode::kLimitExceeded,
       "max_tensor_count"},
      {"size mismatch", [&](std::string& m) { p64(m, 32, 64); }, true, StatusCode::kCorruption, "header says"},
      {"D1 descriptor checksum", [&](std::string& m) { m[d0 + 30] ^= 1; }, false, StatusCode::kCorruption,
       "descriptor block checksum"},
      {"D2 reserved", [&](std::string& m) { p32(m, 68, 1); }, true, StatusCode::kCorruption, "reserved"},
      {"D2 metadata length", [&](std::string& m) { p32(m, 64, 1000); }, true, StatusCode::kCorruption, "runs past"},
      {"D3 reserved", [&](std::string& m) { p32(m, d0 + 36, 1); }, true, StatusCode::kCorruption, "reserved"},
      {"D3 name past block", [&](std::string& m) { p16(m, d1 + 26, 500); }, true, StatusCode::kCorruption, "runs past"},
      {"D4 dtype 0", [&](std::string& m) { p8(m, d0 + 24, 0); }, true, StatusCode::kCorruption, "dtype code 0"},
      {"D4 dtype 99", [&](std::string& m) { p8(m, d0 + 24, 99); }, true, StatusCode::kCorruption, "dtype code 99"},
      {"D5 layout", [&](std::string& m) { p8(m, d0 + 25, 1); }, true, StatusCode::kUnsupported, "layout"},
      {"D6 rank", [&](std::string& m) { p16(m, d0 + 32, 1000); }, true, StatusCode::kLimitExceeded, "max_rank"},
      {"D7 empty name", [&](std::string& m) { p16(m, d0 + 26, 0); }, true, StatusCode::kCorruption, ""},
      {"D7 duplicate", [&](std::string& m) { m[d1 + 48] = 'x'; }, true, StatusCode::kCorruption, "duplicate"},
      {"D7 not UTF-8", [&](std::string& m) { m[d1 + 48] = '\xff'; }, true, StatusCode::kCorruption, "UTF-8"},
      {"D9 length", [&](std::string& m) { p64(m, d0 + 8, 20); }, true, StatusCode::kCorruption, "needs 24"},
      {"D9 dims", [&](std::string& m) { p64(m, d0 + 40, 3); }, true, StatusCode::kCorruption, "needs 36"},
      {"D10 unaligned", [&](std::string& m) { p64(m, d1, 65); }, true, StatusCode::kCorruption, "unaligned"},
      {"D10 overlap", [&](std::string& m) { p64(m, d1, 0); }, true, StatusCode::kCorruption, "overlaps"},
      {"D10 past data", [&](std::string& m) { p64(m, d1, 128); }, true, StatusCode::kCorruption, "exceeds data_bytes"},
      {"D11 padding", [&](std::string& m) { m[d1 + 49 + 3] = 1; }, true, StatusCode::kCorruption, "padding"},
      {"D12 data padding", [&](std::string& m) { m[m.size() - 1] = 1; }, true, StatusCode::kCorruption, "padding"},
      {"X1 data checksum", [&](std::string& m) { m[m.size() - 64] ^= 1; }, true, StatusCode::kCorruption,
       "data checksum"},
  };
  auto good = EncodeMessage(base);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(Decode(*good).ok());
  for (const Mutation& c : cases) {
    SCOPED_TRACE(c.name);
    std::string m = *good;
    c.apply(m);
    if (c.reseal) Reseal(m);
    auto r = Decode(m);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), c.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().ToString();
  }
}

TEST(StreamCodec, DataChecksumCanBeSkipped) {
  auto m = EncodeMessage(OneF32());
  ASSERT_TRUE(m.ok());
  (*m)[192] ^= 1;
  EXPECT_EQ(Decode(*m).status().code(), StatusCode::kCorruption);
  StreamReaderOptions o;
  o.verify_data = false;
  EXPECT_TRUE(Decode(*m, o).ok());
}

TEST(StreamCodec, EveryBitFlipIsDetected) {
  TensorSet s = OneF32();
  s.metadata_json = R"({"k":1})";
  s.tensors[0].info.metadata_json = R"({"t":2})";
  auto m = EncodeMessage(s);
  ASSERT_TRUE(m.ok());
  for (std::size_t i = 0; i < m->size(); ++i) {
    for (int bit : {0, 7}) {
      std::string c = *m;
      c[i] = static_cast<char>(c[i] ^ (1 << bit));
      EXPECT_FALSE(Decode(c).ok()) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(StreamCodec, EveryTruncationIsDetected) {
  auto m = EncodeMessage(OneF32());
  ASSERT_TRUE(m.ok());
  for (std::size_t n = 0; n < m->size(); ++n) {
    auto r = Decode(m->substr(0, n));
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << n;
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
  }
}

TEST(StreamCodec, MisalignedBufferCopiesOnlyWhatMustBe) {
  auto m = EncodeMessage(AllDTypesBatch());
  ASSERT_TRUE(m.ok());
  auto buf = internal::AlignedBuffer::Allocate(m->size() + 1);
  std::memcpy(buf->data() + 1, m->data(), m->size());
  auto out = DecodeMessage({buf->data() + 1, m->size()}, buf);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectBatchEq(AllDTypesBatch(), *out);
  for (const Tensor& t : out->tensors) {
    EXPECT_TRUE(testing::Aligned(t.data.data(), internal::NaturalAlignment(t.info.dtype))) << t.info.name;
  }
}

}  // namespace
}  // namespace tensorsafe

namespace tensorsafe {
namespace {

// DataVerifier: the checks of a data region fed in pieces of any size give
// the same verdicts as the whole region at once (the fd reader feeds 256 KiB
// pieces), for every damaged byte, tensor data and padding alike.
TEST(StreamCodec, DataVerifierPiecesAgreeWithTheWhole) {
  TensorSet s = OneF32();
  Tensor empty;
  empty.info.name = "empty";
  empty.info.dtype = DType::kU8;
  empty.info.shape = {0};
  s.tensors.push_back(empty);
  std::vector<std::uint8_t> odd(131);
  for (std::size_t i = 0; i < odd.size(); ++i) odd[i] = static_cast<std::uint8_t>(i * 7 + 1);
  Tensor t;
  t.info.name = "odd";
  t.info.dtype = DType::kU8;
  t.info.shape = {odd.size()};
  t.data = std::as_bytes(std::span(odd));
  s.tensors.push_back(t);
  auto m = EncodeMessage(s);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto all = std::as_bytes(std::span(*m));
  auto h = internal::DecodeHeader(all, {});
  ASSERT_TRUE(h.ok());
  auto d = internal::DecodeDescriptors(*h, all.subspan(64, h->descriptor_bytes), {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const std::size_t data_at = 64 + h->descriptor_bytes;
  ASSERT_EQ(h->data_bytes, 64u + 192u);  // x at 0 (24 bytes), empty at 64, odd at 64 (131 bytes)
  auto run = [&](const std::string& bytes, std::size_t piece) -> Status {
    auto data = std::as_bytes(std::span(bytes)).subspan(data_at);
    internal::DataVerifier v(*d, data.size(), true);
    for (std::size_t at = 0; at < data.size(); at += piece) {
      TS_RETURN_IF_ERROR(v.Update(data.subspan(at, std::min(piece, data.size() - at))));
    }
    return v.Finish();
  };
  for (std::size_t piece : {1, 7, 64, 100, 1000}) EXPECT_TRUE(run(*m, piece).ok()) << piece;
  for (std::size_t q = 0; q < h->data_bytes; ++q) {
    std::string c = *m;
    c[data_at + q] ^= 0x10;
    const bool padding = (q >= 24 && q < 64) || q >= 64 + 131;
    const std::string want = padding
                                 ? "data padding byte at " + std::to_string(q) + " is not zero"
                                 : std::string(q < 24 ? "tensor \"x\"" : "tensor \"odd\"") + ": data checksum mismatch";
    for (std::size_t piece : {1, 7, 1000}) {
      Status st = run(c, piece);
      EXPECT_EQ(st.code(), StatusCode::kCorruption) << q << " " << piece;
      EXPECT_EQ(st.message(), want) << q << " " << piece;
    }
  }
  // Misuse is an internal error, not a crash: too many bytes, or too few.
  internal::DataVerifier v(*d, h->data_bytes, true);
  EXPECT_EQ(v.Finish().code(), StatusCode::kInternal);
  std::string extra(h->data_bytes + 1, '\0');
  EXPECT_EQ(v.Update(std::as_bytes(std::span(extra))).code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace tensorsafe
