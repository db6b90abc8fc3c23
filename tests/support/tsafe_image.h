// A .tsafe file held in memory for surgery: tests change one field, then
// Reseal() recomputes every checksum that covers it, so the reader gets past
// the checksums to the check under test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tensorsafe::testing {

class TsafeImage {
 public:
  explicit TsafeImage(std::string bytes);

  std::string& bytes() { return bytes_; }
  std::size_t size() const { return bytes_.size(); }

  // Offsets (absolute) of the live index found through slot 0 (or the trailer).
  std::uint64_t index_offset() const { return index_offset_; }
  std::uint64_t index_length() const { return index_length_; }
  std::uint64_t root() const { return index_offset_; }
  std::uint64_t entries() const { return index_offset_ + 128; }
  std::uint64_t hash() const;
  std::uint64_t metadata() const;
  std::uint64_t trailer() const { return index_offset_ + index_length_; }
  // Absolute offset of entry i (walking entry lengths).
  std::uint64_t entry(std::size_t i) const;
  // Absolute offset of entry i's name / metadata-length field.
  std::uint64_t entry_name(std::size_t i) const;

  // XXH3-64 of bytes [off, off + len), e.g. to fix a data checksum.
  std::uint64_t HashRange(std::uint64_t off, std::uint64_t len) const;
  std::uint64_t Get64(std::uint64_t off) const;
  std::uint32_t Get32(std::uint64_t off) const;
  void Set64(std::uint64_t off, std::uint64_t v);
  void Set32(std::uint64_t off, std::uint32_t v);
  void Set16(std::uint64_t off, std::uint16_t v);
  void Set8(std::uint64_t off, std::uint8_t v);

  // Recomputes, in dependency order: identity checksum, every entry check,
  // the entries / hash / metadata checksums in the root, the root checksum in
  // slot 0 and the trailer, the slot and trailer checksums. Fields that
  // locate the index (index_offset/length) are taken from the image as is.
  void Reseal(bool identity = true, bool entries = true, bool sections = true);
  // Makes the file a streamed one: both slots zero.
  void ClearSlots();

 private:
  std::string bytes_;
  std::uint64_t index_offset_ = 0;
  std::uint64_t index_length_ = 0;
};

}  // namespace tensorsafe::testing
