// An Env whose files are in memory, for fuzzing the pread read path without
// touching the disk.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "tensorsafe/env.h"

namespace tensorsafe::fuzz {

// Serves OpenRead(any path) from `bytes` (which must outlive the readers).
class MemReadEnv final : public Env {
 public:
  explicit MemReadEnv(std::span<const std::byte> bytes) : bytes_(bytes) {}
  Result<std::unique_ptr<RandomAccessFile>> OpenRead(const std::string& path) override;

 private:
  std::span<const std::byte> bytes_;
};

// A seekable or non-seekable in-memory file for the Writer.
class MemWritableFile final : public WritableFile {
 public:
  MemWritableFile(std::string* out, bool seekable) : out_(out), seekable_(seekable) {}
  Status Append(std::span<const std::byte> bytes) override;
  bool seekable() const override { return seekable_; }
  Status WriteAt(std::uint64_t offset, std::span<const std::byte> bytes) override;
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }
  std::uint64_t position() const override { return out_->size(); }
  const std::string& name() const override { return name_; }
  // The string itself, sized, while it is still empty.
  Result<std::span<std::byte>> MapForWrite(std::uint64_t size) override;

 private:
  std::string* out_;
  bool seekable_;
  std::string name_ = "<memory>";
};

}  // namespace tensorsafe::fuzz
