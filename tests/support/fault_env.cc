#include "support/fault_env.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <functional>

namespace tensorsafe::testing {
namespace {

class FaultFile final : public WritableFile {
 public:
  FaultFile(std::unique_ptr<WritableFile> base, FaultEnv* env) : base_(std::move(base)), env_(env) {}
  // Kills the process when the crash point is reached; `partial` does half
  // of the write first.
  void MaybeCrash(const std::function<void()>& partial) {
    if (++env_->ops != env_->crash_at) return;
    if (env_->crash_torn && partial) partial();
    ::kill(::getpid(), SIGKILL);
  }
  Status Append(std::span<const std::byte> bytes) override {
    MaybeCrash([&] { (void)base_->Append(bytes.first(bytes.size() / 2)); });
    if (++env_->writes == env_->fail_write) {
      if (env_->short_write && bytes.size() > 1) (void)base_->Append(bytes.first(bytes.size() / 2));
      return IOError(name() + ": write: injected failure", env_->error_number);
    }
    return base_->Append(bytes);
  }
  bool seekable() const override { return base_->seekable(); }
  Status WriteAt(std::uint64_t offset, std::span<const std::byte> bytes) override {
    MaybeCrash([&] { (void)base_->WriteAt(offset, bytes.first(bytes.size() / 2)); });
    if (++env_->writes == env_->fail_write) {
      if (env_->short_write && bytes.size() > 1) (void)base_->WriteAt(offset, bytes.first(bytes.size() / 2));
      return IOError(name() + ": pwrite: injected failure", env_->error_number);
    }
    return base_->WriteAt(offset, bytes);
  }
  Status Sync() override {
    MaybeCrash(nullptr);
    if (++env_->syncs == env_->fail_sync) return IOError(name() + ": fdatasync: injected failure", env_->error_number);
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }
  std::uint64_t position() const override { return base_->position(); }
  const std::string& name() const override { return base_->name(); }
  Status SetAppendPosition(std::uint64_t pos) override { return base_->SetAppendPosition(pos); }
  Status Truncate(std::uint64_t size) override { return base_->Truncate(size); }
  // One write: the bytes of the mapping are written by whoever holds it.
  Result<std::span<std::byte>> MapForWrite(std::uint64_t size) override {
    MaybeCrash(nullptr);
    if (++env_->writes == env_->fail_write)
      return IOError(name() + ": fallocate: injected failure", env_->error_number);
    return base_->MapForWrite(size);
  }

 private:
  std::unique_ptr<WritableFile> base_;
  FaultEnv* env_;
};

class ShortReadFile final : public RandomAccessFile {
 public:
  explicit ShortReadFile(std::unique_ptr<RandomAccessFile> base) : base_(std::move(base)) {}
  Status ReadAt(std::uint64_t offset, std::span<std::byte> out) const override {
    if (out.size() > 1) {
      // What the real file does when the OS returns fewer bytes and then 0.
      return Corruption(name() + ": file shrank while reading: no bytes at offset " +
                        std::to_string(offset + out.size() / 2));
    }
    return base_->ReadAt(offset, out);
  }
  std::uint64_t size() const override { return base_->size(); }
  const std::string& name() const override { return base_->name(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
};

}  // namespace

Result<std::unique_ptr<WritableFile>> FaultEnv::NewTempFile(const std::string& final_path, std::string* tmp_path) {
  TS_ASSIGN_OR_RETURN(auto f, Env::NewTempFile(final_path, tmp_path));
  return std::unique_ptr<WritableFile>(std::make_unique<FaultFile>(std::move(f), this));
}

Result<std::unique_ptr<WritableFile>> FaultEnv::OpenForUpdate(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto f, Env::OpenForUpdate(path));
  return std::unique_ptr<WritableFile>(std::make_unique<FaultFile>(std::move(f), this));
}

Result<std::unique_ptr<RandomAccessFile>> FaultEnv::OpenRead(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto f, Env::OpenRead(path));
  if (!short_read) return f;
  return std::unique_ptr<RandomAccessFile>(std::make_unique<ShortReadFile>(std::move(f)));
}

Status FaultEnv::Rename(const std::string& from, const std::string& to) {
  if (fail_rename) return IOError(from + ": cannot rename to " + to + ": injected failure", error_number);
  return Env::Rename(from, to);
}

}  // namespace tensorsafe::testing
