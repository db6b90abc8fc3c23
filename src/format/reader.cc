// The .tsafe reader. The order of checks follows the numbered reader checks of
// docs/FORMAT.md §8; each failure names the file, the field and the numbers.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "format/layout.h"
#include "format/reader_internal.h"
#include "io/env.h"
#include "tensorsafe/reader.h"
#include "util/checked_math.h"
#include "util/endian.h"
#include "util/hash.h"
#include "util/text.h"

namespace tensorsafe {

using internal::CheckedAdd;
using internal::QuoteName;

namespace {

std::string N(std::uint64_t v) { return std::to_string(v); }

// Names an entry in messages. The text is built only when a check fails: on
// the hot paths (Find, Names, the eager open check) formatting a label per
// entry cost more than decoding the entry.
struct EntryLabel {
  enum class Kind { kOrdinal, kIndexOffset };
  Kind kind;
  std::uint64_t n;
  std::string str() const {
    return kind == Kind::kOrdinal ? "entry " + N(n) : "index entry at offset " + N(n);
  }
  std::string with(std::string_view name) const { return str() + " " + QuoteName(name); }
};
EntryLabel Ordinal(std::uint64_t i) { return {EntryLabel::Kind::kOrdinal, i}; }

// Entries are checked with a rank of at most 255 (the spec maximum) on the
// stack rather than a Shape on the heap.
constexpr std::size_t kMaxDims = 255;

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

// A 64-byte aligned heap buffer, shared so a Tensor can own it.
std::shared_ptr<std::byte> AllocAligned(std::uint64_t n) {
  auto* p = static_cast<std::byte*>(::operator new[](std::max<std::uint64_t>(n, 1), std::align_val_t{64}));
  return std::shared_ptr<std::byte>(p, AlignedDelete{});
}

}  // namespace

class Reader::Impl {
 public:
  Impl(std::string name, const ReaderOptions& opt) : name_(std::move(name)), opt_(opt) {}

  // ---- byte access: a view of the mapping, or a pread into scratch ----
  Status View(std::uint64_t off, std::uint64_t len, std::vector<std::byte>& scratch,
              std::span<const std::byte>* out) const {
    if (!internal::RangeWithin(off, len, size_)) {
      return Err(Corruption("read of " + N(len) + " bytes at offset " + N(off) +
                            " runs past the end of the file (" + N(size_) + " bytes)"));
    }
    if (file_ == nullptr) {
      *out = bytes_.subspan(off, len);
      return Status::OK();
    }
    scratch.resize(len);
    TS_RETURN_IF_ERROR(file_->ReadAt(off, scratch));
    *out = scratch;
    return Status::OK();
  }

  // Bytes of the index at `rel` (relative to its start): from `idx` when the
  // whole index is in memory (always for a mapping; for pread once it has
  // been loaded), else a pread.
  Status IndexView(std::span<const std::byte> idx, std::uint64_t rel, std::uint64_t len,
                   std::vector<std::byte>& scratch, std::span<const std::byte>* out) const {
    if (idx.empty()) return View(IndexAbs(rel), len, scratch, out);
    if (!internal::RangeWithin(rel, len, idx.size())) {
      return Err(Corruption("read of " + N(len) + " bytes at index offset " + N(rel) +
                            " runs past the end of the index (" + N(idx.size()) + " bytes)"));
    }
    *out = idx.subspan(rel, len);
    return Status::OK();
  }

  // Reads the whole index into memory (pread mode), for the checks that look
  // at all of it.
  Status LoadIndex(std::vector<std::byte>* buf) const {
    buf->resize(ptr_.index_length);
    return file_->ReadAt(ptr_.index_offset, *buf);
  }

  Status Err(Status s) const { return s.WithContext(name_); }

