// The updater: staged changes, then the commit protocol of FORMAT.md §10.
#include "tensorsafe/updater.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/file_lock.h"
#include "tensorsafe/env.h"
#include "tensorsafe/reader.h"
#include "tensorsafe/writer.h"
#include "tsafe/data_writer.h"
#include "tsafe/index_builder.h"
#include "tsafe/layout.h"
#include "util/text.h"

namespace tensorsafe {

using internal::QuoteName;

namespace {

// Applies an RFC 7386 merge patch to a JSON object text ("" = {}); returns ""
// for an empty result so that "no metadata" has one encoding.
Result<std::string> MergePatch(std::string_view current, std::string_view patch, const Limits& limits) {
  TS_RETURN_IF_ERROR(internal::ValidateJsonObject(patch, limits.max_json_depth).WithContext("merge patch"));
  nlohmann::json doc = current.empty() ? nlohmann::json::object() : nlohmann::json::parse(current);
  doc.merge_patch(nlohmann::json::parse(patch));
  if (doc.empty()) return std::string();
  std::string out = doc.dump();
  TS_RETURN_IF_ERROR(internal::ValidateJsonObject(out, limits.max_json_depth).WithContext("merged metadata"));
  return out;
}

}  // namespace

class Updater::Impl {
 public:
  // A tensor touched by this transaction, under its current name.
  struct Record {
    bool is_new = false;                  // added in this transaction
    std::string original;                 // its name in the live index, when !is_new
    bool data_replaced = false;           // info holds new data (always for new ones)
    TensorInfo info;                      // the new data's entry when data_replaced
    std::optional<std::string> metadata;  // changed metadata, when set
    std::uint64_t order = 0;              // position among new tensors
  };

  Impl(std::string path, const UpdaterOptions& opt, Env* env, internal::FileLock lock)
      : path_(std::move(path)), opt_(opt), env_(env), lock_(std::move(lock)) {}

  ~Impl() { Abort(); }

  Status Load() {
    ReaderOptions ropt;
    ropt.limits = opt_.limits;
    ropt.env = env_;
    TS_ASSIGN_OR_RETURN(live_, Reader::Open(path_, ropt));
    TS_ASSIGN_OR_RETURN(file_, env_->OpenForUpdate(path_));
    const FileSummary s = live_->summary();
    alignment_ = s.alignment;
    sequence_ = s.sequence;
    live_slot_ = s.live_slot;
    live_end_ = s.index_offset + s.index_length + internal::kTrailerSize;
    TS_ASSIGN_OR_RETURN(metadata_, live_->Metadata());
    if (metadata_ == "{}") metadata_.clear();
    // Bytes past the live trailer belong to no state (an aborted or crashed
    // transaction): drop them. No reader refers to them.
    if (s.file_size > live_end_) TS_RETURN_IF_ERROR(file_->Truncate(live_end_));
    ResetStaging();
    return Status::OK();
  }

  void ResetStaging() {
    touched_.clear();
    gone_.clear();
    metadata_changed_ = false;
    next_order_ = 0;
    data_ = std::make_unique<internal::DataWriter>(file_.get(), live_end_, alignment_);
    (void)file_->SetAppendPosition(live_end_);
    pending_ = std::nullopt;
  }

  Status Usable() const {
    if (broken_) return FailedPrecondition(path_ + ": a failed commit left the updater unusable; reopen it");
    if (data_->in_tensor()) return FailedPrecondition(path_ + ": a streamed tensor is still open");
    return Status::OK();
  }

  bool Exists(std::string_view name) const {
    const std::string n(name);
    if (touched_.count(n)) return true;
    return !gone_.count(n) && live_->Contains(name);
  }

  // The record of `name` (which must exist), creating it for a live tensor.
  Record& Touch(std::string_view name) {
    const std::string n(name);
    auto it = touched_.find(n);
    if (it != touched_.end()) return it->second;
    Record r;
    r.original = n;
    gone_.insert(n);
    return touched_.emplace(n, std::move(r)).first->second;
  }

