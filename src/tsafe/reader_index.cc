// The .tsafe reader, part 1: byte access, open, the index walk, lookup and
// the entry checks. The order of checks follows the numbered reader checks of
// docs/FORMAT.md §8; each failure names the file, the field and the numbers.
#include "tsafe/reader_impl.h"

namespace tensorsafe {

using internal::CheckedAdd;
using internal::EntryLabel;
using internal::kMaxDims;
using internal::Ordinal;
using internal::QuoteName;
using internal::Str;

Status Reader::Impl::View(std::uint64_t off, std::uint64_t len, std::vector<std::byte>& scratch,
                          std::span<const std::byte>* out) const {
  if (!internal::RangeWithin(off, len, size_)) {
    return Err(Corruption("read of " + Str(len) + " bytes at offset " + Str(off) + " runs past the end of the file (" +
                          Str(size_) + " bytes)"));
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
Status Reader::Impl::IndexView(std::span<const std::byte> idx, std::uint64_t rel, std::uint64_t len,
                               std::vector<std::byte>& scratch, std::span<const std::byte>* out) const {
  if (idx.empty()) return View(IndexAbs(rel), len, scratch, out);
  if (!internal::RangeWithin(rel, len, idx.size())) {
    return Err(Corruption("read of " + Str(len) + " bytes at index offset " + Str(rel) +
                          " runs past the end of the index (" + Str(idx.size()) + " bytes)"));
  }
  *out = idx.subspan(rel, len);
  return Status::OK();
}

// Reads the whole index into memory (pread mode), for the checks that look
// at all of it.
Status Reader::Impl::LoadIndex(std::vector<std::byte>* buf) const {
  buf->resize(ptr_.index_length);
  return file_->ReadAt(ptr_.index_offset, *buf);
}

Status Reader::Impl::Open() {
  std::vector<std::byte> scratch;
  if (size_ < internal::kHeaderSize + internal::kTrailerSize) {
    return Err(Corruption("file is " + Str(size_) + " bytes, smaller than the " +
                          Str(internal::kHeaderSize + internal::kTrailerSize) + "-byte minimum (header and trailer)"));
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
    return Err(Corruption("both header slots have sequence " + Str(slots[0].sequence)));
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
    return Err(Corruption("index root checksum mismatch at offset " + Str(ptr_.index_offset) + ": stored " +
                          Str(ptr_.index_checksum) + ", computed " + Str(root_sum)));
  }
  TS_RETURN_IF_ERROR(Err(internal::DecodeRoot(root, ptr_.index_length, &root_)));
  if (root_.tensor_count > opt_.limits.max_tensor_count) {
    return Err(LimitExceeded("file has " + Str(root_.tensor_count) + " tensors, more than the limit of " +
                             Str(opt_.limits.max_tensor_count)));
  }
  if (root_.metadata_length > opt_.limits.max_metadata_bytes) {
    return Err(LimitExceeded("file metadata of " + Str(root_.metadata_length) + " bytes exceeds the limit of " +
                             Str(opt_.limits.max_metadata_bytes)));
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
    trusted_index_ = file_ != nullptr && !index_.empty();
  }
  return Status::OK();
}

Status Reader::Impl::CheckPointer() const {
  const auto& p = ptr_;
  if ((p.features & ~internal::kKnownFeatures) != 0) {
    return Err(Unsupported("file requires feature bits " + Str(p.features) + " that this reader does not know"));
  }
  if (p.index_offset < internal::kHeaderSize || p.index_offset % 8 != 0) {
    return Err(Corruption("index offset " + Str(p.index_offset) + " is inside the header or not a multiple of 8"));
  }
  if (p.index_length < internal::kRootSize || p.index_length % 8 != 0) {
    return Err(Corruption("index length " + Str(p.index_length) +
                          " is smaller than the 128-byte root or not a multiple of 8"));
  }
  if (p.index_length > opt_.limits.max_index_bytes) {
    return Err(LimitExceeded("index of " + Str(p.index_length) + " bytes exceeds the limit of " +
                             Str(opt_.limits.max_index_bytes)));
  }
  auto end = CheckedAdd(p.index_offset, p.index_length);
  auto with_trailer = end ? CheckedAdd(*end, internal::kTrailerSize) : std::nullopt;
  if (!with_trailer || *with_trailer > size_) {
    return Err(Corruption("index at offset " + Str(p.index_offset) + " + length " + Str(p.index_length) +
                          " + trailer 48 exceeds file size " + Str(size_)));
  }
  if (via_trailer_ && *with_trailer != size_) {
    return Err(Corruption("trailer points at an index ending at " + Str(*end) + ", not right before the trailer at " +
                          Str(size_ - internal::kTrailerSize)));
  }
  return Status::OK();
}

// Decodes the entry at `rel` (relative to the entries section) and checks it
// against the file (FORMAT.md §8 R15..R22). `label` names it in messages.
Status Reader::Impl::DecodeEntryAt(std::span<const std::byte> idx, std::uint64_t rel, std::vector<std::byte>& scratch,
                                   internal::EntryView* e, const EntryLabel& label, bool check) const {
  if (rel > root_.entries_length || root_.entries_length - rel < internal::kEntryFixedSize) {
    return Err(Corruption(label.str() + ": offset " + Str(rel) + " is outside the entries section of " +
                          Str(root_.entries_length) + " bytes"));
  }
  std::span<const std::byte> head;
  TS_RETURN_IF_ERROR(IndexView(idx, root_.entries_offset + rel, 4, scratch, &head));
  const std::uint32_t len = internal::PeekEntryLength(head.data());
  if (len > root_.entries_length - rel) {
    return Err(Corruption(label.str() + ": length " + Str(len) + " runs past the entries section (" +
                          Str(root_.entries_length - rel) + " bytes remain)"));
  }
  std::span<const std::byte> bytes;
  TS_RETURN_IF_ERROR(IndexView(idx, root_.entries_offset + rel, len, scratch, &bytes));
  Status s = internal::DecodeEntry(bytes, opt_.limits.max_rank, opt_.limits.max_name_bytes, e);
  if (!s.ok()) return Err(s.WithContext(label.str()));
  return check ? CheckEntry(*e, label) : Status::OK();
}

// FORMAT.md §6.2 (spec 1.1): R30 for COO entries. The indices take
// 8 x nnz x rank bytes; the values start at the next multiple of the
// alignment and take the dtype's size of nnz elements; nothing follows.
Status Reader::Impl::CheckCooSizes(const internal::EntryView& e, const EntryLabel& label) const {
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
    return Err(Corruption(label.with(e.name) + ": COO sizes of " + Str(e.nnz) + " elements of rank " + Str(e.rank) +
                          " overflow"));
  }
  if (e.values_offset != *values_at) {
    return Err(Corruption(label.with(e.name) + ": COO values offset " + Str(e.values_offset) + " is not " +
                          Str(*values_at) + " (the indices' " + Str(*idx_bytes) + " bytes, aligned)"));
  }
  auto total = CheckedAdd(*values_at, *values);
  if (!total || *total != e.data_length) {
    return Err(Corruption(label.with(e.name) + ": data length " + Str(e.data_length) + " does not match " + Str(e.nnz) +
                          " COO elements of " + std::string(DTypeName(e.dtype)) + " (" + Str(total.value_or(0)) +
                          " bytes)"));
  }
  return Status::OK();
}

// R42 (Verify): every COO index lies within its dimension, and a tensor
// marked coalesced has its index rows strictly increasing.
Status Reader::Impl::CheckCooIndices(const internal::EntryView& e, const EntryLabel& label) const {
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
          return Err(Corruption(label.with(e.name) + ": COO index of element " + Str(row + r) + " in dimension " +
                                Str(d) + " is " + std::to_string(static_cast<std::int64_t>(v)) + ", outside [0, " +
                                Str(e.dim(d)) + ")"));
        }
        if (order == 0 && v != prev[d]) order = v > prev[d] ? 1 : -1;
        prev[d] = v;
      }
      if ((e.coo_flags & internal::kCooCoalesced) && order <= 0) {
        return Err(Corruption(label.with(e.name) + ": marked coalesced, but COO element " + Str(row + r) +
                              " does not follow element " + Str(row + r - 1) + " in order"));
      }
    }
  }
  return Status::OK();
}

