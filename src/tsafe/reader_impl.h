// Reader::Impl, the state and steps of the .tsafe reader, shared by its two
// files: reader_index.cc (byte access, open, the index walk, lookup and the
// entry checks of docs/FORMAT.md §8) and reader.cc (tensor data: Get,
// ReadInto, ReadSlice, Verify; the public Reader methods). Internal.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "io/parallel_read.h"
#include "tensorsafe/env.h"
#include "tensorsafe/reader.h"
#include "tsafe/layout.h"
#include "util/aligned_alloc.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe::internal {

// Names an entry in messages. The text is built only when a check fails: on
// the hot paths (Find, Names, the eager open check) formatting a label per
// entry cost more than decoding the entry.
struct EntryLabel {
  enum class Kind { kOrdinal, kIndexOffset };
  Kind kind;
  std::uint64_t n;
  std::string str() const { return kind == Kind::kOrdinal ? "entry " + Str(n) : "index entry at offset " + Str(n); }
  std::string with(std::string_view name) const { return str() + " " + QuoteName(name); }
};
inline EntryLabel Ordinal(std::uint64_t i) { return {EntryLabel::Kind::kOrdinal, i}; }

// Entries are checked with a rank of at most 255 (the spec maximum) on the
// stack rather than a Shape on the heap.
inline constexpr std::size_t kMaxDims = 255;

}  // namespace tensorsafe::internal

namespace tensorsafe {

class Reader::Impl {
 public:
  using EntryLabel = internal::EntryLabel;

  Impl(std::string name, const ReaderOptions& opt) : name_(std::move(name)), opt_(opt) {}
  Status View(std::uint64_t off, std::uint64_t len, std::vector<std::byte>& scratch,
              std::span<const std::byte>* out) const;
  Status IndexView(std::span<const std::byte> idx, std::uint64_t rel, std::uint64_t len,
                   std::vector<std::byte>& scratch, std::span<const std::byte>* out) const;
  Status LoadIndex(std::vector<std::byte>* buf) const;

  Status Err(Status s) const { return s.WithContext(name_); }
  Status Open();
  Status CheckPointer() const;

  std::uint64_t IndexAbs(std::uint64_t rel) const { return ptr_.index_offset + rel; }
  // `check`: CheckEntry after decoding; Walk skips it over a trusted index.
  Status DecodeEntryAt(std::span<const std::byte> idx, std::uint64_t rel, std::vector<std::byte>& scratch,
                       internal::EntryView* e, const EntryLabel& label, bool check = true) const;
  Status CheckCooSizes(const internal::EntryView& e, const EntryLabel& label) const;
  Status CheckCooIndices(const internal::EntryView& e, const EntryLabel& label) const;
  Status CheckEntry(const internal::EntryView& e, const EntryLabel& label) const;
  static TensorInfo ToInfo(const internal::EntryView& e);
  Result<Tensor> TensorOf(TensorInfo info) const;
  Status Lookup(std::span<const std::byte> idx, std::string_view name, std::vector<std::byte>& scratch,
                internal::EntryView* e, std::uint64_t* rel) const;
  Result<TensorInfo> Find(std::string_view name) const;

  // ---- sequential walk ----
  // Visits entries in order; `fn` may set *stop to end the walk early.
  using WalkFn =
      std::function<Status(std::uint64_t ordinal, std::uint64_t rel, const internal::EntryView&, bool* stop)>;
  Status Walk(const WalkFn& fn) const { return Walk(index_, fn); }
  Status Walk(std::span<const std::byte> idx, const WalkFn& fn) const;
  Status Refill(std::uint64_t rel, std::uint64_t remain, std::vector<std::byte>& window, std::uint64_t* win_start,
                std::uint64_t need = 0) const;
  Status CheckSection(std::span<const std::byte> idx, const char* what, std::uint64_t rel, std::uint64_t len,
                      std::uint64_t want) const;
  Status CheckWholeIndex(std::span<const std::byte> idx) const;
  struct NamedEntry {
    std::uint64_t hash, rel;  // NameHash(name); offset in the entries section
    std::string_view name;
  };
  Status CheckHashTable(std::span<const std::byte> table, const std::vector<NamedEntry>& named,
                        std::uint64_t* used) const;

  Result<std::string> Metadata() const { return Metadata(index_); }
  Result<std::string> Metadata(std::span<const std::byte> idx) const;
  Result<Tensor> Get(std::string_view name) const;
  Status CopyOut(std::uint64_t off, std::span<std::byte> out) const;
  Status ReadInto(std::string_view name, std::span<std::byte> out, bool verify) const;
  Status ReadSlice(std::string_view name, std::span<const SliceDim> slice, std::span<std::byte> out) const;
  Status Verify(std::vector<std::string>* damaged) const;
  FileSummary Summary() const;

  std::string name_;
  ReaderOptions opt_;
  std::shared_ptr<const void> owner_;
  std::span<const std::byte> bytes_;
  std::unique_ptr<RandomAccessFile> file_;
  // Mapped files only: positional reads of the mapped inode, for CopyOut.
  std::unique_ptr<RandomAccessFile> copy_file_;
  static constexpr std::uint64_t kPreadCopyBytes = std::uint64_t{1} << 20;
  std::uint64_t size_ = 0;
  internal::Identity id_;
  internal::IndexPointer ptr_;
  std::uint64_t sequence_ = 0;
  int live_slot_ = -1;
  bool via_trailer_ = false;
  internal::IndexRoot root_;
  // The whole index when it is in memory: a view of the mapping, or (pread
  // mode) index_cache_ when the index was loaded for the eager check and is
  // at most kKeepIndexBytes. Empty otherwise. Set by Open(), then constant.
  std::span<const std::byte> index_;
  std::vector<std::byte> index_cache_;
  // index_ is index_cache_, checked whole by Open(): memory no other process
  // can change, so a walk decodes its entries without checking each again.
  bool trusted_index_ = false;
  static constexpr std::uint64_t kKeepIndexBytes = std::uint64_t{16} << 20;
};

}  // namespace tensorsafe