  // ---- open: FORMAT.md §8 checks R1..R14 ----
  Status Open() {
    std::vector<std::byte> scratch;
    if (size_ < internal::kHeaderSize + internal::kTrailerSize) {
      return Err(Corruption("file is " + N(size_) + " bytes, smaller than the " +
                            N(internal::kHeaderSize + internal::kTrailerSize) +
                            "-byte minimum (header and trailer)"));
    }
    std::span<const std::byte> hdr;
    TS_RETURN_IF_ERROR(View(0, internal::kHeaderSize, scratch, &hdr));
    TS_RETURN_IF_ERROR(Err(internal::DecodeIdentity(hdr, &id_)));
    internal::Slot slots[2];
    internal::SlotState st[2];
    for (int i = 0; i < 2; ++i) {
      st[i] = internal::DecodeSlot(hdr.subspan(internal::SlotOffset(i), internal::kSlotSize), &slots[i]);
    }
    int live = -1;
    for (int i = 0; i < 2; ++i) {
      if (st[i] != internal::SlotState::kValid) continue;
      if (live < 0 || slots[i].sequence > slots[live].sequence) live = i;
    }
    if (st[0] == internal::SlotState::kValid && st[1] == internal::SlotState::kValid &&
        slots[0].sequence == slots[1].sequence) {
      return Err(Corruption("both header slots have sequence " + N(slots[0].sequence)));
    }
    if (live < 0 && (st[0] == internal::SlotState::kTorn || st[1] == internal::SlotState::kTorn)) {
      return Err(Corruption("no valid header slot: slot checksums fail"));
    }
    std::span<const std::byte> tr;
    if (live >= 0) {
      ptr_ = slots[live].ptr;
      sequence_ = slots[live].sequence;
      live_slot_ = live;
    } else {
      // Both slots empty: a streamed file, described by its trailer alone.
      via_trailer_ = true;
      TS_RETURN_IF_ERROR(View(size_ - internal::kTrailerSize, internal::kTrailerSize, scratch, &tr));
      TS_RETURN_IF_ERROR(Err(internal::DecodeTrailer(tr, &ptr_)));
    }
    TS_RETURN_IF_ERROR(CheckPointer());
    std::span<const std::byte> root;
    TS_RETURN_IF_ERROR(View(ptr_.index_offset, internal::kRootSize, scratch, &root));
    const std::uint64_t root_sum = internal::Hash64(root);
    if (root_sum != ptr_.index_checksum) {
      return Err(Corruption("index root checksum mismatch at offset " + N(ptr_.index_offset) +
                            ": stored " + N(ptr_.index_checksum) + ", computed " + N(root_sum)));
    }
    TS_RETURN_IF_ERROR(Err(internal::DecodeRoot(root, ptr_.index_length, &root_)));
    if (root_.tensor_count > opt_.limits.max_tensor_count) {
      return Err(LimitExceeded("file has " + N(root_.tensor_count) +
                               " tensors, more than the limit of " + N(opt_.limits.max_tensor_count)));
    }
    if (root_.metadata_length > opt_.limits.max_metadata_bytes) {
      return Err(LimitExceeded("file metadata of " + N(root_.metadata_length) +
                               " bytes exceeds the limit of " + N(opt_.limits.max_metadata_bytes)));
    }
    if (!via_trailer_) {
      // The trailer written with the live index must agree with the slot.
      internal::IndexPointer t;
      TS_RETURN_IF_ERROR(View(ptr_.index_offset + ptr_.index_length, internal::kTrailerSize, scratch, &tr));
      Status s = internal::DecodeTrailer(tr, &t);
      if (!s.ok()) return Err(s.WithContext("trailer after the live index"));
      if (!(t == ptr_)) return Err(Corruption("trailer after the live index disagrees with the header slot"));
    }
    if (file_ == nullptr) index_ = bytes_.subspan(ptr_.index_offset, ptr_.index_length);
    if (ptr_.index_length <= opt_.eager_index_bytes) {
      if (file_ != nullptr) {
        // One read of the whole index rather than a pread per entry and per
        // probe; small indexes stay in memory so Find() needs no syscall
        // for the index.
        TS_RETURN_IF_ERROR(LoadIndex(&index_cache_));
        index_ = index_cache_;
      }
      TS_RETURN_IF_ERROR(CheckWholeIndex(index_));
      if (file_ != nullptr && ptr_.index_length > kKeepIndexBytes) {
        index_ = {};
        std::vector<std::byte>().swap(index_cache_);
      }
    }
    return Status::OK();
  }

  Status CheckPointer() const {
    const auto& p = ptr_;
    if ((p.features & ~internal::kKnownFeatures) != 0) {
      return Err(Unsupported("file requires feature bits " + N(p.features) +
                             " that this reader does not know"));
    }
    if (p.index_offset < internal::kHeaderSize || p.index_offset % 8 != 0) {
      return Err(Corruption("index offset " + N(p.index_offset) +
                            " is inside the header or not a multiple of 8"));
    }
    if (p.index_length < internal::kRootSize || p.index_length % 8 != 0) {
      return Err(Corruption("index length " + N(p.index_length) +
                            " is smaller than the 128-byte root or not a multiple of 8"));
    }
    if (p.index_length > opt_.limits.max_index_bytes) {
      return Err(LimitExceeded("index of " + N(p.index_length) + " bytes exceeds the limit of " +
                               N(opt_.limits.max_index_bytes)));
    }
    auto end = CheckedAdd(p.index_offset, p.index_length);
    auto with_trailer = end ? CheckedAdd(*end, internal::kTrailerSize) : std::nullopt;
    if (!with_trailer || *with_trailer > size_) {
      return Err(Corruption("index at offset " + N(p.index_offset) + " + length " + N(p.index_length) +
                            " + trailer 48 exceeds file size " + N(size_)));
    }
    if (via_trailer_ && *with_trailer != size_) {
      return Err(Corruption("trailer points at an index ending at " + N(*end) +
                            ", not right before the trailer at " + N(size_ - internal::kTrailerSize)));
    }
    return Status::OK();
  }

  std::uint64_t IndexAbs(std::uint64_t rel) const { return ptr_.index_offset + rel; }

  // ---- entries ----
  // Decodes the entry at `rel` (relative to the entries section) and checks it
  // against the file (FORMAT.md §8 R15..R22). `label` names it in messages.
  Status DecodeEntryAt(std::span<const std::byte> idx, std::uint64_t rel, std::vector<std::byte>& scratch,
                       internal::EntryView* e, const EntryLabel& label) const {
    if (rel > root_.entries_length || root_.entries_length - rel < internal::kEntryFixedSize) {
      return Err(Corruption(label.str() + ": offset " + N(rel) + " is outside the entries section of " +
                            N(root_.entries_length) + " bytes"));
    }
    std::span<const std::byte> head;
    TS_RETURN_IF_ERROR(IndexView(idx, root_.entries_offset + rel, 4, scratch, &head));
    const std::uint32_t len = internal::PeekEntryLength(head.data());
    if (len > root_.entries_length - rel) {
      return Err(Corruption(label.str() + ": length " + N(len) + " runs past the entries section (" +
                            N(root_.entries_length - rel) + " bytes remain)"));
    }
    std::span<const std::byte> bytes;
    TS_RETURN_IF_ERROR(IndexView(idx, root_.entries_offset + rel, len, scratch, &bytes));
    Status s = internal::DecodeEntry(bytes, opt_.limits.max_rank, opt_.limits.max_name_bytes, e);
    if (!s.ok()) return Err(s.WithContext(label.str()));
    return CheckEntry(*e, label);
  }