  Result<std::string> CurrentMetadata(std::string_view name) const {
    auto it = touched_.find(std::string(name));
    if (it == touched_.end()) {
      TS_ASSIGN_OR_RETURN(TensorInfo t, live_->Find(name));
      return t.metadata_json;
    }
    const Record& r = it->second;
    if (r.metadata) return *r.metadata;
    if (r.data_replaced) return r.info.metadata_json;
    TS_ASSIGN_OR_RETURN(TensorInfo t, live_->Find(r.original));
    return t.metadata_json;
  }

  Status CheckNew(std::string_view name) const {
    TS_RETURN_IF_ERROR(internal::ValidateTensorName(name, opt_.limits));
    if (Exists(name)) return InvalidArgument(path_ + ": tensor " + QuoteName(name) + " already exists");
    return Status::OK();
  }
  Status CheckExists(std::string_view name) const {
    if (!Exists(name)) return NotFound(path_ + ": no tensor named " + QuoteName(name));
    return Status::OK();
  }

  // Records freshly written data under `name` (new or replacing).
  Status Record_(TensorInfo info, bool replace, std::optional<std::string> keep_metadata) {
    if (!replace) {
      Record r;
      r.is_new = true;
      r.data_replaced = true;
      r.order = next_order_++;
      r.info = std::move(info);
      const std::string n = r.info.name;
      touched_.emplace(n, std::move(r));
      return Status::OK();
    }
    Record& r = Touch(info.name);
    if (keep_metadata) info.metadata_json = *keep_metadata;
    r.info = std::move(info);
    r.data_replaced = true;
    r.metadata.reset();
    return Status::OK();
  }

  Status Write(std::string_view name, const TensorView& view, std::string_view metadata, bool replace,
               std::optional<std::string> keep_metadata) {
    TS_RETURN_IF_ERROR(data_->WriteView(name, view, metadata, opt_.limits));
    return Record_(data_->current(), replace, std::move(keep_metadata));
  }

  Status Add(std::string_view name, const TensorView& view, std::string_view metadata) {
    TS_RETURN_IF_ERROR(Usable());
    TS_RETURN_IF_ERROR(CheckNew(name));
    return Write(name, view, metadata, false, std::nullopt);
  }

  Status Replace(std::string_view name, const TensorView& view, std::optional<std::string_view> metadata) {
    TS_RETURN_IF_ERROR(Usable());
    TS_RETURN_IF_ERROR(CheckExists(name));
    std::optional<std::string> keep;
    if (!metadata) {
      TS_ASSIGN_OR_RETURN(std::string m, CurrentMetadata(name));
      keep = std::move(m);
    }
    return Write(name, view, metadata.value_or(""), true, std::move(keep));
  }

  Status Begin(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata, bool replace) {
    TS_RETURN_IF_ERROR(Usable());
    TS_RETURN_IF_ERROR(replace ? CheckExists(name) : CheckNew(name));
    TS_RETURN_IF_ERROR(data_->Begin(name, dtype, shape, metadata, opt_.limits));
    pending_ = replace;
    return Status::OK();
  }

  Status Append(std::span<const std::byte> bytes) { return data_->Append(bytes); }

  Status End() {
    TS_RETURN_IF_ERROR(data_->End());
    const bool replace = pending_.value_or(false);
    pending_ = std::nullopt;
    return Record_(data_->current(), replace, std::nullopt);
  }

  Status Remove(std::string_view name) {
    TS_RETURN_IF_ERROR(Usable());
    TS_RETURN_IF_ERROR(CheckExists(name));
    const std::string n(name);
    auto it = touched_.find(n);
    if (it != touched_.end()) {
      touched_.erase(it);  // a live original stays in gone_
    } else {
      gone_.insert(n);
    }
    return Status::OK();
  }

