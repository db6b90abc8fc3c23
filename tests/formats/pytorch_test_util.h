// Helpers of the PyTorch checkpoint reader tests (pytorch_test.cc,
// pytorch_hostile_test.cc): the golden files' directory, bytes in an aligned
// buffer as a mapping would hold them, and pickles, archives and legacy
// streams made by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "formats/npy/zip.h"
#include "io/string_file.h"
#include "support/hex.h"
#include "tensorsafe/formats/pytorch.h"
#include "util/aligned_alloc.h"

namespace tensorsafe::pytorch_test {

using testing::Hex;

inline const std::string kPytorchGolden = std::string(TS_SOURCE_DIR) + "/tests/golden/pytorch/";

// Bytes in a 64-byte aligned buffer, as a mapping would hold them.
struct Image {
  explicit Image(const std::string& s) : buf(internal::AllocAligned(s.size() + 1)), size(s.size()) {
    std::memcpy(buf.get(), s.data(), s.size());
  }
  std::span<const std::byte> bytes() const { return {buf.get(), size}; }
  bool Holds(std::span<const std::byte> b) const {
    return b.data() >= buf.get() && b.data() + b.size() <= buf.get() + size;
  }
  std::shared_ptr<std::byte> buf;
  std::size_t size;
};

inline Result<TensorSet> DecodePytorch(const std::string& s, const pytorch::ReadOptions& opt = {},
                                       const std::string& name = "t.pt") {
  auto img = std::make_shared<Image>(s);
  return pytorch::Decode(img->bytes(), img, name, opt);
}

// --- pickles and archives by hand ---------------------------------------------
inline std::string Le32(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
inline std::string Le64(std::uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
inline std::string G(const std::string& module, const std::string& name) { return "c" + module + "\n" + name + "\n"; }
inline std::string U(const std::string& s) { return "X" + Le32(static_cast<std::uint32_t>(s.size())) + s; }
inline std::string I(std::int32_t v) { return "J" + Le32(static_cast<std::uint32_t>(v)); }
inline std::string Tup(const std::vector<std::int32_t>& v) {
  std::string s = "(";
  for (auto x : v) s += I(x);
  return s + "t";
}
inline std::string Pid(const std::string& type, const std::string& key, std::int32_t numel) {
  return "(" + U("storage") + G("torch", type) + U(key) + U("cpu") + I(numel) + "tQ";
}
// _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
inline std::string TensorV2(const std::string& pid, std::int32_t offset, const std::vector<std::int32_t>& size,
                            const std::vector<std::int32_t>& stride) {
  return G("torch._utils", "_rebuild_tensor_v2") + "(" + pid + I(offset) + Tup(size) + Tup(stride) + "\x89" +
         G("collections", "OrderedDict") + ")RtR";
}
inline std::string Proto2(const std::string& body) { return "\x80\x02" + body + "."; }
// {"w": f32 [2] of storage "0"}
inline std::string OneTensorPickle() {
  return Proto2("}(" + U("w") + TensorV2(Pid("FloatStorage", "0", 2), 0, {2}, {1}) + "u");
}

struct Member {
  std::string name;
  std::string data;
  std::uint16_t method = internal::zip::kStored;
};
inline std::string Zip(const std::vector<Member>& members) {
  internal::StringFile f;
  internal::zip::Writer w(f);
  for (const Member& m : members) {
    const std::span<const std::byte> piece[1] = {std::as_bytes(std::span(m.data))};
    EXPECT_TRUE(w.Add(m.name, piece, m.method).ok());
  }
  EXPECT_TRUE(w.Finish().ok());
  return f.str();
}
// A torch.save-like archive: data.pkl first, the version record, storages.
inline std::string Archive(const std::string& pkl, std::vector<Member> storages = {{"data/0", std::string(8, '\1')}}) {
  std::vector<Member> m = {{"archive/data.pkl", pkl}, {"archive/version", "3\n"}};
  for (Member& s : storages) m.push_back({"archive/" + s.name, s.data, s.method});
  return Zip(m);
}
// The legacy stream: magic, protocol, sys_info, the object, the keys, then
// each storage as an 8-byte count and its bytes.
inline std::string Legacy(const std::string& obj, const std::vector<std::pair<std::string, std::string>>& storages,
                          std::uint32_t esize = 4) {
  std::string s = Proto2(std::string("\x8a\x0a") + "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19");
  s += Proto2("M\xe9\x03");
  s += Proto2("}" + U("little_endian") + "\x88s");
  s += obj;
  std::string keys = "](";
  for (const auto& st : storages) keys += U(st.first);
  s += Proto2(keys + "e");
  for (const auto& st : storages) s += Le64(st.second.size() / esize) + st.second;
  return s;
}
inline std::string LegacyPid(const std::string& key, std::int32_t numel) {
  return "(" + U("storage") + G("torch", "FloatStorage") + U(key) + U("cpu") + I(numel) + "NtQ";
}

}  // namespace tensorsafe::pytorch_test