  // FORMAT.md §6.2 (spec 1.1): R30 for COO entries. The indices take
  // 8 x nnz x rank bytes; the values start at the next multiple of the
  // alignment and take the dtype's size of nnz elements; nothing follows.
  Status CheckCooSizes(const internal::EntryView& e, const EntryLabel& label) const {
    if ((ptr_.features & internal::kFeatureCoo) == 0) {
      return Err(Corruption(label.with(e.name) + ": a COO entry in a file whose header does not declare "
                                                 "the sparse feature (bit 0)"));
    }
    auto idx = internal::CheckedMul(e.nnz, e.rank);
    auto idx_bytes = idx ? internal::CheckedMul(*idx, 8) : std::nullopt;
    auto values_at = idx_bytes ? internal::AlignUp(*idx_bytes, id_.alignment) : std::nullopt;
    const std::uint64_t nnz = e.nnz;
    auto values = DenseByteSize(e.dtype, std::span<const std::uint64_t>(&nnz, 1));
    if (!values_at || !values.ok()) {
      return Err(Corruption(label.with(e.name) + ": COO sizes of " + N(e.nnz) + " elements of rank " +
                            N(e.rank) + " overflow"));
    }
    if (e.values_offset != *values_at) {
      return Err(Corruption(label.with(e.name) + ": COO values offset " + N(e.values_offset) + " is not " +
                            N(*values_at) + " (the indices' " + N(*idx_bytes) + " bytes, aligned)"));
    }
    auto total = CheckedAdd(*values_at, *values);
    if (!total || *total != e.data_length) {
      return Err(Corruption(label.with(e.name) + ": data length " + N(e.data_length) + " does not match " +
                            N(e.nnz) + " COO elements of " + std::string(DTypeName(e.dtype)) + " (" +
                            N(total.value_or(0)) + " bytes)"));
    }
    return Status::OK();
  }

  // R42 (Verify): every COO index lies within its dimension, and a tensor
  // marked coalesced has its index rows strictly increasing.
  Status CheckCooIndices(const internal::EntryView& e, const EntryLabel& label) const {
    const std::uint64_t rank = e.rank;
    if (e.nnz == 0 || rank == 0) return Status::OK();
    const std::uint64_t row_bytes = 8 * rank;
    const std::uint64_t rows_per_chunk = std::max<std::uint64_t>(1, (std::uint64_t{1} << 20) / row_bytes);
    std::vector<std::byte> scratch;
    std::vector<std::uint64_t> prev(rank, 0);
    for (std::uint64_t row = 0; row < e.nnz; row += rows_per_chunk) {
      const std::uint64_t n = std::min(rows_per_chunk, e.nnz - row);
      std::span<const std::byte> chunk;
      TS_RETURN_IF_ERROR(View(e.data_offset + row * row_bytes, n * row_bytes, scratch, &chunk));
      for (std::uint64_t r = 0; r < n; ++r) {
        int order = row + r == 0 ? 1 : 0;  // vs the previous row: -1, 0, 1
        for (std::uint64_t d = 0; d < rank; ++d) {
          const std::uint64_t v = internal::Load64(chunk.data() + r * row_bytes + 8 * d);
          if (v >= e.dim(d)) {  // negative i64 values are huge as u64
            return Err(Corruption(label.with(e.name) + ": COO index of element " + N(row + r) + " in dimension " +
                                  N(d) + " is " + std::to_string(static_cast<std::int64_t>(v)) +
                                  ", outside [0, " + N(e.dim(d)) + ")"));
          }
          if (order == 0 && v != prev[d]) order = v > prev[d] ? 1 : -1;
          prev[d] = v;
        }
        if ((e.coo_flags & internal::kCooCoalesced) && order <= 0) {
          return Err(Corruption(label.with(e.name) + ": marked coalesced, but COO element " + N(row + r) +
                                " does not follow element " + N(row + r - 1) + " in order"));
        }
      }
    }
    return Status::OK();
  }