  Status Rename(std::string_view from, std::string_view to) {
    TS_RETURN_IF_ERROR(Usable());
    TS_RETURN_IF_ERROR(CheckExists(from));
    if (from == to) return Status::OK();
    TS_RETURN_IF_ERROR(CheckNew(to));
    Record r = std::move(Touch(from));
    touched_.erase(std::string(from));
    r.info.name = std::string(to);
    touched_.emplace(std::string(to), std::move(r));
    return Status::OK();
  }

  Status SetTensorMetadata(std::string_view name, std::string_view json) {
    TS_RETURN_IF_ERROR(Usable());
    TS_RETURN_IF_ERROR(CheckExists(name));
    if (!json.empty()) {
      TS_RETURN_IF_ERROR(internal::ValidateJsonObject(json, opt_.limits.max_json_depth)
                             .WithContext("tensor " + QuoteName(name) + " metadata"));
    }
    Touch(name).metadata = std::string(json == "{}" ? "" : json);
    return Status::OK();
  }

  Status MergeTensorMetadata(std::string_view name, std::string_view patch) {
    TS_RETURN_IF_ERROR(Usable());
    TS_RETURN_IF_ERROR(CheckExists(name));
    TS_ASSIGN_OR_RETURN(std::string cur, CurrentMetadata(name));
    TS_ASSIGN_OR_RETURN(std::string merged, MergePatch(cur, patch, opt_.limits));
    Touch(name).metadata = std::move(merged);
    return Status::OK();
  }

  Status SetMetadata(std::string_view json) {
    TS_RETURN_IF_ERROR(Usable());
    if (!json.empty()) {
      TS_RETURN_IF_ERROR(internal::ValidateJsonObject(json, opt_.limits.max_json_depth).WithContext("file metadata"));
    }
    metadata_ = std::string(json == "{}" ? "" : json);
    metadata_changed_ = true;
    return Status::OK();
  }

  Status MergeMetadata(std::string_view patch) {
    TS_RETURN_IF_ERROR(Usable());
    TS_ASSIGN_OR_RETURN(metadata_, MergePatch(metadata_, patch, opt_.limits));
    metadata_changed_ = true;
    return Status::OK();
  }

  Result<TensorInfo> Find(std::string_view name) const {
    TS_RETURN_IF_ERROR(CheckExists(name));
    auto it = touched_.find(std::string(name));
    if (it == touched_.end()) return live_->Find(name);
    const Record& r = it->second;
    TensorInfo t;
    if (r.data_replaced) {
      t = r.info;
    } else {
      TS_ASSIGN_OR_RETURN(t, live_->Find(r.original));
    }
    t.name = std::string(name);
    if (r.metadata) t.metadata_json = *r.metadata;
    return t;
  }

  bool has_changes() const { return !touched_.empty() || !gone_.empty() || metadata_changed_; }

  // FORMAT.md §10: data (already written) -> index + trailer -> sync -> slot -> sync.
  Status Commit() {
    TS_RETURN_IF_ERROR(Usable());
    if (!has_changes()) return Status::OK();
    Status s = WriteAndPublish();
    if (!s.ok() && !broken_) Abort();
    return s;
  }

