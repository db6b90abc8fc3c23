// AtomicFile: the one way tensorsafe publishes a file. The bytes go to a
// temporary file next to the destination; Commit syncs, closes and renames it
// over the destination, then syncs the directory. Readers see the old file
// or the complete new one, never a partial one, and a crash or an error at
// any point leaves at most a "<name>.tmp-*" file that was never published.
//
// Thread safety: one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "tensorsafe/env.h"
#include "tensorsafe/status.h"

namespace tensorsafe::internal {

class AtomicFile {
 public:
  // Creates the temporary file next to `path` through `env` (nullptr:
  // Env::Default()). Errors: those of Env::NewTempFile.
  static Result<AtomicFile> Create(const std::string& path, Env* env = nullptr);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // Not committed: Abandon().
  ~AtomicFile();

  // The temporary file to write. Valid until Commit or Abandon.
  WritableFile& file() { return *file_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  Env* env() const { return env_; }

  // fsyncs the file when `sync`, closes it, runs `before_rename` (a last
  // check of the closed temporary file, e.g. a digest of its bytes), renames
  // it over path(), and fsyncs the directory when `sync`. Any failure up to
  // and including the rename removes the temporary file and leaves path()
  // as it was; a failed directory sync is returned with the file in place
  // (the rename may then not survive a crash).
  Status Commit(bool sync, const std::function<Status()>& before_rename = {});

  // Closes and removes the temporary file; path() is untouched. Idempotent.
  void Abandon();

 private:
  AtomicFile(std::unique_ptr<WritableFile> file, Env* env, std::string path, std::string temp_path);

  std::unique_ptr<WritableFile> file_;
  Env* env_ = nullptr;
  std::string path_;
  std::string temp_path_;  // empty once committed or abandoned
};

// Publishes what `fill` writes to `path` through an AtomicFile.
Status WriteAtomically(const std::string& path, bool sync, Env* env, const std::function<Status(WritableFile&)>& fill);

// Publishes `bytes` as `path`.
Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes, bool sync, Env* env = nullptr);

}  // namespace tensorsafe::internal