  Status CheckEntry(const internal::EntryView& e, const EntryLabel& label) const {
    if (!internal::IsValidUtf8(e.name)) return Err(Corruption(label.with(e.name) + ": name is not valid UTF-8"));
    if (!e.metadata.empty()) {
      if (e.metadata.size() > opt_.limits.max_metadata_bytes) {
        return Err(LimitExceeded(label.with(e.name) + ": metadata of " + N(e.metadata.size()) +
                                 " bytes exceeds the limit of " + N(opt_.limits.max_metadata_bytes)));
      }
      Status s = internal::ValidateJsonObject(e.metadata, opt_.limits.max_json_depth);
      if (!s.ok()) {
        return Err(Status(s.code() == StatusCode::kLimitExceeded ? s.code() : StatusCode::kCorruption,
                          label.with(e.name) + ": metadata: " + s.message()));
      }
    }
    // DecodeEntry bounds the rank by the limits, and the spec by 255.
    std::uint64_t dims[kMaxDims];
    const std::size_t rank = std::min<std::size_t>(e.rank, kMaxDims);
    for (std::size_t i = 0; i < rank; ++i) dims[i] = e.dim(i);
    const std::span<const std::uint64_t> shape(dims, rank);
    if (e.layout == Layout::kCoo) {
      TS_RETURN_IF_ERROR(CheckCooSizes(e, label));
    } else {
      auto want = DenseByteSize(e.dtype, shape);
      if (!want.ok()) return Err(Corruption(label.with(e.name) + ": " + want.status().message()));
      if (*want != e.data_length) {
      return Err(Corruption(label.with(e.name) + ": data length " + N(e.data_length) +
                            " does not match shape " + ShapeToString(shape) + " of " +
                            std::string(DTypeName(e.dtype)) + " (" + N(*want) + " bytes)"));
      }
    }
    if (e.data_offset % id_.alignment != 0) {
      return Err(Corruption(label.with(e.name) + ": data offset " + N(e.data_offset) +
                            " is not a multiple of the alignment " + N(id_.alignment)));
    }
    auto end = CheckedAdd(e.data_offset, e.data_length);
    if (e.data_offset < internal::kHeaderSize || !end || *end > ptr_.index_offset) {
      return Err(Corruption(label.with(e.name) + ": data offset " + N(e.data_offset) + " + length " +
                            N(e.data_length) + " is outside the data region [128, " +
                            N(ptr_.index_offset) + ")"));
    }
    return Status::OK();
  }

  static TensorInfo ToInfo(const internal::EntryView& e) {
    TensorInfo t;
    t.name = std::string(e.name);
    t.dtype = e.dtype;
    t.layout = e.layout;
    t.nnz = e.nnz;
    t.coo_values_offset = e.values_offset;
    t.coalesced = (e.coo_flags & internal::kCooCoalesced) != 0;
    t.shape.resize(e.rank);
    for (std::size_t i = 0; i < e.rank; ++i) t.shape[i] = e.dim(i);
    t.data_offset = e.data_offset;
    t.data_length = e.data_length;
    t.data_checksum = e.data_checksum;
    t.metadata_json = std::string(e.metadata);
    return t;
  }

  // ---- lookup: FORMAT.md §6.3 ----
  // Finds `name`; *rel receives its entry offset. Returns kNotFound when the
  // probe reaches an empty slot.
  Status Lookup(std::span<const std::byte> idx, std::string_view name, std::vector<std::byte>& scratch,
                internal::EntryView* e, std::uint64_t* rel) const {
    const std::uint64_t cap = root_.hash_capacity;
    if (cap == 0) return Err(NotFound("no tensor named " + QuoteName(name)));
    const std::uint64_t h = internal::NameHash(name);
    const std::uint64_t tag = h >> internal::kSlotPosBits;
    const std::uint64_t mask = cap - 1;
    std::vector<std::byte> slot_scratch;
    for (std::uint64_t probe = 0, i = h & mask; probe < cap; ++probe, i = (i + 1) & mask) {
      std::span<const std::byte> sb;
      TS_RETURN_IF_ERROR(IndexView(idx, root_.hash_offset + 8 * i, 8, slot_scratch, &sb));
      const std::uint64_t slot = internal::Load64(sb.data());
      if (slot == 0) break;
      if ((slot >> internal::kSlotPosBits) != tag) continue;
      const std::uint64_t pos = (slot & ((std::uint64_t{1} << internal::kSlotPosBits) - 1)) - 1;
      // pos < 2^40, so pos * 8 cannot overflow.
      TS_RETURN_IF_ERROR(DecodeEntryAt(idx, pos * 8, scratch, e,
                                       {EntryLabel::Kind::kIndexOffset, root_.entries_offset + pos * 8}));
      if (e->name == name) {
        *rel = pos * 8;
        return Status::OK();
      }
    }
    return Err(NotFound("no tensor named " + QuoteName(name)));
  }

  Result<TensorInfo> Find(std::string_view name) const {
    std::vector<std::byte> scratch;
    internal::EntryView e;
    std::uint64_t rel;
    TS_RETURN_IF_ERROR(Lookup(index_, name, scratch, &e, &rel));
    return ToInfo(e);
  }