  Status WriteAndPublish() {
    // FORMAT.md §10.1 step 4: the new slot's sequence is the live one + 1.
    // After 2^64 - 1 that would be 0, an empty slot: the commit would be
    // lost while this said OK. Refused before anything is written.
    if (sequence_ == std::numeric_limits<std::uint64_t>::max()) {
      return OutOfRange(path_ + ": the live header slot's sequence is " + std::to_string(sequence_) +
                        ", the last one: no commit can follow it (`tensorsafe compact` rewrites the file from "
                        "sequence 1)");
    }
    internal::IndexBuilder index;
    // Live entries keep their order; renamed ones map back to their original.
    std::unordered_map<std::string, const Record*> by_original;
    for (const auto& [name, r] : touched_) {
      if (!r.is_new) by_original.emplace(r.original, &r);
    }
    Status walk_status;
    TS_RETURN_IF_ERROR(live_->ForEach([&](const TensorInfo& e) {
      if (!gone_.count(e.name)) {
        walk_status = index.Add(e);
        return walk_status.ok();
      }
      auto it = by_original.find(e.name);
      if (it == by_original.end()) return true;  // removed
      const Record& r = *it->second;
      TensorInfo t = r.data_replaced ? r.info : e;
      t.name = r.info.name.empty() ? e.name : r.info.name;
      if (r.metadata) t.metadata_json = *r.metadata;
      walk_status = index.Add(t);
      return walk_status.ok();
    }));
    TS_RETURN_IF_ERROR(walk_status);
    std::vector<const Record*> added;
    for (const auto& [name, r] : touched_) {
      if (r.is_new) added.push_back(&r);
    }
    std::sort(added.begin(), added.end(), [](const Record* a, const Record* b) { return a->order < b->order; });
    for (const Record* r : added) {
      TensorInfo t = r->info;
      if (r->metadata) t.metadata_json = *r->metadata;
      TS_RETURN_IF_ERROR(index.Add(t));
    }
    if (index.count() > opt_.limits.max_tensor_count) {
      return LimitExceeded(path_ + ": more than " + std::to_string(opt_.limits.max_tensor_count) + " tensors");
    }

    TS_RETURN_IF_ERROR(data_->PutZeros(((data_->position() + 7) & ~std::uint64_t{7}) - data_->position()));
    internal::IndexPointer ptr;
    TS_RETURN_IF_ERROR(index.WriteTo(*data_, metadata_, &ptr));
    TS_RETURN_IF_ERROR(data_->Flush());
    // The index must be durable before a slot points at it: disks reorder writes.
    if (opt_.sync) TS_RETURN_IF_ERROR(file_->Sync());
    internal::Slot slot;
    slot.sequence = sequence_ + 1;
    slot.ptr = ptr;
    std::byte sb[internal::kSlotSize];
    internal::EncodeSlot(slot, sb);
    const int target = live_slot_ == 0 ? 1 : 0;  // never the live slot
    Status ws = file_->WriteAt(internal::SlotOffset(target), sb);
    if (!ws.ok()) {
      // A partial slot write fails its checksum; the old slot stays live.
      return ws;
    }
    if (opt_.sync) {
      Status ss = file_->Sync();
      if (!ss.ok()) {
        broken_ = true;  // the slot may or may not reach the disk
        return ss;
      }
    }
    // The new state is live: serve it from a fresh reader.
    ReaderOptions ropt;
    ropt.limits = opt_.limits;
    ropt.env = env_;
    auto reopened = Reader::Open(path_, ropt);
    if (!reopened.ok()) {
      broken_ = true;
      return reopened.status();
    }
    live_ = std::move(reopened).value();
    sequence_ = slot.sequence;
    live_slot_ = target;
    live_end_ = ptr.index_offset + ptr.index_length + internal::kTrailerSize;
    ResetStaging();
    return Status::OK();
  }

  void Abort() {
    if (!file_ || broken_) return;
    data_->Quiesce();  // no background write may land after the truncation
    if (has_changes() || data_->position() > live_end_ || data_->in_tensor()) {
      (void)file_->Truncate(live_end_);  // staged bytes belong to no state
    }
    auto meta = live_->Metadata();
    metadata_ = meta.ok() && *meta != "{}" ? *meta : "";
    ResetStaging();
  }

