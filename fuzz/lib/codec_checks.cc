// The foreign-format decoders under fuzzing: decode, check the set, and when
// it re-encodes, decode again and compare (a decoder and its encoder agree).
#include <memory>
#include <string>
#include <vector>

#include "formats/safetensors/internal.h"
#include "fuzz_checks.h"
#include "fuzz_util.h"
#include "mem_env.h"
#include "tensorsafe/formats/btf.h"
#include "tensorsafe/formats/detect.h"
#include "tensorsafe/formats/gguf.h"
#include "tensorsafe/formats/npy.h"
#include "tensorsafe/formats/npz.h"
#include "tensorsafe/formats/safetensors.h"
#include "tensorsafe/formats/tenbin.h"
#include "tensorsafe/formats/zio.h"

namespace tensorsafe::fuzz {
namespace {

// The input copied into an exactly sized heap block that the decoded tensors
// share, as a mapping would be.
std::shared_ptr<std::vector<std::byte>> Own(std::span<const std::byte> data) {
  return std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
}

// Encoders may refuse what a decoder accepted (a dtype or name the format's
// writer does not produce), but only with these codes.
bool AcceptableRefusal(const Status& s) {
  return s.code() == StatusCode::kUnsupported || s.code() == StatusCode::kInvalidArgument ||
         s.code() == StatusCode::kLimitExceeded;
}

template <typename DecodeFn, typename EncodeFn>
void DecodeReencode(std::string_view codec, std::span<const std::byte> data, DecodeFn decode, EncodeFn encode,
                    bool same_order = true) {
  auto owner = Own(data);
  Result<TensorSet> set = decode(std::span<const std::byte>(*owner), owner);
  // Decoders never report I/O or internal errors for bytes in memory.
  if (!set.ok()) {
    const StatusCode c = set.status().code();
    TS_FUZZ_CHECK(c == StatusCode::kCorruption || c == StatusCode::kUnsupported || c == StatusCode::kLimitExceeded ||
                      c == StatusCode::kInvalidArgument,
                  std::string(codec) + ": unexpected error code: " + Describe(set.status()));
    return;
  }
  CheckSetInvariants(*set, codec);
  Result<std::string> bytes = encode(*set);
  if (!bytes.ok()) {
    TS_FUZZ_CHECK(AcceptableRefusal(bytes.status()),
                  std::string(codec) + ": re-encoding failed: " + Describe(bytes.status()));
    return;
  }
  auto again_owner = std::make_shared<std::string>(std::move(*bytes));
  Result<TensorSet> again = decode(AsBytes(*again_owner), again_owner);
  TS_FUZZ_CHECK(again.ok(), std::string(codec) + ": its own encoding does not decode: " + Describe(again.status()));
  CheckSetInvariants(*again, codec);
  std::string why;
  TS_FUZZ_CHECK(SameSet(*set, *again, &why, same_order), std::string(codec) + ": decode(encode(set)) != set: " + why);
}

}  // namespace

void CheckSafetensors(std::span<const std::byte> data) {
  // The header parser given only the prefix it needs agrees with the whole-file parse.
  auto whole = safetensors::ParseHeader(data);
  if (data.size() >= 8) {
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<std::uint8_t>(data[i])} << (8 * i);
    if (n <= data.size() - 8) {
      auto prefix = safetensors::ParseHeader(data.first(8 + n), data.size());
      TS_FUZZ_CHECK(Describe(prefix.status()) == Describe(whole.status()),
                    "safetensors: prefix parse " + Describe(prefix.status()) + " vs whole " + Describe(whole.status()));
      if (whole.ok()) TS_FUZZ_CHECK(prefix->tensors.size() == whole->tensors.size(), "prefix parse differs");
    }
  }
  // The fast path (writers' form, no JSON parser) reads exactly as the general reader.
  auto general = safetensors::internal::ParseHeaderWith(data, data.size(), {}, /*fast_path=*/false);
  TS_FUZZ_CHECK(Describe(general.status()) == Describe(whole.status()),
                "safetensors: fast path " + Describe(whole.status()) + " vs general " + Describe(general.status()));
  if (whole.ok()) {
    TS_FUZZ_CHECK(general->metadata_json == whole->metadata_json && general->data_start == whole->data_start &&
                      general->tensors.size() == whole->tensors.size(),
                  "safetensors: fast path and general reader disagree");
    for (std::size_t i = 0; i < whole->tensors.size(); ++i) {
      const TensorInfo& a = whole->tensors[i];
      const TensorInfo& b = general->tensors[i];
      TS_FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.data_offset == b.data_offset &&
                        a.data_length == b.data_length,
                    "safetensors: fast path and general reader disagree on tensor " + b.name);
    }
  }
  DecodeReencode(
      "safetensors", data,
      [](std::span<const std::byte> b, std::shared_ptr<const void> o) { return safetensors::Decode(b, o, "fuzz"); },
      [](const TensorSet& s) { return safetensors::Encode(s); },
      /*same_order=*/false);  // the writer sorts by dtype, then name
  if (whole.ok()) {
    auto dec = safetensors::Decode(data, nullptr, "fuzz");
    TS_FUZZ_CHECK(dec.ok() && dec->tensors.size() == whole->tensors.size(), "ParseHeader and Decode disagree");
  }
}