  // ---- sequential walk ----
  // Visits entries in order; `fn` may set *stop to end the walk early.
  using WalkFn = std::function<Status(std::uint64_t ordinal, std::uint64_t rel,
                                      const internal::EntryView&, bool* stop)>;
  Status Walk(const WalkFn& fn) const { return Walk(index_, fn); }
  Status Walk(std::span<const std::byte> idx, const WalkFn& fn) const {
    std::vector<std::byte> scratch;
    // In pread mode, read the entries in windows of 1 MiB rather than per entry.
    std::vector<std::byte> window;
    std::uint64_t win_start = 0;
    std::uint64_t rel = 0;
    for (std::uint64_t i = 0; i < root_.tensor_count; ++i) {
      internal::EntryView e;
      if (file_ != nullptr && idx.empty()) {
        // Refill the window so that it holds the whole entry.
        const std::uint64_t remain = root_.entries_length - std::min(rel, root_.entries_length);
        if (remain < internal::kEntryFixedSize) {
          // The message DecodeEntryAt gives for the same defect: both read
          // modes report the same error (fuzz/regressions/tsafe_fuzz/).
          return Err(Corruption(Ordinal(i).str() + ": offset " + N(rel) + " is outside the entries section of " +
                                N(root_.entries_length) + " bytes"));
        }
        if (rel < win_start || rel + 4 > win_start + window.size()) {
          TS_RETURN_IF_ERROR(Refill(rel, remain, window, &win_start));
        }
        std::uint32_t len = internal::PeekEntryLength(window.data() + (rel - win_start));
        if (len <= remain && rel + len > win_start + window.size()) {
          TS_RETURN_IF_ERROR(Refill(rel, remain, window, &win_start, len));
        }
        if (len > remain) {
          return Err(Corruption("entry " + N(i) + ": length " + N(len) + " runs past the entries section (" +
                                N(remain) + " bytes remain)"));
        }
        std::span<const std::byte> bytes(window.data() + (rel - win_start), len);
        Status s = internal::DecodeEntry(bytes, opt_.limits.max_rank, opt_.limits.max_name_bytes, &e);
        if (!s.ok()) return Err(s.WithContext(Ordinal(i).str()));
        TS_RETURN_IF_ERROR(CheckEntry(e, Ordinal(i)));
      } else {
        TS_RETURN_IF_ERROR(DecodeEntryAt(idx, rel, scratch, &e, Ordinal(i)));
      }
      bool stop = false;
      TS_RETURN_IF_ERROR(fn(i, rel, e, &stop));
      if (stop) return Status::OK();
      rel += e.length;
    }
    if (rel != root_.entries_length) {
      return Err(Corruption("entries section is " + N(root_.entries_length) + " bytes but its " +
                            N(root_.tensor_count) + " entries take " + N(rel)));
    }
    return Status::OK();
  }

  Status Refill(std::uint64_t rel, std::uint64_t remain, std::vector<std::byte>& window,
                std::uint64_t* win_start, std::uint64_t need = 0) const {
    const std::uint64_t n = std::min<std::uint64_t>(remain, std::max<std::uint64_t>(need, 1 << 20));
    window.resize(n);
    TS_RETURN_IF_ERROR(file_->ReadAt(IndexAbs(root_.entries_offset + rel), window));
    *win_start = rel;
    return Status::OK();
  }

  // ---- whole-index check (eager open and Verify): R23..R28 ----
  Status CheckSection(std::span<const std::byte> idx, const char* what, std::uint64_t rel, std::uint64_t len,
                      std::uint64_t want) const {
    std::vector<std::byte> scratch;
    std::span<const std::byte> b;
    TS_RETURN_IF_ERROR(IndexView(idx, rel, len, scratch, &b));
    const std::uint64_t got = internal::Hash64(b);
    if (got != want) {
      return Err(Corruption(std::string(what) + " checksum mismatch: stored " + N(want) +
                            ", computed " + N(got)));
    }
    return Status::OK();
  }

  // `idx` is the whole index in memory; in pread mode without it, the index
  // is read once into a buffer for the duration of the check.
  Status CheckWholeIndex(std::span<const std::byte> idx) const {
    std::vector<std::byte> loaded;
    if (idx.empty() && file_ != nullptr) {
      TS_RETURN_IF_ERROR(LoadIndex(&loaded));
      idx = loaded;
    }
    TS_RETURN_IF_ERROR(CheckSection(idx, "index entries", root_.entries_offset, root_.entries_length,
                                    root_.entries_checksum));
    TS_RETURN_IF_ERROR(CheckSection(idx, "index hash table", root_.hash_offset, root_.hash_capacity * 8,
                                    root_.hash_checksum));
    TS_RETURN_IF_ERROR(Metadata(idx).status());
    struct Extent {
      std::uint64_t off, len, ordinal;
    };
    std::vector<Extent> extents;
    extents.reserve(root_.tensor_count);  // bounded by index_length / 40 (DecodeRoot)
    std::uint64_t data_bytes = 0;
    std::vector<std::byte> scratch;
    std::span<const std::byte> table;
    TS_RETURN_IF_ERROR(IndexView(idx, root_.hash_offset, root_.hash_capacity * 8, scratch, &table));
    const std::uint64_t cap = root_.hash_capacity;
    const std::uint64_t mask = cap - 1;  // cap > 0 whenever there is an entry
    TS_RETURN_IF_ERROR(Walk(idx, [&](std::uint64_t i, std::uint64_t rel, const internal::EntryView& e, bool*) -> Status {
      // Each length is within the file, but a hostile index can repeat them.
      data_bytes = internal::CheckedAdd(data_bytes, e.data_length).value_or(~std::uint64_t{0});
      if (e.data_length > 0) extents.push_back({e.data_offset, e.data_length, i});
      // The hash table must lead to this very entry: this proves the table is
      // complete and that no two entries share a name. The probe is the one
      // Lookup() makes; only another entry with the same tag is decoded.
      const std::uint64_t h = internal::NameHash(e.name);
      const std::uint64_t tag = h >> internal::kSlotPosBits;
      for (std::uint64_t probe = 0, k = h & mask; probe < cap; ++probe, k = (k + 1) & mask) {
        const std::uint64_t slot = internal::Load64(table.data() + 8 * k);
        if (slot == 0) break;
        if ((slot >> internal::kSlotPosBits) != tag) continue;
        const std::uint64_t pos = (slot & ((std::uint64_t{1} << internal::kSlotPosBits) - 1)) - 1;
        if (pos * 8 == rel) return Status::OK();
        internal::EntryView other;
        TS_RETURN_IF_ERROR(DecodeEntryAt(idx, pos * 8, scratch, &other,
                                         {EntryLabel::Kind::kIndexOffset, root_.entries_offset + pos * 8}));
        if (other.name == e.name) {
          return Err(Corruption("entry " + N(i) + " " + QuoteName(e.name) +
                                " duplicates the name of the entry at index offset " +
                                N(root_.entries_offset + pos * 8)));
        }
      }
      return Err(Corruption("entry " + N(i) + " " + QuoteName(e.name) + " is missing from the hash table"));
    }));
    if (data_bytes != root_.data_bytes) {
      return Err(Corruption("index root says " + N(root_.data_bytes) + " data bytes, entries sum to " +
                            N(data_bytes)));
    }
    std::uint64_t used = 0;
    for (std::uint64_t i = 0; i < cap; ++i) used += internal::Load64(table.data() + 8 * i) != 0;
    if (used != root_.tensor_count) {
      return Err(Corruption("hash table has " + N(used) + " used slots for " + N(root_.tensor_count) +
                            " tensors"));
    }
    std::sort(extents.begin(), extents.end(),
              [](const Extent& a, const Extent& b) { return a.off < b.off; });
    for (std::size_t k = 1; k < extents.size(); ++k) {
      const Extent& a = extents[k - 1];
      const Extent& b = extents[k];
      if (a.off + a.len > b.off) {
        return Err(Corruption("data of entry " + N(a.ordinal) + " [" + N(a.off) + ", " + N(a.off + a.len) +
                              ") overlaps data of entry " + N(b.ordinal) + " at " + N(b.off)));
      }
    }
    return Status::OK();
  }

