// The PyTorch checkpoint reader under fuzzing (fuzz_checks.h, CheckPytorch).
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/npy/zip.h"
#include "formats/pytorch/pickle.h"
#include "fuzz_checks.h"
#include "fuzz_util.h"
#include "io/string_file.h"
#include "tensorsafe/formats/pytorch.h"
#include "util/aligned_alloc.h"

#include <nlohmann/json.hpp>

namespace tensorsafe::fuzz {
namespace {

// Small limits: the properties are the same, and no input may make the
// harness allocate more than a few tens of MiB (run.sh caps one allocation
// at 512 MiB).
pytorch::ReadOptions Options(bool crc) {
  pytorch::ReadOptions o;
  o.verify_crc = crc;
  o.limits.max_pickle_bytes = 1 << 20;
  o.limits.max_values = 1 << 16;
  o.limits.max_memo_entries = 1 << 14;
  o.limits.max_depth = 64;
  o.limits.max_container_items = 1 << 14;
  o.limits.max_materialized_bytes = 1 << 20;
  o.limits.max_metadata_bytes = 1 << 20;
  o.limits.max_members = 1 << 12;
  return o;
}

using internal::StringFile;

// Decodes `bytes` from a 64-byte aligned copy (as a mapping); checks the
// code and the invariants. `thorough` also decodes it again (the same
// verdict and set) and with CRCs checked.
void DecodeAndCheck(std::string_view bytes, std::string_view what, bool thorough) {
  std::shared_ptr<std::byte> buf = internal::AllocAligned(bytes.size() + 1);
  if (!bytes.empty()) std::memcpy(buf.get(), bytes.data(), bytes.size());
  const std::span<const std::byte> view(buf.get(), bytes.size());
  Result<TensorSet> plain = pytorch::Decode(view, buf, "fuzz.pt", Options(false));
  const std::string label = "pytorch (" + std::string(what) + ")";
  if (!plain.ok()) {
    const StatusCode c = plain.status().code();
    TS_FUZZ_CHECK(c == StatusCode::kCorruption || c == StatusCode::kUnsupported || c == StatusCode::kLimitExceeded,
                  label + ": unexpected error code: " + Describe(plain.status()));
    TS_FUZZ_CHECK(plain.status().message().rfind("fuzz.pt: ", 0) == 0,
                  label + ": the message does not start with the file: " + plain.status().message());
  } else {
    CheckSetInvariants(*plain, label);
  }
  if (!thorough) return;
  Result<TensorSet> again = pytorch::Decode(view, buf, "fuzz.pt", Options(false));
  Result<TensorSet> crc = pytorch::Decode(view, buf, "fuzz.pt", Options(true));
  if (!plain.ok()) {
    TS_FUZZ_CHECK(!again.ok() && again.status().message() == plain.status().message(),
                  label + ": two decodes disagree: " + Describe(again.status()));
    TS_FUZZ_CHECK(!crc.ok(), label + ": checking CRCs accepted what the plain decode refused");
    return;
  }
  TS_FUZZ_CHECK(again.ok(), label + ": the second decode failed: " + Describe(again.status()));
  std::string why;
  TS_FUZZ_CHECK(SameSet(*plain, *again, &why), label + ": two decodes give different sets: " + why);
  if (crc.ok()) {
    TS_FUZZ_CHECK(SameSet(*plain, *crc, &why), label + ": with CRCs checked: " + why);
  } else {
    TS_FUZZ_CHECK(crc.status().code() == StatusCode::kCorruption &&
                      crc.status().message().find("CRC-32 mismatch") != std::string::npos,
                  label + ": checking CRCs refused with " + Describe(crc.status()));
  }
}

struct Stored {
  std::string key, data;
  std::uint64_t numel;
};

// The storages a pickle declares, with data: a repeating pattern of the
// declared size (declarations beyond 1 MiB in all are left out, so their
// tensors are refused as missing).
std::vector<Stored> Storages(std::span<const std::byte> pkl, pytorch::internal::PidForm form) {
  pytorch::Limits lim = Options(false).limits;
  pytorch::internal::Unpickler u(pkl, "fuzz", lim, form);
  std::size_t end = 0;
  std::vector<Stored> out;
  if (!u.Load(0, &end).ok()) return out;
  std::uint64_t total = 0;
  for (const auto& s : u.tables().storages) {
    if (s.view_of || s.nbytes > (1 << 20) - total) continue;
    total += s.nbytes;
    std::string data(s.nbytes, '\0');
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
    out.push_back({s.key, std::move(data), s.numel});
  }
  return out;
}

std::string ZipAround(std::string_view pkl, bool big_endian) {
  StringFile f;
  internal::zip::Writer w(f);
  auto add = [&](const std::string& name, std::string_view data) {
    const std::span<const std::byte> piece[1] = {AsBytes(data)};
    (void)w.Add(name, piece, internal::zip::kStored);
  };
  add("archive/data.pkl", pkl);
  add("archive/version", "3\n");
  if (big_endian) add("archive/byteorder", "big");
  for (const Stored& st : Storages(AsBytes(pkl), pytorch::internal::PidForm::kZip)) {
    add("archive/data/" + st.key, st.data);
  }
  (void)w.Finish();
  return f.str();
}

std::string LegacyAround(std::string_view pkl) {
  const auto storages = Storages(AsBytes(pkl), pytorch::internal::PidForm::kLegacy);
  std::string s("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.\x80\x02}.");
  s += pkl;
  s += "\x80\x02](";
  for (const auto& st : storages) {
    const std::uint32_t n = static_cast<std::uint32_t>(st.key.size());
    s += 'X';
    s.append(reinterpret_cast<const char*>(&n), 4);
    s += st.key;
  }
  s += "e.";
  for (const auto& st : storages) {
    s.append(reinterpret_cast<const char*>(&st.numel), 8);
    s += st.data;
  }
  return s;
}

}  // namespace

void CheckPytorch(std::span<const std::byte> data) {
  const std::string_view text = AsText(data);
  if (text.substr(0, 2) == "PK" || pytorch::LooksLikeCheckpoint(data)) {
    DecodeAndCheck(text, "file", true);
    return;
  }
  DecodeAndCheck(ZipAround(text, false), "pickle in a zip archive", true);
  DecodeAndCheck(ZipAround(text, true), "pickle in a big-endian zip archive", false);
  DecodeAndCheck(LegacyAround(text), "pickle in a legacy stream", false);
}

// DCP's metadata (fuzz_checks.h, CheckDcpMetadata).
void CheckDcpMetadata(std::span<const std::byte> data) {
  pytorch::Limits limits = Options(false).limits;
  const Result<std::string> a = pytorch::DcpMetadataJson(data, "fuzz/.metadata", limits);
  const Result<std::string> b = pytorch::DcpMetadataJson(data, "fuzz/.metadata", limits);
  TS_FUZZ_CHECK(a.ok() == b.ok() && (a.ok() ? *a == *b : a.status().message() == b.status().message()),
                "two reads of one input differ");
  if (!a.ok()) {
    const StatusCode c = a.status().code();
    TS_FUZZ_CHECK(c == StatusCode::kCorruption || c == StatusCode::kUnsupported || c == StatusCode::kLimitExceeded,
                  Describe(a.status()));
    TS_FUZZ_CHECK(a.status().message().rfind("fuzz/.metadata", 0) == 0, "the error does not name the file");
    return;
  }
  const auto doc = nlohmann::json::parse(*a, nullptr, false);
  TS_FUZZ_CHECK(doc.is_object() && doc["items"].is_array() && doc["storage"].is_array(), *a);
  for (const auto& it : doc["items"]) {
    if (it["kind"] == "bytes") continue;
    const auto& size = it["size"];
    for (const auto& c : it["chunks"]) {
      TS_FUZZ_CHECK(c["offsets"].size() == size.size() && c["sizes"].size() == size.size(), *a);
      for (std::size_t d = 0; d < size.size(); ++d) {
        const std::int64_t o = c["offsets"][d], s = c["sizes"][d], n = size[d];
        TS_FUZZ_CHECK(o >= 0 && s >= 0 && o <= n && s <= n - o, "a chunk outside its tensor");
      }
    }
  }
  // Inside the directory: relative, no NUL, and no ".." component ("..x"
  // is a file name like any other: the first run under libFuzzer found one).
  for (const auto& s : doc["storage"]) {
    const std::string p = s["relative_path"];
    TS_FUZZ_CHECK(!p.empty() && p[0] != '/' && p.find('\0') == std::string::npos, "a path outside: " + p);
    for (std::size_t at = 0; at <= p.size();) {
      const std::size_t end = std::min(p.find('/', at), p.size());
      TS_FUZZ_CHECK(p.compare(at, end - at, "..") != 0, "a path outside: " + p);
      at = end + 1;
    }
  }
}

}  // namespace tensorsafe::fuzz