Status Reader::Impl::CheckEntry(const internal::EntryView& e, const EntryLabel& label) const {
  if (!internal::IsValidUtf8(e.name)) return Err(Corruption(label.with(e.name) + ": name is not valid UTF-8"));
  if (!e.metadata.empty()) {
    if (e.metadata.size() > opt_.limits.max_metadata_bytes) {
      return Err(LimitExceeded(label.with(e.name) + ": metadata of " + Str(e.metadata.size()) +
                               " bytes exceeds the limit of " + Str(opt_.limits.max_metadata_bytes)));
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
      return Err(Corruption(label.with(e.name) + ": data length " + Str(e.data_length) + " does not match shape " +
                            ShapeToString(shape) + " of " + std::string(DTypeName(e.dtype)) + " (" + Str(*want) +
                            " bytes)"));
    }
  }
  if (e.data_offset % id_.alignment != 0) {
    return Err(Corruption(label.with(e.name) + ": data offset " + Str(e.data_offset) +
                          " is not a multiple of the alignment " + Str(id_.alignment)));
  }
  auto end = CheckedAdd(e.data_offset, e.data_length);
  if (e.data_offset < internal::kHeaderSize || !end || *end > ptr_.index_offset) {
    return Err(Corruption(label.with(e.name) + ": data offset " + Str(e.data_offset) + " + length " +
                          Str(e.data_length) + " is outside the data region [128, " + Str(ptr_.index_offset) + ")"));
  }
  return Status::OK();
}

