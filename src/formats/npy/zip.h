// A small ZIP reader and writer for .npz (APPNOTE.TXT 6.3: local headers,
// central directory, zip64).
//
// Hand-written rather than libzip/minizip: Debian's libzip reads through its
// own file layer, so a stored member cannot be served as a view of our
// mapping, and its writer buffers or re-reads what we can stream once. An npz
// needs only stored and deflated members, which zlib covers; the container
// logic is a few hundred lines and every length in it is checked here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorsafe/env.h"
#include "tensorsafe/status.h"

namespace tensorsafe::internal::zip {

inline constexpr std::uint16_t kStored = 0;
inline constexpr std::uint16_t kDeflated = 8;

struct Entry {
  std::string name;
  std::uint16_t flags = 0;
  std::uint16_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t size = 0;  // uncompressed
  std::uint64_t local_offset = 0;
  std::uint64_t data_offset = 0;  // after the local header, name and extra
};

// Reads the end records and the central directory of `file`, checks every
// local header against its central entry and that members do not overlap.
// Errors name `where`: kCorruption, kUnsupported (multi-disk, encryption,
// methods other than stored/deflated), kLimitExceeded (more than max_entries).
Result<std::vector<Entry>> ReadDirectory(std::span<const std::byte> file, const std::string& where,
                                         std::uint64_t max_entries);

// The member's uncompressed bytes: a view of `file` for stored members, else
// inflated into `*buffer`. Checks the size and CRC-32 (when verify_crc).
Result<std::span<const std::byte>> Extract(std::span<const std::byte> file, const Entry& e, bool verify_crc,
                                           std::shared_ptr<std::byte>* buffer, const std::string& where);

std::uint32_t Crc32(std::uint32_t crc, std::span<const std::byte> bytes);

// Streams members into a seekable file. Like Python's zipfile as NumPy uses
// it (force_zip64), every local header carries a zip64 size field, so a
// member's size need not be known before its bytes; the header is patched
// after. Timestamps are the DOS epoch 1980-01-01 so output is deterministic.
class Writer {
 public:
  explicit Writer(WritableFile& file) : file_(file) {}
  // Test hook: use zip64 records wherever they are allowed.
  void set_force_zip64(bool v) { force_zip64_ = v; }
  // Adds a member whose bytes are the concatenation of `pieces`. `level` is a
  // zlib level for kDeflated (-1 = zlib's default, as Python uses).
  Status Add(const std::string& name, std::span<const std::span<const std::byte>> pieces, std::uint16_t method,
             int level = -1);
  // Writes the central directory and end records.
  Status Finish();

 private:
  Status Patch(const Entry& e);
  WritableFile& file_;
  std::vector<Entry> entries_;
  bool force_zip64_ = false;
};

}  // namespace tensorsafe::internal::zip
