#include "support/tsafe_image.h"

#include <cstring>
#include <span>

#include "util/hash.h"

namespace tensorsafe::testing {
namespace {
std::uint64_t H(const std::string& s, std::uint64_t off, std::uint64_t len) {
  return internal::Hash64(std::string_view(s).substr(off, len));
}
}  // namespace

TsafeImage::TsafeImage(std::string bytes) : bytes_(std::move(bytes)) {
  bool slot_used = false;
  for (int i = 0; i < 48; ++i) slot_used |= bytes_[32 + i] != 0;
  const std::uint64_t p = slot_used ? 32 + 8 : bytes_.size() - 48;
  index_offset_ = Get64(p + 8);
  index_length_ = Get64(p + 16);
}

std::uint64_t TsafeImage::hash() const { return index_offset_ + Get64(index_offset_ + 40); }
std::uint64_t TsafeImage::metadata() const { return index_offset_ + Get64(index_offset_ + 64); }

std::uint64_t TsafeImage::entry(std::size_t i) const {
  std::uint64_t off = entries();
  for (std::size_t k = 0; k < i; ++k) off += Get32(off);
  return off;
}

std::uint64_t TsafeImage::entry_name(std::size_t i) const {
  const std::uint64_t e = entry(i);
  return e + 40 + 8 * static_cast<std::uint8_t>(bytes_[e + 10]);
}

std::uint64_t TsafeImage::HashRange(std::uint64_t off, std::uint64_t len) const { return H(bytes_, off, len); }

std::uint64_t TsafeImage::Get64(std::uint64_t off) const {
  std::uint64_t v;
  std::memcpy(&v, bytes_.data() + off, 8);
  return v;
}
std::uint32_t TsafeImage::Get32(std::uint64_t off) const {
  std::uint32_t v;
  std::memcpy(&v, bytes_.data() + off, 4);
  return v;
}
void TsafeImage::Set64(std::uint64_t off, std::uint64_t v) { std::memcpy(bytes_.data() + off, &v, 8); }
void TsafeImage::Set32(std::uint64_t off, std::uint32_t v) { std::memcpy(bytes_.data() + off, &v, 4); }
void TsafeImage::Set16(std::uint64_t off, std::uint16_t v) { std::memcpy(bytes_.data() + off, &v, 2); }
void TsafeImage::Set8(std::uint64_t off, std::uint8_t v) { bytes_[off] = static_cast<char>(v); }

void TsafeImage::Reseal(bool identity, bool entries_too, bool sections) {
  if (identity) Set64(24, H(bytes_, 0, 24));
  const std::uint64_t r = root();
  const std::uint64_t count = Get64(r + 8);
  if (entries_too) {
    std::uint64_t off = entries();
    const std::uint64_t end = entries() + Get64(r + 24);
    for (std::uint64_t i = 0; i < count && off + 8 <= end; ++i) {
      const std::uint32_t len = Get32(off);
      if (len < 8 || off + len > bytes_.size()) break;
      Set32(off + 4, static_cast<std::uint32_t>(H(bytes_, off + 8, len - 8)));
      off += len;
    }
  }
  if (sections) {
    Set64(r + 32, H(bytes_, entries(), Get64(r + 24)));
    Set64(r + 56, H(bytes_, hash(), 8 * Get64(r + 48)));
    Set64(r + 80, H(bytes_, metadata(), Get64(r + 72)));
  }
  const std::uint64_t root_sum = H(bytes_, r, 128);
  bool slot_used = false;
  for (int i = 0; i < 48; ++i) slot_used |= bytes_[32 + i] != 0;
  if (slot_used) {
    Set64(32 + 32, root_sum);
    Set64(32 + 40, H(bytes_, 32, 40));
  }
  const std::uint64_t t = trailer();
  if (t + 48 <= bytes_.size()) {
    Set64(t + 24, root_sum);
    Set64(t + 32, H(bytes_, t, 32));
  }
}

void TsafeImage::ClearSlots() { std::memset(bytes_.data() + 32, 0, 96); }

}  // namespace tensorsafe::testing