TensorInfo Reader::Impl::ToInfo(const internal::EntryView& e) {
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

// Finds `name`; *rel receives its entry offset. Returns kNotFound when the
// probe reaches an empty slot.
Status Reader::Impl::Lookup(std::span<const std::byte> idx, std::string_view name, std::vector<std::byte>& scratch,
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
    TS_RETURN_IF_ERROR(
        DecodeEntryAt(idx, pos * 8, scratch, e, {EntryLabel::Kind::kIndexOffset, root_.entries_offset + pos * 8}));
    if (e->name == name) {
      *rel = pos * 8;
      return Status::OK();
    }
  }
  return Err(NotFound("no tensor named " + QuoteName(name)));
}

Result<TensorInfo> Reader::Impl::Find(std::string_view name) const {
  std::vector<std::byte> scratch;
  internal::EntryView e;
  std::uint64_t rel;
  TS_RETURN_IF_ERROR(Lookup(index_, name, scratch, &e, &rel));
  return ToInfo(e);
}

Status Reader::Impl::Walk(std::span<const std::byte> idx, const Reader::Impl::WalkFn& fn) const {
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
        return Err(Corruption(Ordinal(i).str() + ": offset " + Str(rel) + " is outside the entries section of " +
                              Str(root_.entries_length) + " bytes"));
      }
      if (rel < win_start || rel + 4 > win_start + window.size()) {
        TS_RETURN_IF_ERROR(Refill(rel, remain, window, &win_start));
      }
      std::uint32_t len = internal::PeekEntryLength(window.data() + (rel - win_start));
      if (len <= remain && rel + len > win_start + window.size()) {
        TS_RETURN_IF_ERROR(Refill(rel, remain, window, &win_start, len));
      }
      if (len > remain) {
        return Err(Corruption("entry " + Str(i) + ": length " + Str(len) + " runs past the entries section (" +
                              Str(remain) + " bytes remain)"));
      }
      std::span<const std::byte> bytes(window.data() + (rel - win_start), len);
      Status s = internal::DecodeEntry(bytes, opt_.limits.max_rank, opt_.limits.max_name_bytes, &e);
      if (!s.ok()) return Err(s.WithContext(Ordinal(i).str()));
      TS_RETURN_IF_ERROR(CheckEntry(e, Ordinal(i)));
    } else {
      const bool trusted = trusted_index_ && idx.data() == index_cache_.data();
      TS_RETURN_IF_ERROR(DecodeEntryAt(idx, rel, scratch, &e, Ordinal(i), /*check=*/!trusted));
    }
    bool stop = false;
    TS_RETURN_IF_ERROR(fn(i, rel, e, &stop));
    if (stop) return Status::OK();
    rel += e.length;
  }
  if (rel != root_.entries_length) {
    return Err(Corruption("entries section is " + Str(root_.entries_length) + " bytes but its " +
                          Str(root_.tensor_count) + " entries take " + Str(rel)));
  }
  return Status::OK();
}