void CheckNpy(std::span<const std::byte> data) {
  DecodeReencode(
      "npy", data,
      [](std::span<const std::byte> b, std::shared_ptr<const void> o) { return npy::Decode(b, o, "fuzz.npy"); },
      [](const TensorSet& s) -> Result<std::string> {
        if (s.tensors.size() != 1) return InvalidArgument("not one tensor");
        return npy::Encode(s.tensors[0]);
      });
  // Every void size maps to some dtype when told which.
  npy::ReadOptions o;
  o.void_as = DType::kU8;
  auto owner = Own(data);
  auto r = npy::Decode(*owner, owner, "fuzz.npy", o);
  if (r.ok()) CheckSetInvariants(*r, "npy(void_as)");
}

void CheckNpz(std::span<const std::byte> data) {
  for (bool crc : {true, false}) {
    npz::ReadOptions o;
    o.verify_crc = crc;
    DecodeReencode(
        "npz", data,
        [&](std::span<const std::byte> b, std::shared_ptr<const void> ow) { return npz::Decode(b, ow, "fuzz.npz", o); },
        [](const TensorSet& s) { return npz::Encode(s); });
  }
}

void CheckGguf(std::span<const std::byte> data) {
  DecodeReencode(
      "gguf", data,
      [](std::span<const std::byte> b, std::shared_ptr<const void> o) { return gguf::Decode(b, o, "fuzz.gguf"); },
      [](const TensorSet& s) { return gguf::Encode(s); });
  // ReadHeader, from prefixes of 1, 16 bytes and 1 MiB doubled, agrees with Decode.
  auto owner = Own(data);
  auto whole = gguf::Decode(*owner, owner, "fuzz.gguf");
  MemReadEnv env(data);
  auto file = env.OpenRead("fuzz.gguf");
  TS_FUZZ_CHECK(file.ok(), "gguf: a memory file does not open");
  for (std::uint64_t first : {std::uint64_t{1}, std::uint64_t{16}, std::uint64_t{1} << 20}) {
    gguf::ReadOptions o;
    o.first_read_bytes = first;
    auto head = gguf::ReadHeader(**file, o);
    TS_FUZZ_CHECK(Describe(head.status()) == Describe(whole.status()),
                  "gguf: ReadHeader says " + Describe(head.status()) + ", Decode " + Describe(whole.status()));
    if (!whole.ok()) continue;
    TS_FUZZ_CHECK(head->metadata_json == whole->metadata_json, "gguf: ReadHeader's metadata differs");
    TS_FUZZ_CHECK(head->tensors.size() == whole->tensors.size(), "gguf: ReadHeader's tensor count differs");
    for (std::size_t i = 0; i < whole->tensors.size(); ++i) {
      const TensorInfo &a = head->tensors[i].info, &b = whole->tensors[i].info;
      TS_FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.data_offset == b.data_offset &&
                        a.data_length == b.data_length && a.metadata_json == b.metadata_json &&
                        head->tensors[i].data.empty(),
                    "gguf: ReadHeader's tensor " + std::to_string(i) + " differs");
    }
  }
}