  Result<std::string> Metadata() const { return Metadata(index_); }
  Result<std::string> Metadata(std::span<const std::byte> idx) const {
    std::vector<std::byte> scratch;
    std::span<const std::byte> b;
    // The metadata and the zero padding that ends the index (no checksum
    // covers the padding, so it must be zero: one encoding per content).
    const std::uint64_t padded = ptr_.index_length - root_.metadata_offset;
    TS_RETURN_IF_ERROR(IndexView(idx, root_.metadata_offset, padded, scratch, &b));
    for (std::byte x : b.subspan(root_.metadata_length)) {
      if (x != std::byte{0}) return Err(Corruption("index padding after the file metadata is not zero"));
    }
    b = b.first(root_.metadata_length);
    const std::uint64_t got = internal::Hash64(b);
    if (got != root_.metadata_checksum) {
      return Err(Corruption("file metadata checksum mismatch: stored " + N(root_.metadata_checksum) +
                            ", computed " + N(got)));
    }
    if (b.empty()) return std::string("{}");
    std::string text(reinterpret_cast<const char*>(b.data()), b.size());
    Status s = internal::ValidateJsonObject(text, opt_.limits.max_json_depth);
    if (!s.ok()) {
      return Err(Status(s.code() == StatusCode::kLimitExceeded ? s.code() : StatusCode::kCorruption,
                        "file metadata: " + s.message()));
    }
    return text;
  }

  Result<Tensor> Get(std::string_view name) const {
    TS_ASSIGN_OR_RETURN(TensorInfo info, Find(name));
    Tensor t;
    if (file_ == nullptr) {
      t.data = bytes_.subspan(info.data_offset, info.data_length);
      t.owner = owner_;
    } else {
      auto buf = AllocAligned(info.data_length);
      TS_RETURN_IF_ERROR(file_->ReadAt(info.data_offset, {buf.get(), info.data_length}));
      t.data = {buf.get(), info.data_length};
      t.owner = std::move(buf);
    }
    t.info = std::move(info);
    return t;
  }

  Status CopyOut(std::uint64_t off, std::span<std::byte> out) const {
    // A zero-length tensor's buffer may be null: memcpy(nullptr, p, 0) is UB.
    if (out.empty()) return Status::OK();
    if (file_ == nullptr) {
      // Large copies of a mapped file go through pread on the same inode:
      // the kernel copies from the page cache without faulting the range
      // into our page tables (1 GiB: ~1.3x faster than memcpy from a fresh
      // mapping; the bytes are the same either way).
      if (copy_file_ != nullptr && out.size() >= kPreadCopyBytes) return copy_file_->ReadAt(off, out);
      std::memcpy(out.data(), bytes_.data() + off, out.size());
      return Status::OK();
    }
    return file_->ReadAt(off, out);
  }

  Status ReadInto(std::string_view name, std::span<std::byte> out, bool verify) const {
    TS_ASSIGN_OR_RETURN(TensorInfo info, Find(name));
    if (out.size() != info.data_length) {
      return InvalidArgument("tensor " + QuoteName(name) + " has " + N(info.data_length) +
                             " bytes; the buffer has " + N(out.size()));
    }
    TS_RETURN_IF_ERROR(CopyOut(info.data_offset, out));
    if (verify) {
      const std::uint64_t got = internal::Hash64(std::span<const std::byte>(out));
      if (got != info.data_checksum) {
        return Err(Corruption("tensor " + QuoteName(name) + ": data checksum mismatch: stored " +
                              N(info.data_checksum) + ", computed " + N(got)));
      }
    }
    return Status::OK();
  }

