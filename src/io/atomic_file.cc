#include "io/atomic_file.h"

#include <utility>

namespace tensorsafe::internal {

AtomicFile::AtomicFile(std::unique_ptr<WritableFile> file, Env* env, std::string path, std::string temp_path)
    : file_(std::move(file)), env_(env), path_(std::move(path)), temp_path_(std::move(temp_path)) {}

Result<AtomicFile> AtomicFile::Create(const std::string& path, Env* env) {
  if (env == nullptr) env = Env::Default();
  std::string temp_path;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewTempFile(path, &temp_path));
  return AtomicFile(std::move(file), env, path, std::move(temp_path));
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : file_(std::move(other.file_)),
      env_(other.env_),
      path_(std::move(other.path_)),
      temp_path_(std::exchange(other.temp_path_, std::string())) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    file_ = std::move(other.file_);
    env_ = other.env_;
    path_ = std::move(other.path_);
    temp_path_ = std::exchange(other.temp_path_, std::string());
  }
  return *this;
}

AtomicFile::~AtomicFile() { Abandon(); }

void AtomicFile::Abandon() {
  if (temp_path_.empty()) return;
  if (file_) (void)file_->Close();  // the first error is the one worth reporting
  (void)env_->Remove(temp_path_);
  temp_path_.clear();
}

Status AtomicFile::Commit(bool sync, const std::function<Status()>& before_rename) {
  if (temp_path_.empty()) return FailedPrecondition(path_ + ": the file was already committed or abandoned");
  Status s = sync ? file_->Sync() : Status::OK();
  Status closed = file_->Close();
  if (s.ok()) s = closed;
  if (s.ok() && before_rename) s = before_rename();
  if (s.ok()) s = env_->Rename(temp_path_, path_);
  if (!s.ok()) {
    Abandon();
    return s;
  }
  temp_path_.clear();
  if (sync) return env_->SyncDirOf(path_);
  return Status::OK();
}

Status WriteAtomically(const std::string& path, bool sync, Env* env, const std::function<Status(WritableFile&)>& fill) {
  TS_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path, env));
  TS_RETURN_IF_ERROR(fill(out.file()));
  return out.Commit(sync);
}

Status WriteFileAtomically(const std::string& path, std::span<const std::byte> bytes, bool sync, Env* env) {
  return WriteAtomically(path, sync, env, [&](WritableFile& f) { return f.Append(bytes); });
}

}  // namespace tensorsafe::internal