void CheckTenbin(std::span<const std::byte> data) {
  for (bool zero_padding : {false, true}) {
    tenbin::ReadOptions o;
    o.require_zero_padding = zero_padding;
    DecodeReencode(
        "tenbin", data,
        [&](std::span<const std::byte> b, std::shared_ptr<const void> ow) {
          return tenbin::Decode(b, ow, "fuzz.ten", o);
        },
        [](const TensorSet& s) {
          tenbin::WriteOptions w;
          w.max_rank = 64;
          return tenbin::Encode(s, w);
        });
  }
  // The chunk API agrees with the whole-buffer decoder.
  auto owner = Own(data);
  auto whole = tenbin::Decode(*owner, owner, "fuzz.ten");
  auto chunks = tenbin::SplitChunks(*owner, "fuzz.ten");
  if (chunks.ok()) {
    auto pairs = tenbin::DecodePayloads(*chunks, owner, "fuzz.ten");
    TS_FUZZ_CHECK(pairs.ok() == whole.ok(), "tenbin: SplitChunks+DecodePayloads " + Describe(pairs.status()) +
                                                " vs Decode " + Describe(whole.status()));
    if (pairs.ok()) {
      std::string why;
      TS_FUZZ_CHECK(SameSet(*pairs, *whole, &why), "tenbin: chunk API vs Decode: " + why);
    }
  } else {
    TS_FUZZ_CHECK(!whole.ok(), "tenbin: Decode accepted what SplitChunks refused: " + Describe(chunks.status()));
  }
}

void CheckBtf(std::span<const std::byte> data) {
  for (bool strict : {false, true}) {
    btf::ReadOptions o;
    o.require_aligned_offsets = strict;
    o.accept_documented_coo_layout = !strict;
    DecodeReencode(
        "btf", data,
        [&](std::span<const std::byte> b, std::shared_ptr<const void> ow) { return btf::Decode(b, ow, "fuzz.btf", o); },
        [](const TensorSet& s) { return btf::Encode(s); });
  }
}

void CheckZio(std::span<const std::byte> data) {
  DecodeReencode(
      "zio", data,
      [](std::span<const std::byte> b, std::shared_ptr<const void> o) { return zio::Decode(b, o, "fuzz.zio"); },
      [](const TensorSet& s) { return zio::Encode(s); });
  // The message layer: an unpacked message packs back to the same bytes
  // unless it used a long length marker for a short part.
  auto owner = Own(data);
  auto m = zio::Unpack(*owner, owner, "fuzz.zio");
  if (!m.ok()) return;
  auto frames = zio::EncodeFrames(*m);
  TS_FUZZ_CHECK(frames.ok(), "zio: a decoded message does not re-encode: " + Describe(frames.status()));
  std::vector<std::span<const std::byte>> views;
  for (const auto& f : *frames) views.push_back(AsBytes(f));
  auto m2 = zio::DecodeFrames(views, nullptr, "fuzz.zio");
  TS_FUZZ_CHECK(m2.ok(), "zio: its own frames do not decode: " + Describe(m2.status()));
  TS_FUZZ_CHECK(m2->level == m->level && m2->form == m->form && m2->label == m->label && m2->origin == m->origin &&
                    m2->granule == m->granule && m2->seqno == m->seqno && m2->payload.size() == m->payload.size(),
                "zio: frames round trip changed the message");
  for (std::size_t i = 0; i < m->payload.size(); ++i) {
    TS_FUZZ_CHECK(AsText(m->payload[i]) == AsText(m2->payload[i]), "zio: payload " + std::to_string(i) + " changed");
  }
}

}  // namespace tensorsafe::fuzz