  Status ReadSlice(std::string_view name, std::span<const SliceDim> slice, std::span<std::byte> out) const {
    TS_ASSIGN_OR_RETURN(TensorInfo info, Find(name));
    if (info.layout != Layout::kDense) {
      return Unsupported("tensor " + QuoteName(name) + ": slicing a sparse COO tensor is not supported");
    }
    const std::uint64_t es = ElementSize(info.dtype);
    if (es == 0) {
      return Unsupported("tensor " + QuoteName(name) + ": slicing packed " +
                         std::string(DTypeName(info.dtype)) + " is not supported");
    }
    const std::size_t rank = info.shape.size();
    if (slice.size() != rank) {
      return InvalidArgument("tensor " + QuoteName(name) + " has rank " + N(rank) + "; the slice has " +
                             N(slice.size()) + " dimensions");
    }
    // Per dimension: element count selected, and the byte stride of a step.
    std::vector<std::uint64_t> count(rank), start(rank), step(rank), dim_stride(rank);
    std::uint64_t total = 1;
    std::uint64_t stride = es;
    for (std::size_t d = rank; d-- > 0;) {
      const SliceDim& s = slice[d];
      if (s.step == 0 || s.start > s.stop || s.stop > info.shape[d]) {
        return OutOfRange("tensor " + QuoteName(name) + " dimension " + N(d) + " of size " +
                          N(info.shape[d]) + ": slice [" + N(s.start) + ":" + N(s.stop) + ":" +
                          N(s.step) + "] is out of range");
      }
      count[d] = s.stop == s.start ? 0 : (s.stop - s.start - 1) / s.step + 1;  // no wrap for huge steps
      start[d] = s.start;
      step[d] = s.step;
      dim_stride[d] = stride;
      stride *= info.shape[d];  // bounded by data_length, validated
      total *= count[d];
    }
    if (out.size() != total * es) {
      return InvalidArgument("slice of tensor " + QuoteName(name) + " has " + N(total * es) +
                             " bytes; the buffer has " + N(out.size()));
    }
    if (total == 0) return Status::OK();
    // Merge trailing dimensions that are selected whole into one contiguous run.
    std::size_t inner = rank;
    std::uint64_t run = es;
    while (inner > 0 && start[inner - 1] == 0 && step[inner - 1] == 1 &&
           count[inner - 1] == info.shape[inner - 1]) {
      --inner;
      run *= count[inner];
    }
    // Dimension inner-1 (if any) is gathered with its step; outer ones iterate.
    std::vector<std::uint64_t> idx(inner, 0);
    std::vector<std::byte> scratch;
    std::byte* dst = out.data();
    const std::size_t gather = inner;  // number of iterated dims, the last strided
    while (true) {
      std::uint64_t off = info.data_offset;
      for (std::size_t d = 0; d + 1 < gather; ++d) off += (start[d] + idx[d] * step[d]) * dim_stride[d];
      if (gather == 0) {
        TS_RETURN_IF_ERROR(CopyOut(off, {dst, run}));
        break;
      }
      const std::size_t g = gather - 1;
      const std::uint64_t first = off + start[g] * dim_stride[g];
      if (step[g] == 1) {
        const std::uint64_t n = count[g] * run;
        TS_RETURN_IF_ERROR(CopyOut(first, {dst, n}));
        dst += n;
      } else {
        const std::uint64_t span_len = ((count[g] - 1) * step[g]) * dim_stride[g] + run;
        if (file_ != nullptr && span_len > (std::uint64_t{1} << 20)) {
          // pread mode, sparse selection: read each run, so memory follows the
          // output's size, not the span's.
          for (std::uint64_t j = 0; j < count[g]; ++j) {
            TS_RETURN_IF_ERROR(CopyOut(first + j * step[g] * dim_stride[g], {dst, run}));
            dst += run;
          }
        } else {
          std::span<const std::byte> src;
          TS_RETURN_IF_ERROR(View(first, span_len, scratch, &src));
          for (std::uint64_t j = 0; j < count[g]; ++j) {
            std::memcpy(dst, src.data() + j * step[g] * dim_stride[g], run);
            dst += run;
          }
        }
      }
      // Advance the outer index (dims 0..g-1).
      std::size_t d = g;
      bool done = true;
      while (d-- > 0) {
        if (++idx[d] < count[d]) {
          done = false;
          break;
        }
        idx[d] = 0;
      }
      if (done) break;
    }
    return Status::OK();
  }

  Status Verify(std::vector<std::string>* damaged) const {
    TS_RETURN_IF_ERROR(CheckWholeIndex(index_));
    Status first;
    std::vector<std::byte> buf;
    TS_RETURN_IF_ERROR(Walk([&](std::uint64_t i, std::uint64_t, const internal::EntryView& e, bool*) -> Status {
      std::uint64_t got;
      if (file_ == nullptr) {
        got = internal::Hash64(bytes_.subspan(e.data_offset, e.data_length));
      } else {
        internal::StreamingHash h;
        std::uint64_t off = e.data_offset, left = e.data_length;
        buf.resize(std::min<std::uint64_t>(left, 1 << 20));
        while (left > 0) {
          const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(left, buf.size()));
          TS_RETURN_IF_ERROR(file_->ReadAt(off, {buf.data(), k}));
          h.Update({buf.data(), k});
          off += k;
          left -= k;
        }
        got = h.Digest();
      }
      if (got != e.data_checksum) {
        if (first.ok()) {
          first = Err(Corruption("entry " + N(i) + " " + QuoteName(e.name) + ": data checksum mismatch: stored " +
                                 N(e.data_checksum) + ", computed " + N(got)));
        }
        if (damaged) damaged->emplace_back(e.name);
      } else if (e.layout == Layout::kCoo) {
        // Only indices that the checksum vouches for are worth checking.
        Status cs = CheckCooIndices(e, Ordinal(i));
        if (!cs.ok()) {
          if (first.ok()) first = cs;
          if (damaged) damaged->emplace_back(e.name);
        }
      }
      return Status::OK();
    }));
    return first;
  }