Status Reader::Impl::Refill(std::uint64_t rel, std::uint64_t remain, std::vector<std::byte>& window,
                            std::uint64_t* win_start, std::uint64_t need) const {
  const std::uint64_t n = std::min<std::uint64_t>(remain, std::max<std::uint64_t>(need, 1 << 20));
  window.resize(n);
  TS_RETURN_IF_ERROR(file_->ReadAt(IndexAbs(root_.entries_offset + rel), window));
  *win_start = rel;
  return Status::OK();
}

Status Reader::Impl::CheckSection(std::span<const std::byte> idx, const char* what, std::uint64_t rel,
                                  std::uint64_t len, std::uint64_t want) const {
  std::vector<std::byte> scratch;
  std::span<const std::byte> b;
  TS_RETURN_IF_ERROR(IndexView(idx, rel, len, scratch, &b));
  const std::uint64_t got = internal::Hash64(b);
  if (got != want) {
    return Err(Corruption(std::string(what) + " checksum mismatch: stored " + Str(want) + ", computed " + Str(got)));
  }
  return Status::OK();
}

// The hash table must lead every entry's probe (the one Lookup() makes) to
// that very entry, before any other entry of the same name: this proves the
// table complete and the names unique. Done in O(capacity + n log n), not by
// probing per entry, which a table whose entries all share one cluster made
// quadratic (docs/SECURITY.md, "Worst-case time"). `*used` receives the
// number of occupied slots.
Status Reader::Impl::CheckHashTable(std::span<const std::byte> table, const std::vector<NamedEntry>& named,
                                    std::uint64_t* used) const {
  const std::uint64_t cap = table.size() / 8;
  const std::uint64_t mask = cap - 1;  // cap is a power of two, > 0 whenever there is an entry
  constexpr std::uint64_t kPosMask = (std::uint64_t{1} << internal::kSlotPosBits) - 1;
  // (entry position, slot) of every occupied slot, and the run of occupied
  // slots ending at each slot (a probe from home reaches slot k only if all
  // of home..k are occupied).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> by_pos;
  std::vector<std::uint32_t> run(cap, 0);
  std::uint64_t first_empty = cap;
  for (std::uint64_t k = 0; k < cap; ++k) {
    const std::uint64_t slot = internal::Load64(table.data() + 8 * k);
    if (slot != 0)
      by_pos.push_back({(slot & kPosMask) - 1, k});
    else if (first_empty == cap)
      first_empty = k;
  }
  *used = by_pos.size();
  for (std::uint64_t j = 1, len = 0; j <= cap; ++j) {
    const std::uint64_t k = (first_empty + j) & mask;  // from just past an empty slot, around once
    len = internal::Load64(table.data() + 8 * k) != 0 ? len + 1 : 0;
    run[k] = static_cast<std::uint32_t>(std::min<std::uint64_t>(first_empty == cap ? cap : len, UINT32_MAX));
  }
  std::sort(by_pos.begin(), by_pos.end());
  // Every slot names the start of an entry (`named` is in file order, so
  // its offsets ascend): a merge of the two sorted lists.
  for (std::size_t j = 0, i = 0; j < by_pos.size(); ++j) {
    const std::uint64_t rel = by_pos[j].first * 8;
    while (i < named.size() && named[i].rel < rel) ++i;
    if (i < named.size() && named[i].rel == rel) continue;
    const std::string label =
        "hash slot " + Str(by_pos[j].second) + ": index entry at offset " + Str(root_.entries_offset + rel);
    if (rel >= root_.entries_length) {
      return Err(Corruption(label + " is outside the entries section of " + Str(root_.entries_length) + " bytes"));
    }
    return Err(Corruption(label + " is not the start of an entry"));
  }
  // The first entry of each name (by ordinal): sorted by hash, then each
  // run of equal hashes (rare, but a hostile file can make them long) by
  // (name, ordinal), equal names sit side by side. Names are compared only
  // within such runs.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> order(named.size());  // (hash, ordinal)
  for (std::uint64_t i = 0; i < order.size(); ++i) order[i] = {named[i].hash, i};
  std::sort(order.begin(), order.end());
  std::vector<std::uint64_t> first_of(named.size());
  for (std::size_t j = 0; j < order.size();) {
    std::size_t end = j + 1;
    while (end < order.size() && order[end].first == order[j].first) ++end;
    if (end - j > 1) {
      std::sort(order.begin() + j, order.begin() + end, [&](const auto& a, const auto& b) {
        return named[a.second].name != named[b.second].name ? named[a.second].name < named[b.second].name
                                                            : a.second < b.second;
      });
    }
    for (std::size_t k = j; k < end; ++k) {
      const bool same = k > j && named[order[k].second].name == named[order[k - 1].second].name;
      first_of[order[k].second] = same ? first_of[order[k - 1].second] : order[k].second;
    }
    j = end;
  }
  // by_pos and named both ascend by offset: one walk finds each entry's
  // slots (a hostile table may point several slots at one entry).
  std::size_t at = 0;
  for (std::uint64_t i = 0; i < named.size(); ++i) {
    const NamedEntry& e = named[i];
    if (first_of[i] != i) {
      return Err(Corruption("entry " + Str(i) + " " + QuoteName(e.name) +
                            " duplicates the name of the entry at index offset " +
                            Str(root_.entries_offset + named[first_of[i]].rel)));
    }
    const std::uint64_t home = e.hash & mask;
    const std::uint64_t tag = e.hash >> internal::kSlotPosBits;
    while (at < by_pos.size() && by_pos[at].first * 8 < e.rel) ++at;
    bool found = false;
    for (std::size_t k = at; !found && k < by_pos.size() && by_pos[k].first * 8 == e.rel; ++k) {
      const std::uint64_t slot = by_pos[k].second;
      found = internal::Load64(table.data() + 8 * slot) >> internal::kSlotPosBits == tag &&
              run[slot] > ((slot - home) & mask);
    }
    if (!found) return Err(Corruption("entry " + Str(i) + " " + QuoteName(e.name) + " is missing from the hash table"));
  }
  return Status::OK();
}