  std::string path_;
  UpdaterOptions opt_;
  Env* env_;
  internal::FileLock lock_;
  std::shared_ptr<Reader> live_;
  std::unique_ptr<WritableFile> file_;
  std::unique_ptr<internal::DataWriter> data_;
  std::uint32_t alignment_ = 64;
  std::uint64_t sequence_ = 0;
  int live_slot_ = -1;
  std::uint64_t live_end_ = 0;
  std::string metadata_;
  bool metadata_changed_ = false;
  bool broken_ = false;
  std::unordered_map<std::string, Record> touched_;
  std::unordered_set<std::string> gone_;  // live names no longer present under that name
  std::uint64_t next_order_ = 0;
  std::optional<bool> pending_;  // a streamed tensor is open: replace or not
};

Updater::Updater(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Updater::~Updater() = default;

Result<std::unique_ptr<Updater>> Updater::Open(const std::string& path, const UpdaterOptions& options) {
  Env* env = options.env != nullptr ? options.env : Env::Default();
  TS_ASSIGN_OR_RETURN(internal::FileLock lock, internal::FileLock::Acquire(path, options.lock_timeout));
  auto impl = std::make_unique<Updater::Impl>(path, options, env, std::move(lock));
  TS_RETURN_IF_ERROR(impl->Load());
  return std::make_unique<Updater>(std::move(impl));
}

Status Updater::Add(std::string_view name, const TensorView& view, std::string_view metadata_json) {
  return impl_->Add(name, view, metadata_json);
}
Status Updater::Replace(std::string_view name, const TensorView& view, std::optional<std::string_view> metadata_json) {
  return impl_->Replace(name, view, metadata_json);
}
Status Updater::BeginTensor(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata_json,
                            bool replace) {
  return impl_->Begin(name, dtype, shape, metadata_json, replace);
}
Status Updater::Append(std::span<const std::byte> bytes) { return impl_->Append(bytes); }
Status Updater::EndTensor() { return impl_->End(); }
Status Updater::Remove(std::string_view name) { return impl_->Remove(name); }
Status Updater::Rename(std::string_view from, std::string_view to) { return impl_->Rename(from, to); }
Status Updater::SetTensorMetadata(std::string_view name, std::string_view json) {
  return impl_->SetTensorMetadata(name, json);
}
Status Updater::MergeTensorMetadata(std::string_view name, std::string_view patch) {
  return impl_->MergeTensorMetadata(name, patch);
}
Status Updater::SetMetadata(std::string_view json) { return impl_->SetMetadata(json); }
Status Updater::MergeMetadata(std::string_view patch) { return impl_->MergeMetadata(patch); }
bool Updater::Contains(std::string_view name) const { return impl_->Exists(name); }
Result<TensorInfo> Updater::Find(std::string_view name) const { return impl_->Find(name); }
Result<std::string> Updater::Metadata() const {
  return impl_->metadata_.empty() ? std::string("{}") : impl_->metadata_;
}
Status Updater::Commit() { return impl_->Commit(); }
void Updater::Abort() { impl_->Abort(); }
std::uint64_t Updater::sequence() const { return impl_->sequence_; }
bool Updater::has_changes() const { return impl_->has_changes(); }

Result<CompactResult> Compact(const std::string& path, const UpdaterOptions& options) {
  TS_ASSIGN_OR_RETURN(internal::FileLock lock, internal::FileLock::Acquire(path, options.lock_timeout));
  ReaderOptions ropt;
  ropt.limits = options.limits;
  ropt.env = options.env;
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> r, Reader::Open(path, ropt));
  const FileSummary s = r->summary();
  WriterOptions wopt;
  wopt.alignment = s.alignment;
  wopt.sync = options.sync;
  wopt.limits = options.limits;
  wopt.env = options.env;
  TS_ASSIGN_OR_RETURN(auto w, Writer::Create(path, wopt));
  Status inner;
  TS_RETURN_IF_ERROR(r->ForEach([&](const TensorInfo& t) {
    auto g = r->Get(t.name);
    inner = g.ok() ? w->AddTensor(*g) : g.status();
    return inner.ok();
  }));
  TS_RETURN_IF_ERROR(inner);
  TS_ASSIGN_OR_RETURN(std::string meta, r->Metadata());
  if (meta != "{}") TS_RETURN_IF_ERROR(w->SetMetadata(meta));
  TS_RETURN_IF_ERROR(w->Finish());
  TS_ASSIGN_OR_RETURN(std::shared_ptr<Reader> after, Reader::Open(path, ropt));
  return CompactResult{s.file_size, after->summary().file_size};
}

}  // namespace tensorsafe