  FileSummary Summary() const {
    FileSummary s;
    s.version_major = id_.version_major;
    s.version_minor = id_.version_minor;
    s.alignment = id_.alignment;
    s.file_size = size_;
    s.tensor_count = root_.tensor_count;
    s.index_offset = ptr_.index_offset;
    s.index_length = ptr_.index_length;
    s.sequence = sequence_;
    s.live_slot = live_slot_;
    s.via_trailer = via_trailer_;
    s.data_bytes = root_.data_bytes;
    const std::uint64_t used = internal::kHeaderSize + root_.data_bytes + ptr_.index_length + internal::kTrailerSize;
    s.unused_bytes = size_ > used ? size_ - used : 0;
    return s;
  }

  std::string name_;
  ReaderOptions opt_;
  std::shared_ptr<const void> owner_;
  std::span<const std::byte> bytes_;
  std::unique_ptr<internal::RandomAccessFile> file_;
  // Mapped files only: positional reads of the mapped inode, for CopyOut.
  std::unique_ptr<internal::RandomAccessFile> copy_file_;
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
  static constexpr std::uint64_t kKeepIndexBytes = std::uint64_t{16} << 20;
};

Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Reader::~Reader() = default;

Result<std::shared_ptr<Reader>> internal::OpenReaderWithEnv(const std::string& path,
                                                            const ReaderOptions& options, Env* env) {
  // An updater may publish a new index between our reading the file size and
  // our reading the header; the new slot then points past what we mapped.
  // The file only grows while an index is live, so retry with the new size.
  for (int attempt = 0;; ++attempt) {
    auto impl = std::make_unique<Reader::Impl>(path, options);
    if (options.access == ReaderOptions::Access::kMmap) {
      TS_ASSIGN_OR_RETURN(auto mapped, env->MapWithFile(path));
      impl->bytes_ = mapped.region->bytes();
      impl->size_ = impl->bytes_.size();
      impl->owner_ = std::move(mapped.region);
      impl->copy_file_ = std::move(mapped.file);
    } else {
      TS_ASSIGN_OR_RETURN(impl->file_, env->OpenRead(path));
      impl->size_ = impl->file_->size();
    }
    Status s = impl->Open();
    if (s.ok()) return std::make_shared<Reader>(std::move(impl));
    if (s.code() != StatusCode::kCorruption || attempt == 3) return s;
    auto again = env->OpenRead(path);
    if (!again.ok() || (*again)->size() == impl->size_) return s;
  }
}

Result<std::shared_ptr<Reader>> Reader::Open(const std::string& path, const ReaderOptions& options) {
  return internal::OpenReaderWithEnv(path, options, internal::Env::Default());
}

Result<std::shared_ptr<Reader>> Reader::OpenBuffer(std::span<const std::byte> bytes,
                                                   std::shared_ptr<const void> owner,
                                                   std::string display_name,
                                                   const ReaderOptions& options) {
  auto impl = std::make_unique<Impl>(std::move(display_name), options);
  impl->bytes_ = bytes;
  impl->size_ = bytes.size();
  impl->owner_ = std::move(owner);
  TS_RETURN_IF_ERROR(impl->Open());
  return std::make_shared<Reader>(std::move(impl));
}

const std::string& Reader::path() const { return impl_->name_; }
std::uint64_t Reader::size() const { return impl_->root_.tensor_count; }
FileSummary Reader::summary() const { return impl_->Summary(); }
Result<std::string> Reader::Metadata() const { return impl_->Metadata(); }
Result<TensorInfo> Reader::Find(std::string_view name) const { return impl_->Find(name); }
bool Reader::Contains(std::string_view name) const { return impl_->Find(name).ok(); }
Result<Tensor> Reader::Get(std::string_view name) const { return impl_->Get(name); }
Status Reader::ReadInto(std::string_view name, std::span<std::byte> out, bool verify) const {
  return impl_->ReadInto(name, out, verify);
}
Status Reader::ReadSlice(std::string_view name, std::span<const SliceDim> slice,
                         std::span<std::byte> out) const {
  return impl_->ReadSlice(name, slice, out);
}
Status Reader::ForEach(const std::function<bool(const TensorInfo&)>& fn) const {
  return impl_->Walk([&](std::uint64_t, std::uint64_t, const internal::EntryView& e, bool* stop) -> Status {
    *stop = !fn(Impl::ToInfo(e));
    return Status::OK();
  });
}
Result<std::vector<std::string>> Reader::Names() const {
  std::vector<std::string> names;
  names.reserve(impl_->root_.tensor_count);
  TS_RETURN_IF_ERROR(impl_->Walk([&](std::uint64_t, std::uint64_t, const internal::EntryView& e, bool*) -> Status {
    names.emplace_back(e.name);
    return Status::OK();
  }));
  return names;
}
Status Reader::Verify(std::vector<std::string>* damaged) const { return impl_->Verify(damaged); }

}  // namespace tensorsafe