// `idx` is the whole index in memory; in pread mode without it, the index
// is read once into a buffer for the duration of the check.
Status Reader::Impl::CheckWholeIndex(std::span<const std::byte> idx) const {
  std::vector<std::byte> loaded;
  if (idx.empty() && file_ != nullptr) {
    TS_RETURN_IF_ERROR(LoadIndex(&loaded));
    idx = loaded;
  }
  TS_RETURN_IF_ERROR(
      CheckSection(idx, "index entries", root_.entries_offset, root_.entries_length, root_.entries_checksum));
  TS_RETURN_IF_ERROR(
      CheckSection(idx, "index hash table", root_.hash_offset, root_.hash_capacity * 8, root_.hash_checksum));
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
  std::vector<NamedEntry> named;
  named.reserve(root_.tensor_count);
  TS_RETURN_IF_ERROR(Walk(idx, [&](std::uint64_t i, std::uint64_t rel, const internal::EntryView& e, bool*) -> Status {
    // Each length is within the file, but a hostile index can repeat them.
    data_bytes = internal::CheckedAdd(data_bytes, e.data_length).value_or(~std::uint64_t{0});
    if (e.data_length > 0) extents.push_back({e.data_offset, e.data_length, i});
    named.push_back({internal::NameHash(e.name), rel, e.name});  // views into idx
    return Status::OK();
  }));
  std::uint64_t used = 0;
  TS_RETURN_IF_ERROR(CheckHashTable(table, named, &used));
  if (data_bytes != root_.data_bytes) {
    return Err(
        Corruption("index root says " + Str(root_.data_bytes) + " data bytes, entries sum to " + Str(data_bytes)));
  }
  if (used != root_.tensor_count) {
    return Err(Corruption("hash table has " + Str(used) + " used slots for " + Str(root_.tensor_count) + " tensors"));
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) { return a.off < b.off; });
  for (std::size_t k = 1; k < extents.size(); ++k) {
    const Extent& a = extents[k - 1];
    const Extent& b = extents[k];
    if (a.off + a.len > b.off) {
      return Err(Corruption("data of entry " + Str(a.ordinal) + " [" + Str(a.off) + ", " + Str(a.off + a.len) +
                            ") overlaps data of entry " + Str(b.ordinal) + " at " + Str(b.off)));
    }
  }
  return Status::OK();
}

Result<std::string> Reader::Impl::Metadata(std::span<const std::byte> idx) const {
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
    return Err(Corruption("file metadata checksum mismatch: stored " + Str(root_.metadata_checksum) + ", computed " +
                          Str(got)));
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
}  // namespace tensorsafe
