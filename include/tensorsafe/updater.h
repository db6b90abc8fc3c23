// Updater: atomic in-place changes to an existing .tsafe file
// (docs/FORMAT.md §10).
//
// Changes are staged in a transaction: new tensor data is written past the
// live end of the file as it arrives, existing data is never overwritten.
// Commit() writes a new index and trailer after the new data, syncs, then
// switches the header slot that is not live, then syncs again; a crash at any
// instant leaves the file in its last committed state or the one before.
// Abort() (or destroying the Updater) discards the staged changes.
//
// One updater at a time: Open() takes an exclusive advisory lock (flock) on
// the file, failing at once or after `lock_timeout`. Readers need no lock:
// a Reader opened before a commit keeps its snapshot for as long as it lives.
//
// Thread safety: an Updater is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensorsafe/options.h"
#include "tensorsafe/status.h"
#include "tensorsafe/tensor.h"

namespace tensorsafe {

struct UpdaterOptions {
  // How long Open() waits for another updater to release the file; zero fails
  // at once with kFailedPrecondition.
  std::chrono::milliseconds lock_timeout{0};
  // fsync before and after switching the header slot. Off only for tests and
  // throwaway files: without it a power failure can lose a commit.
  bool sync = true;
  Limits limits;
  // File operations (tensorsafe/env.h, for tests and embedders); nullptr:
  // Env::Default().
  Env* env = nullptr;
};

class Updater {
 public:
  // Opens `path` for update. Errors: kIOError, kFailedPrecondition (locked by
  // another updater), and the reader's errors for a damaged file.
  static Result<std::unique_ptr<Updater>> Open(const std::string& path, const UpdaterOptions& options = {});

  ~Updater();  // aborts a staged transaction and releases the lock
  Updater(const Updater&) = delete;
  Updater& operator=(const Updater&) = delete;

  // Adds a tensor; kInvalidArgument when the name exists.
  Status Add(std::string_view name, const TensorView& view, std::string_view metadata_json = {});
  // Replaces a tensor's data, dtype and shape; keeps its position and, when
  // `metadata_json` is nullopt, its metadata. kNotFound when absent.
  Status Replace(std::string_view name, const TensorView& view,
                 std::optional<std::string_view> metadata_json = std::nullopt);
  // Streams a new (replace = false) or replacing tensor, as Writer does.
  Status BeginTensor(std::string_view name, DType dtype, const Shape& shape, std::string_view metadata_json = {},
                     bool replace = false);
  Status Append(std::span<const std::byte> bytes);
  Status EndTensor();
  Status Remove(std::string_view name);
  Status Rename(std::string_view from, std::string_view to);
  // Per-tensor metadata: Set replaces it ("" removes it); Merge applies an
  // RFC 7386 merge patch (a JSON object; null values delete keys).
  Status SetTensorMetadata(std::string_view name, std::string_view json_object);
  Status MergeTensorMetadata(std::string_view name, std::string_view json_patch);
  // File metadata, likewise.
  Status SetMetadata(std::string_view json_object);
  Status MergeMetadata(std::string_view json_patch);

  // The staged view: whether `name` exists, and its entry (for new or
  // replaced tensors, the data offset is in the staged region).
  bool Contains(std::string_view name) const;
  Result<TensorInfo> Find(std::string_view name) const;
  // The staged file metadata ("{}" when none).
  Result<std::string> Metadata() const;

  // Makes every staged change visible at once. After an error the file is as
  // it was before the transaction and the transaction is aborted; after an
  // error of the final sync the commit may or may not be durable and the
  // updater must be reopened (kFailedPrecondition until then).
  Status Commit();
  // Discards the staged changes.
  void Abort();

  // Sequence number of the live header slot (incremented by each commit).
  std::uint64_t sequence() const;
  bool has_changes() const;

  class Impl;
  explicit Updater(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

struct CompactResult {
  std::uint64_t bytes_before = 0;
  std::uint64_t bytes_after = 0;
  std::uint64_t bytes_reclaimed() const { return bytes_before > bytes_after ? bytes_before - bytes_after : 0; }
};

// Rewrites the live tensors of `path` into a fresh file (temp file + rename),
// holding the updater lock meanwhile; readers of the old file keep their
// snapshot. Keeps names, order, metadata and alignment.
Result<CompactResult> Compact(const std::string& path, const UpdaterOptions& options = {});

}  // namespace tensorsafe
